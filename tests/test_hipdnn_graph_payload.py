"""FUSPLAN kind 1 (a hipDNN graph FlatBuffer, as hipDNN's fusilli-provider writes its plans), both ways:
written by serialize_compiled_plan(payload="hipdnn_graph"), restored here by compiling, refused
without the compiler, upgraded by `hipdnn-iree upgrade`; graphs read and written by C++ code that
flatc generates from schemas/graph.fbs; fuzzed kind-1 payloads."""
import os
import random
import shutil
import struct
import subprocess
import sys
import textwrap

import flatbuffers
import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.plugin_sdk.contract import SessionSettings
from harness import BLOCK_COMPILER, REPO, raises, run_python
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.flatbuffers_sdk import execution_plan_generated as E
from hipdnn_iree.plugins.iree_linalg import IreeLinalgPlugin
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
from hipdnn_iree.plugin_sdk.engine_ids import FUSILLI_ENGINE_ID

F = hd.DataType.FLOAT
S = hd.Status
IREE_ID = hd.engine_id_from_name("IREE_LINALG")


def _rfc_matmul():
    """The sample graph of hipDNN RFC 0009: C = A[4x8] . B[8x5], UIDs 0, 1, 2."""
    g = hd.Graph(name="serialized_matmul", io_data_type=F, compute_data_type=F)
    a = g.tensor(name="A", uid=0, dim=[4, 8])
    b = g.tensor(name="B", uid=1, dim=[8, 5])
    g.matmul(a, b).set_output(True).set_uid(2).set_name("C")
    return g


def _fusilli_plan(graph: bytes, uids=(0, 1, 2), engine_id=FUSILLI_ENGINE_ID, header=None) -> bytes:
    """A plan laid out as the fusilli-provider lays it out, built with the flatc-generated envelope
    builder: the RFC's five fields, payload = FUSPLAN 1.0 kind 1 (20 bytes) + the graph."""
    payload = header if header is not None else struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 1, 20)
    payload += graph
    b = flatbuffers.Builder(1024)
    E.SerializedExecutionPlanStartTensorUidsVector(b, len(uids))
    for u in reversed(uids):
        b.PrependInt64(u)
    tv = b.EndVector()
    pv = b.CreateByteVector(payload)
    E.SerializedExecutionPlanStart(b)
    E.SerializedExecutionPlanAddVersion(b, 1)
    E.SerializedExecutionPlanAddEngineId(b, engine_id)
    E.SerializedExecutionPlanAddWorkspaceSize(b, 0)
    E.SerializedExecutionPlanAddTensorUids(b, tv)
    E.SerializedExecutionPlanAddPluginPayload(b, pv)
    b.Finish(E.SerializedExecutionPlanEnd(b))
    return bytes(b.Output())


def _run_matmul(handle, g, rng):
    a, b = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
    c = np.full((4, 5), np.nan, np.float32)
    g.execute(handle, {0: a, 1: b, 2: c})
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def nocache():
    return hd.create_handle(cache=False)


# -- writing and restoring -----------------------------------------------------------------
def test_rfc_sample_round_trips_as_a_kind1_plan(cpu, nocache, rng):
    g = _rfc_matmul()
    g.build(cpu)
    assert g.get_execution_plan_engine_id() == IREE_ID      # building keeps IREE_LINALG
    data = g.serialize_compiled_plan(payload="hipdnn_graph")
    env = _envelope.decode(data)
    assert (env.version, env.layout, env.engine_id, env.workspace_size, list(env.tensor_uids)) == \
        (1, "rfc-v1", FUSILLI_ENGINE_ID, 0, [0, 1, 2])
    assert FUSILLI_ENGINE_ID == hd.engine_id_from_name("FUSILLI_ENGINE") == -3193037706610614382
    payload = bytes(env.plugin_payload)
    assert payload[:20] == struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 1, 20)
    assert payload[20:] == g.to_hipdnn_graph()
    r = hd.Graph.from_compiled_plan(nocache, data)           # compiles (no cache)
    assert r.is_restored and r.get_compiled_plan_tensor_uids() == [0, 1, 2]
    assert r.get_execution_plan_engine_id() == FUSILLI_ENGINE_ID
    assert [(t.uid, t.role, t.dims) for t in r.get_compiled_plan_tensors()] == \
        [(0, "input", (4, 8)), (1, "input", (8, 5)), (2, "output", (4, 5))]
    _run_matmul(nocache, r, rng)
    # the restored plan writes a compiled plan (IREE_LINALG, kind 2) or its graph again (kind 1)
    compiled = r.serialize_compiled_plan()
    env2 = _envelope.decode(compiled)
    assert env2.engine_id == IREE_ID and _fusplan.unpack(env2.plugin_payload).payload_kind == 2
    _run_matmul(nocache, hd.Graph.from_compiled_plan(nocache, compiled), rng)
    assert r.serialize_compiled_plan(payload="hipdnn_graph") == data


def test_a_plan_laid_out_by_hand_as_the_fusilli_provider_writes_restores(nocache, rng):
    """Envelope from the flatc-generated builder, no file identifier in the graph (hipDNN writes none)."""
    graph = bytearray(_rfc_matmul().to_hipdnn_graph())
    graph[4:8] = b"\0\0\0\0"
    _run_matmul(nocache, hd.Graph.from_compiled_plan(nocache, _fusilli_plan(bytes(graph))), rng)


def test_kind1_restore_goes_through_the_compile_cache(tmp_path, rng):
    h = hd.create_handle(cache=str(tmp_path))
    data = _fusilli_plan(_rfc_matmul().to_hipdnn_graph())
    _run_matmul(h, hd.Graph.from_compiled_plan(h, data), rng)
    entries = [f for _, _, fs in os.walk(tmp_path) for f in fs]
    assert entries, "the kind-1 restore stored nothing in the compile cache"
    # a second process without the compiler restores it from that cache
    p = run_python(BLOCK_COMPILER + textwrap.dedent(f"""
        import numpy as np, hipdnn_iree as hd
        h = hd.create_handle(cache={str(tmp_path)!r})
        r = hd.Graph.from_compiled_plan(h, {data!r})
        a = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
        b = np.random.default_rng(4).standard_normal((8, 5)).astype(np.float32)
        c = np.zeros((4, 5), np.float32)
        r.execute(h, {{0: a, 1: b, 2: c}})
        print("MAXERR", float(np.abs(c - a.astype(np.float64) @ b).max()))
    """))
    assert p.returncode == 0, p.stdout + p.stderr
    assert float(p.stdout.split("MAXERR")[1]) < 1e-4


def test_without_the_compiler_a_kind1_plan_is_not_supported_and_says_what_to_do(tmp_path):
    data = _fusilli_plan(_rfc_matmul().to_hipdnn_graph())
    p = run_python(BLOCK_COMPILER + textwrap.dedent(f"""
        import hipdnn_iree as hd
        try:
            import iree.compiler
            raise SystemExit("compiler import was not blocked")
        except ImportError:
            pass
        h = hd.create_handle(cache={str(tmp_path / 'empty')!r})
        try:
            hd.Graph.from_compiled_plan(h, {data!r})
            print("RESTORED")
        except hd.HipdnnError as e:
            print("REFUSED", e.status.name, e)
    """))
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "REFUSED NOT_SUPPORTED" in out, out + p.stderr
    assert "iree-base-compiler==3.13" in out and "hipdnn-iree upgrade" in out and "kind 1" in out, out


def test_building_picks_iree_linalg_and_fusilli_is_only_a_restore_id(cpu):
    plugin = next(p for p in cpu.resource_manager.plugins if isinstance(p, IreeLinalgPlugin))
    assert cpu.resource_manager.plugin_for(FUSILLI_ENGINE_ID) is plugin
    assert plugin.engine_names[FUSILLI_ENGINE_ID] == "FUSILLI_ENGINE"
    assert plugin.get_applicable_engine_ids(_rfc_matmul().to_hipdnn_graph()) == [IREE_ID]
    g = _rfc_matmul().set_preferred_engine_id_ext("FUSILLI_ENGINE")
    raises(S.NOT_SUPPORTED, g.build, cpu, match="FUSILLI_ENGINE")


def test_writing_a_kind1_plan_refuses_what_it_cannot_carry(cpu):
    g = _rfc_matmul()
    g.build(cpu)
    raises(S.NOT_SUPPORTED, lambda: g.serialize_compiled_plan(b"key", payload="hipdnn_graph"), match="signature")
    raises(S.BAD_PARAM, lambda: g.serialize_compiled_plan(payload="graph"), match="payload must be one of")
    ref = _rfc_matmul().set_preferred_engine_id_ext("NUMPY_REFERENCE")
    ref.build(cpu)
    raises(S.NOT_SUPPORTED, lambda: ref.serialize_compiled_plan(payload="hipdnn_graph"))


def _resample_graph() -> bytes:
    from graph_ir.desc import ATTRS_BY_KIND, GraphDesc, NodeDesc, OpKind, TensorDesc, encode_graph
    at = ATTRS_BY_KIND[OpKind.RESAMPLE_FWD](x_uid=0, y_uid=1, pre_padding=(0, 0), post_padding=(0, 0),
                                           stride=(2, 2), window=(2, 2), resample_mode=1, padding_mode=1)
    t = (TensorDesc(0, "x", int(F), (1, 2, 4, 4), (32, 16, 4, 1)), TensorDesc(1, "y", int(F), (1, 2, 2, 2), (8, 4, 2, 1)))
    return encode_graph(GraphDesc("pool", int(F), int(F), int(F), t, (NodeDesc("pool1", int(F), at),)))


def _custom_op_graph() -> bytes:
    """A CUSTOM_OP node naming an operation no plugin provides: refused NOT_SUPPORTED by name."""
    from graph_ir.desc import ATTRS_BY_KIND, GraphDesc, NodeDesc, OpKind, TensorDesc, encode_graph
    at = ATTRS_BY_KIND[OpKind.CUSTOM_OP](custom_op_id="nobody.nothing", input_uids=(0,), output_uids=(1,))
    t = (TensorDesc(0, "x", int(F), (1, 2, 4, 4), (32, 16, 4, 1)), TensorDesc(1, "y", int(F), (1, 2, 4, 4), (32, 16, 4, 1)))
    return encode_graph(GraphDesc("custom", int(F), int(F), int(F), t, (NodeDesc("op1", int(F), at),)))


def _huge_graph() -> bytes:
    """A consistent graph whose tensors no target can address (the frontend refuses it at validate)."""
    from graph_ir.desc import ATTRS_BY_KIND, GraphDesc, NodeDesc, OpKind, TensorDesc, encode_graph
    n = 2**40
    at = ATTRS_BY_KIND[OpKind.POINTWISE](operation=int(hd.PointwiseMode.RELU_FWD), in_0_uid=0, out_0_uid=1)
    t = (TensorDesc(0, "x", int(F), (n, n), (n, 1)), TensorDesc(1, "y", int(F), (n, n), (n, 1)))
    return encode_graph(GraphDesc("huge", int(F), int(F), int(F), t, (NodeDesc("relu", int(F), at),)))


@pytest.mark.parametrize("plan,status,match", [
    (lambda: _fusilli_plan(_custom_op_graph(), uids=(0, 1)), S.NOT_SUPPORTED, "CUSTOM_OP"),
    (lambda: _fusilli_plan(_huge_graph(), uids=(0, 1)), S.PLUGIN_ERROR, "more than a target can address"),
    (lambda: _fusilli_plan(_rfc_matmul().to_hipdnn_graph(), uids=(0, 1, 7)), S.BAD_PARAM, "tensor_uids"),
    (lambda: _fusilli_plan(b"not a graph at all"), S.PLUGIN_ERROR, "payload_kind 1"),
    (lambda: _fusilli_plan(_rfc_matmul().to_hipdnn_graph()[:60]), S.PLUGIN_ERROR, "cannot be read"),
    (lambda: _fusilli_plan(b"", header=struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 1, 20)), S.PLUGIN_ERROR,
     "header_size 20"),
])
def test_bad_kind1_plans_are_typed_errors_naming_the_problem(nocache, plan, status, match):
    raises(status, hd.Graph.from_compiled_plan, nocache, plan(), match=match)


# -- hipdnn-iree upgrade -------------------------------------------------------------------
def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "hipdnn_iree.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)


def test_upgrade_turns_a_kind1_plan_into_a_compiled_one(tmp_path, cpu):
    src, dst = tmp_path / "k1.plan", tmp_path / "k2.plan"
    src.write_bytes(_fusilli_plan(_rfc_matmul().to_hipdnn_graph()))
    p = _cli("inspect", str(src))
    assert p.returncode == 0 and "payload kind 1 (hipDNN graph FlatBuffer)" in p.stdout, p.stdout + p.stderr
    assert "engine FUSILLI_ENGINE" in p.stdout and "matmul_0 (MatmulAttributes)" in p.stdout, p.stdout
    p = _cli("upgrade", str(src), str(dst), "--no-cache")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "FUSPLAN kind 2" in p.stdout and "engine IREE_LINALG" in p.stdout and "llvm-cpu:host" in p.stdout, p.stdout
    env = _envelope.decode(dst.read_bytes())
    assert env.engine_id == IREE_ID and list(env.tensor_uids) == [0, 1, 2]
    assert _fusplan.unpack(env.plugin_payload).payload_kind == _fusplan.KIND_IREE_VMFB
    # the upgraded plan restores and runs in a process without the compiler
    p = run_python(BLOCK_COMPILER + textwrap.dedent(f"""
        import numpy as np, hipdnn_iree as hd
        h = hd.create_handle(cache=False)
        r = hd.Graph.from_compiled_plan_file(h, {str(dst)!r})
        rng = np.random.default_rng(5)
        a, b = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
        c = np.zeros((4, 5), np.float32)
        r.execute(h, {{0: a, 1: b, 2: c}})
        print("MAXERR", float(np.abs(c - a.astype(np.float64) @ b).max()))
    """))
    assert p.returncode == 0, p.stdout + p.stderr
    assert float(p.stdout.split("MAXERR")[1]) < 1e-4


def test_upgrade_for_a_gpu_target_and_its_refusals(tmp_path):
    src = tmp_path / "k1.plan"
    src.write_bytes(_fusilli_plan(_rfc_matmul().to_hipdnn_graph()))
    gpu = tmp_path / "gfx942.plan"
    p = _cli("upgrade", str(src), str(gpu), "--target", "rocm:gfx942")
    assert p.returncode == 0, p.stdout + p.stderr
    p = _cli("inspect", str(gpu), "--json")
    import json
    d = json.loads(p.stdout)
    assert d["module"]["abi"]["target"] == "rocm:gfx942" and d["fusplan"]["payload_kind"] == 2
    again = _cli("upgrade", str(gpu), str(tmp_path / "x.plan"))
    assert again.returncode == 2 and "already a compiled plan" in again.stderr, again.stderr
    bad = tmp_path / "bad.plan"
    bad.write_bytes(_fusilli_plan(b"garbage bytes, not a graph"))
    p = _cli("upgrade", str(bad), str(tmp_path / "y.plan"))
    assert p.returncode == 3 and "cannot be read" in p.stderr, p.stderr
    p = _cli("upgrade", str(src), str(tmp_path / "z.plan"), "--target", "nonsense:1")
    assert p.returncode == 2 and "--target" in p.stderr, p.stderr
    assert not (tmp_path / "x.plan").exists() and not (tmp_path / "y.plan").exists()


# -- flatc-generated C++ reader and writer ---------------------------------------------------
@pytest.fixture(scope="module")
def cpp_tool(tmp_path_factory):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    from importlib.util import module_from_spec, spec_from_file_location
    spec = spec_from_file_location("_gen", os.path.join(REPO, "schemas", "generate.py"))
    gen = module_from_spec(spec)
    spec.loader.exec_module(gen)
    flatc = gen.find_flatc()
    inc = os.path.join(os.path.dirname(os.path.dirname(sys.executable)), "include")
    if flatc is None or not os.path.isfile(os.path.join(inc, "flatbuffers", "flatbuffers.h")):
        pytest.skip("flatc or the flatbuffers C++ headers are not installed")
    out = tmp_path_factory.mktemp("cpp")
    subprocess.run([flatc, "--cpp", "-o", str(out), os.path.join(REPO, "schemas", "graph.fbs")], check=True)
    exe = out / "hipdnn_graph_tool"
    subprocess.run([gxx, "-std=c++17", "-O0", f"-I{inc}", f"-I{out}", "-o", str(exe),
                    os.path.join(REPO, "tests", "data", "hipdnn_graph_tool.cpp")], check=True)
    return str(exe)


def test_flatc_cpp_reader_parses_graphs_this_project_writes(cpp_tool, tmp_path):
    g = hd.Graph(name="mix", io_data_type=F, compute_data_type=F)
    a = g.tensor(name="A", uid=0, dim=[4, 8])
    b = g.tensor(name="B", uid=1, dim=[8, 5])
    c = g.matmul(a, b)
    g.pointwise(c, 0.25, mode=hd.PointwiseMode.ADD).set_output(True).set_uid(2).set_name("Y")
    path = tmp_path / "g.bin"
    path.write_bytes(g.to_hipdnn_graph())
    p = subprocess.run([cpp_tool, "read", str(path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "graph mix io=1 compute=1 tensors=5 nodes=2"
    tensors = {int(l.split()[1][4:]): l for l in lines if l.startswith("tensor")}
    assert "name=A dtype=1 dims=4,8 strides=8,1 virtual=0" in tensors[0]
    assert "name=Y dtype=1 dims=4,5 strides=5,1 virtual=0" in tensors[2]
    scalar = [l for l in tensors.values() if "value=" in l]
    assert len(scalar) == 1 and scalar[0].endswith("value=0.25"), lines
    mm = next(l for l in lines if " matmul " in l)
    virt = int(mm.split("c=")[1])
    assert mm.endswith(f"type=9 matmul a=0 b=1 c={virt}") and "virtual=1" in tensors[virt]
    pw = next(l for l in lines if " pointwise " in l)
    assert f"type=2 pointwise op=2 in0={virt} out0=2 in1=" in pw, pw   # ADD = 2, as hipDNN numbers it


def test_graphs_written_by_flatc_cpp_builders_build_and_run_here(cpp_tool, tmp_path, cpu, nocache, rng):
    path = tmp_path / "w.bin"
    subprocess.run([cpp_tool, "write", str(path)], check=True)
    data = path.read_bytes()
    a, b = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
    want = np.clip(a.astype(np.float64) @ b, 0.0, 0.5)
    g = hd.Graph.from_hipdnn_graph(data)
    g.build(cpu)
    d = np.full((4, 5), np.nan, np.float32)
    g.execute(cpu, {0: a, 1: b, 3: d})
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-5)
    # and as the graph of a kind-1 plan
    r = hd.Graph.from_compiled_plan(nocache, _fusilli_plan(data, uids=(0, 1, 3)))
    d[...] = np.nan
    r.execute(nocache, {0: a, 1: b, 3: d})
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-5)


# -- fuzzing --------------------------------------------------------------------------------
def _seed_payloads():
    g2 = hd.Graph(name="mix", io_data_type=F)
    x = g2.tensor(name="x", uid=1, dim=[2, 3, 4])
    y = g2.pointwise(x, 0.5, mode=hd.PointwiseMode.MUL)
    g2.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_upper_clip=2.0).set_output(True).set_uid(5)
    head = struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 1, 20)
    return [(head + _rfc_matmul().to_hipdnn_graph(), (0, 1, 2)), (head + g2.to_hipdnn_graph(), (1, 5)),
            (head + _resample_graph(), (0, 1)), (head + _custom_op_graph(), (0, 1))]


def fuzz_kind1(n, seed):
    """Mutated kind-1 payloads through the plugin's unpack + decode + check + lowering (no compile)."""
    plugin = IreeLinalgPlugin()
    session = plugin.create_session(SessionSettings(None, "llvm-cpu:host"))
    seeds = _seed_payloads()
    rnd = random.Random(seed)
    counts = {}
    for _ in range(n):
        payload, uids = rnd.choice(seeds)
        data = bytearray(payload)
        how = rnd.randrange(5)
        if how == 0:
            for _ in range(rnd.randint(1, 8)):
                data[rnd.randrange(len(data))] = rnd.randrange(256)
        elif how == 1:
            data = data[:rnd.randrange(len(data))]
        elif how == 2:
            pos = rnd.randrange(len(data) - 4)
            data[pos:pos + 4] = rnd.randrange(1 << 32).to_bytes(4, "little")
        elif how == 3:   # the header only
            pos = rnd.randrange(20)
            data[pos] = rnd.randrange(256)
        else:
            data = bytearray(rnd.randbytes(rnd.randint(0, 256)))
        try:
            plugin.graph_from_serialized(bytes(data), {"tensor_uids": uids}, session=session)
            counts["ok"] = counts.get("ok", 0) + 1
        except hd.HipdnnError as e:
            assert e.status in (S.PLUGIN_ERROR, S.NOT_SUPPORTED, S.BAD_PARAM), e
            assert str(e), "an error without a message"
            counts[e.status.name] = counts.get(e.status.name, 0) + 1
    return counts


def test_fuzzed_kind1_payloads_give_only_typed_errors():
    counts = fuzz_kind1(10_000, seed=121)
    assert counts.get("PLUGIN_ERROR", 0) > 2000 and counts.get("ok", 0) > 100, counts


@pytest.mark.slow
def test_fuzzed_kind1_payloads_give_only_typed_errors_100k():
    counts = fuzz_kind1(100_000, seed=12121)
    assert counts.get("PLUGIN_ERROR", 0) > 20_000 and counts.get("ok", 0) > 1000, counts


def test_the_unmutated_seeds_pass_the_check():
    plugin = IreeLinalgPlugin()
    session = plugin.create_session(SessionSettings(None, "llvm-cpu:host"))
    for payload, uids in _seed_payloads()[:3]:
        assert plugin.graph_from_serialized(payload, {"tensor_uids": uids}, session=session) == payload[20:]
    raises(S.NOT_SUPPORTED, lambda: plugin.graph_from_serialized(_seed_payloads()[3][0], session=session),
           match="CUSTOM_OP")
