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
from lowering.graph_ir import (ABSENT, ATTRS_BY_KIND, LOWERED_KINDS, GraphDesc, LoweringError, NodeDesc, OpKind,
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
    at = ATTRS_BY_KIND[OpKind.RESAMPLE_FWD](x_uid=1, y_uid=2, pre_padding=(0, 0), post_padding=(0, 0),
                                           stride=(2, 2), window=(2, 2), resample_mode=1, padding_mode=1)
    t = (TensorDesc(1, "x", int(F), (1, 2, 4, 4), (32, 16, 4, 1)), TensorDesc(2, "y", int(F), (1, 2, 2, 2), (8, 4, 2, 1)))
    return encode_graph(GraphDesc("pool", int(F), int(F), int(F), t, (NodeDesc("pool1", int(F), at),)))


def test_a_node_type_not_lowered_parses_and_is_refused_by_name(cpu):
    g = hd.Graph.from_hipdnn_graph(_resample_graph())
    with pytest.raises(hd.HipdnnError) as e:
        g.build(cpu)
    assert e.value.status == hd.Status.NOT_SUPPORTED
    assert "pool1" in str(e.value) and "ResampleFwdAttributes" in str(e.value)


def test_a_data_type_not_run_parses_and_is_refused_by_name(cpu):
    g = hd.Graph(name="fp8", io_data_type=F)
    x = g.tensor(name="x8", uid=1, dim=[4, 4], data_type=hd.DataType.FP8_E4M3)
    g.pointwise(x, mode=hd.PointwiseMode.IDENTITY).set_output(True).set_uid(2)
    r = hd.Graph.from_hipdnn_graph(g.to_hipdnn_graph())
    with pytest.raises(hd.HipdnnError) as e:
        r.build(cpu)
    assert e.value.status == hd.Status.NOT_SUPPORTED and "x8" in str(e.value) and "FP8_E4M3" in str(e.value)


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
