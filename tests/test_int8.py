"""int8/uint8 convolution and matmul with int32 accumulation (cuDNN FE's test_conv_int8 graph and
its relatives): the IREE engine and the numpy reference engine against an independent int64 numpy
reference, exactly (np.array_equal); every CPU form and knob path an integer conv takes; the int8 x
bf16 matmul with FLOAT compute; the MLIR (i8 operands, i32 accumulator, no float detour); what is
refused (integer conv_dgrad/conv_wgrad, narrow or mixed integer compute types).

The data is full range (int8 -128..127, uint8 0..255) and the reductions long enough that the
exact results leave the int16 range (checked in each test): an i8 or i16 accumulator, a sign
extension of uint8 or an f32 round trip beyond 2^24 gives other numbers."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import empty_like_tensor, raises, run_engines
from hipdnn_iree.plugin_sdk.buffers import numpy_dtype

I8, U8, I32, F, BF = (hd.DataType.INT8, hd.DataType.UINT8, hd.DataType.INT32, hd.DataType.FLOAT,
                      hd.DataType.BFLOAT16)
_NP = {I8: np.int8, U8: np.uint8}
_RANGE = {I8: (-128, 128), U8: (0, 256)}
INT16_MAX = np.iinfo(np.int16).max


# ---------------------------------------------------------------------------
# Independent references (int64) and data
# ---------------------------------------------------------------------------


def conv_ref(x, w, pre, post, stride, dilation):
    """Grouped cross-correlation in int64, one kernel offset at a time: for every group and offset
    ``r``, ``y[n, k, o] += sum_c x_pad[n, c, o*stride + r*dilation] * w[k, c, r]``."""
    x, w = np.asarray(x, np.int64), np.asarray(w, np.int64)
    n, c, k, cg = x.shape[0], x.shape[1], w.shape[0], w.shape[1]
    groups, rank = c // cg, x.ndim - 2
    kg = k // groups
    xp = np.pad(x, [(0, 0), (0, 0)] + [(a, b) for a, b in zip(pre, post)])
    out = [(xp.shape[2 + i] - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1 for i in range(rank)]
    y = np.zeros((n, k, *out), np.int64)
    for g in range(groups):
        for r in itertools.product(*(range(e) for e in w.shape[2:])):
            win = tuple(slice(r[i] * dilation[i], r[i] * dilation[i] + (out[i] - 1) * stride[i] + 1, stride[i])
                        for i in range(rank))
            xs = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + win]                # [N, Cg, *O]
            ws = w[(slice(g * kg, (g + 1) * kg), slice(None)) + r]                    # [Kg, Cg]
            y[:, g * kg:(g + 1) * kg] += np.einsum("nc...,kc->nk...", xs, ws)
    return y


def _strides(dims, channels_last: bool) -> list[int]:
    order = [0, *range(2, len(dims)), 1] if channels_last else list(range(len(dims)))
    strides, acc = [0] * len(dims), 1
    for a in reversed(order):
        strides[a] = acc
        acc *= dims[a]
    return strides


def _rand(rng, shape, dt, strides=None, low=None, high=None):
    """Full-range random integers of ``dt`` (a strided view when ``strides`` is given)."""
    lo, hi = _RANGE[dt]
    lo, hi = lo if low is None else low, hi if high is None else high
    vals = rng.integers(lo, hi, size=shape).astype(_NP[dt])
    if strides is None:
        return vals
    base = np.empty(int(np.prod(shape)), _NP[dt])
    view = np.lib.stride_tricks.as_strided(base, shape=tuple(shape), strides=tuple(s * base.itemsize for s in strides))
    view[...] = vals
    return view


def _pads(kw, rank):
    pre = kw.get("pre_padding", kw.get("padding", [0] * rank))
    post = kw.get("post_padding", kw.get("padding", [0] * rank))
    return pre, post, kw.get("stride", [1] * rank), kw.get("dilation", [1] * rank)


def _conv_graph(dt, xd, wd, kw, channels_last, identity=False, compute=I32, out=I32):
    """A builder for compare/run helpers: x, w of ``dt`` -> conv_fprop (-> identity) -> ``out``."""
    def build():
        g = hd.Graph(io_data_type=dt, intermediate_data_type=I32, compute_data_type=compute)
        x = g.tensor(name="X", uid=1, dim=xd, stride=_strides(xd, channels_last))
        w = g.tensor(name="W", uid=2, dim=wd, stride=_strides(wd, channels_last))
        y = g.conv_fprop(x, w, name="conv", **kw)
        if identity:
            y = g.pointwise(y, mode=hd.PointwiseMode.IDENTITY, name="identity")
        y.set_output(True).set_data_type(out).set_uid(3)
        return g, {3: y}
    return build


def _conv_inputs(rng, dt, xd, wd, channels_last, **bounds):
    return {1: _rand(rng, xd, dt, _strides(xd, channels_last), **bounds),
            2: _rand(rng, wd, dt, _strides(wd, channels_last), **bounds)}


def _run_plan(build, inputs, handle, knobs):
    """Builds ``build()``'s graph for the IREE engine with ``knobs`` and runs it; returns its output."""
    g, outs = build()
    g.validate().build_operation_graph(handle)
    g.create_execution_plan("IREE_LINALG", knobs).check_support().build_plans()
    assert g.get_engine_config_at_index(0).knobs == knobs
    got = {u: empty_like_tensor(t) for u, t in outs.items()}
    g.execute(handle, {**inputs, **got})
    return got[3]


def _body(mlir: str) -> str:
    """The module's text without the function line (its reflection attributes name data types)."""
    return "\n".join(line for line in mlir.splitlines() if "func.func" not in line)


# ---------------------------------------------------------------------------
# conv_fprop
# ---------------------------------------------------------------------------

# id, x dims, w dims, attributes, channels-last
CONVS = [
    ("2d-nchw", [2, 64, 9, 9], [8, 64, 3, 3], dict(padding=[1, 1]), False),
    ("2d-nhwc-asym-stride-dil", [2, 32, 11, 10], [6, 32, 3, 2],
     dict(pre_padding=[1, 0], post_padding=[0, 2], stride=[2, 1], dilation=[1, 2]), True),
    ("2d-nhwc-groups", [1, 32, 7, 7], [12, 8, 3, 3], dict(padding=[1, 1]), True),
    ("2d-nchw-depthwise-mult2", [2, 8, 9, 9], [16, 1, 3, 3], dict(padding=[1, 1], stride=[2, 2]), False),
    # past grouped_split_max (64) groups: the single conv_2d_nhwgc_gfhwc op
    ("2d-nhwc-65-groups", [1, 260, 5, 5], [65, 4, 3, 3], dict(padding=[1, 1]), True),
    ("1d-nwc-asym-stride-dil", [2, 16, 20], [5, 16, 3], dict(pre_padding=[2], post_padding=[1], stride=[2],
                                                              dilation=[2]), True),
    ("1d-ncw-groups", [1, 12, 13], [9, 4, 4], dict(padding=[1], stride=[2]), False),
    ("3d-ndhwc-asym-stride-dil", [1, 16, 5, 6, 6], [4, 16, 3, 2, 3],
     dict(pre_padding=[1, 0, 1], post_padding=[1, 1, 0], stride=[2, 1, 1], dilation=[1, 2, 1]), True),
    ("3d-ncdhw-groups", [1, 16, 5, 6, 6], [4, 8, 3, 2, 2], dict(padding=[1, 1, 1]), False),
]


@pytest.mark.parametrize("dt", [I8, U8], ids=["int8", "uint8"])
@pytest.mark.parametrize("case", CONVS, ids=[c[0] for c in CONVS])
def test_conv_fprop_exact(cpu, rng, case, dt):
    """IREE (serialized and restored) and NUMPY_REFERENCE both equal the int64 reference exactly."""
    _, xd, wd, kw, cl = case
    build = _conv_graph(dt, xd, wd, kw, cl)
    inputs = _conv_inputs(rng, dt, xd, wd, cl)
    want = conv_ref(inputs[1], inputs[2], *_pads(kw, len(xd) - 2))
    assert np.abs(want).max() > INT16_MAX, "the data must overflow a narrow accumulator"
    got, ref, g = run_engines(build, inputs, cpu)
    assert got[3].dtype == np.int32 and got[3].shape == want.shape
    assert np.array_equal(got[3], want.astype(np.int32)), f"IREE differs at {np.argwhere(got[3] != want)[:5].tolist()}"
    assert np.array_equal(ref[3], want.astype(np.int32)), "NUMPY_REFERENCE differs"


KNOBS = [{"CONV_LAYOUT": "CHANNELS_FIRST"}, {"CONV_LAYOUT": "CHANNELS_LAST"}, {"IM2COL": "ON"},
         {"DATA_TILING": "OFF"}, {"IM2COL": "ON", "DATA_TILING": "OFF"}]


@pytest.mark.parametrize("dt", [I8, U8], ids=["int8", "uint8"])
@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()))
@pytest.mark.parametrize("case", [CONVS[1], CONVS[2], CONVS[5], CONVS[7]], ids=lambda c: c[0])
def test_conv_fprop_knob_paths_exact(cpu, rng, case, knobs, dt):
    """Every conv knob path (channels-first named ops, im2col, no data tiling) computes it exactly.
    NOTE: IREE's im2col pass cannot compile i8 operands with an i32 accumulator: that path takes
    i32 operands (conv_acc_operands)."""
    _, xd, wd, kw, cl = case
    inputs = _conv_inputs(rng, dt, xd, wd, cl)
    want = conv_ref(inputs[1], inputs[2], *_pads(kw, len(xd) - 2))
    assert np.abs(want).max() > INT16_MAX
    got = _run_plan(_conv_graph(dt, xd, wd, kw, cl), inputs, cpu, knobs)
    assert np.array_equal(got, want.astype(np.int32))


def test_cudnn_int8_conv_graph(cpu, rng):
    """cuDNN FE's test_conv_int8: io INT8, intermediate INT32, compute INT32, channels-last
    [2,64,32,32] * [4,64,3,3], padding 1, then identity, INT32 output (dims and channels-last
    strides inferred)."""
    xd, wd, kw = [2, 64, 32, 32], [4, 64, 3, 3], dict(padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    build = _conv_graph(I8, xd, wd, kw, True, identity=True)
    g, outs = build()
    g.validate()
    assert outs[3].get_dim() == [2, 4, 32, 32] and outs[3].get_stride() == [4096, 1, 128, 4]
    inputs = _conv_inputs(rng, I8, xd, wd, True)
    want = conv_ref(inputs[1], inputs[2], *_pads(kw, 2))
    assert np.abs(want).max() > INT16_MAX
    got, ref, _ = run_engines(build, inputs, cpu)
    assert np.array_equal(got[3], want.astype(np.int32))
    assert np.array_equal(ref[3], want.astype(np.int32))


def test_cudnn_facade_int8_conv(rng):
    """The same graph through hipdnn_iree.cudnn, written as cuDNN FE's test writes it (torch CPU tensors)."""
    torch = pytest.importorskip("torch")
    import hipdnn_iree.cudnn as cudnn
    handle = cudnn.create_handle(device="cpu")
    try:
        X = torch.from_numpy(_rand(rng, [2, 64, 32, 32], I8)).to(memory_format=torch.channels_last)
        W = torch.from_numpy(_rand(rng, [4, 64, 3, 3], I8)).to(memory_format=torch.channels_last)
        with cudnn.graph(handle, io_data_type=cudnn.data_type.INT8, intermediate_data_type=cudnn.data_type.INT32,
                         compute_data_type=cudnn.data_type.INT32) as (g, _):
            x, w = g.tensor_like(X), g.tensor_like(W)
            c = g.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
            y = g.identity(name="identity", input=c)
            y.set_output(True).set_data_type(cudnn.data_type.INT32)
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        Y = torch.full((2, 4, 32, 32), -1, dtype=torch.int32).to(memory_format=torch.channels_last)
        g.execute({x: X, w: W, y: Y}, torch.empty(g.get_workspace_size(), dtype=torch.uint8), handle=handle)
        want = conv_ref(X.numpy(), W.numpy(), [1, 1], [1, 1], [1, 1], [1, 1])
        assert np.array_equal(Y.numpy(), want.astype(np.int32))
    finally:
        cudnn.destroy_handle(handle)


def test_identity_of_int32_conv_beyond_f32_exactness(cpu, rng):
    """Sums past 2^24 (not all representable in f32): the INT32 identity after the conv converts
    nothing through float, so the output stays exact."""
    xd, wd, kw = [1, 256, 6, 6], [4, 256, 3, 3], dict(padding=[0, 0])
    build = _conv_graph(I8, xd, wd, kw, True, identity=True)
    inputs = _conv_inputs(rng, I8, xd, wd, True, low=100, high=128)
    want = conv_ref(inputs[1], inputs[2], *_pads(kw, 2))
    assert want.min() > 2 ** 24 and (want % 4 != 0).any(), "needs values f32 cannot hold"
    got, ref, _ = run_engines(build, inputs, cpu)
    assert np.array_equal(got[3], want.astype(np.int32))
    assert np.array_equal(ref[3], want.astype(np.int32))


@pytest.mark.parametrize("dt", [I8, U8], ids=["int8", "uint8"])
def test_int8_conv_float_output_and_default_compute(cpu, rng, dt):
    """No compute type set: integer operands accumulate in i32 (as matmul's do); a FLOAT output is
    the exact sum converted once."""
    xd, wd, kw = [2, 32, 8, 8], [4, 32, 3, 3], dict(padding=[1, 1])

    def build():
        g = hd.Graph(io_data_type=dt)
        x = g.tensor(name="X", uid=1, dim=xd, stride=_strides(xd, True))
        w = g.tensor(name="W", uid=2, dim=wd)
        y = g.conv_fprop(x, w, **kw)
        y.set_output(True).set_data_type(F).set_uid(3)
        return g, {3: y}
    assert "xi32>) -> tensor<2x8x8x4xi32>" in build()[0].validate().get_mlir()
    inputs = {1: _rand(rng, xd, dt, _strides(xd, True)), 2: _rand(rng, wd, dt)}
    want = conv_ref(inputs[1], inputs[2], *_pads(kw, 2))
    assert np.abs(want).max() > INT16_MAX
    got, ref, _ = run_engines(build, inputs, cpu)
    assert np.array_equal(got[3], want.astype(np.float32))
    assert np.array_equal(ref[3], want.astype(np.float32))


@pytest.mark.parametrize("dt", [I8, U8], ids=["int8", "uint8"])
def test_int8_conv_override_shapes_exact(cpu, rng, dt):
    """An override-shape plan (varying N/H/W: the dynamic-spatial conv form) runs int8 convs exactly
    at shapes other than the built one."""
    c, k = 32, 6
    g = hd.Graph(io_data_type=dt, intermediate_data_type=I32, compute_data_type=I32)
    x = g.tensor(name="X", uid=1, dim=[2, c, 8, 8], stride=[c * 64, 1, 8 * c, c])
    w = g.tensor(name="W", uid=2, dim=[k, c, 3, 3], stride=[9 * c, 1, 3 * c, c])
    g.conv_fprop(x, w, padding=[1, 1], stride=[2, 1]).set_output(True).set_data_type(I32).set_uid(3)
    g.set_override_shape_enabled(True)
    g.build(cpu)
    for n, h, w_ in ((1, 9, 5), (3, 6, 7)):
        xs, ws = _rand(rng, [n, h, w_, c], dt), _rand(rng, [k, 3, 3, c], dt)              # memory order
        want = conv_ref(xs.transpose(0, 3, 1, 2), ws.transpose(0, 3, 1, 2), [1, 1], [1, 1], [2, 1], [1, 1])
        assert np.abs(want).max() > INT16_MAX
        oh = want.shape[2]
        y = np.full((n, oh, w_, k), -1, np.int32)
        g.execute(cpu, {1: xs, 2: ws, 3: y}, override_uids=[1, 3], override_shapes=[[n, c, h, w_], [n, k, oh, w_]])
        assert np.array_equal(y, want.transpose(0, 2, 3, 1).astype(np.int32)), f"at {n}x{h}x{w_}"


# ---------------------------------------------------------------------------
# matmul
# ---------------------------------------------------------------------------


def _mm_graph(ad, bd, adt, bdt, compute, out):
    def build():
        g = hd.Graph(io_data_type=out, compute_data_type=compute)
        a = g.tensor(name="A", uid=1, dim=ad, data_type=adt)
        b = g.tensor(name="B", uid=2, dim=bd, data_type=bdt)
        c = g.matmul(a, b, name="mm")
        c.set_output(True).set_data_type(out).set_uid(3)
        return g, {3: c}
    return build


MATMULS = [("2d", [33, 200], [200, 17]), ("batched", [3, 20, 150], [3, 150, 9]),
           ("broadcast-batch", [2, 1, 7, 150], [3, 150, 5])]
INT_PAIRS = [(I8, I8), (U8, U8), (I8, U8)]


@pytest.mark.parametrize("knobs", [None, {"DATA_TILING": "OFF"}], ids=["auto", "no-data-tiling"])
@pytest.mark.parametrize("types", INT_PAIRS, ids=["int8", "uint8", "int8xuint8"])
@pytest.mark.parametrize("case", MATMULS, ids=[m[0] for m in MATMULS])
def test_int_matmul_int32_exact(cpu, rng, case, types, knobs):
    """int8/uint8 matmul, INT32 compute and output: exact (2-D, batched, broadcast batch)."""
    _, ad, bd = case
    build = _mm_graph(ad, bd, *types, I32, I32)
    inputs = {1: _rand(rng, ad, types[0]), 2: _rand(rng, bd, types[1])}
    want = np.matmul(inputs[1].astype(np.int64), inputs[2].astype(np.int64))
    assert np.abs(want).max() > INT16_MAX
    if knobs is None:
        got, ref, _ = run_engines(build, inputs, cpu)
        assert np.array_equal(ref[3], want.astype(np.int32)), "NUMPY_REFERENCE differs"
        got = got[3]
    else:
        got = _run_plan(build, inputs, cpu, knobs)
    assert got.dtype == np.int32 and np.array_equal(got, want.astype(np.int32))


def _bf16_ulp(v: np.ndarray) -> np.ndarray:
    """One bf16 ulp at |v| (8 significant bits)."""
    e = np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -126)))
    return 2.0 ** (e - 7)


@pytest.mark.parametrize("order", ["int8-bf16", "bf16-int8"])
@pytest.mark.parametrize("case", MATMULS[:2], ids=[m[0] for m in MATMULS[:2]])
def test_int8_bf16_matmul_float_compute(cpu, rng, case, order):
    """int8 x bf16 with FLOAT compute and BF16 output: int8 converted exactly; within a bf16 ulp of
    the float64 result rounded to bf16."""
    _, ad, bd = case
    bf16 = numpy_dtype(BF)
    ints, floats = (ad, bd) if order == "int8-bf16" else (bd, ad)
    iv = _rand(rng, ints, I8)
    fv = rng.uniform(-4, 4, size=floats).astype(bf16)
    a, b = (iv, fv) if order == "int8-bf16" else (fv, iv)
    adt, bdt = (I8, BF) if order == "int8-bf16" else (BF, I8)
    build = _mm_graph(ad, bd, adt, bdt, F, BF)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    rounded = want.astype(bf16).astype(np.float64)
    got, ref, _ = run_engines(build, {1: a, 2: b}, cpu)
    for what, res in (("IREE", got[3]), ("NUMPY_REFERENCE", ref[3])):
        res = np.asarray(res).astype(np.float64)
        err = np.abs(res - rounded)
        assert (err <= _bf16_ulp(rounded)).all(), f"{what}: max error {err.max()}"
    # int8 read as anything but its value (e.g. uint8, or truncated) is far off
    assert np.abs(want).max() > 100


# ---------------------------------------------------------------------------
# MLIR
# ---------------------------------------------------------------------------


def test_mlir_int8_conv_i8_operands_i32_accumulator():
    """The CPU form: conv_2d_nhwc_hwcf with i8 ins and i32 outs; channels-first named op for GPU
    targets; nothing converted to float anywhere."""
    g, _ = _conv_graph(I8, [2, 64, 32, 32], [4, 64, 3, 3], dict(padding=[1, 1]), True, identity=True)()
    cpu = _body(g.validate().get_mlir())
    assert ("linalg.conv_2d_nhwc_hwcf {dilations = dense<[1, 1]> : tensor<2xi64>, strides = dense<[1, 1]> : "
            "tensor<2xi64>} ins(") in cpu
    conv = next(line for line in cpu.splitlines() if "linalg.conv_2d_nhwc_hwcf" in line)
    assert ": tensor<2x34x34x64xi8>, tensor<3x3x64x4xi8>) outs(" in conv and conv.endswith("-> tensor<2x32x32x4xi32>")
    gpu = _body(g.get_mlir("rocm:gfx942"))
    conv = next(line for line in gpu.splitlines() if "linalg.conv_2d_nchw_fchw" in line)
    assert ": tensor<2x64x34x34xi8>, tensor<4x64x3x3xi8>) outs(" in conv and conv.endswith("-> tensor<2x4x32x32xi32>")
    for text in (cpu, gpu):
        for bad in ("f32", "sitofp", "uitofp", "fptosi", "arith.addf", "arith.mulf", "extui"):
            assert bad not in text, bad


def test_mlir_uint8_conv_zero_extends_and_generic_form_is_integer():
    """UINT8 operands: arith.extui to i32 before the conv (the named ops sign-extend); the grouped
    3-D generic accumulates with arith.muli/addi."""
    g, _ = _conv_graph(U8, [1, 8, 5, 6, 6], [4, 4, 3, 2, 2], dict(padding=[1, 1, 1]), False)()
    text = _body(g.validate().get_mlir())
    assert text.count("arith.extui") == 2 and "arith.extsi" not in text
    assert "arith.muli" in text and "arith.addi" in text
    for bad in ("f32", "sitofp", "uitofp", "arith.addf", "arith.mulf"):
        assert bad not in text, bad


def test_mlir_int8_matmul_i32_accumulator():
    g, _ = _mm_graph([16, 64], [64, 8], I8, I8, I32, I32)()
    text = _body(g.validate().get_mlir())
    assert ("linalg.matmul ins(%arg0, %arg1 : tensor<16x64xi8>, tensor<64x8xi8>) outs(") in text
    assert "-> tensor<16x8xi32>" in text and "f32" not in text and "sitofp" not in text
    g, _ = _mm_graph([16, 64], [64, 8], I8, BF, F, BF)()
    text = _body(g.validate().get_mlir())
    assert "linalg.matmul ins(%arg0, %arg1 : tensor<16x64xi8>, tensor<64x8xbf16>) outs(" in text
    assert "-> tensor<16x8xf32>" in text


# ---------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["dgrad", "wgrad"])
def test_int8_conv_grads_refused_by_name(op):
    xd, wd, yd = [1, 8, 6, 6], [4, 8, 3, 3], [1, 4, 6, 6]
    g = hd.Graph(io_data_type=I8, intermediate_data_type=I32, compute_data_type=I32)
    if op == "dgrad":
        dy, w = g.tensor(name="DY", uid=1, dim=yd), g.tensor(name="W", uid=2, dim=wd)
        out = g.conv_dgrad(dy, w, padding=[1, 1])
        out.set_dim(xd)
    else:
        dy, x = g.tensor(name="DY", uid=1, dim=yd), g.tensor(name="X", uid=2, dim=xd)
        out = g.conv_wgrad(dy, x, padding=[1, 1])
        out.set_dim(wd)
    out.set_output(True).set_data_type(I32).set_uid(3)
    e = raises(hd.Status.NOT_SUPPORTED, g.validate().get_mlir)
    assert f"conv_{op}" in str(e) and "int8" in str(e) and "conv_fprop only" in str(e), str(e)


def test_narrow_or_mixed_integer_compute_refused():
    xd, wd = [1, 8, 6, 6], [4, 8, 3, 3]
    g = hd.Graph(io_data_type=I8, intermediate_data_type=I32, compute_data_type=I8)
    g.conv_fprop(g.tensor(name="X", uid=1, dim=xd), g.tensor(name="W", uid=2, dim=wd)).set_output(True).set_uid(3)
    e = raises(hd.Status.NOT_SUPPORTED, g.validate().get_mlir)
    assert "INT32" in str(e), str(e)
    g = hd.Graph(io_data_type=F, compute_data_type=I32)
    x, w = g.tensor(name="X", uid=1, dim=xd, data_type=I8), g.tensor(name="W", uid=2, dim=wd)
    g.conv_fprop(x, w).set_output(True).set_uid(3)
    raises(hd.Status.NOT_SUPPORTED, g.validate().get_mlir, match="needs INT8/UINT8 operands")
    g, _ = _mm_graph([4, 8], [8, 2], I8, BF, I32, I32)()
    raises(hd.Status.NOT_SUPPORTED, g.validate().get_mlir, match="needs integer operands")


# ---------------------------------------------------------------------------
# GPU (skipped without one)
# ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [I8, U8], ids=["int8", "uint8"])
def test_gpu_int8_conv_and_matmul_exact(rng, dt):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    handle = hd.create_handle(device="cuda")

    def on_gpu(pack):
        return {u: torch.from_numpy(np.ascontiguousarray(a)).cuda() for u, a in pack.items()}
    xd, wd, kw = [2, 64, 32, 32], [4, 64, 3, 3], dict(padding=[1, 1])
    for cl in (True, False):
        inputs = _conv_inputs(rng, dt, xd, wd, cl)
        want = conv_ref(inputs[1], inputs[2], *_pads(kw, 2))
        g, outs = _conv_graph(dt, xd, wd, kw, cl, identity=True)()
        g.build(handle)
        got = torch.from_numpy(empty_like_tensor(outs[3])).cuda()
        feeds = {}
        for u, a in inputs.items():     # keep each input's own strides (channels-last views)
            t = torch.empty_strided(a.shape, [s // a.itemsize for s in a.strides], dtype=getattr(torch, a.dtype.name),
                                    device="cuda")
            t.copy_(torch.from_numpy(np.ascontiguousarray(a)))
            feeds[u] = t
        g.execute(handle, {**feeds, 3: got})
        torch.cuda.synchronize()
        assert np.array_equal(got.cpu().numpy(), want.astype(np.int32)), f"conv channels_last={cl}"
    a, b = _rand(rng, [3, 64, 256], dt), _rand(rng, [3, 256, 48], dt)
    g, outs = _mm_graph([3, 64, 256], [3, 256, 48], dt, dt, I32, I32)()
    g.build(handle)
    got = torch.from_numpy(empty_like_tensor(outs[3])).cuda()
    g.execute(handle, {**on_gpu({1: a, 2: b}), 3: got})
    torch.cuda.synchronize()
    assert np.array_equal(got.cpu().numpy(), np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32))