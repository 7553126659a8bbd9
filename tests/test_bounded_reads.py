"""Bounded plan reads, restores that survive their file being rewritten, and plan bytes in any
contiguous buffer. Real files, pipes, devices and child processes."""
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import tracemalloc

import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree import backend
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.backend import planfile
import test_envelope_variants as ev
from harness import REPO, raises
from test_envelope_variants import gen  # noqa: F401 - the flatc-generated envelope variants (a fixture)

S = hd.Status
M, K, N = 16, 32, 8
CHUNK = 1 << 20
DATA = os.path.join(REPO, "tests", "data")
CORPUS = sorted(os.path.join(DATA, f) for f in os.listdir(DATA) if f.endswith(".plan"))


def _graph(mode):
    g = hd.Graph(name=f"bounded_{mode.name}", io_data_type=hd.DataType.FLOAT)
    x, w = g.tensor(name="X", uid=1, dim=[M, K]), g.tensor(name="W", uid=2, dim=[K, N])
    g.pointwise(g.matmul(x, w), mode=mode).set_output(True).set_uid(4)
    return g


@pytest.fixture(scope="module")
def plans():
    """(handle, tanh plan, relu plan): two plans of the same shape that compute different things."""
    h = hd.create_handle(cache=False)
    out = []
    for mode in (hd.PointwiseMode.TANH_FWD, hd.PointwiseMode.RELU_FWD):
        g = _graph(mode)
        g.build(h)
        out.append(g.serialize_compiled_plan())
    return h, out[0], out[1]


def _check_tanh(h, r, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    y = np.full((M, N), np.nan, np.float32)
    r.execute(h, {1: x, 2: w, 4: y})
    np.testing.assert_allclose(y, np.tanh(x.astype(np.float64) @ w), rtol=1e-4, atol=1e-5)


class _Feeder:
    """Writes ``source`` (bytes, or a callable giving the next chunk) into a FIFO from a thread and
    counts what the reader took before it closed its end."""

    def __init__(self, path, source, limit=256 * CHUNK):
        self.path, self.source, self.limit, self.written = path, source, limit, 0
        os.mkfifo(path)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            with open(self.path, "wb", buffering=0) as f:
                if isinstance(self.source, bytes):
                    f.write(self.source)
                    self.written = len(self.source)
                    return
                while self.written < self.limit:
                    chunk = self.source()
                    f.write(chunk)
                    self.written += len(chunk)
        except BrokenPipeError:
            pass

    def join(self):
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        return self.written


# -- item 2: bounded reads ------------------------------------------------------------------------

def test_dev_urandom_is_refused_at_the_first_chunk():
    tracemalloc.start()
    try:
        raises(S.BAD_PARAM, hd.load_plan, "/dev/urandom", match="not a plan")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * CHUNK, peak        # it used to read 1 GiB (the plan limit) first, 1 time in 4


@pytest.mark.parametrize("seed", range(16))
def test_random_streams_are_refused_after_one_chunk(tmp_path, seed):
    """Random bytes through a pipe: refused once the first 1 MiB is in, whatever the first bytes say
    (a root offset under the 1 GiB limit used to make the reader go on to the limit)."""
    rng = np.random.default_rng(seed)
    head = bytearray(rng.bytes(64 * 1024))
    if seed % 2:   # a root offset that is 4-aligned and within the limit (within the chunk for seed 1)
        head[:4] = (4 * int(rng.integers(1, (CHUNK if seed == 1 else 1 << 28) // 4))).to_bytes(4, "little")
    first = [bytes(head)]
    feeder = _Feeder(str(tmp_path / "fifo"), lambda: first.pop() if first else rng.bytes(64 * 1024))
    raises(S.BAD_PARAM, hd.load_plan, str(tmp_path / "fifo"), match="not a plan")
    written = feeder.join()
    # NOTE: the writer may be ahead of the reader by the pipe's buffer (64 KiB) and one chunk
    assert written <= CHUNK + 3 * 64 * 1024, written


def test_random_heads_never_pass_the_first_chunk_check():
    rng = np.random.default_rng(7)
    blob = rng.bytes(8 * CHUNK)
    passed = 0
    for i in range(100_000):
        at = int(rng.integers(0, 7 * CHUNK))
        head = bytearray(blob[at:at + 4096])
        head[:4] = (4 * int(rng.integers(1, 1024))).to_bytes(4, "little")   # even a plausible root offset
        passed += planfile.could_start_plan(bytes(head)) is None
    assert passed <= 2, passed   # each needs vtable, sizes and 4 field offsets to be plausible too


def _padded_plan(data: bytes, mb: int) -> bytes:
    """A real plan whose module is padded to about ``mb`` MB (IREE ignores bytes after the archive)."""
    from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
    env = _envelope.decode(data)
    fp = _fusplan.unpack(env.plugin_payload)
    body = bytes(fp.body) + bytes(mb * CHUNK - len(fp.body))
    payload = _fusplan.pack(body, fp.payload_kind, fp.metadata,
                            envelope=_fusplan.envelope_fields(env.engine_id, env.workspace_size, env.tensor_uids))
    return _envelope.encode(_envelope.Envelope(1, env.engine_id, env.workspace_size, env.tensor_uids, payload))


def _variants(plans):
    h, tanh, _ = plans
    g = _graph(hd.PointwiseMode.TANH_FWD)
    g.build(h)
    out = {"kind2": tanh, "signed": g.serialize_compiled_plan(b"key"),
           "kind1": g.serialize_compiled_plan(payload="hipdnn_graph"), "padded_3mb": _padded_plan(tanh, 3)}
    for p in CORPUS:
        out[os.path.basename(p)] = open(p, "rb").read()
    return out


def test_every_plan_variant_loads_through_a_pipe(plans, tmp_path):
    """Corpus plans (envelope v1 and v2, FUSPLAN 1.0/1.1, kind 3), signed, kind-1 and a plan bigger
    than the first chunk pass the first-chunk check, read through a FIFO."""
    h = plans[0]
    for i, (name, data) in enumerate(_variants(plans).items()):
        assert planfile.could_start_plan(data[:CHUNK]) is None, name
        fifo = str(tmp_path / f"fifo{i}")
        feeder = _Feeder(fifo, data)
        assert hd.load_plan(fifo) == data, name
        feeder.join()
    fifo = str(tmp_path / "fifo_restore")
    feeder = _Feeder(fifo, plans[1])
    _check_tanh(h, hd.Graph.from_compiled_plan_file(h, fifo))
    feeder.join()


def test_flatc_written_envelope_variants_pass_the_first_chunk_check(plans, gen):
    """Envelopes written by flatc-generated writers of each public hipDNN envelope schema."""
    env = _envelope.decode(plans[1])
    for v in ev.VARIANTS:
        extra = {"engine_config": dict(engine_config=b"cfg"), "override_flag": dict(flag=True),
                 "override_alignments": dict(alignments=[64, 64, 64])}.get(v, {})
        data = bytes(ev.write_with(gen[v], 1, env.engine_id, 0, list(env.tensor_uids), bytes(env.plugin_payload),
                                   **extra))
        assert planfile.could_start_plan(data[:CHUNK]) is None, v
        _envelope.decode(data)


CLI_READS = [["inspect", "{src}"], ["run", "{src}", "-o", "{tmp}/out"], ["bench", "{src}"],
             ["upgrade", "{src}", "{tmp}/up.plan"], ["compile", "{src}", "-o", "{tmp}/c.plan"]]


@pytest.mark.parametrize("src", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("args", CLI_READS, ids=[a[0] for a in CLI_READS])
def test_cli_reads_are_bounded_under_a_memory_limit(args, src, tmp_path):
    """Each command that reads a plan (or graph) file, on an endless device, in a child limited to
    2 GiB of address space: a clean exit 3 with a message, never killed nor out of memory."""
    limit = 2 << 30

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = dict(os.environ, HIPDNN_IREE_CACHE="0", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [a.format(src=src, tmp=tmp_path) for a in args]
    p = subprocess.run([sys.executable, "-m", "hipdnn_iree.cli", *argv], capture_output=True, text=True,
                       env=env, cwd=REPO, timeout=120, preexec_fn=cap)
    assert p.returncode == 3, (p.returncode, p.stderr[-2000:])
    want = "is not graph JSON" if args[0] == "compile" else "is not a plan"
    assert want in p.stderr and src in p.stderr and "refused after reading 1048576 bytes" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_cli_key_files_are_bounded(plans, tmp_path):
    path = tmp_path / "p.plan"
    hd.save_plan(path, plans[1])
    env = dict(os.environ, HIPDNN_IREE_CACHE="0", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "hipdnn_iree.cli", "inspect", str(path), "--verify-key-file",
                        "/dev/zero"], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert p.returncode == 2 and "key file" in p.stderr and "1048576-byte limit" in p.stderr, p.stderr


# -- item 3: a restored plan does not depend on its file -------------------------------------------

_CHILD = textwrap.dedent("""
    import os, shutil, sys
    import numpy as np
    import hipdnn_iree as hd
    path, other, how, mapped = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    h = hd.create_handle(cache=False)
    r = hd.Graph.from_compiled_plan_file(h, path, mmap=True) if mapped else hd.Graph.from_compiled_plan_file(h, path)
    if how == "truncate":
        os.truncate(path, 0)
    elif how == "copy":                       # cp other.plan same.plan: rewritten in place
        shutil.copyfile(other, path)
    elif how == "shrink":
        os.truncate(path, os.path.getsize(path) // 3)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 32), dtype=np.float32)
    w = rng.standard_normal((32, 8), dtype=np.float32)
    for _ in range(3):
        y = np.full((16, 8), np.nan, np.float32)
        r.execute(h, {1: x, 2: w, 4: y})
        np.testing.assert_allclose(y, np.tanh(x.astype(np.float64) @ w), rtol=1e-4, atol=1e-5)
    print("EXECUTED OK")
""")


def _child(tmp_path, plans, how, mapped):
    path, other = tmp_path / "same.plan", tmp_path / "other.plan"
    hd.save_plan(path, plans[1])
    hd.save_plan(other, plans[2])
    env = dict(os.environ, HIPDNN_IREE_CACHE="0", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", _CHILD, str(path), str(other), how, "1" if mapped else "0"],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("how", ["truncate", "copy", "shrink"])
def test_default_file_restore_survives_the_file_being_rewritten(plans, tmp_path, how):
    """from_compiled_plan_file, then the file is truncated or overwritten in place, then execute:
    correct numbers (vs numpy), in a child so a crash cannot take pytest down."""
    p = _child(tmp_path, plans, how, mapped=False)
    assert p.returncode == 0 and "EXECUTED OK" in p.stdout, (p.returncode, p.stdout, p.stderr[-3000:])


def test_mapped_restore_is_the_explicit_option_and_dies_on_truncation(plans, tmp_path):
    """The hazard that mmap=True's docs state, shown: truncating a mapped plan's file kills the process."""
    p = _child(tmp_path, plans, "none", mapped=True)
    assert p.returncode == 0 and "EXECUTED OK" in p.stdout, p.stderr[-3000:]
    p = _child(tmp_path, plans, "truncate", mapped=True)
    assert p.returncode == -signal.SIGBUS, (p.returncode, p.stdout, p.stderr[-3000:])


def test_file_restore_reads_in_place_from_a_private_aligned_copy(plans, tmp_path):
    h, tanh, _ = plans
    path = tmp_path / "p.plan"
    hd.save_plan(path, tanh)
    for mapped in (False, True):
        r = hd.Graph.from_compiled_plan_file(h, path, mmap=mapped)
        assert r.get_execution_plan().context.in_place   # the module imported without a further copy
        _check_tanh(h, r)
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan_file(h, path, mmap="yes"), match="mmap")
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan_file(h, tmp_path), match="folder")
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan_file(h, "/dev/zero"), match="not a plan")


# -- item 6: plan bytes in any contiguous buffer ----------------------------------------------------

def _buffers(data: bytes):
    arr = np.frombuffer(data, np.uint8)
    out = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data),
           "np.frombuffer": arr, "np.uint8 copy": arr.copy(), "np.int8": arr.view(np.int8),
           "memoryview of bytearray": memoryview(bytearray(data))}
    if len(data) % 16 == 0:
        out["2-D uint8"] = arr.reshape(-1, 16)
    return out


RESTORERS = {
    "Graph.from_compiled_plan": lambda h, d: hd.Graph.from_compiled_plan(h, d),
    "deserialize_compiled_plan": lambda h, d: hd.Graph().deserialize_compiled_plan(h, d),
    "from_compiled_plan_binary": lambda h, d: hd.Graph().from_compiled_plan_binary(h, d),
}


@pytest.mark.parametrize("restore", RESTORERS, ids=list(RESTORERS))
def test_any_contiguous_buffer_restores(plans, restore):
    h, tanh, _ = plans
    for name, buf in _buffers(tanh).items():
        r = RESTORERS[restore](h, buf)
        _check_tanh(h, r, seed=len(name))
    p = backend.create_and_deserialize_execution_plan(h, np.frombuffer(tanh, np.uint8))
    assert sorted(p.get_attribute(backend.Attribute.EXECUTION_PLAN_TENSOR_UIDS_EXT)) == [1, 2, 4]


def test_the_callers_buffer_is_copied_and_may_be_reused(plans):
    h, tanh, relu = plans
    for buf in (np.frombuffer(tanh, np.uint8).copy(), bytearray(tanh)):
        r = hd.Graph.from_compiled_plan(h, buf)
        n = min(len(buf), len(relu))
        memoryview(buf)[:n] = relu[:n]      # the caller refills its buffer with another plan
        _check_tanh(h, r)
        memoryview(buf)[:] = b"\xab" * len(buf)
        _check_tanh(h, r)


@pytest.mark.parametrize("bad,words", [
    (lambda d: np.frombuffer(d[:len(d) // 4 * 4], np.float32), ["4-byte items", "'f'", "ndarray"]),
    (lambda d: np.frombuffer(d, np.uint8)[::2], ["non-contiguous", "strides [2]", "ndarray"]),
    (lambda d: memoryview(bytearray(d))[::3], ["non-contiguous", "strides [3]", "memoryview"]),
    (lambda d: list(d[:16]), ["bytes-like", "list"]),
    (lambda d: "a string", ["bytes-like", "str"]),
])
def test_unusable_buffers_are_bad_param_naming_them(plans, bad, words, tmp_path):
    h, tanh, _ = plans
    buf = bad(tanh)
    before = bytes(np.asarray(buf).tobytes()) if not isinstance(buf, str) else buf
    for fn in (*RESTORERS.values(), lambda h, d: backend.create_and_deserialize_execution_plan(h, d),
               lambda h, d: hd.save_plan(tmp_path / "never-written.plan", d)):
        with pytest.raises(hd.HipdnnError) as e:
            fn(h, buf)
        assert e.value.status == S.BAD_PARAM, e.value
        for w in words:
            assert w in str(e.value), (w, str(e.value))
    assert not os.listdir(tmp_path)
    after = bytes(np.asarray(buf).tobytes()) if not isinstance(buf, str) else buf
    assert before == after            # the caller's buffer untouched


def test_save_plan_takes_any_contiguous_buffer(plans, tmp_path):
    h, tanh, _ = plans
    for i, (name, buf) in enumerate(_buffers(tanh).items()):
        path = tmp_path / f"{i}.plan"
        hd.save_plan(path, buf)
        assert hd.load_plan(path) == tanh, name
    raises(S.BAD_PARAM_NULL_POINTER, lambda: hd.save_plan(tmp_path / "n.plan", None))
    raises(S.BAD_PARAM, lambda: hd.save_plan(tmp_path / "e.plan", np.zeros(0, np.uint8)), match="0 bytes")
    assert sorted(os.listdir(tmp_path)) == sorted(f"{i}.plan" for i in range(len(_buffers(tanh))))
