"""Pointwise modes: numerics against the reference, broadcasting, scalars, dtypes, golden IR."""
import math

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import compare_engines, filecheck, lowered_mlir, random_array
from graph_ir.ops.pointwise import ARITY

M = hd.PointwiseMode
F, H, B = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16

# Input ranges where each mode is defined and well-conditioned.
POSITIVE = {M.LOG, M.SQRT, M.RSQRT, M.RECIPROCAL}
SMALL = {M.TAN, M.POW}
BOOLEAN_IN = {M.LOGICAL_AND, M.LOGICAL_OR, M.LOGICAL_NOT}


def _inputs(mode, shapes, dt, rng):
    if mode in BOOLEAN_IN:
        return [random_array(s, hd.DataType.BOOLEAN, rng) for s in shapes]
    lo, hi = (0.1, 3.0) if mode in POSITIVE else (-1.2, 1.2) if mode in SMALL else (-3.0, 3.0)
    if mode == M.BINARY_SELECT:
        return [random_array(shapes[0], dt, rng), random_array(shapes[1], dt, rng),
                random_array(shapes[2], hd.DataType.BOOLEAN, rng)]
    if mode == M.POW:
        return [random_array(shapes[0], dt, rng, 0.2, 2.0), random_array(shapes[1], dt, rng, -1.5, 1.5)]
    if mode in (M.DIV, M.MOD):
        return [random_array(shapes[0], dt, rng, lo, hi), random_array(shapes[1], dt, rng, 0.5, 2.0)]
    return [random_array(s, dt, rng, lo, hi) for s in shapes]


def _run(cpu, rng, mode, dt, shapes, out_shape, **params):
    ins = _inputs(mode, shapes, dt, rng)
    in_types = [hd.DataType.BOOLEAN if x.dtype == np.bool_ else dt for x in ins]

    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        ts = [g.tensor(name=f"in{i}", uid=i + 1, dim=list(s), data_type=t) for i, (s, t) in enumerate(zip(shapes, in_types))]
        y = g.pointwise(*ts, mode=mode, **params).set_output(True).set_uid(10)
        return g, {10: y}

    got, want, g = compare_engines(build, {i + 1: x for i, x in enumerate(ins)}, cpu, roundtrip=False)
    assert got[10].shape == tuple(out_shape)
    return got[10], want[10], ins


ALL_MODES = sorted(set(ARITY) - {M.GEN_INDEX}, key=int)   # GEN_INDEX needs an axis: its own test


@pytest.mark.parametrize("mode", ALL_MODES, ids=lambda m: M(m).name)
def test_every_mode_f32(cpu, rng, mode):
    n = ARITY[mode]
    shapes = [(3, 17)] * n
    _run(cpu, rng, M(mode), F, shapes, (3, 17))


@pytest.mark.parametrize("dt", [H, B], ids=lambda d: d.name)
@pytest.mark.parametrize("mode", [M.ADD, M.MUL, M.GELU_FWD, M.SIGMOID_FWD, M.TANH_BWD, M.CMP_GT, M.SOFTPLUS_FWD,
                                  M.GELU_APPROX_TANH_FWD, M.SWISH_FWD], ids=lambda m: m.name)
def test_modes_low_precision(cpu, rng, dt, mode):
    _run(cpu, rng, mode, dt, [(4, 9)] * ARITY[mode], (4, 9))


@pytest.mark.parametrize("shapes,out", [
    ([(4, 1, 5), (1, 3, 1)], (4, 3, 5)),
    ([(2, 3, 4), (4,)], (2, 3, 4)),
    ([(1, 1, 5), (2, 6, 5)], (2, 6, 5)),
    ([(7, 1), (1, 1)], (7, 1)),
])
def test_broadcasting_like_pytorch(cpu, rng, shapes, out):
    got, want, ins = _run(cpu, rng, M.SUB, F, shapes, out)
    np.testing.assert_allclose(got, ins[0].astype(np.float64) - ins[1], rtol=1e-6, atol=1e-6)


def test_parameters_are_honoured(cpu, rng):
    got, _, ins = _run(cpu, rng, M.ELU_FWD, F, [(5, 6)], (5, 6), alpha=0.3)
    x = ins[0].astype(np.float64)
    np.testing.assert_allclose(got, np.where(x > 0, x, 0.3 * np.expm1(x)), rtol=1e-5, atol=1e-5)
    got, _, ins = _run(cpu, rng, M.SOFTPLUS_FWD, F, [(5, 6)], (5, 6), beta=2.0)
    x = ins[0].astype(np.float64)
    np.testing.assert_allclose(got, np.log1p(np.exp(2 * x)) / 2, rtol=1e-5, atol=1e-5)
    got, _, ins = _run(cpu, rng, M.SWISH_FWD, F, [(5, 6)], (5, 6), beta=1.7)
    x = ins[0].astype(np.float64)
    np.testing.assert_allclose(got, x / (1 + np.exp(-1.7 * x)), rtol=1e-5, atol=1e-5)


def test_reference_hand_values():
    """The oracle itself, on values derived by hand."""
    from hipdnn_iree.plugins.numpy_reference.pointwise import pointwise
    x = np.array([-1.0, 0.0, 2.0])
    np.testing.assert_allclose(pointwise(M.RELU_FWD, [x]), [0, 0, 2])
    np.testing.assert_allclose(pointwise(M.GELU_FWD, [x]), [-0.15865525393145707, 0.0, 1.9544997361036416])
    np.testing.assert_allclose(pointwise(M.SIGMOID_FWD, [x]), [1 / (1 + math.e), 0.5, 1 / (1 + math.exp(-2))])
    np.testing.assert_allclose(pointwise(M.ADD_SQUARE, [x, x]), [0.0, 0.0, 6.0])
    np.testing.assert_allclose(pointwise(M.RELU_BWD, [np.ones(3), x]), [0, 0, 1])
    np.testing.assert_allclose(pointwise(M.TANH_BWD, [np.full(3, 2.0), x]), 2 * (1 - np.tanh(x) ** 2))


def test_scalar_constants_and_chain(cpu, rng):
    x = random_array([8, 16], F, rng)

    def build():
        g = hd.Graph(io_data_type=F)
        t = g.tensor(name="x", uid=1, dim=[8, 16])
        half = g.tensor(value=0.5)
        y = g.pointwise(g.pointwise(t, half, mode=M.MUL), 2.0, mode=M.ADD)     # python number -> scalar
        y = g.pointwise(y, mode=M.TANH_FWD)
        y = g.pointwise(y, mode=M.EXP).set_output(True).set_uid(2)
        return g, {2: y}

    got, _, _ = compare_engines(build, {1: x}, cpu)
    np.testing.assert_allclose(got[2], np.exp(np.tanh(x * 0.5 + 2.0)), rtol=1e-5, atol=1e-5)


def test_strided_layouts(cpu, rng):
    x = random_array([2, 3, 4, 5], F, rng, strides=[60, 1, 15, 3])   # channels-last
    bias = random_array([1, 3, 1, 1], F, rng)
    bc = random_array([2, 3, 4, 5], F, rng, strides=[0, 5, 0, 1])    # broadcast input via stride 0

    def build():
        g = hd.Graph(io_data_type=F)
        a = g.tensor(uid=1, dim=[2, 3, 4, 5], stride=[60, 1, 15, 3])
        b = g.tensor(uid=2, dim=[1, 3, 1, 1])
        c = g.tensor(uid=3, dim=[2, 3, 4, 5], stride=[0, 5, 0, 1])
        y = g.pointwise(g.pointwise(a, b, mode=M.ADD), c, mode=M.MUL)
        y.set_output(True).set_uid(4).set_stride([60, 1, 15, 3])
        return g, {4: y}

    got, _, _ = compare_engines(build, {1: x, 2: bias, 3: bc}, cpu)
    np.testing.assert_allclose(got[4], (x.astype(np.float64) + bias) * bc, rtol=1e-5, atol=1e-5)
    assert got[4].strides == tuple(s * 4 for s in [60, 1, 15, 3])


def test_pointwise_golden_ir(cpu):
    g = hd.Graph(io_data_type=H, compute_data_type=F)
    x = g.tensor(uid=1, dim=[4, 6])
    b = g.tensor(uid=2, dim=[1, 6])
    y = g.pointwise(g.pointwise(x, b, mode=M.ADD), mode=M.GELU_FWD)
    g.pointwise(y, 0.0, mode=M.CMP_GT).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: func.func @main(%[[X:.+]]: tensor<4x6xf16>, %[[B:.+]]: tensor<1x6xf16>, %[[O:.+]]: tensor<4x6xi1> {iree.abi.output = 0 : index})
// CHECK: linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (0, d1)>, affine_map<(d0, d1) -> (d0, d1)>]
// CHECK: arith.extf {{.*}} : f16 to f32
// CHECK: arith.addf {{.*}} : f32
// CHECK: math.erf
// CHECK: arith.constant dense<0.0> : tensor<f32>
// CHECK: affine_map<(d0, d1) -> ()>
// CHECK: arith.cmpf ogt
// CHECK: return {{.*}} : tensor<4x6xi1>
""")


def test_softplus_threshold_is_refused():
    """hipDNN's schema has no softplus threshold: asking for one is NOT_SUPPORTED, not ignored."""
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="x", dim=[2, 2])
    with pytest.raises(hd.HipdnnError) as e:
        g.pointwise(x, mode=M.SOFTPLUS_FWD, beta=2.0, threshold=1.5)
    assert e.value.status == hd.Status.NOT_SUPPORTED and "threshold" in str(e.value)


@pytest.mark.parametrize("clip", [dict(relu_lower_clip=-0.5), dict(relu_upper_clip=1.25),
                                  dict(relu_lower_clip_slope=0.1),
                                  dict(relu_lower_clip=0.5, relu_upper_clip=2.0, relu_lower_clip_slope=0.25)],
                         ids=lambda d: ",".join(d))
def test_relu_clips_and_slope(cpu, rng, clip):
    """ReLU's hipDNN fields: the engine against the reference, and the reference against numpy."""
    got, want, ins = _run(cpu, rng, M.RELU_FWD, F, [(6, 7)], (6, 7), **clip)
    x = ins[0].astype(np.float64)
    lo, hi, s = clip.get("relu_lower_clip", 0.0), clip.get("relu_upper_clip", np.inf), clip.get(
        "relu_lower_clip_slope", 0.0)
    expect = np.clip(x, lo, hi) + s * np.minimum(x - lo, 0.0)
    np.testing.assert_allclose(got, expect, rtol=1e-6, atol=1e-6)
    assert not np.allclose(expect, np.maximum(x, 0.0)), "the clip changed nothing: the test would not see it ignored"


def test_relu_bwd_clips(cpu, rng):
    ins_shape = [(5, 8), (5, 8)]
    got, _, ins = _run(cpu, rng, M.RELU_BWD, F, ins_shape, (5, 8), relu_lower_clip=-0.5, relu_upper_clip=1.0,
                       relu_lower_clip_slope=0.2)
    dy, x = (a.astype(np.float64) for a in ins)
    grad = np.where(x <= -0.5, 0.2, np.where(x < 1.0, 1.0, 0.0))
    np.testing.assert_allclose(got, dy * grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("out_type", [hd.DataType.INT32, hd.DataType.INT64, F], ids=lambda d: d.name)
def test_gen_index(cpu, rng, axis, out_type):
    x = random_array((3, 4, 5), F, rng)

    def build():
        g = hd.Graph(io_data_type=F)
        t = g.tensor(name="x", uid=1, dim=[3, 4, 5])
        y = g.pointwise(t, mode=M.GEN_INDEX, axis=axis).set_output(True).set_uid(2).set_data_type(out_type)
        return g, {2: y}

    got, want, _ = compare_engines(build, {1: x}, cpu, roundtrip=False)
    expect = np.indices((3, 4, 5))[axis]
    np.testing.assert_array_equal(got[2], expect)


def test_gen_index_needs_a_valid_axis(cpu):
    g = hd.Graph(io_data_type=F)
    t = g.tensor(name="x", uid=1, dim=[3, 4])
    g.pointwise(t, mode=M.GEN_INDEX, axis=2).set_output(True)
    with pytest.raises(hd.HipdnnError) as e:
        g.build(cpu)
    assert e.value.status == hd.Status.BAD_PARAM and "axis" in str(e.value)
