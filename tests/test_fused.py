"""Fused graphs people build, each serialized, restored and executed against the reference, with
the number of dispatches IREE produced asserted (from its compile statistics) so a fusion
regression fails loudly. Also: every op kind has all four pieces."""
import numpy as np
import pytest

import hipdnn_iree as hd
from harness import compare_engines, random_array

F, H = hd.DataType.FLOAT, hd.DataType.HALF
P = hd.PointwiseMode


def nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


def conv_bias_relu():
    g = hd.Graph(name="conv_bias_relu", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[2, 16, 12, 12], stride=nhwc(2, 16, 12, 12))
    w = g.tensor(name="w", uid=2, dim=[32, 16, 3, 3], stride=nhwc(32, 16, 3, 3))
    b = g.tensor(name="b", uid=3, dim=[1, 32, 1, 1])
    y = g.pointwise(g.pointwise(g.conv_fprop(x, w, padding=[1, 1]), b, mode=P.ADD), mode=P.RELU_FWD)
    y.set_output(True).set_uid(4).set_stride(nhwc(2, 32, 12, 12))
    return g, {4: y}, {1: ([2, 16, 12, 12], nhwc(2, 16, 12, 12)), 2: ([32, 16, 3, 3], nhwc(32, 16, 3, 3)),
                       3: ([1, 32, 1, 1], None)}


def matmul_bias_gelu():
    g = hd.Graph(name="matmul_bias_gelu", io_data_type=H, compute_data_type=F)
    x, w = g.tensor(name="x", uid=1, dim=[4, 32, 64]), g.tensor(name="w", uid=2, dim=[64, 48])
    b = g.tensor(name="b", uid=3, dim=[1, 1, 48])
    y = g.pointwise(g.pointwise(g.matmul(x, w), b, mode=P.ADD), mode=P.GELU_FWD)
    y.set_output(True).set_uid(4)
    return g, {4: y}, {1: ([4, 32, 64], None), 2: ([64, 48], None), 3: ([1, 1, 48], None)}


def layernorm_matmul():
    g = hd.Graph(name="layernorm_matmul", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[8, 64])
    s, b = g.tensor(name="s", uid=2, dim=[1, 64]), g.tensor(name="b", uid=3, dim=[1, 64])
    w = g.tensor(name="w", uid=4, dim=[64, 32])
    y, _, _ = g.layernorm(x, s, b, epsilon=1e-5)
    g.matmul(y, w).set_output(True).set_uid(5)
    out = [t for t in g._tensors if t.get_uid() == 5][0]
    return g, {5: out}, {1: ([8, 64], None), 2: ([1, 64], None), 3: ([1, 64], None), 4: ([64, 32], None)}


def sdpa_causal():
    g = hd.Graph(name="sdpa_causal", io_data_type=H, compute_data_type=F)
    q = g.tensor(name="q", uid=1, dim=[1, 4, 32, 16])
    k, v = g.tensor(name="k", uid=2, dim=[1, 2, 32, 16]), g.tensor(name="v", uid=3, dim=[1, 2, 32, 16])
    o = g.sdpa(q, k, v, is_causal=True).set_output(True).set_uid(4)
    return g, {4: o}, {1: ([1, 4, 32, 16], None), 2: ([1, 2, 32, 16], None), 3: ([1, 2, 32, 16], None)}


def conv_fprop_dgrad_wgrad():
    g = hd.Graph(name="conv_train_step", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[2, 8, 10, 10])
    w = g.tensor(name="w", uid=2, dim=[16, 8, 3, 3])
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1])
    y.set_output(True).set_uid(3)
    dx = g.conv_dgrad(y, w, padding=[1, 1], stride=[1, 1]).set_output(True).set_uid(4).set_dim([2, 8, 10, 10])
    dw = g.conv_wgrad(y, x, padding=[1, 1], stride=[1, 1]).set_output(True).set_uid(5).set_dim([16, 8, 3, 3])
    return g, {3: y, 4: dx, 5: dw}, {1: ([2, 8, 10, 10], None), 2: ([16, 8, 3, 3], None)}


# graph -> dispatches IREE 3.13 produces for llvm-cpu (measured; a change here is a fusion change)
# conv_fprop's filter relayout runs in a dispatch of its own on the CPU (+1 per conv), and
# f32 graphs compile with data tiling (matmul operands packed in dispatches of their own).
FUSED = [
    (conv_bias_relu, 3),
    (matmul_bias_gelu, 1),
    (layernorm_matmul, 3),   # CPU: the layernorm's one-pass statistics fused with its normalize (policy norm_one_pass)
    (sdpa_causal, 4),   # CPU: the composition (GPU targets: the fused op, 2 dispatches)
    (conv_fprop_dgrad_wgrad, 13),   # CPU: fprop, dgrad and wgrad channels-last, each relayout a dispatch of its own
]


@pytest.mark.parametrize("factory,dispatches", FUSED, ids=[f.__name__ for f, _ in FUSED])
def test_fused_graph(cpu, rng, factory, dispatches):
    _, _, specs = factory()
    dt = factory()[0].io_data_type
    inputs = {u: random_array(d, dt, rng, strides=s) for u, (d, s) in specs.items()}
    got, want, g = compare_engines(lambda: factory()[:2], inputs, cpu, roundtrip=True, scale=4.0)
    assert g.get_execution_plan().context.dispatch_count == dispatches, (
        f"{factory.__name__}: IREE produced {g.get_execution_plan().context.dispatch_count} dispatches, "
        f"expected {dispatches}: did a fusion change?")


def test_every_op_kind_has_all_four_pieces():
    from hipdnn_iree.plugins.numpy_reference.registry import REFERENCES
    from lowering import LOWERINGS
    from graph_ir import ATTRS_BY_KIND, OpKind
    from graph_ir.desc import LOWERED_KINDS
    from graph_ir.opdef import OPS
    missing = [f"{kind.name}: attributes type" for kind in OpKind if kind not in ATTRS_BY_KIND]
    for kind in LOWERED_KINDS:   # hipDNN's other node types parse and are refused (test_hipdnn_graph.py)
        d = OPS[kind]
        if not d.supported or not callable(getattr(hd.Graph, d.frontend_method or "", None)):
            missing.append(f"{kind.name}: frontend method")
        if kind not in LOWERINGS:
            missing.append(f"{kind.name}: lowering")
        if kind not in REFERENCES:
            missing.append(f"{kind.name}: reference")
        if d.dynamic is None:
            missing.append(f"{kind.name}: dynamic-shape rule")
    assert not missing, missing
