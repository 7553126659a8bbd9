"""Convolutions (conv_fprop, conv_dgrad, conv_wgrad): numerics of the IREE engine against the
numpy reference over ranks, groups, strides, dilations, paddings, layouts and dtypes; the
reference against hand-derived values and PyTorch; golden linalg; GPU compile-only builds;
attribute validation."""
import numpy as np
import pytest

import hipdnn_iree as hd
from harness import compare_engines, empty_like_tensor, filecheck, lowered_mlir, random_array
from hipdnn_iree.plugins.numpy_reference.conv import conv_data_grad, conv_filter_grad, conv_forward

F, H, B = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16


def _strides(dims, layout: str) -> list[int]:
    """Element strides of ``dims`` (logical N, C, spatial...) stored in ``layout`` order,
    e.g. "nhwc"; a filter uses the same letters (n = output channels)."""
    names = "nc" + "dhw"[3 - (len(dims) - 2):]
    order = [names.index(ch) for ch in layout]
    strides, acc = [0] * len(dims), 1
    for axis in reversed(order):
        strides[axis] = acc
        acc *= dims[axis]
    return strides


def _out_dims(x, w, pre, post, stride, dilation):
    """y dims of the forward convolution, from the definition."""
    sp = [(i + a + b - d * (k - 1) - 1) // s + 1
          for i, k, a, b, s, d in zip(x[2:], w[2:], pre, post, stride, dilation)]
    return [x[0], w[0], *sp]


def _geometry_kwargs(kw, rank):
    pre = kw.get("pre_padding", kw.get("padding", [0] * rank))
    post = kw.get("post_padding", kw.get("padding", [0] * rank))
    return pre, post, kw.get("stride", [1] * rank), kw.get("dilation", [1] * rank)


# id, x dims, w dims, attributes, io data type, layout of every tensor
GEOMETRIES = [
    ("2d-nchw-f32", [2, 3, 8, 8], [4, 3, 3, 3], dict(padding=[1, 1]), F, "nchw"),
    # stride 2 with (in + pads - extent) % stride != 0 on W
    ("2d-nhwc-f16-stride", [2, 8, 9, 10], [6, 8, 3, 3], dict(padding=[1, 1], stride=[2, 2]), H, "nhwc"),
    ("2d-nchw-bf16-groups-asym-dil", [1, 4, 7, 9], [6, 2, 3, 2],
     dict(pre_padding=[1, 0], post_padding=[0, 2], stride=[1, 2], dilation=[2, 1]), B, "nchw"),
    ("2d-nhwc-f32-depthwise", [2, 6, 10, 9], [12, 1, 3, 3], dict(padding=[1, 1], stride=[2, 2]), F, "nhwc"),
    ("1d-nwc-f32-asym-stride-dil", [2, 4, 18], [5, 4, 3],
     dict(pre_padding=[2], post_padding=[1], stride=[3], dilation=[2]), F, "nwc"),
    ("1d-ncw-f16-groups", [1, 6, 13], [9, 2, 4], dict(padding=[1], stride=[2]), H, "ncw"),
    ("3d-ncdhw-bf16", [1, 3, 5, 6, 7], [4, 3, 2, 3, 3], dict(padding=[1, 1, 1], stride=[1, 2, 2]), B, "ncdhw"),
    ("3d-ndhwc-f32-groups-asym-dil", [1, 4, 5, 6, 6], [4, 2, 3, 2, 2],
     dict(pre_padding=[1, 0, 1], post_padding=[1, 1, 0], stride=[2, 1, 1], dilation=[1, 2, 1]), F, "ndhwc"),
    # ungrouped 3-D on CPUs: KD 2-D convs, so depth stride, dilation and asymmetric depth padding matter
    ("3d-ndhwc-f32-depth-stride-dil", [2, 3, 9, 5, 6], [4, 3, 3, 2, 3],
     dict(pre_padding=[2, 1, 0], post_padding=[0, 0, 1], stride=[2, 1, 2], dilation=[2, 1, 1]), F, "ndhwc"),
    # padding wider than a 1x1 kernel (reads pure padding; dgrad crops), odd permutation
    ("2d-chwn-f32-1x1-widepad", [3, 4, 7, 8], [5, 4, 1, 1], dict(padding=[2, 0], stride=[2, 3]), F, "chwn"),
]


def _build_conv(op, x_dims, w_dims, kw, dt, layout):
    """A graph running one conv op; returns (build, inputs) for compare_engines."""
    y_dims = _out_dims(x_dims, w_dims, *_geometry_kwargs(kw, len(x_dims) - 2))
    in_a, in_b, out = {"fprop": (x_dims, w_dims, y_dims), "dgrad": (y_dims, w_dims, x_dims),
                       "wgrad": (y_dims, x_dims, w_dims)}[op]
    sa, sb, so = _strides(in_a, layout), _strides(in_b, layout), _strides(out, layout)

    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        a = g.tensor(name="A", uid=1, dim=in_a, stride=sa)
        b = g.tensor(name="B", uid=2, dim=in_b, stride=sb)
        o = getattr(g, f"conv_{op}")(a, b, name=f"conv_{op}", **kw)
        o.set_dim(out).set_stride(so).set_output(True).set_uid(3)
        return g, {3: o}

    return build, (in_a, sa), (in_b, sb)


@pytest.mark.parametrize("geo", GEOMETRIES, ids=[g[0] for g in GEOMETRIES])
@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
def test_conv_numerics(cpu, rng, op, geo):
    _, x_dims, w_dims, kw, dt, layout = geo
    build, (da, sa), (db, sb) = _build_conv(op, x_dims, w_dims, kw, dt, layout)
    inputs = {1: random_array(da, dt, rng, strides=sa), 2: random_array(db, dt, rng, strides=sb)}
    compare_engines(build, inputs, cpu)


def test_conv_bias_relu_fused(cpu, rng):
    """conv_fprop, then a broadcast bias add and relu, in one graph (NHWC, half in, f32 compute)."""
    xd, wd, yd = [2, 8, 12, 12], [16, 8, 3, 3], [2, 16, 12, 12]
    X, W = random_array(xd, H, rng, strides=_strides(xd, "nhwc")), random_array(wd, H, rng)
    bias = random_array([1, 16, 1, 1], H, rng)

    def build():
        g = hd.Graph(io_data_type=H, compute_data_type=F)
        x = g.tensor(name="X", uid=1, dim=xd, stride=_strides(xd, "nhwc"))
        w, b = g.tensor(name="W", uid=2, dim=wd), g.tensor(name="bias", uid=3, dim=[1, 16, 1, 1])
        y = g.conv_fprop(x, w, padding=[1, 1])
        y = g.pointwise(g.pointwise(y, b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.RELU_FWD)
        y.set_stride(_strides(yd, "nhwc")).set_output(True).set_uid(4)
        return g, {4: y}

    got, _, _ = compare_engines(build, {1: X, 2: W, 3: bias}, cpu)
    assert got[4].shape == tuple(yd)
    assert (np.asarray(got[4]) >= 0).all()


def test_conv_defaults_on_virtual_input(cpu, rng):
    """Attributes left unset on an input whose rank is unknown at call time mean the defaults."""
    X, W = random_array([1, 3, 6, 5], F, rng), random_array([2, 3, 2, 2], F, rng)

    def build():
        g = hd.Graph(io_data_type=F)
        x, w = g.tensor(name="X", uid=1, dim=[1, 3, 6, 5]), g.tensor(name="W", uid=2, dim=[2, 3, 2, 2])
        y = g.conv_fprop(g.pointwise(x, mode=hd.PointwiseMode.RELU_FWD), w)
        y.set_output(True).set_uid(3)
        return g, {3: y}

    got, want, _ = compare_engines(build, {1: X, 2: W}, cpu)
    assert got[3].shape == (1, 2, 5, 4)
    np.testing.assert_allclose(want[3], conv_forward(np.maximum(X, 0), W, [0, 0], [0, 0], [1, 1], [1, 1]),
                               rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------
# The reference against independent values
# ---------------------------------------------------------------------------


def test_reference_hand_derived():
    """1-D cases worked out by hand."""
    x, w = np.array([[[1.0, 2, 3, 4]]]), np.array([[[1.0, 0, -1]]])
    # y[o] = x[o-1] - x[o+1] with zero padding 1
    np.testing.assert_array_equal(conv_forward(x, w, [1], [1], [1], [1]), [[[-2, -2, -2, 3]]])
    # dx[i] = dy[i+1] - dy[i-1]
    np.testing.assert_array_equal(conv_data_grad(np.array([[[1.0, 2, 3, 4]]]), w, [1, 1, 4], [1], [1], [1], [1]),
                                  [[[2, 2, 2, -3]]])
    # dw[r] = sum_o dy[o] * x_pad[o + r], x_pad = [0, 1, 2, 3, 4, 0], dy = 1
    np.testing.assert_array_equal(conv_filter_grad(np.ones((1, 1, 4)), x, [1, 1, 3], [1], [1], [1], [1]),
                                  [[[6, 10, 9]]])
    # stride 2, kernel [1, 1] on 5 inputs: y = [x0 + x1, x2 + x3]; x4 is never read
    x5, w2 = np.array([[[1.0, 2, 3, 4, 5]]]), np.ones((1, 1, 2))
    np.testing.assert_array_equal(conv_forward(x5, w2, [0], [0], [2], [1]), [[[3, 7]]])
    np.testing.assert_array_equal(conv_data_grad(np.array([[[1.0, 10]]]), w2, [1, 1, 5], [0], [0], [2], [1]),
                                  [[[1, 1, 10, 10, 0]]])
    # two groups of one channel each: y_k = conv(x_k, w_k)
    xg, wg = np.array([[[1.0, 2], [3, 4]]]), np.array([[[2.0]], [[-1.0]]])
    np.testing.assert_array_equal(conv_forward(xg, wg, [0], [0], [1], [1]), [[[2, 4], [-3, -4]]])


def test_dgrad_hand_derived_on_iree(cpu):
    """The stride-2 hand case on the IREE engine: dx = [1, 1, 10, 10, 0]."""
    g = hd.Graph(io_data_type=F)
    dy, w = g.tensor(name="dY", uid=1, dim=[1, 1, 2]), g.tensor(name="W", uid=2, dim=[1, 1, 2])
    dx = g.conv_dgrad(dy, w, stride=[2]).set_dim([1, 1, 5]).set_output(True).set_uid(3)
    g.build(cpu)
    out = empty_like_tensor(dx)
    g.execute(cpu, {1: np.array([[[1.0, 10]]], np.float32), 2: np.ones((1, 1, 2), np.float32), 3: out})
    np.testing.assert_array_equal(out, [[[1, 1, 10, 10, 0]]])


TORCH_CASES = [
    # x dims, w dims, pre, post, stride, dilation (torch needs symmetric padding)
    ([2, 6, 9, 8], [4, 3, 3, 2], [1, 2], [1, 2], [2, 1], [1, 2]),
    ([1, 4, 11], [8, 1, 3], [2], [2], [3], [2]),
    ([2, 3, 10], [6, 3, 4], [0], [0], [2], [1]),
    ([1, 4, 5, 6, 7], [4, 2, 2, 3, 2], [1, 0, 1], [1, 0, 1], [1, 2, 2], [2, 1, 1]),
    ([2, 8, 7, 7], [8, 1, 3, 3], [1, 1], [1, 1], [2, 2], [1, 1]),
]


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: f"{len(c[0]) - 2}d-{c[0]}-{c[1]}")
def test_reference_matches_torch(rng, case):
    torch = pytest.importorskip("torch")
    xd, wd, pre, post, stride, dil = case
    x, w = rng.standard_normal(xd), rng.standard_normal(wd)
    conv = {3: torch.nn.functional.conv1d, 4: torch.nn.functional.conv2d, 5: torch.nn.functional.conv3d}[len(xd)]
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    yt = conv(xt, wt, stride=stride, padding=pre, dilation=dil, groups=xd[1] // wd[1])
    y = conv_forward(x, w, pre, post, stride, dil)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(conv_data_grad(dy, w, xd, pre, post, stride, dil), xt.grad.numpy(),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(conv_filter_grad(dy, x, wd, pre, post, stride, dil), wt.grad.numpy(),
                               rtol=1e-12, atol=1e-12)


def test_reference_asymmetric_padding_matches_torch(rng):
    """Asymmetric padding = explicit zero padding, then an unpadded conv (checked with torch)."""
    torch = pytest.importorskip("torch")
    x, w = rng.standard_normal([1, 4, 7, 9]), rng.standard_normal([6, 2, 3, 2])
    xp = torch.nn.functional.pad(torch.tensor(x), (0, 2, 1, 0))    # W: (pre 0, post 2), H: (pre 1, post 0)
    want = torch.nn.functional.conv2d(xp, torch.tensor(w), stride=(1, 2), dilation=(2, 1), groups=2).numpy()
    got = conv_forward(x, w, [1, 0], [0, 2], [1, 2], [2, 1])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------
# Golden linalg
# ---------------------------------------------------------------------------


def test_fprop_golden_grouped_nhwc(cpu):
    g = hd.Graph(io_data_type=H, compute_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[2, 8, 9, 9], stride=_strides([2, 8, 9, 9], "nhwc"))
    w = g.tensor(name="W", uid=2, dim=[6, 4, 3, 3])
    # NOTE: an NCHW output set explicitly (left unset, it would follow x's channels-last layout)
    g.conv_fprop(x, w, pre_padding=[1, 0], post_padding=[0, 2], stride=[2, 2],
                 dilation=[1, 2]).set_output(True).set_uid(3).set_stride([96, 16, 4, 1])
    # NOTE: the channels-first form GPU targets compile (CPUs: test_fprop_golden_grouped_split_on_cpu)
    filecheck(lowered_mlir(g, cpu, target="rocm:gfx942"), r"""
// CHECK: func.func @main(%[[X:.+]]: tensor<2x9x9x8xf16>, %[[W:.+]]: tensor<6x4x3x3xf16>, %{{.+}}: tensor<2x6x4x4xf16> {iree.abi.output = 0 : index})
// CHECK: %[[XT:.+]] = linalg.transpose ins(%[[X]] : tensor<2x9x9x8xf16>) {{.*}} permutation = [0, 3, 1, 2]
// CHECK: %[[CROP:.+]] = tensor.extract_slice %[[XT]][0, 0, 0, 0] [2, 8, 8, 9] [1, 1, 1, 1]
// CHECK: %[[PAD:.+]] = tensor.pad %[[CROP]] low[0, 0, 1, 0] high[0, 0, 0, 2]
// CHECK: tensor.yield %{{.+}} : f16
// CHECK: } : tensor<2x8x8x9xf16> to tensor<2x8x9x11xf16>
// CHECK: %[[WG:.+]] = tensor.expand_shape %[[W]] {{\[}}[0, 1], [2], [3], [4]] output_shape [2, 3, 4, 3, 3]
// CHECK: %[[XG:.+]] = tensor.expand_shape %[[PAD]] {{\[}}[0], [1, 2], [3], [4]] output_shape [2, 2, 4, 9, 11]
// CHECK: %[[ACC:.+]] = linalg.fill {{.*}} -> tensor<2x2x3x4x4xf32>
// CHECK: %[[CONV:.+]] = linalg.conv_2d_ngchw_gfchw {dilations = dense<[1, 2]> : tensor<2xi64>, strides = dense<[2, 2]> : tensor<2xi64>} ins(%[[XG]], %[[WG]] : tensor<2x2x4x9x11xf16>, tensor<2x3x4x3x3xf16>) outs(%[[ACC]] : tensor<2x2x3x4x4xf32>)
// CHECK: tensor.collapse_shape %[[CONV]] {{\[}}[0], [1, 2], [3], [4]] : tensor<2x2x3x4x4xf32> into tensor<2x6x4x4xf32>
// CHECK: arith.truncf {{.*}} : f32 to f16
// CHECK: return
""")


def test_fprop_golden_plain_and_grouped_1d(cpu):
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[1, 4, 8, 8])
    w = g.tensor(name="W", uid=2, dim=[5, 4, 3, 3])
    g.conv_fprop(x, w, padding=[1, 1]).set_output(True).set_uid(3)
    # CPU: NCHW activations relaid to NHWC and the filter to HWCF, each behind a barrier, then the
    # channels-last named op (lowering/ops/conv.py, cpu_channels_last).
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: %[[XT:.+]] = linalg.transpose ins(%arg0 : tensor<1x4x8x8xf32>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK: %[[XB:.+]] = util.optimization_barrier %[[XT]] : tensor<1x8x8x4xf32>
// CHECK: %[[PAD:.+]] = tensor.pad %[[XB]] low[0, 1, 1, 0] high[0, 1, 1, 0]
// CHECK: %[[WT:.+]] = linalg.transpose ins(%arg1 : tensor<5x4x3x3xf32>) {{.*}} permutation = [2, 3, 1, 0]
// CHECK: %[[WB:.+]] = util.optimization_barrier %[[WT]] : tensor<3x3x4x5xf32>
// CHECK: %[[Y:.+]] = linalg.conv_2d_nhwc_hwcf {dilations = dense<[1, 1]> : tensor<2xi64>, strides = dense<[1, 1]> : tensor<2xi64>} ins(%[[PAD]], %[[WB]] : tensor<1x10x10x4xf32>, tensor<3x3x4x5xf32>) outs(%{{.+}} : tensor<1x8x8x5xf32>)
// CHECK: linalg.transpose ins(%[[Y]] : tensor<1x8x8x5xf32>) {{.*}} permutation = [0, 3, 1, 2]
""")
    # GPU targets keep the channels-first form their CUDA workarounds are measured on.
    filecheck(lowered_mlir(g, cpu, target="cuda:sm_80"), r"""
// CHECK: %[[PAD:.+]] = tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1]
// CHECK: linalg.conv_2d_nchw_fchw {dilations = dense<[1, 1]> : tensor<2xi64>, strides = dense<[1, 1]> : tensor<2xi64>} ins(%[[PAD]], %arg1 : tensor<1x4x10x10xf32>, tensor<5x4x3x3xf32>) outs(%{{.+}} : tensor<1x5x8x8xf32>)
""")
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[1, 6, 11])
    w = g.tensor(name="W", uid=2, dim=[9, 2, 3])
    g.conv_fprop(x, w, stride=[2], dilation=[3]).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: tensor.expand_shape %arg1 {{\[}}[0, 1], [2], [3]] output_shape [3, 3, 2, 3]
// CHECK: tensor.expand_shape %arg0 {{\[}}[0], [1, 2], [3]] output_shape [1, 3, 2, 11]
// CHECK: linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4, d3 * 2 + d5 * 3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d1, d2, d4, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: tensor.collapse_shape {{.*}} : tensor<1x3x3x3xf32> into tensor<1x9x3xf32>
""")


def test_fprop_golden_channels_last_cpu(cpu):
    """NHWC activations with a KRSC filter on the CPU: the activations' relayout folds into the
    argument's (no transpose, no barrier on x), the filter goes to HWCF behind a barrier; a
    depthwise conv takes the depthwise named op."""
    xd = [2, 8, 9, 9]
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=xd, stride=_strides(xd, "nhwc"))
    w = g.tensor(name="W", uid=2, dim=[6, 8, 3, 3], stride=_strides([6, 8, 3, 3], "nhwc"))
    g.conv_fprop(x, w, padding=[1, 1], stride=[2, 2]).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: func.func @main(%[[X:.+]]: tensor<2x9x9x8xf32>, %[[W:.+]]: tensor<6x3x3x8xf32>
// CHECK: %[[XL:.+]] = linalg.transpose ins(%[[X]] : tensor<2x9x9x8xf32>) {{.*}} permutation = [0, 3, 1, 2]
// CHECK: %[[XC:.+]] = linalg.transpose ins(%[[XL]] : tensor<2x8x9x9xf32>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK-NOT: util.optimization_barrier %[[XC]]
// CHECK: %[[PAD:.+]] = tensor.pad %[[XC]] low[0, 1, 1, 0] high[0, 1, 1, 0]
// CHECK: %[[WB:.+]] = util.optimization_barrier %{{.+}} : tensor<3x3x8x6xf32>
// CHECK: linalg.conv_2d_nhwc_hwcf {dilations = dense<[1, 1]> : tensor<2xi64>, strides = dense<[2, 2]> : tensor<2xi64>} ins(%[[PAD]], %[[WB]] : tensor<2x11x11x8xf32>, tensor<3x3x8x6xf32>) outs(%{{.+}} : tensor<2x5x5x6xf32>)
""")
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=xd, stride=_strides(xd, "nhwc"))
    w = g.tensor(name="W", uid=2, dim=[16, 1, 3, 3])
    g.conv_fprop(x, w, padding=[1, 1]).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: %[[WB:.+]] = util.optimization_barrier %{{.+}} : tensor<3x3x8x2xf32>
// CHECK: %[[Y:.+]] = linalg.depthwise_conv_2d_nhwc_hwcm {{.*}} outs(%{{.+}} : tensor<2x9x9x8x2xf32>)
// CHECK: tensor.collapse_shape %[[Y]] {{\[}}[0], [1], [2], [3, 4]] : tensor<2x9x9x8x2xf32> into tensor<2x9x9x16xf32>
""")


def test_fprop_golden_grouped_split_on_cpu(cpu):
    """CPUs: a grouped 2-D conv is one channels-last conv_2d_nhwc_hwcf per group on channel slices."""
    g = hd.Graph(io_data_type=H, compute_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[2, 8, 9, 9], stride=_strides([2, 8, 9, 9], "nhwc"))
    w = g.tensor(name="W", uid=2, dim=[6, 4, 3, 3])
    g.conv_fprop(x, w, pre_padding=[1, 0], post_padding=[0, 2], stride=[2, 2], dilation=[1, 2]).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: %[[XP:.+]] = tensor.pad %{{.+}} low[0, 1, 0, 0] high[0, 0, 2, 0]
// CHECK: %[[WT:.+]] = util.optimization_barrier %{{.+}} : tensor<3x3x4x6xf16>
// CHECK: %[[X0:.+]] = tensor.extract_slice %[[XP]][0, 0, 0, 0] [2, 9, 11, 4] [1, 1, 1, 1]
// CHECK: %[[W0:.+]] = tensor.extract_slice %[[WT]][0, 0, 0, 0] [3, 3, 4, 3] [1, 1, 1, 1]
// CHECK: linalg.conv_2d_nhwc_hwcf {dilations = dense<[1, 2]> : tensor<2xi64>, strides = dense<[2, 2]> : tensor<2xi64>} ins(%[[X0]], %[[W0]] : tensor<2x9x11x4xf16>, tensor<3x3x4x3xf16>) outs(%{{.+}} : tensor<2x4x4x3xf32>)
// CHECK: tensor.insert_slice %{{.+}} into %{{.+}}[0, 0, 0, 0] [2, 4, 4, 3]
// CHECK: %[[X1:.+]] = tensor.extract_slice %[[XP]][0, 0, 0, 4] [2, 9, 11, 4] [1, 1, 1, 1]
// CHECK: linalg.conv_2d_nhwc_hwcf
// CHECK: tensor.insert_slice %{{.+}} into %{{.+}}[0, 0, 0, 3] [2, 4, 4, 3]
""")


def test_dgrad_golden(cpu):
    g = hd.Graph(io_data_type=F)
    dy = g.tensor(name="dY", uid=1, dim=[2, 6, 4, 4])
    w = g.tensor(name="W", uid=2, dim=[6, 4, 3, 3])
    g.conv_dgrad(dy, w, padding=[1, 1], stride=[2, 2]).set_dim([2, 4, 8, 8]).set_output(True).set_uid(3)
    # NOTE: the channels-first form GPU targets compile (CPUs: test_dgrad_golden_channels_last_on_cpu)
    filecheck(lowered_mlir(g, cpu, target="rocm:gfx942"), r"""
// CHECK: %[[Z:.+]] = linalg.fill {{.*}} -> tensor<2x6x10x10xf32>
// CHECK: %[[S:.+]] = tensor.insert_slice %arg0 into %[[Z]][0, 0, 1, 1] [2, 6, 4, 4] [1, 1, 2, 2] : tensor<2x6x4x4xf32> into tensor<2x6x10x10xf32>
// CHECK: %[[WF:.+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<4x6x3x3xf32>)
// CHECK: %[[C:.+]] = linalg.index 0 : index
// CHECK: %[[K:.+]] = linalg.index 1 : index
// CHECK: %[[R:.+]] = linalg.index 2 : index
// CHECK: %[[Q:.+]] = linalg.index 3 : index
// CHECK: %[[RF:.+]] = arith.subi %{{.+}}, %[[R]] : index
// CHECK: %[[QF:.+]] = arith.subi %{{.+}}, %[[Q]] : index
// CHECK: tensor.extract %arg1[%[[K]], %[[C]], %[[RF]], %[[QF]]] : tensor<6x4x3x3xf32>
// CHECK: linalg.conv_2d_nchw_fchw {dilations = dense<[1, 1]> : tensor<2xi64>, strides = dense<[1, 1]> : tensor<2xi64>} ins(%[[S]], %[[WF]] : tensor<2x6x10x10xf32>, tensor<4x6x3x3xf32>) outs(%{{.+}} : tensor<2x4x8x8xf32>)
""")


def test_dgrad_golden_channels_last_on_cpu(cpu):
    """CPUs: the same scattered-dy correlation in conv_fprop's channels-last form."""
    g = hd.Graph(io_data_type=F)
    dy = g.tensor(name="dY", uid=1, dim=[2, 6, 4, 4])
    w = g.tensor(name="W", uid=2, dim=[6, 4, 3, 3])
    g.conv_dgrad(dy, w, padding=[1, 1], stride=[2, 2]).set_dim([2, 4, 8, 8]).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: %[[S:.+]] = tensor.insert_slice %arg0 into %{{.+}}[0, 0, 1, 1] [2, 6, 4, 4] [1, 1, 2, 2] : tensor<2x6x4x4xf32> into tensor<2x6x10x10xf32>
// CHECK: tensor.extract %arg1
// CHECK: %[[SC:.+]] = linalg.transpose ins(%[[S]] : tensor<2x6x10x10xf32>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK: util.optimization_barrier %[[SC]] : tensor<2x10x10x6xf32>
// CHECK: util.optimization_barrier %{{.+}} : tensor<3x3x6x4xf32>
// CHECK: linalg.conv_2d_nhwc_hwcf {dilations = dense<[1, 1]> : tensor<2xi64>, strides = dense<[1, 1]> : tensor<2xi64>} ins(%{{.+}}, %{{.+}} : tensor<2x10x10x6xf32>, tensor<3x3x6x4xf32>) outs(%{{.+}} : tensor<2x8x8x4xf32>)
""")


def test_wgrad_golden(cpu):
    """Ungrouped: a forward conv_2d_nchw_fchw with batch and channels swapped (stride and dilation
    exchanged) between transposes."""
    g = hd.Graph(io_data_type=F)
    dy = g.tensor(name="dY", uid=1, dim=[2, 6, 4, 4])
    x = g.tensor(name="X", uid=2, dim=[2, 4, 8, 8])
    g.conv_wgrad(dy, x, padding=[1, 2], stride=[2, 2], dilation=[1, 2]).set_dim([6, 4, 3, 3]).set_output(True).set_uid(3)
    # NOTE: the channels-first form GPU targets compile (CPUs: test_wgrad_golden_channels_last_on_cpu)
    filecheck(lowered_mlir(g, cpu, target="rocm:gfx942"), r"""
// CHECK: %[[XP:.+]] = tensor.pad %arg1 low[0, 0, 1, 2] high[0, 0, 0, 1]
// CHECK: } : tensor<2x4x8x8xf32> to tensor<2x4x9x11xf32>
// CHECK: %[[XT:.+]] = linalg.transpose ins(%[[XP]] : tensor<2x4x9x11xf32>) outs(%{{.+}} : tensor<4x2x9x11xf32>) permutation = [1, 0, 2, 3]
// CHECK: %[[DYT:.+]] = linalg.transpose ins(%arg0 : tensor<2x6x4x4xf32>) outs(%{{.+}} : tensor<6x2x4x4xf32>) permutation = [1, 0, 2, 3]
// CHECK: %[[ACC:.+]] = linalg.fill {{.*}} -> tensor<4x6x3x3xf32>
// CHECK: %[[DW:.+]] = linalg.conv_2d_nchw_fchw {dilations = dense<[2, 2]> : tensor<2xi64>, strides = dense<[1, 2]> : tensor<2xi64>} ins(%[[XT]], %[[DYT]] : tensor<4x2x9x11xf32>, tensor<6x2x4x4xf32>) outs(%[[ACC]] : tensor<4x6x3x3xf32>)
// CHECK: %[[OUT:.+]] = linalg.transpose ins(%[[DW]] : tensor<4x6x3x3xf32>) outs(%{{.+}} : tensor<6x4x3x3xf32>) permutation = [1, 0, 2, 3]
// CHECK: return %[[OUT]] : tensor<6x4x3x3xf32>
""")


def test_wgrad_golden_channels_last_on_cpu(cpu):
    """CPUs: the swapped correlation in conv_fprop's channels-last form, relayouts behind barriers."""
    g = hd.Graph(io_data_type=F)
    dy = g.tensor(name="dY", uid=1, dim=[2, 6, 4, 4])
    x = g.tensor(name="X", uid=2, dim=[2, 4, 8, 8])
    g.conv_wgrad(dy, x, padding=[1, 2], stride=[2, 2], dilation=[1, 2]).set_dim([6, 4, 3, 3]).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: util.optimization_barrier %{{.+}} : tensor<4x9x11x2xf32>
// CHECK: util.optimization_barrier %{{.+}} : tensor<4x4x2x6xf32>
// CHECK: linalg.conv_2d_nhwc_hwcf {dilations = dense<[2, 2]> : tensor<2xi64>, strides = dense<[1, 2]> : tensor<2xi64>} ins(%{{.+}}, %{{.+}} : tensor<4x9x11x2xf32>, tensor<4x4x2x6xf32>) outs(%{{.+}} : tensor<4x3x3x6xf32>)
// CHECK: return %{{.+}} : tensor<6x4x3x3xf32>
""")


def test_wgrad_golden_grouped_1d(cpu):
    """Grouped 1-D (no named grouped op): x regrouped to [Cg, G*N, *], dy to [G, Kg, N, *], the
    grouped conv generic, then back to [K, Cg, *R]."""
    g = hd.Graph(io_data_type=H, compute_data_type=F)
    dy = g.tensor(name="dY", uid=1, dim=[2, 6, 4])
    x = g.tensor(name="X", uid=2, dim=[2, 4, 10])
    g.conv_wgrad(dy, x, padding=[1], stride=[2], dilation=[2]).set_dim([6, 2, 3]).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: %[[XP:.+]] = tensor.pad %arg1 low[0, 0, 1] high[0, 0, 0]
// CHECK: %[[XS:.+]] = tensor.expand_shape %[[XP]] {{\[}}[0], [1, 2], [3]] output_shape [2, 2, 2, 11]
// CHECK: %[[XT:.+]] = linalg.transpose ins(%[[XS]] : tensor<2x2x2x11xf16>) {{.*}} permutation = [2, 1, 0, 3]
// CHECK: %[[XC:.+]] = tensor.collapse_shape %[[XT]] {{\[}}[0], [1, 2], [3]] : tensor<2x2x2x11xf16> into tensor<2x4x11xf16>
// CHECK: %[[DYT:.+]] = linalg.transpose ins(%arg0 : tensor<2x6x4xf16>) {{.*}} permutation = [1, 0, 2]
// CHECK: %[[DYG:.+]] = tensor.expand_shape %[[DYT]] {{\[}}[0, 1], [2], [3]] output_shape [2, 3, 2, 4]
// CHECK: %[[XG:.+]] = tensor.expand_shape %[[XC]] {{\[}}[0], [1, 2], [3]] output_shape [2, 2, 2, 11]
// CHECK: %[[ACC:.+]] = linalg.fill {{.*}} -> tensor<2x2x3x3xf32>
// CHECK: %[[DW:.+]] = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4, d3 * 2 + d5 * 2)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d1, d2, d4, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%[[XG]], %[[DYG]] : tensor<2x2x2x11xf16>, tensor<2x3x2x4xf16>) outs(%[[ACC]] : tensor<2x2x3x3xf32>)
// CHECK: arith.extf {{.*}} : f16 to f32
// CHECK: arith.extf {{.*}} : f16 to f32
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: %[[DWC:.+]] = tensor.collapse_shape %[[DW]] {{\[}}[0], [1, 2], [3]] : tensor<2x2x3x3xf32> into tensor<2x6x3xf32>
// CHECK: linalg.transpose ins(%[[DWC]] : tensor<2x6x3xf32>) {{.*}} permutation = [1, 0, 2]
// CHECK: arith.truncf {{.*}} : f32 to f16
""")


# ---------------------------------------------------------------------------
# GPU targets, compile only
# ---------------------------------------------------------------------------

GPU_TARGETS = [("rocm:gfx942", b"rocm-hsaco-fb"), ("rocm:gfx90a", b"rocm-hsaco-fb"), ("cuda:sm_80", b"cuda-nvptx-fb")]
GPU_CASES = {  # grouped, strided, asymmetric: the named grouped op, the scatter and the generic
    "fprop": ([2, 8, 9, 10], [6, 4, 3, 3], dict(pre_padding=[1, 0], post_padding=[1, 2], stride=[2, 2])),
    "dgrad": ([2, 8, 9, 10], [6, 4, 3, 3], dict(padding=[1, 1], stride=[2, 2], dilation=[1, 2])),
    "wgrad": ([1, 4, 5, 6, 6], [4, 2, 3, 2, 2], dict(padding=[1, 0, 1], stride=[2, 1, 1])),
}


@pytest.mark.parametrize("op", list(GPU_CASES))
@pytest.mark.parametrize("target,fmt", GPU_TARGETS, ids=[t for t, _ in GPU_TARGETS])
def test_gpu_compile_only(op, target, fmt):
    x_dims, w_dims, kw = GPU_CASES[op]
    build, _, _ = _build_conv(op, x_dims, w_dims, kw, H, "nhwc" if len(x_dims) == 4 else "ndhwc")
    g, _ = build()
    g.build(hd.create_handle(device=None, target=target))
    assert fmt in g.serialize_compiled_plan()



# A realistic weight gradient (ResNet-like 3x3 layer): large reductions over N and the output
# positions, which a single generic contracting over them did not compile for on GPU targets.
WGRAD_REALISTIC = {
    "plain": ([4, 32, 28, 28], [64, 32, 3, 3], dict(padding=[1, 1])),
    "grouped-strided": ([4, 32, 28, 28], [64, 16, 3, 3], dict(padding=[1, 1], stride=[2, 2])),
}


@pytest.mark.parametrize("case", list(WGRAD_REALISTIC))
@pytest.mark.parametrize("target,fmt", [("cuda:sm_80", b"cuda-nvptx-fb"), ("rocm:gfx942", b"rocm-hsaco-fb")],
                         ids=["cuda:sm_80", "rocm:gfx942"])
def test_wgrad_gpu_compile_realistic(case, target, fmt):
    x_dims, w_dims, kw = WGRAD_REALISTIC[case]
    build, _, _ = _build_conv("wgrad", x_dims, w_dims, kw, H, "nchw")
    g, _ = build()
    g.build(hd.create_handle(device=None, target=target))
    assert fmt in g.serialize_compiled_plan()

# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------

INVALID = [
    # id, op, a dims, b dims, out dims, attributes, words the message must hold
    ("negative-padding", "fprop", [1, 4, 8, 8], [4, 4, 3, 3], None, dict(padding=[-1, 0]),
     ["pre_padding", "[-1, 0]", ">= 0"]),
    ("negative-post-padding", "wgrad", [1, 4, 6, 6], [1, 4, 8, 8], [4, 4, 3, 3],
     dict(pre_padding=[0, 0], post_padding=[0, -2]), ["post_padding", "[0, -2]"]),
    ("stride-0", "fprop", [1, 4, 8, 8], [4, 4, 3, 3], None, dict(stride=[0, 1]), ["stride", "[0, 1]", ">= 1"]),
    ("dilation-0", "dgrad", [1, 4, 6, 6], [4, 4, 3, 3], [1, 4, 8, 8], dict(dilation=[1, 0]),
     ["dilation", "[1, 0]"]),
    ("stride-wrong-length", "fprop", [1, 4, 8, 8], [4, 4, 3, 3], None, dict(stride=[1, 1, 1]),
     ["stride", "[1, 1, 1]", "2 values"]),
    ("channels-not-divisible", "fprop", [1, 6, 8, 8], [4, 4, 3, 3], None, {}, ["w_uid", "6 channels", "4"]),
    ("out-channels-not-divisible", "fprop", [1, 4, 8, 8], [3, 2, 3, 3], None, {}, ["w_uid", "3 output channels"]),
    ("rank-mismatch", "fprop", [1, 4, 8, 8], [4, 4, 3], None, {}, ["w_uid", "[4, 4, 3]", "rank"]),
    ("not-a-conv-rank", "fprop", [4, 8], [4, 8], None, {}, ["x_uid", "[4, 8]", "rank"]),
    ("kernel-too-large", "fprop", [1, 4, 4, 4], [4, 4, 3, 3], None, dict(dilation=[2, 1]),
     ["w_uid", "exceeds the padded input"]),
    ("y-dims-contradict", "fprop", [1, 4, 8, 8], [4, 4, 3, 3], [1, 4, 8, 8], {}, ["[1, 4, 8, 8]", "[1, 4, 6, 6]"]),
    ("dgrad-dy-channels", "dgrad", [1, 5, 6, 6], [4, 4, 3, 3], [1, 4, 8, 8], {}, ["w_uid", "dy has 5"]),
    ("wgrad-batch", "wgrad", [2, 4, 6, 6], [1, 4, 8, 8], [4, 4, 3, 3], {}, ["y_uid", "batch"]),
]


@pytest.mark.parametrize("case", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_attributes_at_validate(case):
    _, op, a, b, out, kw, words = case
    g = hd.Graph(io_data_type=F)
    ta, tb = g.tensor(name="A", uid=1, dim=a), g.tensor(name="B", uid=2, dim=b)
    o = getattr(g, f"conv_{op}")(ta, tb, name="bad_conv", **kw)
    if out is not None:
        o.set_dim(out)
    o.set_output(True)
    with pytest.raises(hd.HipdnnError) as e:
        g.validate()
    assert e.value.status == hd.Status.BAD_PARAM
    msg = str(e.value)
    for word in [f"conv_{op}", "'bad_conv'", *words]:
        assert word in msg, f"{word!r} missing from: {msg}"


@pytest.mark.parametrize("op,a,b,out,field", [
    ("dgrad", [1, 4, 6, 6], [4, 4, 3, 3], [1, 4, 9, 8], "x_uid"),     # 9x8 gives a 7x6 dy, not 6x6
    ("dgrad", [1, 6, 6, 6], [6, 2, 3, 3], [1, 5, 8, 8], "x_uid"),     # 5 channels do not split into w.dims[1]=2
    ("wgrad", [1, 4, 6, 6], [1, 4, 8, 8], [4, 4, 2, 3], "w_uid"),     # a 2x3 kernel gives a 7x6 dy
])
def test_grad_output_dims_contradicting(cpu, op, a, b, out, field):
    """A caller-set dx/dw that no forward convolution of these operands produces is BAD_PARAM
    (at validate when the frontend can see the set dims, else when the engine lowers it)."""
    g = hd.Graph(io_data_type=F)
    ta, tb = g.tensor(name="A", uid=1, dim=a), g.tensor(name="B", uid=2, dim=b)
    getattr(g, f"conv_{op}")(ta, tb, name="bad_grad").set_dim(out).set_output(True)
    with pytest.raises(hd.HipdnnError) as e:
        g.build(cpu)
    assert e.value.status == hd.Status.BAD_PARAM
    for word in [f"conv_{op}", "'bad_grad'", f"field '{field}'", str(out)]:
        assert word in str(e.value), f"{word!r} missing from: {e.value}"


def test_padding_given_both_ways():
    g = hd.Graph(io_data_type=F)
    x, w = g.tensor(name="X", dim=[1, 4, 8, 8]), g.tensor(name="W", dim=[4, 4, 3, 3])
    with pytest.raises(hd.HipdnnError) as e:
        g.conv_fprop(x, w, padding=[1, 1], pre_padding=[1, 0], name="both")
    assert e.value.status == hd.Status.BAD_PARAM
    for word in ["both", "padding=[1, 1]", "pre_padding=[1, 0]", "not both"]:
        assert word in str(e.value)


def test_attribute_types_and_int_shorthand():
    g = hd.Graph(io_data_type=F)
    x, w = g.tensor(name="X", dim=[1, 4, 8, 8]), g.tensor(name="W", dim=[4, 4, 3, 3])
    with pytest.raises(hd.HipdnnError) as e:
        g.conv_fprop(x, w, stride=[1.5, 1])
    assert e.value.status == hd.Status.BAD_PARAM and "stride" in str(e.value)
    y = g.conv_fprop(x, w, padding=1, stride=2).set_output(True)   # one int: every spatial dim
    g.validate()
    assert y.get_dim() == [1, 4, 4, 4]


@pytest.mark.parametrize("groups,channels", [(65, 130), (4, 16)])
def test_grouped_conv_cpu_forms_match_the_reference(cpu, rng, groups, channels):
    """Both CPU grouped forms (per-group convs up to 64 groups, conv_2d_nhwgc_gfhwc past that) against
    the numpy reference, channels-last tensors, stride 2 and asymmetric padding."""
    from harness import compare_engines, random_array

    def build():
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="X", uid=1, dim=[2, channels, 7, 7], stride=_strides([2, channels, 7, 7], "nhwc"))
        w = g.tensor(name="W", uid=2, dim=[channels, 2 if groups == 65 else 4, 3, 3])
        y = g.conv_fprop(x, w, pre_padding=[1, 0], post_padding=[0, 1], stride=[2, 2]).set_output(True).set_uid(3)
        return g, {3: y}

    cg = 2 if groups == 65 else 4
    inputs = {1: random_array([2, channels, 7, 7], F, rng, strides=_strides([2, channels, 7, 7], "nhwc")),
              2: random_array([channels, cg, 3, 3], F, rng)}
    compare_engines(build, inputs, cpu)


def test_fprop_golden_3d_as_2d_convs_on_cpu(cpu):
    """CPUs: an ungrouped 3-D conv is KD channels-last 2-D convs accumulating into one output (depth
    folded into the batch); GPU targets keep conv_3d_ncdhw_fcdhw."""
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[2, 4, 6, 5, 5], stride=_strides([2, 4, 6, 5, 5], "ndhwc"))
    w = g.tensor(name="W", uid=2, dim=[8, 4, 3, 3, 3], stride=_strides([8, 4, 3, 3, 3], "ndhwc"))
    g.conv_fprop(x, w, padding=[1, 1, 1], stride=[2, 1, 1]).set_output(True).set_uid(3)
    checks = "\n".join(
        f"// CHECK: tensor.extract_slice %{{{{.+}}}}[0, {kd}, 0, 0, 0] [2, 3, 7, 7, 4] [1, 2, 1, 1, 1]\n"
        f"// CHECK: linalg.conv_2d_nhwc_hwcf {{{{.*}}}} outs(%{{{{.+}}}} : tensor<6x5x5x8xf32>)" for kd in range(3))
    filecheck(lowered_mlir(g, cpu), checks + "\n// CHECK-NOT: linalg.conv_3d\n")
    assert "linalg.conv_3d_ncdhw_fcdhw" in lowered_mlir(g, cpu, target="rocm:gfx942")
