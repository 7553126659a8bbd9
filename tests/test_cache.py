"""Persistent compile cache (hipdnn_iree/plugins/iree_linalg/cache.py): reuse across processes, keys, bypass,
damaged entries, LRU eviction and concurrent writers. Every test points the cache at its own
temporary folder, so nothing here reads or writes the user's cache."""
import os
import subprocess
import sys
import textwrap

import pytest

import hipdnn_iree as hd
from hipdnn_iree.plugins.iree_linalg import cache as _cache
from hipdnn_iree.plugins.iree_linalg.targets import parse_target
from harness import BLOCK_COMPILER, REPO, run_python

GRAPH = textwrap.dedent("""
    import time, sys
    import numpy as np
    import hipdnn_iree as hd
    def build():
        g = hd.Graph(name="cache_mlp", io_data_type=hd.DataType.FLOAT)
        x = g.tensor(name="X", uid=1, dim=[16, 32])
        w = g.tensor(name="W", uid=2, dim=[32, 8], stride=[1, 32])
        g.pointwise(g.matmul(x, w), mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3)
        return g
    def check(g, h):
        rng = np.random.default_rng(5)
        x = rng.standard_normal((16, 32), dtype=np.float32)
        w = np.ascontiguousarray(rng.standard_normal((8, 32), dtype=np.float32)).T
        y = np.full((16, 8), np.nan, np.float32)
        g.execute(h, {1: x, 2: w, 3: y})
        np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
""")


BUILD_AND_REPORT = textwrap.dedent("""
    from hipdnn_iree.plugins.iree_linalg import cache as _cache
    h = hd.create_handle()
    g = build()
    t0 = time.perf_counter()
    g.build(h)
    took = time.perf_counter() - t0
    check(g, h)
    print("BUILD_S", took, "HITS", _cache.STATS.hits, "STORES", _cache.STATS.stores,
          "DISPATCHES", g.get_execution_plan().context.dispatch_count,
          "COMPILER_LOADED", any(m.startswith("iree.compiler") for m in sys.modules))
""")


def _report(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("BUILD_S"))
    it = iter(line.split())
    return {k: v for k, v in zip(it, it)}


def _env(cache_dir, **extra):
    return {"HIPDNN_IREE_CACHE_DIR": str(cache_dir), "HIPDNN_IREE_CACHE": "1", **extra}


def _entries(folder):
    return sorted(p for p in os.listdir(folder) if p.endswith(_cache.SUFFIX)) if os.path.isdir(folder) else []


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    """This test's own cache folder, cache on, fresh counters."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("HIPDNN_IREE_CACHE_DIR", str(folder))
    monkeypatch.setenv("HIPDNN_IREE_CACHE", "1")
    monkeypatch.delenv("HIPDNN_IREE_CACHE_MAX_BYTES", raising=False)
    _cache.STATS.reset()
    return folder


def _graph():
    ns = {}
    exec(GRAPH, ns)  # noqa: S102  (the same graph code the subprocesses run)
    return ns["build"], ns["check"]


def test_second_process_compiles_nothing(tmp_path):
    folder = tmp_path / "cache"
    first = run_python(GRAPH + BUILD_AND_REPORT, _env(folder))
    assert first.returncode == 0, first.stdout + first.stderr
    second = run_python(BLOCK_COMPILER + GRAPH + BUILD_AND_REPORT, _env(folder))
    assert second.returncode == 0, second.stdout + second.stderr
    a, b = _report(first.stdout), _report(second.stdout)
    print(f"\nfirst process build (compiles): {float(a['BUILD_S']) * 1e3:.1f} ms; "
          f"second process build (cache hit): {float(b['BUILD_S']) * 1e3:.1f} ms")
    assert a["STORES"] == "1" and a["HITS"] == "0" and a["COMPILER_LOADED"] == "True"
    assert b["HITS"] == "1" and b["STORES"] == "0"
    assert b["COMPILER_LOADED"] == "False", "the cache hit imported the IREE compiler"
    assert a["DISPATCHES"] == b["DISPATCHES"] != "None"
    assert len(_entries(folder)) == 1


def test_hit_gives_what_a_compile_gives(cpu, cache_env):
    build, check = _graph()
    g1 = build().build(cpu)
    g2 = build().build(cpu)
    assert (_cache.STATS.stores, _cache.STATS.hits) == (1, 1)
    c1, c2 = g1.get_execution_plan().context, g2.get_execution_plan().context
    assert c2.vmfb == c1.vmfb and c2.abi == c1.abi and c2.dispatch_count == c1.dispatch_count
    assert c2.mlir == c1.mlir and c2.compiler_version == c1.compiler_version
    check(g2, cpu)
    assert g2.serialize_compiled_plan() == g1.serialize_compiled_plan()


def test_key_covers_mlir_target_flags_and_versions():
    base = dict(mlir="module {}", target="llvm-cpu:host", flags=["--a", "--b"], compiler_identity="3.13.0",
                abi_version=1, entry_format=1)
    k = _cache.cache_key(**base)
    assert k == _cache.cache_key(**base) and len(k) == 64
    for field, other in [("mlir", "module { }"), ("target", "llvm-cpu:znver3"), ("flags", ["--a"]),
                         ("flags", ["--b", "--a"]), ("flags", ["--a", "--b", "--c"]), ("compiler_identity", "3.13.1"),
                         ("abi_version", 2), ("entry_format", 2)]:
        assert _cache.cache_key(**{**base, field: other}) != k, field
    # length prefixes: moving bytes between parts changes the key
    assert _cache.cache_key(**{**base, "mlir": "module {}l", "target": "lvm-cpu:host"}) != k
    store = _cache.CompileCache("/nonexistent")
    cpu, zen = parse_target("llvm-cpu:host"), parse_target("llvm-cpu:znver3")
    key = store.key_for("module {}", cpu)
    assert store.key_for("module {}", cpu) == key
    assert len({key, store.key_for("module {\n}", cpu), store.key_for("module {}", zen),
                store.key_for("module {}", parse_target("rocm:gfx942")),
                store.key_for("module {}", cpu, ("--iree-opt-level=O3",))}) == 5


def test_spec_files_enter_the_key_by_content_not_path(tmp_path):
    """A flag naming a file (a transform-dialect spec knobs.py writes to a temporary folder) keys by
    the file's content: another folder, same text: same key; other text: another key."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "s.mlir").write_text("spec one")
    (b / "s.mlir").write_text("spec one")
    cpu, store = parse_target("llvm-cpu:host"), _cache.CompileCache("/nonexistent")

    def key(folder):
        return store.key_for("module {}", cpu, (f"--iree-codegen-transform-dialect-library={folder}/s.mlir@__kernel_config",))
    assert key(a) == key(b)
    assert "sha256:" in _cache.key_flags([f"--x={a}/s.mlir@e"])[0] and str(a) not in _cache.key_flags([f"--x={a}/s.mlir"])[0]
    (b / "s.mlir").write_text("spec two")
    assert key(a) != key(b)
    from hipdnn_iree.plugins.iree_linalg.knobs import tile_spec_flag
    flag = tile_spec_flag("64X64")
    path = flag.split("=", 1)[1].split("@")[0]
    assert path not in _cache.key_flags([flag])[0] and "sha256:" in _cache.key_flags([flag])[0]


def test_real_graphs_get_distinct_keys(cpu):
    from hipdnn_iree.plugins.iree_linalg import build as _build
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    build, _ = _graph()
    g = build().validate().build_operation_graph(cpu)
    other = hd.Graph(name="cache_mlp", io_data_type=hd.DataType.FLOAT)
    x = other.tensor(name="X", uid=1, dim=[16, 32])
    w = other.tensor(name="W", uid=2, dim=[32, 8])    # same dims, packed strides: a different graph
    other.pointwise(other.matmul(x, w), mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3)
    other.validate().build_operation_graph(cpu)
    store = _cache.CompileCache("/nonexistent")
    t = parse_target("llvm-cpu:host")

    def key(graph_bytes):
        desc = _build.decode(graph_bytes)
        resolved = resolve(t, GraphSummary.of(desc), {})
        return store.key_for(_build.lower(desc, graph_bytes, resolved, verify=False).mlir, t, resolved.flags)
    assert key(g.get_op_graph_bytes()) != key(other.get_op_graph_bytes())
    assert key(g.get_op_graph_bytes()) == key(build().validate().build_operation_graph(cpu).get_op_graph_bytes())


def test_cache_false_and_env_zero_bypass(cache_env, monkeypatch):
    build, check = _graph()
    build().build(hd.create_handle())                    # fills the cache
    assert _cache.STATS.stores == 1 and len(_entries(cache_env)) == 1
    _cache.STATS.reset()
    g = build().build(hd.create_handle(cache=False))     # neither reads nor writes
    check(g, g.get_execution_plan().handle)
    assert (_cache.STATS.hits, _cache.STATS.misses, _cache.STATS.stores) == (0, 0, 0)
    monkeypatch.setenv("HIPDNN_IREE_CACHE", "0")
    build().build(hd.create_handle())
    assert (_cache.STATS.hits, _cache.STATS.misses, _cache.STATS.stores) == (0, 0, 0)
    assert _cache.resolve(None) is None and _cache.resolve(True) is not None   # the argument wins
    assert len(_entries(cache_env)) == 1


def test_bad_settings_are_clear_errors(monkeypatch, tmp_path):
    with pytest.raises(hd.HipdnnError) as e:
        hd.create_handle(cache=3)
    assert e.value.status == hd.Status.BAD_PARAM and "cache" in str(e.value)
    monkeypatch.setenv("HIPDNN_IREE_CACHE", "maybe")
    with pytest.raises(hd.HipdnnError) as e:
        _cache.resolve(None)
    assert e.value.status == hd.Status.BAD_PARAM and "HIPDNN_IREE_CACHE" in str(e.value)
    monkeypatch.setenv("HIPDNN_IREE_CACHE", "1")
    monkeypatch.setenv("HIPDNN_IREE_CACHE_MAX_BYTES", "lots")
    with pytest.raises(hd.HipdnnError) as e:
        _cache.resolve(str(tmp_path))
    assert e.value.status == hd.Status.BAD_PARAM and "HIPDNN_IREE_CACHE_MAX_BYTES" in str(e.value)
    monkeypatch.setenv("HIPDNN_IREE_CACHE_MAX_BYTES", "64K")
    assert _cache.resolve(str(tmp_path)).max_bytes == 65536
    assert _cache.parse_size("2G") == 2 << 30 and _cache.parse_size("512MiB") == 512 << 20


def test_default_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("HIPDNN_IREE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _cache.default_dir() == str(tmp_path / "xdg" / "hipdnn-iree")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert _cache.default_dir() == os.path.join(os.path.expanduser("~"), ".cache", "hipdnn-iree")


@pytest.mark.parametrize("damage", ["flip_module_byte", "flip_meta_byte", "truncate", "magic", "empty"])
def test_damaged_entry_is_rejected(damage, tmp_path):
    store = _cache.CompileCache(str(tmp_path))
    key = "ab" * 32
    module = _cache.CachedModule(b"\x7fELF" + bytes(range(256)) * 4, {"tensors": []}, 1, ("--x",), "mlir", "3.13")
    assert store.put(key, module)
    path = store.path_of(key)
    data = bytearray(open(path, "rb").read())
    if damage == "flip_module_byte":
        data[-10] ^= 0x01
    elif damage == "flip_meta_byte":
        data[60] ^= 0x01
    elif damage == "truncate":
        data = data[:-1]
    elif damage == "magic":
        data[:8] = b"NOTCACHE"
    else:
        data = bytearray()
    open(path, "wb").write(bytes(data))
    _cache.STATS.reset()
    assert store.get(key) is None
    assert _cache.STATS.corrupt == 1 and not os.path.exists(path)


def test_corrupt_entry_is_detected_and_rebuilt(cpu, cache_env):
    build, check = _graph()
    build().build(cpu)
    (name,) = _entries(cache_env)
    path = cache_env / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2 + 100] ^= 0xFF          # inside the module: the digest must catch it
    path.write_bytes(bytes(data))
    _cache.STATS.reset()
    g = build().build(cpu)                      # compiles again instead of loading the damaged module
    check(g, cpu)
    assert (_cache.STATS.corrupt, _cache.STATS.hits, _cache.STATS.stores) == (1, 0, 1)
    entry = _cache.decode_entry(path.read_bytes(), name.removesuffix(_cache.SUFFIX))
    assert entry.vmfb == g.get_execution_plan().context.vmfb


def test_lru_eviction_under_a_small_cap(tmp_path):
    def module(i):
        return _cache.CachedModule(bytes([i]) * 10_000, {"tensors": [], "i": i}, 1)
    one = len(_cache.encode_entry("00" * 32, module(0)))
    store = _cache.CompileCache(str(tmp_path), max_bytes=3 * one + 100)     # room for three entries
    keys = [f"{i:02x}" * 32 for i in range(1, 5)]
    for i, k in enumerate(keys[:3]):
        assert store.put(k, module(i))
        os.utime(store.path_of(k), (1_000_000 + i, 1_000_000 + i))           # A oldest, then B, then C
    assert store.get(keys[0]) is not None                                    # a hit makes A the newest
    _cache.STATS.reset()
    assert store.put(keys[3], module(3))                                     # D: over the cap, evict the LRU
    present = {k for k in keys if os.path.exists(store.path_of(k))}
    assert present == {keys[0], keys[2], keys[3]}, "B (least recently used) should have gone"
    assert _cache.STATS.evicted == 1 and store.size() <= store.max_bytes
    tiny = _cache.CompileCache(str(tmp_path / "tiny"), max_bytes=100)       # an entry over the cap is not stored
    assert not tiny.put(keys[0], module(0)) and tiny.entries() == []


def test_unwritable_cache_folder_does_not_fail_the_build(cpu, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("HIPDNN_IREE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setenv("HIPDNN_IREE_CACHE", "1")
    build, check = _graph()
    check(build().build(hd.create_handle()), cpu)


def test_concurrent_builds_from_four_processes(tmp_path):
    folder = tmp_path / "cache"
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.update(_env(folder))
    code = GRAPH + textwrap.dedent("""
        h = hd.create_handle()
        g = build().build(h)
        check(g, h)
        print("OK")
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=REPO) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "OK" in out, out + err
    (name,) = _entries(folder)
    assert not [n for n in os.listdir(folder) if n.endswith(".tmp")]
    entry = _cache.decode_entry((folder / name).read_bytes(), name.removesuffix(_cache.SUFFIX))
    assert entry.dispatch_count is not None and entry.vmfb[:2] == b"PK"
