"""Reduction and normalization ops (reduction, batchnorm_inference, layernorm, rmsnorm).

Numerics of the IREE engine against the numpy reference (over modes, axis sets,
layouts and data types), the reference itself against hand-derived values and
PyTorch, golden linalg IR, compile-only GPU builds, and validation errors.
"""
import math

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import compare_engines, empty_like_tensor, filecheck, lowered_mlir, random_array

F, H, B = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16
R = hd.ReductionMode
TRAINING, INFERENCE = hd.NormFwdPhase.TRAINING, hd.NormFwdPhase.INFERENCE


def channels_last(dims):
    """Strides of a channels-last buffer (memory order N, spatial..., C) for logical dims [N, C, ...]."""
    order = [0] + list(range(2, len(dims))) + [1]
    strides, acc = [0] * len(dims), 1
    for a in reversed(order):
        strides[a] = acc
        acc *= dims[a]
    return strides


def reference_run(build, inputs, handle):
    """Runs ``build()``'s graph on the NUMPY_REFERENCE engine only (no compile)."""
    g, outs = build()
    g.set_preferred_engine_id_ext("NUMPY_REFERENCE")
    g.build(handle)
    got = {u: empty_like_tensor(t) for u, t in outs.items()}
    g.execute(handle, {**inputs, **got})
    return got


def bad_param(fn, *words):
    """Asserts ``fn()`` raises HipdnnError(BAD_PARAM) whose message names every one of ``words``."""
    with pytest.raises(hd.HipdnnError) as info:
        fn()
    assert info.value.status == hd.Status.BAD_PARAM, str(info.value)
    for w in words:
        assert w in str(info.value), f"{w!r} not in: {info.value}"
    return info.value


# ---------------------------------------------------------------------------
# reduction
# ---------------------------------------------------------------------------

# x dims, y dims, mode, data type, channels-last x?
REDUCTIONS = [
    ([2, 3, 4, 5], [1, 1, 1, 1], R.ADD, F, False),          # all axes
    ([2, 3, 4, 5], [2, 1, 4, 1], R.MUL, F, False),          # non-adjacent axes
    ([4, 6, 5], [4, 1, 5], R.MIN, H, False),
    ([4, 6, 5], [1, 6, 1], R.MAX, B, False),
    ([2, 8, 3, 3], [2, 8, 1, 1], R.AMAX, F, True),          # global pool over an NHWC input
    ([2, 8, 3, 5], [1, 8, 1, 1], R.AVG, H, True),           # everything but the (innermost) channels
    ([3, 16, 7], [3, 1, 1], R.NORM1, B, False),
    ([16, 33], [16, 1], R.NORM2, H, False),
    ([2, 4, 6], [2, 4, 1], R.MUL_NO_ZEROS, F, False),
    ([5, 7], [1, 7], R.AVG, F, False),                      # axis 0
    ([4, 2048], [4, 1], R.ADD, H, False),                   # long rows: f32 accumulation of f16 data
    ([3, 4], [3, 4], R.NORM2, B, False),                    # nothing reduced: |x|
]


def _reduction_input(x_dims, mode, dt, strides, rng):
    # NOTE: products of many values in [-1, 1] vanish; keep factors near 1 in magnitude.
    low, high = (0.7, 1.3) if mode in (R.MUL, R.MUL_NO_ZEROS) else (-1.0, 1.0)
    x = random_array(x_dims, dt, rng, low=low, high=high, strides=strides)
    x = x * np.where(rng.random(x_dims) < 0.5, -1, 1).astype(x.dtype) if low > 0 else x
    if mode == R.MUL_NO_ZEROS:
        x[rng.random(x_dims) < 0.3] = 0      # scattered zeros ...
        x[0, 0, :] = 0                        # ... and one all-zero slice, which gives 1
    return x


@pytest.mark.parametrize("x_dims,y_dims,mode,dt,nhwc", REDUCTIONS,
                         ids=[f"{m.name}-{d.name}-{x}to{y}{'-nhwc' if c else ''}"
                              for x, y, m, d, c in REDUCTIONS])
def test_reduction(cpu, rng, x_dims, y_dims, mode, dt, nhwc):
    strides = channels_last(x_dims) if nhwc else None
    X = _reduction_input(x_dims, mode, dt, strides, rng)

    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        x = g.tensor(name="X", uid=1, dim=x_dims, stride=strides)
        y = g.reduction(x, mode=mode, name="red").set_dim(y_dims).set_output(True).set_uid(2)
        return g, {2: y}

    got, _, _ = compare_engines(build, {1: X}, cpu)
    if mode == R.MUL_NO_ZEROS:
        assert got[2][0, 0, 0] == 1  # the all-zero slice


def test_reduction_hand_derived(cpu):
    """Every mode on one small input whose results are worked out by hand (both engines)."""
    X = np.array([[1, -2, 0], [3, 0, -4]], np.float32)
    want = {R.ADD: [-1, -1], R.MUL: [0, 0], R.MIN: [-2, -4], R.MAX: [1, 3], R.AMAX: [2, 4],
            R.AVG: [-1 / 3, -1 / 3], R.NORM1: [3, 7], R.NORM2: [math.sqrt(5), 5], R.MUL_NO_ZEROS: [-2, -12]}

    def build():
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="X", uid=1, dim=[2, 3])
        outs = {}
        for i, mode in enumerate(want):
            outs[10 + i] = g.reduction(x, mode=mode, name=mode.name).set_dim([2, 1]).set_output(True).set_uid(10 + i)
        return g, outs

    got, ref, _ = compare_engines(build, {1: X}, cpu)
    for i, mode in enumerate(want):
        for res in (got, ref):
            np.testing.assert_allclose(res[10 + i][:, 0], want[mode], rtol=1e-6, err_msg=mode.name)


# ---------------------------------------------------------------------------
# batchnorm_inference
# ---------------------------------------------------------------------------

BATCHNORMS = [([2, 3, 4, 5], F, False), ([2, 8, 3, 5], H, True), ([4, 6, 10], B, False)]


def _per_channel(dims, dt, rng):
    c = [1, dims[1]] + [1] * (len(dims) - 2)
    return c, {2: random_array(c, dt, rng), 3: random_array(c, dt, rng, low=0.5, high=2.0),
               4: random_array(c, dt, rng, low=0.5, high=1.5), 5: random_array(c, dt, rng)}


@pytest.mark.parametrize("dims,dt,nhwc", BATCHNORMS,
                         ids=[f"{d.name}-{x}{'-nhwc' if c else ''}" for x, d, c in BATCHNORMS])
def test_batchnorm_inference(cpu, rng, dims, dt, nhwc):
    strides = channels_last(dims) if nhwc else None
    c, stats = _per_channel(dims, dt, rng)
    X = random_array(dims, dt, rng, strides=strides)

    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        x = g.tensor(name="X", uid=1, dim=dims, stride=strides)
        m, v, s, b = (g.tensor(name=n, uid=u, dim=c) for n, u in
                      (("mean", 2), ("inv_var", 3), ("scale", 4), ("bias", 5)))
        y = g.batchnorm_inference(x, m, v, s, b).set_output(True).set_uid(6)
        if nhwc:
            y.set_stride(strides)
        return g, {6: y}

    compare_engines(build, {1: X, **stats}, cpu)


# ---------------------------------------------------------------------------
# layernorm and rmsnorm
# ---------------------------------------------------------------------------

# dims, data type, phase, channels-last, offset added to x
LAYERNORMS = [
    ([4, 32], F, INFERENCE, False, 0.0),
    ([2, 4, 6, 6], H, INFERENCE, True, 0.0),
    ([3, 5, 16], B, INFERENCE, False, 0.0),
    # NOTE: |mean| >> std: E[x^2] - E[x]^2 of x itself in f32 would be off by ~1%; both forms sum x
    # minus the row's first element (the CPU's one pass as well as the GPUs' two) and keep the default
    # tolerance, at 100 and at 10^4.
    ([4, 3, 8, 8], F, TRAINING, False, 100.0),
    ([4, 256], F, TRAINING, False, 1e4),
    ([8, 64], H, TRAINING, False, 0.0),
]


@pytest.mark.parametrize("dims,dt,phase,nhwc,offset", LAYERNORMS,
                         ids=[f"{p.name}-{d.name}-{x}{'-nhwc' if c else ''}{'-offset' if o else ''}"
                              for x, d, p, c, o in LAYERNORMS])
def test_layernorm(cpu, rng, dims, dt, phase, nhwc, offset):
    strides = channels_last(dims) if nhwc else None
    X = random_array(dims, dt, rng, strides=strides)
    if offset:
        X = X + np.asarray(offset, X.dtype)
    sdims = [1] + dims[1:]
    S, Bi = random_array(sdims, dt, rng, low=0.5, high=1.5), random_array(sdims, dt, rng)

    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        x = g.tensor(name="X", uid=1, dim=dims, stride=strides)
        s, b = g.tensor(name="scale", uid=2, dim=sdims), g.tensor(name="bias", uid=3, dim=sdims)
        y, mean, inv = g.layernorm(x, s, b, epsilon=1e-5, forward_phase=phase, name="ln")
        y.set_output(True).set_uid(4)
        if nhwc:
            y.set_stride(strides)
        outs = {4: y}
        if phase == TRAINING:
            mean.set_output(True).set_uid(5)
            inv.set_output(True).set_uid(6).set_data_type(F)   # mean keeps the io type
            outs.update({5: mean, 6: inv})
        else:
            assert mean is None and inv is None
        return g, outs

    got, _, _ = compare_engines(build, {1: X, 2: S, 3: Bi}, cpu)
    if phase == TRAINING:
        assert got[5].shape == got[6].shape == (dims[0],) + (1,) * (len(dims) - 1)
        x64 = np.asarray(X, np.float64).reshape(dims[0], -1)
        np.testing.assert_allclose(got[5].reshape(-1), x64.mean(1), rtol=1e-3 if dt == H else 1e-5)
        np.testing.assert_allclose(got[6].reshape(-1), 1 / np.sqrt(x64.var(1) + 1e-5), rtol=1e-4)


def test_layernorm_hand_derived(cpu):
    """Rows [1, 2, 3, 4] (mean 2.5, var 1.25) and [2, 2, 2, 2] (var 0) with epsilon 0.25."""
    X = np.array([[1, 2, 3, 4], [2, 2, 2, 2]], np.float32)
    S = np.array([[1, 2, 1, 2]], np.float32)
    Bi = np.array([[0, 0, 1, 1]], np.float32)
    inv = np.array([1 / math.sqrt(1.25 + 0.25), 1 / math.sqrt(0 + 0.25)])

    def build():
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="X", uid=1, dim=[2, 4])
        s, b = g.tensor(name="scale", uid=2, dim=[1, 4]), g.tensor(name="bias", uid=3, dim=[1, 4])
        y, m, v = g.layernorm(x, s, b, epsilon=0.25, forward_phase=TRAINING)
        return g, {4: y.set_output(True).set_uid(4), 5: m.set_output(True).set_uid(5),
                   6: v.set_output(True).set_uid(6)}

    # y row 0: (x - 2.5) * inv * scale + bias; row 1: 0 * 2 * scale + bias = bias.
    want_y = np.array([[-1.5 * 1, -0.5 * 2, 0.5 * 1, 1.5 * 2], [0, 0, 0, 0]]) * inv[:, None] + Bi
    got, ref, _ = compare_engines(build, {1: X, 2: S, 3: Bi}, cpu)
    for res in (got, ref):
        np.testing.assert_allclose(res[4], want_y, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(res[5].reshape(-1), [2.5, 2.0], rtol=1e-6)
        np.testing.assert_allclose(res[6].reshape(-1), inv, rtol=1e-6)


RMSNORMS = [([4, 64], F, False), ([2, 3, 8, 8], H, True), ([3, 5, 16], B, False)]


@pytest.mark.parametrize("dims,dt,nhwc", RMSNORMS,
                         ids=[f"{d.name}-{x}{'-nhwc' if c else ''}" for x, d, c in RMSNORMS])
def test_rmsnorm(cpu, rng, dims, dt, nhwc):
    strides = channels_last(dims) if nhwc else None
    X = random_array(dims, dt, rng, strides=strides)
    S = random_array([1] + dims[1:], dt, rng, low=0.5, high=1.5)

    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        x = g.tensor(name="X", uid=1, dim=dims, stride=strides)
        s = g.tensor(name="scale", uid=2, dim=[1] + dims[1:])
        return g, {3: g.rmsnorm(x, s, epsilon=1e-6).set_output(True).set_uid(3)}

    compare_engines(build, {1: X, 2: S}, cpu)


def test_layernorm_then_matmul(cpu, rng):
    """A layernorm feeding a matmul through a virtual f32 intermediate (half I/O)."""
    X, S, Bi = random_array([6, 32], H, rng), random_array([1, 32], H, rng), random_array([1, 32], H, rng)
    W = random_array([32, 16], H, rng)

    def build():
        g = hd.Graph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        x, w = g.tensor(name="X", uid=1, dim=[6, 32]), g.tensor(name="W", uid=4, dim=[32, 16])
        s, b = g.tensor(name="scale", uid=2, dim=[1, 32]), g.tensor(name="bias", uid=3, dim=[1, 32])
        y, _, _ = g.layernorm(x, s, b)
        return g, {5: g.matmul(y, w).set_output(True).set_uid(5)}

    # NOTE: 32-term dot products of O(1) normalized values: allow a few f16 ulps more.
    compare_engines(build, {1: X, 2: S, 3: Bi, 4: W}, cpu, scale=3.0)


# ---------------------------------------------------------------------------
# the reference against PyTorch (CPU, float64)
# ---------------------------------------------------------------------------


def test_reference_reductions_match_torch(cpu, rng):
    torch = pytest.importorskip("torch")
    X = rng.uniform(-1.5, 1.5, size=(3, 4, 5)).astype(np.float32)
    X[np.abs(X) < 0.2] = 0  # zeros for MUL_NO_ZEROS
    t = torch.from_numpy(X.astype(np.float64))
    dims, y_dims = (0, 2), [1, 4, 1]
    nz = torch.where(t == 0, torch.ones_like(t), t)
    expect = {R.ADD: t.sum(dims, keepdim=True), R.MUL: t.prod(0, keepdim=True).prod(2, keepdim=True),
              R.MIN: t.amin(dims, keepdim=True), R.MAX: t.amax(dims, keepdim=True),
              R.AMAX: t.abs().amax(dims, keepdim=True), R.AVG: t.mean(dims, keepdim=True),
              R.NORM1: torch.linalg.vector_norm(t, 1, dims, keepdim=True),
              R.NORM2: torch.linalg.vector_norm(t, 2, dims, keepdim=True),
              R.MUL_NO_ZEROS: nz.prod(0, keepdim=True).prod(2, keepdim=True)}

    def build():
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="X", uid=1, dim=[3, 4, 5])
        return g, {10 + i: g.reduction(x, mode=m).set_dim(y_dims).set_output(True).set_uid(10 + i)
                   for i, m in enumerate(expect)}

    got = reference_run(build, {1: X}, cpu)
    for i, (mode, want) in enumerate(expect.items()):
        np.testing.assert_allclose(got[10 + i], want.numpy(), rtol=1e-6, atol=1e-7, err_msg=mode.name)


def test_reference_norms_match_torch(cpu, rng):
    torch = pytest.importorskip("torch")
    fn = torch.nn.functional
    dims = [3, 4, 5, 6]
    X = rng.uniform(-2, 3, size=dims).astype(np.float32)
    S = rng.uniform(0.5, 1.5, size=[1] + dims[1:]).astype(np.float32)
    Bi = rng.normal(size=[1] + dims[1:]).astype(np.float32)
    C = {u: rng.uniform(0.5, 1.5, size=[1, 4, 1, 1]).astype(np.float32) for u in (20, 21, 22, 23)}
    eps = 1e-3

    def build():
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="X", uid=1, dim=dims)
        s, b = g.tensor(name="scale", uid=2, dim=[1] + dims[1:]), g.tensor(name="bias", uid=3, dim=[1] + dims[1:])
        y, m, v = g.layernorm(x, s, b, epsilon=eps, forward_phase=TRAINING)
        r = g.rmsnorm(x, s, epsilon=eps)
        bn = g.batchnorm_inference(x, *(g.tensor(name=f"c{u}", uid=u, dim=[1, 4, 1, 1]) for u in C))
        return g, {u: t.set_output(True).set_uid(u) for u, t in ((4, y), (5, m), (6, v), (7, r), (8, bn))}

    got = reference_run(build, {1: X, 2: S, 3: Bi, **C}, cpu)
    t = {k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in (("x", X), ("s", S[0]), ("b", Bi[0]))}
    eps32 = float(np.float32(eps))  # the scalar tensor holds epsilon as FLOAT
    ln = fn.layer_norm(t["x"], dims[1:], t["s"], t["b"], eps=eps32)
    var, mean = torch.var_mean(t["x"], dim=(1, 2, 3), keepdim=True, correction=0)
    np.testing.assert_allclose(got[4], ln.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[5], mean.numpy(), rtol=1e-6)
    np.testing.assert_allclose(got[6], torch.rsqrt(var + eps32).numpy(), rtol=1e-6)
    if hasattr(fn, "rms_norm"):
        np.testing.assert_allclose(got[7], fn.rms_norm(t["x"], dims[1:], t["s"], eps=eps32).numpy(),
                                   rtol=1e-5, atol=1e-6)
    # batchnorm eval: running_var such that 1/sqrt(var + eps) is the given inv_variance
    mean_c, inv_c = (torch.from_numpy(C[u].reshape(-1).astype(np.float64)) for u in (20, 21))
    scale_c, bias_c = (torch.from_numpy(C[u].reshape(-1).astype(np.float64)) for u in (22, 23))
    bn = fn.batch_norm(t["x"], mean_c, 1 / inv_c ** 2 - 1e-5, scale_c, bias_c, training=False, eps=1e-5)
    np.testing.assert_allclose(got[8], bn.numpy(), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# golden IR
# ---------------------------------------------------------------------------


def test_reduction_golden_ir(cpu):
    g = hd.Graph(io_data_type=H, compute_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[2, 3, 4, 5])
    g.reduction(x, mode=R.AVG).set_dim([2, 1, 4, 1]).set_output(True).set_uid(2)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: func.func @main(%[[X:.+]]: tensor<2x3x4x5xf16>, %{{.+}}: tensor<2x1x4x1xf16> {iree.abi.output = 0 : index})
// CHECK: %[[ZERO:.+]] = arith.constant 0.0 : f32
// CHECK: %[[ACC:.+]] = linalg.fill ins(%[[ZERO]] : f32) {{.*}} -> tensor<2x4xf32>
// CHECK: %[[SUM:.+]] = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d2)>], iterator_types = ["parallel", "reduction", "parallel", "reduction"]} ins(%[[X]] : tensor<2x3x4x5xf16>) outs(%[[ACC]] : tensor<2x4xf32>)
// CHECK: arith.extf {{.*}} : f16 to f32
// CHECK: arith.addf
// CHECK: } -> tensor<2x4xf32>
// CHECK: %[[AVG:.+]] = linalg.generic {{.*}} ins(%[[SUM]] : tensor<2x4xf32>) outs({{.*}} : tensor<2x4xf16>)
// CHECK: arith.constant 15.0 : f32
// CHECK: arith.divf
// CHECK: arith.truncf {{.*}} : f32 to f16
// CHECK: %[[Y:.+]] = tensor.expand_shape %[[AVG]] {{\[\[0\], \[1, 2, 3\]\]}} output_shape [2, 1, 4, 1]
// CHECK: return %[[Y]]
""")


def test_batchnorm_golden_ir(cpu):
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[2, 3, 4, 5])
    c = [g.tensor(name=f"c{i}", uid=2 + i, dim=[1, 3, 1, 1]) for i in range(4)]
    g.batchnorm_inference(x, *c).set_output(True).set_uid(6)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (0, d1, 0, 0)>, affine_map<(d0, d1, d2, d3) -> (0, d1, 0, 0)>, affine_map<(d0, d1, d2, d3) -> (0, d1, 0, 0)>, affine_map<(d0, d1, d2, d3) -> (0, d1, 0, 0)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
// CHECK: ^bb0(%[[X:.+]]: f32, %[[M:.+]]: f32, %[[V:.+]]: f32, %[[S:.+]]: f32, %[[B:.+]]: f32, %{{.+}}: f32):
// CHECK: %[[D:.+]] = arith.subf %[[X]], %[[M]] : f32
// CHECK: %[[N:.+]] = arith.mulf %[[D]], %[[V]] : f32
// CHECK: %[[SC:.+]] = arith.mulf %[[N]], %[[S]] : f32
// CHECK: %[[Y:.+]] = arith.addf %[[SC]], %[[B]] : f32
// CHECK: linalg.yield %[[Y]] : f32
// CHECK-NOT: linalg.generic
""")


def _layernorm_training_graph():
    g = hd.Graph(io_data_type=H, compute_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[4, 3, 8])
    s, b = g.tensor(name="scale", uid=2, dim=[1, 3, 8]), g.tensor(name="bias", uid=3, dim=[1, 3, 8])
    y, m, v = g.layernorm(x, s, b, epsilon=1e-5, forward_phase=TRAINING)
    y.set_output(True).set_uid(4)
    m.set_output(True).set_uid(5).set_data_type(F)
    v.set_output(True).set_uid(6).set_data_type(F)
    return g


def test_layernorm_one_pass_golden_ir(cpu):
    """The CPU's default (policy norm_one_pass): one two-result reduction of x - pivot, the normalize
    derives mean and 1/std from the sums itself (so IREE fuses it with the reduction)."""
    filecheck(lowered_mlir(_layernorm_training_graph(), cpu), r"""
// CHECK: %[[PV:.+]] = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0, 0, 0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%[[X:.+]] : tensor<4x3x8xf16>) outs({{.*}} : tensor<4xf32>)
// CHECK: %[[SQ:.+]]:2 = linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "reduction"]} ins(%[[X]], %[[PV]] : tensor<4x3x8xf16>, tensor<4xf32>) outs(%[[Z:.+]], %[[Z]] : tensor<4xf32>, tensor<4xf32>)
// CHECK: %[[DEV:.+]] = arith.subf
// CHECK: %[[S1:.+]] = arith.addf {{.*}}, %[[DEV]] : f32
// CHECK: %[[D2:.+]] = arith.mulf %[[DEV]], %[[DEV]] : f32
// CHECK: %[[Q1:.+]] = arith.addf {{.*}}, %[[D2]] : f32
// CHECK: linalg.yield %[[S1]], %[[Q1]] : f32, f32
// CHECK-DAG: tensor.expand_shape %[[SQ]]#0
// CHECK-DAG: tensor.expand_shape %[[SQ]]#1
// CHECK: %[[Y:.+]] = linalg.generic {{.*}} ins(%[[X]], {{.*}} : tensor<4x3x8xf16>, tensor<4x1x1xf32>, tensor<4x1x1xf32>, tensor<4x1x1xf32>, tensor<1x3x8xf16>, tensor<1x3x8xf16>)
// CHECK: arith.maximumf
// CHECK: math.rsqrt
// CHECK: arith.truncf {{.*}} : f32 to f16
// CHECK: return %[[Y]],
""")


def test_layernorm_golden_ir(cpu):
    """The two-pass form (GPU targets' default; norm_one_pass off)."""
    filecheck(lowered_mlir(_layernorm_training_graph(), cpu, norm_one_pass=False), r"""
// Pass 0 materializes the pivot row x[n, 0, 0]; pass 1 sums x - pivot; mean = pivot + sum / 24.
// CHECK: %[[PV:.+]] = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0, 0, 0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%[[X:.+]] : tensor<4x3x8xf16>) outs({{.*}} : tensor<4xf32>)
// CHECK: arith.extf
// CHECK: %[[SUM:.+]] = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0)>, affine_map<(d0, d1, d2) -> (d0)>], iterator_types = ["parallel", "reduction", "reduction"]} ins(%[[X]], %[[PV]] : tensor<4x3x8xf16>, tensor<4xf32>) outs({{.*}} : tensor<4xf32>)
// CHECK: %[[SHIFTED:.+]] = arith.subf
// CHECK: arith.addf {{.*}}, %[[SHIFTED]] : f32
// CHECK: %[[MEAN:.+]] = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], {{.*}} ins(%[[SUM]], %[[PV]] : tensor<4xf32>, tensor<4xf32>)
// CHECK: arith.constant 24.0 : f32
// CHECK: arith.divf
// CHECK: arith.addf
// Pass 2: sum of squared deviations from that mean.
// CHECK: %[[SSD:.+]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "reduction"]} ins(%[[X]], %[[MEAN]] : tensor<4x3x8xf16>, tensor<4xf32>) outs({{.*}} : tensor<4xf32>)
// CHECK: %[[DEV:.+]] = arith.subf
// CHECK: arith.mulf %[[DEV]], %[[DEV]] : f32
// CHECK: arith.addf
// CHECK: %[[INV:.+]] = linalg.generic {{.*}} ins(%[[SSD]] : tensor<4xf32>)
// CHECK: arith.divf
// CHECK: arith.constant 1.0e-05 : f32
// CHECK: arith.addf
// CHECK: math.rsqrt
// CHECK: %[[MB:.+]] = tensor.expand_shape %[[MEAN]] {{.*}} into tensor<4x1x1xf32>
// CHECK: %[[IB:.+]] = tensor.expand_shape %[[INV]] {{.*}} into tensor<4x1x1xf32>
// CHECK: %[[Y:.+]] = linalg.generic {{.*}}affine_map<(d0, d1, d2) -> (d0, 0, 0)>, affine_map<(d0, d1, d2) -> (d0, 0, 0)>, affine_map<(d0, d1, d2) -> (0, d1, d2)>, affine_map<(d0, d1, d2) -> (0, d1, d2)>{{.*}} ins(%[[X]], %[[MB]], %[[IB]]
// CHECK: arith.subf
// CHECK: arith.truncf {{.*}} : f32 to f16
// CHECK: return %[[Y]], %[[MB]], %[[IB]]
""")


def test_rmsnorm_golden_ir_half_compute(cpu):
    """With compute_data_type=HALF the statistics accumulate in f16, as asked."""
    g = hd.Graph(io_data_type=H, compute_data_type=H)
    x = g.tensor(name="X", uid=1, dim=[4, 16])
    g.rmsnorm(x, g.tensor(name="scale", uid=2, dim=[1, 16]), epsilon=1e-6).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: %[[SS:.+]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]} ins(%{{.+}} : tensor<4x16xf16>) outs({{.*}} : tensor<4xf16>)
// CHECK: %[[SQ:.+]] = arith.mulf %[[XV:.+]], %[[XV]] : f16
// CHECK: arith.addf {{.*}}, %[[SQ]] : f16
// CHECK: linalg.generic {{.*}} ins(%[[SS]] : tensor<4xf16>)
// CHECK: arith.constant 16.0 : f16
// CHECK: arith.constant 1.0e-06 : f16
// CHECK: math.rsqrt {{.*}} : f16
// CHECK: tensor.expand_shape
// CHECK: linalg.generic
// CHECK-NOT: arith.extf
// CHECK: return
""")


# ---------------------------------------------------------------------------
# compile-only GPU targets
# ---------------------------------------------------------------------------


def _one_op_graph(op: str):
    g = hd.Graph(io_data_type=H, compute_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[4, 8, 6, 6], stride=channels_last([4, 8, 6, 6]))
    if op == "reduction":
        g.reduction(x, mode=R.NORM2).set_dim([4, 8, 1, 1]).set_output(True).set_uid(2)
    elif op == "batchnorm_inference":
        c = [g.tensor(name=f"c{i}", uid=2 + i, dim=[1, 8, 1, 1]) for i in range(4)]
        g.batchnorm_inference(x, *c).set_output(True).set_uid(6)
    elif op == "layernorm":
        s, b = g.tensor(name="scale", uid=2, dim=[1, 8, 6, 6]), g.tensor(name="bias", uid=3, dim=[1, 8, 6, 6])
        y, m, v = g.layernorm(x, s, b, forward_phase=TRAINING)
        for u, t in ((4, y), (5, m), (6, v)):
            t.set_output(True).set_uid(u)
    else:
        g.rmsnorm(x, g.tensor(name="scale", uid=2, dim=[1, 8, 6, 6])).set_output(True).set_uid(3)
    return g


GPU_TARGETS = [("rocm:gfx942", b"rocm-hsaco-fb"), ("rocm:gfx90a", b"rocm-hsaco-fb"), ("cuda:sm_80", b"cuda-nvptx-fb")]


@pytest.mark.parametrize("target,fmt", GPU_TARGETS, ids=[t for t, _ in GPU_TARGETS])
@pytest.mark.parametrize("op", ["reduction", "batchnorm_inference", "layernorm", "rmsnorm"])
def test_compiles_for_gpu(op, target, fmt):
    g = _one_op_graph(op)
    g.build(hd.create_handle(device=None, target=target))
    assert fmt in g.serialize_compiled_plan()


# ---------------------------------------------------------------------------
# validation errors
# ---------------------------------------------------------------------------


def _ln_graph(x_dims=(4, 3, 8), s_dims=None, b_dims=None, eps=1e-5, phase=INFERENCE):
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=list(x_dims))
    nd = [1] + list(x_dims[1:])
    s = g.tensor(name="scale", uid=2, dim=s_dims or nd)
    b = g.tensor(name="bias", uid=3, dim=b_dims or nd)
    y, _, _ = g.layernorm(x, s, b, epsilon=eps, forward_phase=phase, name="ln")
    y.set_output(True)
    return g


def _bn_graph(mean_dims=(1, 3, 1, 1), inv_dims=(1, 3, 1, 1)):
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[2, 3, 4, 4])
    m, v = g.tensor(name="mean", uid=2, dim=list(mean_dims)), g.tensor(name="inv", uid=3, dim=list(inv_dims))
    s, b = g.tensor(name="s", uid=4, dim=[1, 3, 1, 1]), g.tensor(name="b", uid=5, dim=[1, 3, 1, 1])
    g.batchnorm_inference(x, m, v, s, b, name="bn").set_output(True)
    return g


def _red_graph(y_dims, mode=R.ADD):
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[2, 3, 4])
    y = g.reduction(x, mode=mode, name="red").set_output(True)
    if y_dims is not None:
        y.set_dim(y_dims)
    return g


INVALID = {
    "layernorm-negative-epsilon": (lambda: _ln_graph(eps=-1.0).validate(), ("layernorm 'ln'", "epsilon", "-1.0")),
    "layernorm-nan-epsilon": (lambda: _ln_graph(eps=math.nan).validate(), ("layernorm 'ln'", "epsilon", "nan")),
    "layernorm-scale-dims": (lambda: _ln_graph(s_dims=[1, 24]).validate(), ("layernorm 'ln'", "scale", "[1, 24]")),
    "layernorm-bias-dims": (lambda: _ln_graph(b_dims=[1, 3, 1]).validate(),
                            ("layernorm 'ln'", "bias", "[1, 3, 1]", "[1, 3, 8]")),
    "layernorm-rank-1": (lambda: _ln_graph(x_dims=(8,), s_dims=[1], b_dims=[1]).validate(),
                         ("layernorm 'ln'", "'x'", "[8]")),
    "batchnorm-mean-dims": (lambda: _bn_graph(mean_dims=(1, 4, 1, 1)).validate(),
                            ("batchnorm_inference 'bn'", "mean", "[1, 4, 1, 1]", "[1, 3, 1, 1]")),
    "batchnorm-inv-variance-rank": (lambda: _bn_graph(inv_dims=(3,)).validate(),
                                    ("batchnorm_inference 'bn'", "inv_variance", "[3]")),
    "reduction-dims-contradict-x": (lambda: _red_graph([2, 2, 4]).validate(),
                                    ("reduction 'red'", "'y'", "[2, 2, 4]", "axis 1")),
    "reduction-rank-mismatch": (lambda: _red_graph([2, 1]).validate(), ("reduction 'red'", "'y'", "[2, 1]", "rank")),
    "reduction-dims-unset": (lambda: _red_graph(None).validate(), ("reduction 'red'", "set the dims")),
    "reduction-mode-not-set": (lambda: _red_graph([2, 1, 1], mode=R.NOT_SET).validate(),
                               ("reduction 'red'", "mode", "NOT_SET")),
    "reduction-mode-unknown": (lambda: _red_graph([2, 1, 1], mode=42), ("reduction", "mode", "42")),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_attributes(case):
    fn, words = INVALID[case]
    bad_param(fn, *words)


def test_rmsnorm_invalid():
    def graph(s_dims, eps, as_tensor=False):
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="X", uid=1, dim=[4, 16])
        eps = g.tensor(name="eps", value=eps) if as_tensor else eps
        g.rmsnorm(x, g.tensor(name="scale", uid=2, dim=s_dims), epsilon=eps, name="rms").set_output(True)
        return g.validate()

    bad_param(lambda: graph([1, 16], -0.5, as_tensor=True), "rmsnorm 'rms'", "epsilon", "-0.5")
    bad_param(lambda: graph([8], 1e-5), "rmsnorm 'rms'", "scale", "[8]", "axis 1", "16")
    bad_param(lambda: graph([4, 16], 1e-5), "rmsnorm 'rms'", "scale", "[4, 16]", "trailing")
    graph([1, 16], 0.0)  # zero is a valid epsilon
    graph([16], 1e-5)    # hipDNN's lower-rank scale, right-aligned


# ---------------------------------------------------------------------------
# hipDNN's norm shapes: the normalized axes are the trailing ones the scale spans
# ---------------------------------------------------------------------------

def _norm_numpy(x, scale, bias, eps, axes, centered=True):
    """Independent float64 layernorm/rmsnorm over ``axes`` (numpy broadcasting for scale/bias)."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=axes, keepdims=True) if centered else 0.0
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    y = (x - mean) * inv * np.asarray(scale, np.float64)
    return (y + np.asarray(bias, np.float64) if bias is not None else y), mean, inv


def _norm_engines(build, inputs, handle):
    """``build()``'s graph on the IREE engine and on NUMPY_REFERENCE; outputs of each by uid."""
    res = []
    for eng in (None, "NUMPY_REFERENCE"):
        g, outs = build()
        if eng:
            g.set_preferred_engine_id_ext(eng)
        g.build(handle)
        got = {u: empty_like_tensor(t) for u, t in outs.items()}
        g.execute(handle, {**inputs, **got})
        res.append(got)
    return res


# x dims, scale (and bias) dims, normalized axes
HIPDNN_NORM_SHAPES = [([2, 7, 32], [1, 1, 32], (2,)),     # a transformer's per-token norm
                      ([2, 7, 32], [32], (2,)),           # lower-rank scale, right-aligned
                      ([6, 32], [32], (1,)),
                      ([2, 3, 4, 5], [1, 1, 4, 5], (2, 3)),
                      ([2, 1, 32], [1, 1, 32], (1, 2))]   # a size-1 axis: the same numbers either way


@pytest.mark.parametrize("phase", [INFERENCE, TRAINING], ids=["inference", "training"])
@pytest.mark.parametrize("x_dims,s_dims,axes", HIPDNN_NORM_SHAPES, ids=[f"{x}-{s}" for x, s, _ in HIPDNN_NORM_SHAPES])
def test_layernorm_hipdnn_scale_shapes(cpu, rng, x_dims, s_dims, axes, phase):
    X = random_array(x_dims, F, rng) + np.float32(3.0)
    S, Bi = random_array(s_dims, F, rng, low=0.5, high=1.5), random_array(s_dims, F, rng)
    stats = [1 if i in axes else d for i, d in enumerate(x_dims)]

    def build():
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="X", uid=1, dim=x_dims)
        s, b = g.tensor(name="scale", uid=2, dim=s_dims), g.tensor(name="bias", uid=3, dim=s_dims)
        y, m, v = g.layernorm(x, s, b, epsilon=1e-5, forward_phase=phase, name="ln")
        outs = {4: y.set_output(True).set_uid(4)}
        if phase == TRAINING:
            outs.update({5: m.set_output(True).set_uid(5), 6: v.set_output(True).set_uid(6)})
        g.validate()
        if phase == TRAINING:
            assert m.get_dim() == stats and v.get_dim() == stats
        return g, outs

    want_y, want_m, want_v = _norm_numpy(X, S, Bi, 1e-5, axes)
    for got in _norm_engines(build, {1: X, 2: S, 3: Bi}, cpu):
        np.testing.assert_allclose(got[4], want_y, rtol=2e-5, atol=2e-5)
        if phase == TRAINING:
            assert got[5].shape == got[6].shape == tuple(stats)
            np.testing.assert_allclose(got[5], want_m, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got[6], want_v, rtol=1e-4)


@pytest.mark.parametrize("x_dims,s_dims,axes", HIPDNN_NORM_SHAPES, ids=[f"{x}-{s}" for x, s, _ in HIPDNN_NORM_SHAPES])
def test_rmsnorm_hipdnn_scale_shapes(cpu, rng, x_dims, s_dims, axes):
    X = random_array(x_dims, F, rng)
    S = random_array(s_dims, F, rng, low=0.5, high=1.5)

    def build():
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="X", uid=1, dim=x_dims)
        return g, {3: g.rmsnorm(x, g.tensor(name="scale", uid=2, dim=s_dims), epsilon=1e-6).set_output(True).set_uid(3)}

    want, _, _ = _norm_numpy(X, S, None, 1e-6, axes, centered=False)
    for got in _norm_engines(build, {1: X, 2: S}, cpu):
        np.testing.assert_allclose(got[3], want, rtol=2e-5, atol=2e-5)


def test_hipdnn_norm_shapes_in_an_imported_graph(cpu, rng):
    """A hipDNN graph (bytes) with layernorm over [B, S, E] by a [1, 1, E] scale, epsilon written
    [1]/[1] and normalized_dim_count 1, as hipDNN's frontend writes it."""
    from graph_ir.desc import GraphDesc, LayernormAttrs, NodeDesc, TensorDesc, encode_graph
    t = (TensorDesc(1, "x", int(F), (2, 5, 16), (80, 16, 1)), TensorDesc(2, "s", int(F), (1, 1, 16), (16, 16, 1)),
         TensorDesc(3, "b", int(F), (1, 1, 16), (16, 16, 1)),
         TensorDesc(4, "eps", int(F), (1,), (1,), is_scalar=True, scalar_value=1e-5),
         TensorDesc(5, "y", int(F), (2, 5, 16), (80, 16, 1)), TensorDesc(6, "mean", int(F), (2, 5, 1), (5, 1, 1)),
         TensorDesc(7, "inv", int(F), (2, 5, 1), (5, 1, 1)))
    at = LayernormAttrs(int(TRAINING), 1, 2, 3, 4, 5, mean_uid=6, inv_variance_uid=7, normalized_dim_count=1)
    data = encode_graph(GraphDesc("ln", int(F), int(F), int(F), t, (NodeDesc("ln", int(F), at),)))
    X, S, Bi = random_array([2, 5, 16], F, rng), random_array([1, 1, 16], F, rng), random_array([1, 1, 16], F, rng)
    want = _norm_numpy(X, S, Bi, 1e-5, (2,))
    for eng in (None, "NUMPY_REFERENCE"):
        g = hd.Graph.from_hipdnn_graph(data)
        if eng:
            g.set_preferred_engine_id_ext(eng)
        g.build(cpu)
        out = {5: np.empty((2, 5, 16), np.float32), 6: np.empty((2, 5, 1), np.float32), 7: np.empty((2, 5, 1), np.float32)}
        g.execute(cpu, {1: X, 2: S, 3: Bi, **out})
        for u, w in zip((5, 6, 7), want):
            np.testing.assert_allclose(out[u], w, rtol=1e-4, atol=2e-5)


def test_norm_scale_shapes_hipdnn_does_not_define_are_refused():
    def ln(s_dims, x_dims=(2, 5, 8), count=0):
        from graph_ir.desc import GraphDesc, LayernormAttrs, NodeDesc, TensorDesc, encode_graph
        from graph_ir.layout import packed_strides
        t = (TensorDesc(1, "x", int(F), x_dims, packed_strides(x_dims)),
             TensorDesc(2, "s", int(F), s_dims, packed_strides(s_dims)),
             TensorDesc(3, "b", int(F), s_dims, packed_strides(s_dims)),
             TensorDesc(4, "eps", int(F), (), (), is_scalar=True, scalar_value=1e-5),
             TensorDesc(5, "y", int(F), x_dims, packed_strides(x_dims)))
        at = LayernormAttrs(int(INFERENCE), 1, 2, 3, 4, 5, normalized_dim_count=count)
        return hd.Graph.from_hipdnn_graph(encode_graph(GraphDesc("g", int(F), 0, 0, t, (NodeDesc("ln", 0, at),))))

    # all 1s: hipDNN's rule names no axis; refused unless normalized_dim_count names them
    bad_param(lambda: ln((1, 1, 1)), "layernorm 'ln'", "[1, 1, 1]", "names no axis")
    ln((1, 1, 1), count=1)
    bad_param(lambda: ln((1, 5, 1)), "layernorm 'ln'", "[1, 5, 1]", "trailing")     # not a trailing run
    bad_param(lambda: ln((1, 1, 8), count=2), "normalized_dim_count", "[1, 1, 8]")  # disagrees with the scale
    ln((1, 5, 8), count=2)                                                          # agrees


def test_lowering_rejects_bad_graph_bytes():
    """Graphs that reach the lowering as bytes (not through validate) get the same checks."""
    from lowering import lower
    from graph_ir import GraphError
    from graph_ir.desc import GraphDesc, LayernormAttrs, NodeDesc, ReductionAttrs, TensorDesc, encode_graph

    def t(uid, dims, **kw):
        from graph_ir.layout import packed_strides
        return TensorDesc(uid, f"t{uid}", int(F), tuple(dims), packed_strides(dims), **kw)

    eps = TensorDesc(9, "eps", int(F), (), (), is_scalar=True, scalar_value=-2.0)
    ln = NodeDesc("ln", 0, LayernormAttrs(int(INFERENCE), 1, 2, 3, 9, 4))
    g = GraphDesc("g", int(F), 0, 0, (t(1, [2, 4]), t(2, [1, 4]), t(3, [1, 4]), t(4, [2, 4]), eps), (ln,))
    with pytest.raises(GraphError, match=r"layernorm 'ln': field 'epsilon' value -2.0"):
        lower(encode_graph(g))
    red = NodeDesc("red", 0, ReductionAttrs(int(R.MAX), 1, 2))
    g = GraphDesc("g", int(F), 0, 0, (t(1, [2, 4]), t(2, [2, 3])), (red,))
    with pytest.raises(GraphError, match=r"reduction 'red': field 'y' dims \[2, 3\]"):
        lower(encode_graph(g))


def test_every_norm_op_is_registered():
    from hipdnn_iree.plugins.numpy_reference.registry import REFERENCES
    from lowering import LOWERINGS
    from graph_ir import OpKind
    from graph_ir.opdef import OPS
    for kind in (OpKind.REDUCTION, OpKind.BATCHNORM_INFERENCE, OpKind.LAYERNORM, OpKind.RMSNORM):
        assert OPS[kind].supported and kind in LOWERINGS and kind in REFERENCES
        assert callable(getattr(hd.Graph, OPS[kind].frontend_method))
