"""graph_ir/dynamic.py: which dims vary per op family, resolve's checks and messages, JSON."""
from __future__ import annotations

import pytest

import hipdnn_iree as hd
from graph_ir import GraphError, decode_graph
from graph_ir.dynamic import ShapeSpec, analyze

F = hd.DataType.FLOAT
P = hd.PointwiseMode


def _desc(g, handle):
    g.validate()
    g.build_operation_graph(handle)
    return decode_graph(g.get_op_graph_bytes())


def _out(t, uid):
    t.set_output(True).set_uid(uid)
    return t


def mlp(cpu):
    g = hd.Graph(name="mlp", io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[8, 64, 128])
    w = g.tensor(name="W", uid=2, dim=[1, 128, 256], stride=[256 * 128, 1, 128])
    b = g.tensor(name="bias", uid=3, dim=[1, 1, 256])
    _out(g.pointwise(g.pointwise(g.matmul(x, w), b, mode=P.ADD), mode=P.RELU_FWD), 4)
    return _desc(g, cpu)


def test_matmul_batch_and_m_vary_k_n_fixed(cpu):
    s = analyze(mlp(cpu))
    assert s.varying() == {1: [0, 1], 4: [0, 1]}
    assert s.symbols == {"B": 8, "M": 64}
    assert s.allowed(1, 0) == "any size >= 1 (symbol B, shared with uid 4)"
    assert s.allowed(1, 2) == "fixed at 128"
    assert s.allowed(2, 0) == "fixed at 1"      # the weight's batch 1 broadcasts
    assert s.resolve({1: (3, 7, 128)}) == {1: (3, 7, 128), 2: (1, 128, 256), 3: (1, 1, 256), 4: (3, 7, 256)}


def test_resolve_refuses_with_uid_dim_and_allowed(cpu):
    s = analyze(mlp(cpu))
    with pytest.raises(GraphError, match=r"uid 1 dim 2: size 127 given; the plan allows fixed at 128"):
        s.resolve({1: (3, 7, 127)})
    with pytest.raises(GraphError, match=r"uid 4 dim 0: size 4 given, but uid 1 dim 0 gives symbol B the size 3"):
        s.resolve({1: (3, 7, 128), 4: (4, 7, 256)})
    with pytest.raises(GraphError, match=r"uid 1 dim 1: size 0 given"):
        s.resolve({1: (3, 0, 128)})
    with pytest.raises(GraphError, match=r"uid 1: 2 dims"):
        s.resolve({1: (3, 7)})
    with pytest.raises(GraphError, match=r"symbol B: no shape given"):
        s.resolve({2: (1, 128, 256)})
    with pytest.raises(GraphError, match=r"uid 99: not a tensor bound"):
        s.resolve({99: (1,)})


def test_json_round_trip_and_canonical(cpu):
    s = analyze(mlp(cpu))
    j = s.to_json()
    assert ShapeSpec.from_json(j).to_json() == j
    assert ShapeSpec.from_json(j) == s
    with pytest.raises(GraphError, match="malformed"):
        ShapeSpec.from_json("{\"version\": 1}")


def test_strides_follow_memory_order(cpu):
    s = analyze(mlp(cpu))
    assert s.strides_for(1, (3, 7, 128)) == (7 * 128, 128, 1)
    assert s.strides_for(2, (1, 128, 256)) == (256 * 128, 1, 128)   # transposed through strides


def test_pointwise_only_graph_all_but_last_axis(cpu):
    g = hd.Graph(name="pw", io_data_type=F)
    a = g.tensor(name="a", uid=1, dim=[4, 6, 8])
    b = g.tensor(name="b", uid=2, dim=[4, 6, 8])
    _out(g.pointwise(a, b, mode=P.MUL), 3)
    assert analyze(_desc(g, cpu)).varying() == {1: [0, 1], 2: [0, 1], 3: [0, 1]}


def test_pointwise_per_channel_operand_fixes_channels(cpu):
    g = hd.Graph(name="pwc", io_data_type=F)
    a = g.tensor(name="a", uid=1, dim=[2, 3, 5, 7])
    b = g.tensor(name="b", uid=2, dim=[1, 3, 1, 1])
    _out(g.pointwise(a, b, mode=P.ADD), 3)
    s = analyze(_desc(g, cpu))
    assert s.varying() == {1: [0, 2, 3], 3: [0, 2, 3]}
    assert s.allowed(2, 0) == "fixed at 1"


def test_reduction_kept_axes_vary_reduced_fixed(cpu):
    g = hd.Graph(name="red", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[4, 6, 8])
    y = g.reduction(x, mode=hd.ReductionMode.ADD)
    y.set_dim([4, 6, 1])
    _out(y, 2)
    s = analyze(_desc(g, cpu))
    assert s.varying() == {1: [0, 1], 2: [0, 1]}
    assert s.allowed(2, 2) == "fixed at 1"


def test_layernorm_normalized_axes_fixed(cpu):
    g = hd.Graph(name="ln", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[2, 5, 16])
    sc = g.tensor(name="s", uid=2, dim=[1, 1, 16])
    bi = g.tensor(name="b", uid=3, dim=[1, 1, 16])
    y = g.layernorm(x, sc, bi, epsilon=1e-5)
    y = y[0] if isinstance(y, (list, tuple)) else y
    _out(y, 4)
    s = analyze(_desc(g, cpu))
    assert s.varying() == {1: [0, 1], 4: [0, 1]}


def test_sdpa_batch_and_both_sequence_lengths(cpu):
    g = hd.Graph(name="att", io_data_type=F)
    q = g.tensor(name="q", uid=1, dim=[2, 4, 8, 16])
    k = g.tensor(name="k", uid=2, dim=[2, 2, 6, 16])
    v = g.tensor(name="v", uid=3, dim=[2, 2, 6, 16])
    _out(g.sdpa(q, k, v, is_causal=True), 4)
    s = analyze(_desc(g, cpu))
    assert s.varying() == {1: [0, 2], 2: [0, 2], 3: [0, 2], 4: [0, 2]}
    assert s.symbols == {"B": 2, "S_q": 8, "S_kv": 6}
    with pytest.raises(GraphError, match=r"uid 3 dim 2: size 5 given, but uid 2 dim 2 gives symbol S_kv the size 9"):
        s.resolve({1: (1, 4, 3, 16), 2: (1, 2, 9, 16), 3: (1, 2, 5, 16)})
    with pytest.raises(GraphError, match=r"uid 1 dim 3: size 8 given; the plan allows fixed at 16"):
        s.resolve({1: (1, 4, 3, 8)})


def _conv(cpu, stride=1, pad=1):
    g = hd.Graph(name="conv", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[2, 3, 10, 12])
    w = g.tensor(name="w", uid=2, dim=[5, 3, 3, 3])
    _out(g.conv_fprop(x, w, padding=[pad, pad], stride=[stride, stride]), 3)
    return _desc(g, cpu)


def test_conv_n_varies_channels_and_filter_fixed(cpu):
    s = analyze(_conv(cpu), conv_spatial=False)
    assert s.varying() == {1: [0], 3: [0]}
    assert s.allowed(2, 2) == "fixed at 3"


def test_conv_spatial_output_formula(cpu):
    s = analyze(_conv(cpu, stride=2, pad=1), conv_spatial=True)
    assert s.varying() == {1: [0, 2, 3], 3: [0, 2, 3]}
    assert s.allowed(3, 2) == "(H + 2 - 3) // 2 + 1 from uid 1 dim 2"
    got = s.resolve({1: (1, 3, 7, 5)})
    assert got[3] == (1, 5, (7 + 2 - 3) // 2 + 1, (5 + 2 - 3) // 2 + 1)
    with pytest.raises(GraphError, match=r"uid 3 dim 3: size 4 given; the plan allows \(W \+ 2 - 3\) // 2 \+ 1"):
        s.resolve({1: (1, 3, 7, 5), 3: (1, 5, 4, 4)})
    # 'same' padding with stride 1 keeps the size: one symbol for x and y
    s1 = analyze(_conv(cpu, stride=1, pad=1), conv_spatial=True)
    assert s1.allowed(3, 2) == "any size >= 1 (symbol H, shared with uid 1)"
    assert ShapeSpec.from_json(s.to_json()) == s


def test_batch_made_by_a_broadcasting_matmul_stays_fixed(cpu):
    """x [S, E] @ w [1, H, E, D] -> [1, H, S, D]: no input carries the batch, so it is fixed at 1
    (the output alone cannot give it a size); the tokens vary through the matmul into sdpa."""
    g = hd.Graph(name="gqa", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[6, 16])
    outs = [g.matmul(x, g.tensor(name=n, uid=u, dim=[1, h, 16, 8])) for n, u, h in (("q", 3, 4), ("k", 4, 2), ("v", 5, 2))]
    _out(g.sdpa(*outs, is_causal=True), 100)
    s = analyze(_desc(g, cpu))
    assert s.varying() == {1: [0], 100: [2]}
    assert s.allowed(100, 0) == "fixed at 1"
    assert s.resolve({1: (9, 16)})[100] == (1, 4, 9, 8)


def test_grouped_conv_keeps_spatial_fixed(cpu):
    g = hd.Graph(name="gconv", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[2, 4, 8, 8])
    w = g.tensor(name="w", uid=2, dim=[4, 2, 3, 3])
    _out(g.conv_fprop(x, w, padding=[1, 1]), 3)
    assert analyze(_desc(g, cpu)).varying() == {1: [0], 3: [0]}


def test_wgrad_lets_n_vary_unless_the_graph_has_a_conv_fprop(cpu):
    """conv_wgrad contracts over N: alone, N varies (its GPU builds then skip IREE's channels-last pass,
    which cannot take a dynamic N there: knobs.resolve); beside a conv_fprop (whose f16 GPU builds need
    that pass) N stays fixed."""
    def graph(with_fprop):
        g = hd.Graph(name="wgrad", io_data_type=F)
        dy = g.tensor(name="dy", uid=1, dim=[2, 4, 6, 7])
        x = g.tensor(name="x", uid=2, dim=[2, 3, 6, 7])
        dw = g.conv_wgrad(dy, x, padding=[1, 1])
        dw.set_dim([4, 3, 3, 3])
        _out(dw, 3)
        if with_fprop:
            w = g.tensor(name="w", uid=4, dim=[4, 3, 3, 3])
            _out(g.conv_fprop(x, w, padding=[1, 1]), 5)
        return _desc(g, cpu)
    s = analyze(graph(False))
    assert s.varying() == {1: [0], 2: [0]} and "symbol N" in s.allowed(1, 0)
    s = analyze(graph(True))
    assert s.varying() == {} and s.allowed(1, 0) == "fixed at 2"


def test_pinned_fixes_a_symbol_and_what_derives_from_it(cpu):
    s = analyze(_conv(cpu, stride=2, pad=1)).pinned(["W"])
    assert s.varying() == {1: [0, 2], 3: [0, 2]}
    assert s.allowed(3, 3) == "fixed at 6" and s.allowed(1, 3) == "fixed at 12"
    assert s.resolve({1: (3, 3, 9, 12)})[3] == (3, 5, 5, 6)
    assert ShapeSpec.from_json(s.to_json()) == s
    with pytest.raises(GraphError, match=r"symbols \['Q'\] are not in this spec"):
        s.pinned(["Q"])
