"""CPU plans record the LLVM CPU features their code needs; a host without one refuses the plan
(NOT_SUPPORTED naming the features) instead of dying with SIGILL at the first dispatch.

The foreign CPU is ``bdver1`` (AMD Bulldozer: XOP and FMA4, which no Zen or Intel CPU has). The
restores and executes that could crash run in a child process, so a failure cannot take pytest down.
"""
import dataclasses
import json
import os
import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.plugins.iree_linalg import cpufeatures
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan

S = hd.Status
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOREIGN = "llvm-cpu:bdver1"
FOREIGN_NEEDS = ("fma4", "xop")
foreign_host = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or not cpufeatures.host_flags()
    or set(FOREIGN_NEEDS) <= cpufeatures.host_flags(),
    reason="needs an x86-64 Linux host without XOP/FMA4 (so that bdver1 code cannot run on it)")


def graph(name="mm"):
    g = hd.Graph(name=name, io_data_type=hd.DataType.FLOAT)
    a = g.tensor(name="A", uid=1, dim=[1, 8, 16])
    b = g.tensor(name="B", uid=2, dim=[1, 16, 4])
    g.matmul(a, b).set_output(True).set_uid(3)
    return g


def plan_for(target) -> bytes:
    g = graph()
    g.build(hd.create_handle(device=None, target=target, cache=False))
    return g.serialize_compiled_plan()


def metadata(data):
    return _fusplan.unpack(_envelope.decode(data).plugin_payload)


def without_record(data) -> bytes:
    """The plan as a writer before the cpu_features field wrote it (the field left out)."""
    env = _envelope.decode(data)
    fp = _fusplan.unpack(env.plugin_payload)
    meta = dataclasses.replace(fp.metadata, cpu_features="")
    payload = _fusplan.pack(bytes(fp.body), fp.payload_kind, meta)
    return _envelope.encode(dataclasses.replace(env, plugin_payload=payload))


def child(code: str, *args, timeout=300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), HIPDNN_IREE_CACHE="0")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=REPO)


# -- the feature strings ------------------------------------------------------------------------
def test_required_reads_left_to_right_last_sign_wins():
    assert cpufeatures.required("+avx,+pku,-pku,+sse4.1,-xop") == ("avx", "sse4.1")
    assert cpufeatures.required("-avx,+avx") == ("avx",)
    assert cpufeatures.required("") == () and cpufeatures.required(None) == ()
    assert cpufeatures.canonical("+a,-b,+b,+c,-c") == "+a,+b"


def test_missing_maps_llvm_names_to_cpuinfo_flags():
    flags = {"pni", "sse4_1", "sse4_2", "avx512_vnni", "abm", "lahf_lm", "avx", "3dnowprefetch"}
    have = "+sse3,+sse4.1,+sse4.2,+crc32,+avx512vnni,+lzcnt,+sahf,+avx,+prfchw,+shstk,+x87"
    assert cpufeatures.missing(have, flags, machine="x86_64") == []
    assert cpufeatures.missing(have + ",+xop,+fma4,+avx512fp16", flags, machine="x86_64") == [
        "xop", "fma4", "avx512fp16"]
    assert cpufeatures.missing("+neon,+sve,+v8.2a", {"asimd"}, machine="aarch64") == ["sve"]
    assert cpufeatures.missing("+xop", set(), machine="x86_64") == []   # unknown host: nothing refused


def test_plans_record_the_features_of_their_target():
    data = plan_for(FOREIGN)
    meta = metadata(data).metadata
    assert set(FOREIGN_NEEDS) <= set(cpufeatures.required(meta.cpu_features)), meta.cpu_features
    assert "avx2" not in cpufeatures.required(meta.cpu_features)          # bdver1 has no AVX2
    generic = metadata(plan_for("llvm-cpu:generic")).metadata.cpu_features
    assert "xop" not in generic and "avx" not in cpufeatures.required(generic)
    # several targets: each CPU entry records its own; the GPU entry none
    fp = metadata(plan_for([FOREIGN, "llvm-cpu:x86-64-v2", "cuda:sm_80"]))
    feats = {e.target: e.cpu_features for e in fp.entries}
    assert "+xop" in feats[FOREIGN].split(",") and "+sse4.2" in feats["llvm-cpu:x86-64-v2"].split(",")
    assert "+xop" not in feats["llvm-cpu:x86-64-v2"].split(",") and feats["cuda:sm_80"] == ""


@foreign_host
def test_foreign_cpu_plan_refused_in_process_and_compile_only_restore_works():
    data = plan_for(FOREIGN)
    for plan in (data, without_record(data)):   # a plan without the record: read from the module itself
        e = pytest.raises(hd.HipdnnError, hd.Graph.from_compiled_plan, hd.create_handle(), plan).value
        assert e.status == S.NOT_SUPPORTED, e
        assert all(f in str(e) for f in FOREIGN_NEEDS) and FOREIGN in str(e), str(e)
    assert metadata(without_record(data)).metadata.cpu_features == ""
    # a compile-only handle restores it (it never runs it) and re-serializes it with the record
    r = hd.Graph.from_compiled_plan(hd.create_handle(device=None, target=FOREIGN), without_record(data))
    assert "+xop" in metadata(r.serialize_compiled_plan()).metadata.cpu_features
    # a local handle built for the foreign CPU refuses to load what it built
    e = pytest.raises(hd.HipdnnError, graph().build, hd.create_handle(target=FOREIGN, cache=False)).value
    assert e.status == S.NOT_SUPPORTED and "xop" in str(e), str(e)


def test_host_plan_without_record_still_loads_and_runs(rng):
    g = graph()
    h = hd.create_handle(cache=False)
    g.build(h)
    data = g.serialize_compiled_plan()
    assert cpufeatures.missing(metadata(data).metadata.cpu_features) == []
    a, b = rng.standard_normal((1, 8, 16)).astype(np.float32), rng.standard_normal((1, 16, 4)).astype(np.float32)
    for plan in (data, without_record(data)):
        r = hd.Graph.from_compiled_plan(h, plan)
        y = np.full((1, 8, 4), np.nan, np.float32)
        r.execute(h, {1: a, 2: b, 3: y})
        np.testing.assert_allclose(y, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


@foreign_host
def test_foreign_cpu_plan_refused_in_a_child_process_and_by_the_cli(tmp_path):
    """The refusal where a failure would otherwise be a SIGILL: a fresh process restores and
    executes (it must exit normally with the refusal), then the CLI's run and bench (exit 4)."""
    path = tmp_path / "bdver1.plan"
    hd.save_plan(str(path), plan_for(FOREIGN))
    p = child("""
        import sys, json, numpy as np, hipdnn_iree as hd
        h = hd.create_handle()
        try:
            g = hd.Graph.from_compiled_plan(h, hd.load_plan(sys.argv[1]))
            y = np.zeros((1, 8, 4), np.float32)
            g.execute(h, {1: np.ones((1, 8, 16), np.float32), 2: np.ones((1, 16, 4), np.float32), 3: y})
            print(json.dumps({"ran": True}))
        except hd.HipdnnError as e:
            print(json.dumps({"status": e.status.name, "message": str(e)}))
        """, path)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)   # -4 would be SIGILL
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out.get("status") == "NOT_SUPPORTED" and all(f in out["message"] for f in FOREIGN_NEEDS), out
    for cmd in (["run", path, "-o", tmp_path / "out"], ["bench", path, "-n", "2", "--restores", "1"]):
        p = subprocess.run([sys.executable, "-m", "hipdnn_iree.cli", *map(str, cmd)], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=REPO, HIPDNN_IREE_CACHE="0"), timeout=300, cwd=REPO)
        assert p.returncode == 4, (cmd[0], p.returncode, p.stderr)   # 132 would be SIGILL
        assert "xop" in p.stderr and "fma4" in p.stderr, p.stderr


@foreign_host
def test_kind3_picks_a_module_the_host_runs(rng):
    h = hd.create_handle()
    data = plan_for([FOREIGN, "llvm-cpu:x86-64-v2", "cuda:sm_80"])
    r = hd.Graph.from_compiled_plan(h, data)
    assert str(r.get_execution_plan().context.target) == "llvm-cpu:x86-64-v2"
    a, b = rng.standard_normal((1, 8, 16)).astype(np.float32), rng.standard_normal((1, 16, 4)).astype(np.float32)
    y = np.full((1, 8, 4), np.nan, np.float32)
    r.execute(h, {1: a, 2: b, 3: y})
    np.testing.assert_allclose(y, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)
    # only the foreign CPU module (and a GPU one): refused, naming what the CPU lacks
    e = pytest.raises(hd.HipdnnError, hd.Graph.from_compiled_plan, h, plan_for([FOREIGN, "cuda:sm_80"])).value
    assert e.status == S.NOT_SUPPORTED and FOREIGN in str(e) and "xop" in str(e), str(e)
