"""hipDNN's graph schema at the plugin boundary: Graph.to_hipdnn_graph / from_hipdnn_graph, node and
data types this project parses but does not run, old-format plans, and fuzzed graph bytes."""
import glob
import os
import random
import textwrap

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import REPO, run_python
from graph_ir.desc import (ABSENT, ATTRS_BY_KIND, LOWERED_KINDS, GraphDesc, GraphError, NodeDesc, OpKind,
                               TensorDesc, decode_graph, encode_graph)

F = hd.DataType.FLOAT


def _rfc_matmul():
    """The sample graph of hipDNN RFC 0009: C = A[4x8] . B[8x5], UIDs 0, 1, 2."""
    g = hd.Graph(name="serialized_matmul", io_data_type=F, compute_data_type=F)
    a = g.tensor(name="A", uid=0, dim=[4, 8])
    b = g.tensor(name="B", uid=1, dim=[8, 5])
    g.matmul(a, b).set_output(True).set_uid(2).set_name("C")
    return g


def test_rfc_sample_round_trips_and_runs(cpu, rng):
    data = _rfc_matmul().to_hipdnn_graph()
    assert data[4:8] == b"HDI1"
    r = hd.Graph.from_hipdnn_graph(data)
    assert r.to_hipdnn_graph() == data
    desc = decode_graph(data)
    assert [t.uid for t in desc.tensors] == [0, 1, 2] and desc.nodes[0].kind == OpKind.MATMUL
    r.build(cpu)
    a, b = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
    c = np.full((4, 5), np.nan, np.float32)
    r.execute(cpu, {0: a, 1: b, 2: c})
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_enum_numbers_are_hipdnns():
    """Spot values from hipDNN's published schema (the whole list is schemas/graph.fbs)."""
    assert (hd.DataType.UINT8, hd.DataType.INT32, hd.DataType.INT8, hd.DataType.INT64) == (5, 6, 7, 15)
    assert hd.DataType.FP8_E4M3 == 8 and hd.DataType.FP8_E5M2_FNUZ == 17 and hd.DataType.BOOLEAN == 100
    M = hd.PointwiseMode
    assert (M.ABS, M.ADD, M.GEN_INDEX, M.RELU_FWD, M.TANH_FWD) == (1, 2, 22, 34, 47)
    assert (hd.ReductionMode.MIN, hd.ReductionMode.MAX, hd.ReductionMode.MUL_NO_ZEROS) == (3, 4, 9)
    assert hd.DataType.UNSET is hd.DataType.NOT_SET and hd.ReductionMode.MIN_OP is hd.ReductionMode.MIN
    assert int(OpKind.BATCHNORM_INFERENCE) == 1 and int(OpKind.POINTWISE) == 2 and int(OpKind.MATMUL) == 9
    assert int(OpKind.SDPA) == 12 and int(OpKind.REDUCTION) == 18 and int(OpKind.MOE_GROUPED_MATMUL_BWD) == 23


def _resample_graph() -> bytes:
    at = ATTRS_BY_KIND[OpKind.CUSTOM_OP](input_uids=(1,), output_uids=(2,))
    t = (TensorDesc(1, "x", int(F), (1, 2, 4, 4), (32, 16, 4, 1)), TensorDesc(2, "y", int(F), (1, 2, 2, 2), (8, 4, 2, 1)))
    return encode_graph(GraphDesc("pool", int(F), int(F), int(F), t, (NodeDesc("pool1", int(F), at),)))


def test_a_node_type_not_lowered_parses_and_is_refused_by_name(cpu):
    g = hd.Graph.from_hipdnn_graph(_resample_graph())
    with pytest.raises(hd.HipdnnError) as e:
        g.build(cpu)
    assert e.value.status == hd.Status.NOT_SUPPORTED
    assert "pool1" in str(e.value) and "CustomOpAttributes" in str(e.value)


def test_a_data_type_not_run_parses_and_is_refused_by_name(cpu):
    # FP8/FP4 run now (tests/test_block_scale.py); FP6 and INT4 still parse and are refused
    g = hd.Graph(name="fp6", io_data_type=F)
    x = g.tensor(name="x6", uid=1, dim=[4, 4], data_type=hd.DataType.FP6_E2M3)
    g.pointwise(x, mode=hd.PointwiseMode.IDENTITY).set_output(True).set_uid(2)
    r = hd.Graph.from_hipdnn_graph(g.to_hipdnn_graph())
    with pytest.raises(hd.HipdnnError) as e:
        r.build(cpu)
    assert e.value.status == hd.Status.NOT_SUPPORTED and "x6" in str(e.value) and "FP6_E2M3" in str(e.value)


def test_an_sdpa_field_not_honoured_is_refused_by_name(cpu):
    at = ATTRS_BY_KIND[OpKind.SDPA](q_uid=1, k_uid=2, v_uid=3, o_uid=4, dropout_probability=0.1)
    t = tuple(TensorDesc(u, n, int(F), (1, 1, 4, 8), (32, 32, 8, 1)) for u, n in ((1, "q"), (2, "k"), (3, "v"), (4, "o")))
    g = hd.Graph.from_hipdnn_graph(encode_graph(GraphDesc("attn", int(F), int(F), int(F), t,
                                                          (NodeDesc("att", int(F), at),))))
    with pytest.raises(hd.HipdnnError) as e:
        g.build(cpu)
    assert e.value.status == hd.Status.NOT_SUPPORTED and "dropout_probability" in str(e.value)


def test_causal_said_the_newer_way_decodes_as_causal():
    at = ATTRS_BY_KIND[OpKind.SDPA](q_uid=1, k_uid=2, v_uid=3, o_uid=4, right_bound=0)
    t = tuple(TensorDesc(u, n, int(F), (1, 1, 4, 8), (32, 32, 8, 1)) for u, n in ((1, "q"), (2, "k"), (3, "v"), (4, "o")))
    back = decode_graph(encode_graph(GraphDesc("a", int(F), int(F), int(F), t, (NodeDesc("att", int(F), at),))))
    assert back.nodes[0].attrs.is_causal and back.nodes[0].attrs.unsupported() is None


def test_plan_with_the_old_graph_format_is_refused_by_the_self_check():
    """hipdnn-iree 0.2 plans carry the graph in the pre-hipDNN schema: the self-check says so, cleanly."""
    plan = os.path.join(REPO, "tests", "data", "plan_v1_fusplan11_cpu.plan")
    p = run_python(textwrap.dedent(f"""
        import numpy as np, hipdnn_iree as hd
        h = hd.create_handle(self_check=True)
        r = hd.Graph.from_compiled_plan(h, hd.load_plan({plan!r}))
        d = np.load({plan[:-5] + '.npz'!r})
        y = np.zeros((2, 6, 12), np.float32)
        try:
            r.execute(h, {{1: d["x"], 2: d["w_memory"].transpose(0, 2, 1), 3: d["b"], 4: y}})
        except hd.HipdnnError as e:
            print("REFUSED", e.status.name, e)
    """))
    assert "REFUSED NOT_SUPPORTED" in p.stdout and "< 0.3" in p.stdout, p.stdout + p.stderr


def _mutations(seed_graphs, n, seed):
    rnd = random.Random(seed)
    for i in range(n):
        data = bytearray(rnd.choice(seed_graphs))
        how = rnd.randrange(4)
        if how == 0:
            for _ in range(rnd.randint(1, 8)):
                data[rnd.randrange(len(data))] = rnd.randrange(256)
        elif how == 1:
            data = data[:rnd.randrange(len(data))]
        elif how == 2:
            pos = rnd.randrange(len(data) - 4)
            data[pos:pos + 4] = rnd.randrange(1 << 32).to_bytes(4, "little")
        else:
            data = bytearray(rnd.randbytes(rnd.randint(0, 256)))
        yield bytes(data)


def _seed_graphs():
    g2 = hd.Graph(name="mix", io_data_type=F)
    x = g2.tensor(name="x", uid=1, dim=[2, 3, 4])
    y = g2.pointwise(x, 0.5, mode=hd.PointwiseMode.MUL)
    g2.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_upper_clip=2.0).set_output(True)
    return [_rfc_matmul().to_hipdnn_graph(), g2.to_hipdnn_graph(), _resample_graph()]


def fuzz_graphs(n, seed):
    seeds = _seed_graphs()
    counts = {}
    for data in _mutations(seeds, n, seed):
        try:
            hd.Graph.from_hipdnn_graph(data)
            counts["ok"] = counts.get("ok", 0) + 1
        except hd.HipdnnError as e:
            assert e.status in (hd.Status.BAD_PARAM, hd.Status.NOT_SUPPORTED), e
            counts[e.status.name] = counts.get(e.status.name, 0) + 1
    return counts


def test_fuzzed_graph_bytes_give_only_typed_errors():
    counts = fuzz_graphs(10_000, seed=12)
    assert counts.get("BAD_PARAM", 0) > 1000, counts


@pytest.mark.slow
def test_fuzzed_graph_bytes_give_only_typed_errors_100k():
    counts = fuzz_graphs(100_000, seed=1212)
    assert counts.get("BAD_PARAM", 0) > 10_000, counts


# -- what hipDNN's frontend writes and its readers need (read back through the generated reader) --------
def _mixed_graph(compute=hd.DataType.NOT_SET):
    """A pointwise constant, a layernorm epsilon, an rmsnorm, an sdpa with a constant scale tensor and an
    int8 matmul; no compute type set anywhere unless ``compute`` (the graph's)."""
    g = hd.Graph(name="mixed", io_data_type=F, compute_data_type=compute)
    x = g.tensor(name="x", uid=1, dim=[2, 4, 8])
    y = g.pointwise(x, 0.5, mode=hd.PointwiseMode.MUL, name="pw")
    s, b = g.tensor(name="s", uid=2, dim=[1, 1, 8]), g.tensor(name="b", uid=3, dim=[1, 1, 8])
    ln, _, _ = g.layernorm(y, s, b, epsilon=1e-5, name="ln")
    g.rmsnorm(ln, s, epsilon=1e-6, name="rms").set_output(True).set_uid(4)
    q = g.tensor(name="q", uid=5, dim=[1, 1, 4, 8])
    g.sdpa(q, q, q, attn_scale=g.tensor(name="sc", value=0.25), name="att").set_output(True).set_uid(6)
    a8 = g.tensor(name="a8", uid=7, dim=[4, 4], data_type=hd.DataType.INT8)
    g.matmul(a8, a8, name="imm").set_output(True).set_uid(8).set_data_type(hd.DataType.INT32)
    return g


def _read(data):
    from graph_ir._fbs import graph_generated as GG
    return GG, GG.Graph.GetRootAs(data, 0)


def test_scalar_constants_are_written_with_dims_1_and_read_either_way(cpu):
    GG, root = _read(_mixed_graph().to_hipdnn_graph())
    scalars = [root.Tensors(i) for i in range(root.TensorsLength()) if root.Tensors(i).ValueType() != 0]
    assert {t.Name().decode() for t in scalars} == {"pw_in_1_const", "ln_epsilon_const", "rms_epsilon_const", "sc"}
    for t in scalars:
        assert t.DimsAsNumpy().tolist() == [1] and t.StridesAsNumpy().tolist() == [1], t.Name()
    # a graph carrying its scalars as dims []/[] (this project before, other writers) still reads and runs
    desc = _mixed_graph().validate()._desc
    assert any(t.is_scalar and t.dims == () for t in desc.tensors)
    r = hd.Graph.from_hipdnn_graph(encode_graph(desc))
    assert all(t.dims == () for t in r._desc.tensors if t.is_scalar)


def test_compute_types_are_resolved_on_every_node_and_on_the_graph():
    GG, root = _read(_mixed_graph().to_hipdnn_graph())
    types = {root.Nodes(i).Name().decode(): root.Nodes(i).ComputeDataType() for i in range(root.NodesLength())}
    assert root.ComputeDataType() == GG.DataType.FLOAT
    assert types == {"pw": GG.DataType.FLOAT, "ln": GG.DataType.FLOAT, "rms": GG.DataType.FLOAT,
                     "att": GG.DataType.FLOAT, "imm": GG.DataType.INT32}
    # the graph's compute type fills nodes that set none; a node's own wins
    g = _mixed_graph(compute=hd.DataType.HALF)
    g._nodes[0].compute_data_type = hd.DataType.DOUBLE
    GG, root = _read(g.to_hipdnn_graph())
    types = [root.Nodes(i).ComputeDataType() for i in range(root.NodesLength())]
    assert root.ComputeDataType() == GG.DataType.HALF and types == [GG.DataType.DOUBLE] + [GG.DataType.HALF] * 4


def test_rmsnorm_forward_phase_is_written_and_not_set_still_reads(cpu, rng):
    GG, root = _read(_mixed_graph().to_hipdnn_graph())
    node = next(root.Nodes(i) for i in range(root.NodesLength()) if root.Nodes(i).Name() == b"rms")
    at = GG.RMSNormAttributes()
    at.Init(node.Attributes().Bytes, node.Attributes().Pos)
    assert at.ForwardPhase() == GG.NormFwdPhase.INFERENCE
    # a graph written with NOT_SET (older writers) is inference
    from graph_ir.desc import RmsnormAttrs, as_hipdnn_writes
    at = RmsnormAttrs(1, 2, 3, 4)
    t = (TensorDesc(1, "x", int(F), (2, 8), (8, 1)), TensorDesc(2, "s", int(F), (1, 8), (8, 1)),
         TensorDesc(3, "eps", int(F), (), (), is_scalar=True, scalar_value=1e-6), TensorDesc(4, "y", int(F), (2, 8), (8, 1)))
    desc = GraphDesc("r", int(F), 0, 0, t, (NodeDesc("rms", 0, at),))
    assert as_hipdnn_writes(desc).nodes[0].attrs.phase == GG.NormFwdPhase.INFERENCE
    x, s = rng.standard_normal((2, 8)).astype(np.float32), rng.standard_normal((1, 8)).astype(np.float32)
    for data in (encode_graph(desc), _encode_phase_not_set(desc)):
        r = hd.Graph.from_hipdnn_graph(data)
        r.set_preferred_engine_id_ext("NUMPY_REFERENCE")
        r.build(cpu)
        y = np.empty((2, 8), np.float32)
        r.execute(cpu, {1: x, 2: s, 4: y})
        x64 = x.astype(np.float64)
        np.testing.assert_allclose(y, x64 / np.sqrt((x64 ** 2).mean(1, keepdims=True) + 1e-6) * s, rtol=1e-5)


def _encode_phase_not_set(desc) -> bytes:
    """``desc`` (one RMSNorm node) with forward_phase left out, as writers before the field did."""
    import flatbuffers
    from graph_ir._fbs import graph_generated as GG
    data = bytearray(encode_graph(desc))
    root = GG.Graph.GetRootAs(data, 0)
    node = root.Nodes(0)
    tab = flatbuffers.table.Table(data, node.Attributes().Pos)
    off = tab.Offset(16)   # forward_phase: the 7th field's vtable slot
    assert off and data[tab.Pos + off] == GG.NormFwdPhase.INFERENCE
    data[tab.Pos + off] = GG.NormFwdPhase.NOT_SET
    assert decode_graph(bytes(data)).nodes[0].attrs.phase == GG.NormFwdPhase.NOT_SET
    return bytes(data)


@pytest.fixture(scope="module")
def cpp_reader(tmp_path_factory):
    """tests/data/hipdnn_graph_tool.cpp built on the C++ code flatc generates from schemas/graph.fbs."""
    import shutil
    import subprocess
    import sys
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


def test_flatc_cpp_reader_sees_scalar_dims_compute_types_phase_and_scale_tensor(cpp_reader, tmp_path):
    import subprocess
    path = tmp_path / "mixed.bin"
    path.write_bytes(_mixed_graph().to_hipdnn_graph())
    p = subprocess.run([cpp_reader, "read", str(path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("graph mixed io=1 compute=1 "), lines[0]
    scalars = [l for l in lines if l.startswith("tensor") and " value=" in l]
    assert len(scalars) == 4 and all("dims=1 strides=1 " in l for l in scalars), scalars
    nodes = {l.split()[1]: l for l in lines if l.startswith("node ")}
    assert set(nodes) == {"pw", "ln", "rms", "att", "imm"}
    for name, line in nodes.items():
        assert f" compute={6 if name == 'imm' else 1} " in line, line   # INT32 = 6, FLOAT = 1
    assert " rmsnorm phase=1 " in nodes["rms"] and " layernorm phase=1 " in nodes["ln"]
    sc = next(l for l in scalars if "name=sc " in l)
    assert nodes["att"].endswith(f" sdpa scale_tensor={sc.split()[1][4:]}"), nodes["att"]
