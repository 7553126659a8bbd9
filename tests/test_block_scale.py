"""Block-scale quantization and the FP8/FP4/E8M0 types, on the CPU: quantize bit for bit against an
exact reference written here (numpy float64 + ml_dtypes, cuDNN's rule: scale = round_up(amax /
vmax) in the scale's type, y = x / scale rounded to nearest even and saturated) on random data
with zero blocks, NaN, infinities and values at saturation; dequantize(quantize(x)) within the
format's bound; an fp8 matmul with f32 accumulation; dequantize fused into a matmul; plans through
serialize/restore; bad input."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import hipdnn_iree as hd
from harness import raises, run_engines

DT = hd.DataType
S = hd.Status
NP = {DT.FP8_E4M3: ml_dtypes.float8_e4m3fn, DT.FP8_E5M2: ml_dtypes.float8_e5m2, DT.FP8_E8M0: ml_dtypes.float8_e8m0fnu,
      DT.FP4_E2M1: ml_dtypes.float4_e2m1fn, DT.FLOAT: np.float32, DT.HALF: np.float16}
VMAX = {DT.FP8_E4M3: 448.0, DT.FP8_E5M2: 57344.0, DT.FP4_E2M1: 6.0}
RECIPES = [  # (y type, scale type, block)
    (DT.FP8_E4M3, DT.FP8_E8M0, 32),    # MXFP8
    (DT.FP8_E5M2, DT.FP8_E8M0, 32),    # MXFP8 (E5M2)
    (DT.FP4_E2M1, DT.FP8_E4M3, 16),    # NVFP4
    (DT.FP4_E2M1, DT.FP8_E8M0, 32),    # MXFP4
    (DT.FP8_E4M3, DT.FLOAT, 16),       # FLOAT scales
]


def _scale_ref(amax, vmax, sdt):
    """The smallest value of the scale's type whose product with vmax reaches amax."""
    if sdt == DT.FP8_E8M0:
        out = np.empty_like(amax)
        for i, a in np.ndenumerate(amax):
            if np.isnan(a):
                out[i] = np.nan
                continue
            e = -127
            while e < 127 and vmax * 2.0 ** e < a:
                e += 1
            out[i] = 2.0 ** e
        return out
    if sdt == DT.FP8_E4M3:
        vals = np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        out = np.empty_like(amax)
        for i, a in np.ndenumerate(amax):
            ok = vals[vals * vmax >= a]
            out[i] = np.nan if np.isnan(a) else (ok[0] if ok.size else vals[-1])
        return out
    return (amax / vmax).astype(np.float32).astype(np.float64)


def quantize_ref(x, block, ydt, sdt):
    """Along the last axis; returns (y codes as ml_dtypes, scale as ml_dtypes/float32)."""
    xb = x.astype(np.float64).reshape(x.shape[:-1] + (x.shape[-1] // block, block))
    amax = np.abs(xb).max(-1)
    s = _scale_ref(amax, VMAX[ydt], sdt)
    with np.errstate(all="ignore"):
        q = np.where(s[..., None] == 0, 0.0, xb / s[..., None])
    q = np.where(np.isnan(s[..., None]), np.nan, q)              # a NaN block: +NaN
    q = np.clip(q, -VMAX[ydt], VMAX[ydt]).reshape(x.shape)
    if ydt == DT.FP4_E2M1:
        q = np.where(np.isnan(q), 6.0, q)                        # E2M1 has no NaN: +6
    return q.astype(NP[ydt]), s.astype(NP[sdt])


def _data(rng, shape, block):
    mag = np.exp(rng.uniform(-10, 10, shape[:-1] + (shape[-1] // block, 1))).repeat(block, -1).reshape(shape)
    x = rng.standard_normal(shape) * mag
    x = x.astype(np.float32)
    x[0, :block] = 0.0                    # a zero block
    x[1, 3] = np.nan                      # a NaN block
    x[2, block + 1] = np.inf              # an infinity saturates
    x[3, :block] = 448.0 * rng.choice([-1, 1], block)   # exactly at E4M3's saturation
    x[4, :block] = np.float32(1e-30)      # tiny
    x[5, :block] = rng.choice([1.0, 2.0, 3.0, 5.0, 6.0, 0.5], block) * 2.0 ** 20  # ties of the grid
    return x


def _build(h, shape, block, ydt, sdt, xdt=DT.FLOAT, dequant=True):
    g = hd.Graph(io_data_type=DT.FLOAT)
    x = g.tensor(name="x", uid=1, dim=list(shape), data_type=xdt)
    y, s = g.block_scale_quantize(x, block, y_data_type=ydt, scale_data_type=sdt)
    y.set_output(True).set_uid(2)
    s.set_output(True).set_uid(3)
    if dequant:
        g.block_scale_dequantize(y, s, block).set_output(True).set_uid(4)
    g.build(h)
    return g


def _bufs(shape, block, ydt, sdt, dequant=True):
    sshape = shape[:-1] + (shape[-1] // block,)
    b = {2: np.zeros(shape, NP[ydt]), 3: np.zeros(sshape, NP[sdt])}
    if dequant:
        b[4] = np.full(shape, np.nan, np.float32)
    return b


def _same_bits(a, b):
    return np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


@pytest.mark.parametrize("ydt, sdt, block", RECIPES, ids=lambda v: getattr(v, "name", str(v)))
def test_quantize_bit_exact(cpu, rng, ydt, sdt, block):
    shape = (8, 4 * block)
    g = _build(cpu, shape, block, ydt, sdt)
    x = _data(rng, shape, block)
    bufs = _bufs(shape, block, ydt, sdt)
    g.execute(cpu, {1: x, **bufs})
    ry, rs = quantize_ref(x, block, ydt, sdt)
    if sdt == DT.FLOAT:
        assert np.array_equal(bufs[3], rs, equal_nan=True)
    else:
        assert _same_bits(bufs[3], rs), (bufs[3].view(np.uint8), rs.view(np.uint8))
    bad = np.nonzero(bufs[2].view(np.uint8) != ry.view(np.uint8))
    assert bad[0].size == 0, (bad, x[bad][:5], bufs[2].view(np.uint8)[bad][:5], ry.view(np.uint8)[bad][:5])
    # dequantize(quantize(x)): the scale times y's values, exactly (f32 products of short significands)
    want = ry.astype(np.float64) * rs.astype(np.float64).repeat(block, -1)
    assert np.array_equal(bufs[4], want.astype(np.float32), equal_nan=True)


@pytest.mark.parametrize("ydt, sdt, block", RECIPES[:3], ids=lambda v: getattr(v, "name", str(v)))
def test_roundtrip_error_within_format_bound(cpu, rng, ydt, sdt, block):
    # |dequant(quant(x)) - x| <= half an ulp of y's format at the element's magnitude, relative to the
    # block's scale: 2^-(mbits+1) * |x| for normal values, plus the scale's smallest step near zero
    shape = (16, 8 * block)
    g = _build(cpu, shape, block, ydt, sdt)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    bufs = _bufs(shape, block, ydt, sdt)
    g.execute(cpu, {1: x, **bufs})
    mbits = {DT.FP8_E4M3: 3, DT.FP8_E5M2: 2, DT.FP4_E2M1: 1}[ydt]
    sub = {DT.FP8_E4M3: 2.0 ** -9, DT.FP8_E5M2: 2.0 ** -16, DT.FP4_E2M1: 0.5}[ydt]
    s = bufs[3].astype(np.float64).repeat(block, -1)
    err = np.abs(bufs[4].astype(np.float64) - x)
    bound = 2.0 ** -(mbits + 1) * np.abs(x) + sub * s / 2
    assert (err <= bound * (1 + 1e-6)).all(), float((err / bound).max())


@pytest.mark.parametrize("xdt", [DT.HALF, DT.BFLOAT16])
def test_quantize_from_half_types(cpu, rng, xdt):
    shape, block = (4, 64), 32
    g = _build(cpu, shape, block, DT.FP8_E4M3, DT.FP8_E8M0, xdt=xdt, dequant=False)
    xnp = ml_dtypes.bfloat16 if xdt == DT.BFLOAT16 else np.float16
    x = (rng.standard_normal(shape) * 50).astype(xnp)
    bufs = _bufs(shape, block, DT.FP8_E4M3, DT.FP8_E8M0, dequant=False)
    g.execute(cpu, {1: x, **bufs})
    ry, rs = quantize_ref(x.astype(np.float32), block, DT.FP8_E4M3, DT.FP8_E8M0)
    assert _same_bits(bufs[2], ry) and _same_bits(bufs[3], rs)


def test_quantize_other_axis(cpu, rng):
    # axis 0 of a [64, 6] tensor: blocks run down the columns
    g = hd.Graph(io_data_type=DT.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[64, 6])
    y, s = g.block_scale_quantize(x, 32, axis=0)
    y.set_output(True).set_uid(2)
    s.set_output(True).set_uid(3)
    g.build(cpu)
    assert list(s.get_dim()) == [2, 6]
    xv = (rng.standard_normal((64, 6)) * 10).astype(np.float32)
    bufs = {2: np.zeros((64, 6), NP[DT.FP8_E4M3]), 3: np.zeros((2, 6), NP[DT.FP8_E8M0])}
    g.execute(cpu, {1: xv, **bufs})
    ry, rs = quantize_ref(np.ascontiguousarray(xv.T), 32, DT.FP8_E4M3, DT.FP8_E8M0)
    assert _same_bits(bufs[2], np.ascontiguousarray(ry.T)) and _same_bits(bufs[3], np.ascontiguousarray(rs.T))


def test_fp8_matmul_f32_accumulation(cpu, rng):
    # E4M3 x E5M2 inputs, f32 accumulation, FLOAT output; an E4M3 output saturates
    g = hd.Graph(io_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    a = g.tensor(name="a", uid=1, dim=[2, 24, 64], data_type=DT.FP8_E4M3)
    b = g.tensor(name="b", uid=2, dim=[2, 64, 16], data_type=DT.FP8_E5M2)
    c = g.matmul(a, b)
    c.set_output(True).set_uid(3)
    d = g.pointwise(c, mode=hd.PointwiseMode.RELU_FWD)
    d.set_output(True).set_uid(4).set_data_type(DT.FP8_E4M3)
    g.build(cpu)
    av = (rng.standard_normal((2, 24, 64)) * 8).astype(ml_dtypes.float8_e4m3fn)
    bv = rng.standard_normal((2, 64, 16)).astype(ml_dtypes.float8_e5m2)
    cv, dv = np.full((2, 24, 16), np.nan, np.float32), np.zeros((2, 24, 16), ml_dtypes.float8_e4m3fn)
    g.execute(cpu, {1: av, 2: bv, 3: cv, 4: dv})
    ref = av.astype(np.float64) @ bv.astype(np.float64)
    assert np.abs(cv - ref).max() <= 1e-5 * np.abs(ref).max()
    assert _same_bits(dv, np.clip(np.maximum(cv, 0), 0, 448).astype(ml_dtypes.float8_e4m3fn))


def test_dequantize_matmul_through_a_plan(cpu, rng, tmp_path):
    # MXFP8 weights (codes and E8M0 scales as inputs), dequantized into a matmul; the plan restored
    m, k, n, blk = 16, 64, 24, 32
    g = hd.Graph(io_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    a = g.tensor(name="a", uid=1, dim=[1, m, k])
    wq = g.tensor(name="wq", uid=2, dim=[1, k, n], data_type=DT.FP8_E4M3)
    ws = g.tensor(name="ws", uid=3, dim=[1, k // blk, n], data_type=DT.FP8_E8M0)
    w = g.block_scale_dequantize(wq, ws, [blk, 1])
    g.matmul(a, w).set_output(True).set_uid(4)
    g.build(cpu)
    path = tmp_path / "deq_mm.plan"
    hd.save_plan(str(path), g.serialize_compiled_plan())
    r = hd.Graph.from_compiled_plan(cpu, hd.load_plan(str(path)))
    av = rng.standard_normal((1, m, k)).astype(np.float32)
    wv = (rng.standard_normal((1, k, n)) * 20).astype(ml_dtypes.float8_e4m3fn)
    sv = np.exp2(rng.integers(-4, 4, (1, k // blk, n)).astype(np.float64)).astype(ml_dtypes.float8_e8m0fnu)
    out = np.full((1, m, n), np.nan, np.float32)
    r.execute(cpu, {1: av, 2: wv, 3: sv, 4: out})
    wf = wv.astype(np.float64) * sv.astype(np.float64).repeat(blk, 1)
    ref = av.astype(np.float64) @ wf
    assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()
    # the dequantization fuses: the graph has as many dispatches as the same matmul of FLOAT weights
    p = hd.Graph(io_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    p.matmul(p.tensor(name="a", uid=1, dim=[1, m, k]), p.tensor(name="w", uid=2, dim=[1, k, n])).set_output(True).set_uid(4)
    p.build(cpu)
    assert g.get_execution_plan().context.dispatch_count == p.get_execution_plan().context.dispatch_count


def _deq_matmul(m, k, n, block, ydt, sdt, io=DT.FLOAT):
    """a [1, m, k] @ dequantize(wq [1, k, n], ws [1, k / block, n]); uids a 1, wq 2, ws 3, out 4."""
    g = hd.Graph(io_data_type=io, compute_data_type=DT.FLOAT)
    a = g.tensor(name="a", uid=1, dim=[1, m, k])
    wq = g.tensor(name="wq", uid=2, dim=[1, k, n], data_type=ydt)
    ws = g.tensor(name="ws", uid=3, dim=[1, k // block, n], data_type=sdt)
    g.matmul(a, g.block_scale_dequantize(wq, ws, [1, block, 1])).set_output(True).set_uid(4)
    return g


def _build_with(g, h, knobs):
    g.validate()
    g.build_operation_graph(h)
    g.create_execution_plan("IREE_LINALG", knobs)
    g.check_support()
    g.build_plans()
    assert g.get_engine_config_at_index(g.get_selected_plan_index()).knobs == knobs
    return g.get_execution_plan().context.dispatch_count


@pytest.mark.parametrize("ydt, sdt, block", [RECIPES[0], RECIPES[2]], ids=["MXFP8", "NVFP4"])
def test_dequantize_matmul_one_dispatch(cpu, rng, tmp_path, ydt, sdt, block):
    # knob DEQUANT_MATMUL=ONE_DISPATCH: the dequantization (FP4 bytes unpacked too) and the matmul in one
    # dispatch, the same numbers as IREE's own dispatches (SPLIT) and a float64 reference; the plan
    # restored in this process keeps its one dispatch
    m, k, n = 24, 4 * block, 40
    av = rng.standard_normal((1, m, k)).astype(np.float32)
    wv = np.clip(rng.standard_normal((1, k, n)) * VMAX[ydt] / 3, -VMAX[ydt], VMAX[ydt]).astype(NP[ydt])
    sv = (np.exp2(rng.integers(-4, 4, (1, k // block, n)).astype(np.float64)) *
          (rng.random((1, k // block, n)) + 0.5 if sdt == DT.FP8_E4M3 else 1.0)).astype(NP[sdt])
    ref = av.astype(np.float64) @ (wv.astype(np.float64) * sv.astype(np.float64).repeat(block, 1))
    counts, outs = {}, {}
    for form in ("SPLIT", "ONE_DISPATCH"):
        g = _deq_matmul(m, k, n, block, ydt, sdt)
        counts[form] = _build_with(g, cpu, {"DEQUANT_MATMUL": form})
        path = tmp_path / f"{form}.plan"
        hd.save_plan(str(path), g.serialize_compiled_plan())
        r = hd.Graph.from_compiled_plan(cpu, hd.load_plan(str(path)))
        assert r.get_engine_config_at_index(0).knobs == {"DEQUANT_MATMUL": form}
        outs[form] = np.full((1, m, n), np.nan, np.float32)
        r.execute(cpu, {1: av, 2: wv, 3: sv, 4: outs[form]})
        assert np.abs(outs[form] - ref).max() <= 1e-5 * np.abs(ref).max(), form
    assert counts["ONE_DISPATCH"] == 1 and counts["SPLIT"] > 1, counts
    assert np.abs(outs["ONE_DISPATCH"] - outs["SPLIT"]).max() <= 1e-5 * np.abs(ref).max()


def test_dequantize_matmul_one_dispatch_gpu_targets():
    # the same graphs compile to one dispatch for CUDA and ROCm; HeurMode B offers both forms to autotune
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, candidates
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    from graph_ir.desc import decode_graph
    for target in ("cuda:sm_80", "rocm:gfx942", "rocm:gfx950"):
        h = hd.create_handle(device=None, target=target)
        for ydt, sdt, block in (RECIPES[0], RECIPES[2]):
            g = _deq_matmul(32, 4 * block, 48, block, ydt, sdt, io=DT.HALF)
            assert _build_with(g, h, {"DEQUANT_MATMUL": "ONE_DISPATCH"}) == 1, (target, ydt)
    g = _deq_matmul(32, 64, 48, 32, DT.FP8_E4M3, DT.FP8_E8M0)
    g.validate()
    g.build_operation_graph(hd.create_handle(device=None, target="cuda:sm_80"))
    summary = GraphSummary.of(decode_graph(g.get_op_graph_bytes()))
    offered = {c.get("DEQUANT_MATMUL") for c in candidates(parse_target("cuda:sm_80"), summary, hd.HeurMode.B)}
    assert {None, "ONE_DISPATCH"} <= offered      # AUTO (= SPLIT, deduplicated) and the region


def test_dequantize_matmul_auto_is_one_dispatch_on_cuda():
    """DEQUANT_MATMUL AUTO: on CUDA a graph of dequantize-matmuls with >= 128 rows takes the region and the
    128X64_SMEM tile (measured faster there: plugins/iree_linalg/knobs.py); fewer rows, ROCm, the CPU, a
    user's GPU_MATMUL_TILE, and graphs with other contractions keep IREE's own dispatches. NVFP4 (FP4 bytes
    unpacked inside the region) compiles too: unpacked through a reshape it asked for more shared memory
    than the GPU has."""
    from hipdnn_iree.plugins.iree_linalg.knobs import DEQUANT_MATMUL_TILE, NO_REDUCTION_DISTRIBUTION_FLAG

    def build(target, m, knobs=None, recipe=RECIPES[0]):
        ydt, sdt, block = recipe
        g = _deq_matmul(m, 512, 256, block, ydt, sdt, io=DT.HALF)
        g.validate()
        g.build_operation_graph(hd.create_handle(device=None, target=target))
        g.create_execution_plan("IREE_LINALG", knobs or {})
        g.check_support()
        g.build_plans()
        ctx = g.get_execution_plan().context
        return ctx.dispatch_count, " ".join(ctx.compile_flags)

    for recipe in (RECIPES[0], RECIPES[2]):
        n, flags = build("cuda:sm_80", 256, recipe=recipe)
        assert n == 1 and DEQUANT_MATMUL_TILE in flags and NO_REDUCTION_DISTRIBUTION_FLAG in flags, (recipe, flags)
    assert build("cuda:sm_80", 64)[0] == 2                                   # fewer rows than 128
    assert build("cuda:sm_80", 256, {"GPU_MATMUL_TILE": "64X64_SMEM"})[0] == 2   # the user's tile
    assert build("rocm:gfx942", 256)[0] == 2
    assert build("llvm-cpu", 256)[0] > 1


def _both_dequantized(m, k, n, block, ydt, sdt, io=DT.FLOAT):
    """dequantize(aq [1, m, k], as_ [1, m, k / block]) @ dequantize(wq [1, k, n], ws [1, k / block, n]):
    uids aq 1, as 2, wq 3, ws 4, out 5."""
    g = hd.Graph(io_data_type=io, compute_data_type=DT.FLOAT)
    aq = g.tensor(name="aq", uid=1, dim=[1, m, k], data_type=ydt)
    as_ = g.tensor(name="as", uid=2, dim=[1, m, k // block], data_type=sdt)
    wq = g.tensor(name="wq", uid=3, dim=[1, k, n], data_type=ydt)
    ws = g.tensor(name="ws", uid=4, dim=[1, k // block, n], data_type=sdt)
    a = g.block_scale_dequantize(aq, as_, [1, 1, block])
    g.matmul(a, g.block_scale_dequantize(wq, ws, [1, block, 1])).set_output(True).set_uid(5)
    return g


def _scales(rng, shape, sdt):
    return (np.exp2(rng.integers(-3, 3, shape).astype(np.float64)) *
            (rng.random(shape) + 0.5 if sdt == DT.FP8_E4M3 else 1.0)).astype(NP[sdt])


@pytest.mark.parametrize("ydt, sdt, block", [RECIPES[0], RECIPES[2]], ids=["MXFP8", "NVFP4"])
def test_both_operands_dequantized_in_one_dispatch(cpu, rng, ydt, sdt, block):
    """Both matmul operands block-scaled (cuDNN's MXFP8/NVFP4 matmul): with ONE_DISPATCH both
    dequantizations and the matmul make one region (1 dispatch), the numbers of SPLIT and of a float64
    reference; for CUDA too (compiled). AUTO keeps such graphs on SPLIT for CUDA (not run on a GPU)."""
    m, k, n = 24, 4 * block, 40
    vmax = VMAX[ydt]
    aq = np.clip(rng.standard_normal((1, m, k)) * vmax / 3, -vmax, vmax).astype(NP[ydt])
    wq = np.clip(rng.standard_normal((1, k, n)) * vmax / 3, -vmax, vmax).astype(NP[ydt])
    as_, ws = _scales(rng, (1, m, k // block), sdt), _scales(rng, (1, k // block, n), sdt)
    af = aq.astype(np.float64) * as_.astype(np.float64).repeat(block, 2)
    wf = wq.astype(np.float64) * ws.astype(np.float64).repeat(block, 1)
    ref = af @ wf
    outs = {}
    for form in ("SPLIT", "ONE_DISPATCH"):
        g = _both_dequantized(m, k, n, block, ydt, sdt)
        count = _build_with(g, cpu, {"DEQUANT_MATMUL": form})
        assert (count == 1) == (form == "ONE_DISPATCH"), (form, count)
        outs[form] = np.full((1, m, n), np.nan, np.float32)
        g.execute(cpu, {1: aq, 2: as_, 3: wq, 4: ws, 5: outs[form]})
        assert np.abs(outs[form] - ref).max() <= 1e-5 * np.abs(ref).max(), form
    assert np.abs(outs["ONE_DISPATCH"] - outs["SPLIT"]).max() <= 1e-5 * np.abs(ref).max()
    h = hd.create_handle(device=None, target="cuda:sm_80")
    assert _build_with(_both_dequantized(256, k, n, block, ydt, sdt, io=DT.HALF), h, {"DEQUANT_MATMUL": "ONE_DISPATCH"}) == 1
    g = _both_dequantized(256, k, n, block, ydt, sdt, io=DT.HALF)
    assert _build_with(g, h, {}) > 1


def test_cuda_dequantize_matmul_module_is_right_on_the_cpu(rng):
    """The module DEQUANT_MATMUL AUTO builds for CUDA (the region, >= 128 rows), compiled for this CPU
    and run by the IREE runtime: the float64 reference's numbers (the tile spec is a CUDA flag; the
    lowering's ops are what is checked here)."""
    import iree.compiler.tools as tools
    import iree.runtime as rt
    m, k, n = 128, 128, 48
    for ydt, sdt, block in (RECIPES[0], RECIPES[2]):
        g = _deq_matmul(m, k, n, block, ydt, sdt, io=DT.HALF)
        assert _build_with(g, hd.create_handle(device=None, target="cuda:sm_80"), {}) == 1
        mlir = g.get_execution_plan().context.mlir
        assert "flow.dispatch.region" in mlir
        vmfb = tools.compile_str(mlir, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=host"])
        ctx = rt.SystemContext(config=rt.Config("local-task"))
        ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
        a = (rng.standard_normal((1, m, k)) / 8).astype(np.float16)
        wv = np.clip(rng.standard_normal((1, k, n)) * VMAX[ydt] / 3, -VMAX[ydt], VMAX[ydt]).astype(NP[ydt])
        sv = _scales(rng, (1, k // block, n), sdt)
        wbuf = hd.pack_fp4(wv) if ydt == DT.FP4_E2M1 else wv.view(np.uint8)
        got = np.asarray(ctx.modules.module.main(a, wbuf.view(np.int8), sv.view(np.int8),
                                                 np.zeros((1, m, n), np.float16)).to_host()).astype(np.float64)
        ref = a.astype(np.float64) @ (wv.astype(np.float64) * sv.astype(np.float64).repeat(block, 1))
        assert np.abs(got - ref).max() <= 2e-3 * np.abs(ref).max(), ydt


def test_dequant_matmul_rows_summary():
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary
    from graph_ir.desc import decode_graph

    def summary(g):
        g.validate()
        g.build_operation_graph(hd.create_handle(device=None, target="cuda:sm_80"))
        return GraphSummary.of(decode_graph(g.get_op_graph_bytes()))
    assert summary(_deq_matmul(200, 64, 48, 32, DT.FP8_E4M3, DT.FP8_E8M0)).dequant_matmul_rows == 200
    g = _deq_matmul(200, 64, 48, 32, DT.FP8_E4M3, DT.FP8_E8M0)     # and a matmul of plain weights
    g.matmul(g.tensor(name="x", uid=5, dim=[1, 8, 64]), g.tensor(name="w", uid=6, dim=[1, 64, 16])).set_output(True).set_uid(7)
    assert summary(g).dequant_matmul_rows is None


@pytest.mark.parametrize("ydt, sdt, block", RECIPES, ids=lambda v: getattr(v, "name", str(v)))
def test_reference_engine_agrees(cpu, rng, ydt, sdt, block):
    # the NUMPY_REFERENCE engine (its own code, plugins/numpy_reference/block_scale.py) gives the same
    # bits as the IREE plan restored from its serialized form, dequantized values included
    shape = (6, 4 * block)
    x = _data(rng, shape, block)

    def build():
        g = hd.Graph(io_data_type=DT.FLOAT)
        xt = g.tensor(name="x", uid=1, dim=list(shape))
        y, s = g.block_scale_quantize(xt, block, y_data_type=ydt, scale_data_type=sdt)
        y.set_output(True).set_uid(2)
        s.set_output(True).set_uid(3)
        z = g.block_scale_dequantize(y, s, block)
        z.set_output(True).set_uid(4)
        return g, {2: y, 3: s, 4: z}

    got, want, _ = run_engines(build, {1: x}, cpu)
    for u in (2, 3):
        assert _same_bits(got[u], want[u]), u
    assert np.array_equal(got[4], want[4], equal_nan=True)


def test_gpu_targets_compile():
    # MXFP8 quantize, and NVFP4 quantize + dequantize (FP4 packed two per byte), for every GPU target
    import iree.compiler as ic
    g = hd.Graph(io_data_type=DT.HALF)
    x = g.tensor(name="x", uid=1, dim=[4, 64])
    y, s = g.block_scale_quantize(x, 32)
    y.set_output(True).set_uid(2)
    s.set_output(True).set_uid(3)
    f = hd.Graph(io_data_type=DT.HALF)
    y4, s4 = f.block_scale_quantize(f.tensor(name="x", uid=1, dim=[4, 64]), 16, y_data_type=DT.FP4_E2M1)
    y4.set_output(True).set_uid(2)
    s4.set_output(True).set_uid(3)
    f.block_scale_dequantize(y4, s4, 16).set_output(True).set_uid(4)
    assert "%arg1: tensor<4x32xi8>" in f.get_mlir(target="rocm:gfx942")
    for target, flags in (("cuda:sm_80", ["--iree-cuda-target=sm_80"]), ("rocm:gfx942", ["--iree-rocm-target=gfx942"]),
                          ("rocm:gfx950", ["--iree-rocm-target=gfx950"])):
        for graph in (g, f):
            text = graph.get_mlir(target=target)
            assert len(ic.compile_str(text, target_backends=[target.split(":")[0]], extra_args=flags)) > 1000


@pytest.mark.parametrize("kw, status, match", [
    (dict(block_size=24), S.BAD_PARAM, "block_size"),                     # 24 does not divide 64
    (dict(block_size=32, axis=3), S.BAD_PARAM, "axis"),
    (dict(block_size=32, y_data_type=DT.HALF), S.NOT_SUPPORTED, "y must be"),
    (dict(block_size=32, scale_data_type=DT.HALF), S.NOT_SUPPORTED, "scale must be"),
])
def test_bad_quantize(cpu, kw, status, match):
    g = hd.Graph(io_data_type=DT.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[4, 64])
    y, s = g.block_scale_quantize(x, **kw)
    y.set_output(True).set_uid(2)
    s.set_output(True).set_uid(3)
    raises(status, g.build, cpu, match=match)


def test_bad_dequantize_blocks(cpu):
    g = hd.Graph(io_data_type=DT.FLOAT)
    q = g.tensor(name="q", uid=1, dim=[4, 64], data_type=DT.FP8_E4M3)
    sc = g.tensor(name="s", uid=2, dim=[4, 3], data_type=DT.FP8_E8M0)
    g.block_scale_dequantize(q, sc, 32).set_output(True).set_uid(3)
    raises(S.BAD_PARAM, g.build, cpu, match="block")


def test_wrong_buffer_type_is_refused_and_buffers_kept(cpu, rng):
    shape, block = (4, 64), 32
    g = _build(cpu, shape, block, DT.FP8_E4M3, DT.FP8_E8M0, dequant=False)
    x = rng.standard_normal(shape).astype(np.float32)
    y = np.full(shape, 7, np.uint8)          # uint8, not float8_e4m3fn
    s = np.zeros((4, 2), ml_dtypes.float8_e8m0fnu)
    raises(S.BAD_PARAM, g.execute, cpu, {1: x, 2: y, 3: s})
    assert (y == 7).all()


def test_transpose_packs_the_block_axis_innermost(cpu, rng):
    # cuDNN's transpose=True: y and scale take the block axis as their innermost memory axis; the
    # values are those of the plain quantize
    g = hd.Graph(io_data_type=DT.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[64, 48])
    y, s = g.block_scale_quantize(x, 32, axis=0, transpose=True)
    y.set_output(True).set_uid(2)
    s.set_output(True).set_uid(3)
    g.build(cpu)
    assert list(y.get_stride()) == [1, 64] and list(s.get_dim()) == [2, 48] and list(s.get_stride()) == [1, 2]
    xv = (rng.standard_normal((64, 48)) * 10).astype(np.float32)
    yb, sb = np.zeros((48, 64), NP[DT.FP8_E4M3]), np.zeros((48, 2), NP[DT.FP8_E8M0])   # memory order
    g.execute(cpu, {1: xv, 2: yb, 3: sb})
    ry, rs = quantize_ref(np.ascontiguousarray(xv.T), 32, DT.FP8_E4M3, DT.FP8_E8M0)
    assert _same_bits(yb, ry) and _same_bits(sb, rs)
    # along the last axis of a row-major x, transpose changes nothing
    g2 = hd.Graph(io_data_type=DT.FLOAT)
    y2, s2 = g2.block_scale_quantize(g2.tensor(name="x", uid=1, dim=[4, 64]), 32, transpose=True)
    y2.set_output(True).set_uid(2)
    s2.set_output(True).set_uid(3)
    g2.validate()
    assert list(y2.get_stride()) == [64, 1] and list(s2.get_stride()) == [2, 1]


def test_pack_fp4_order_and_roundtrip(rng):
    # element 2i in the low nibble: 0.5 is code 1, -6 code 15, 1.0 code 2
    assert hd.pack_fp4(np.array([0.5, -6.0, 1.0, 0.0])).tolist() == [0xF1, 0x02]
    v = rng.choice(np.arange(16, dtype=np.uint8), (3, 5, 8)).view(ml_dtypes.float4_e2m1fn)
    p = hd.pack_fp4(v)
    assert p.shape == (3, 5, 4) and p.dtype == np.uint8
    assert _same_bits(hd.unpack_fp4(p), v)
    raises(S.BAD_PARAM, hd.pack_fp4, np.zeros((2, 3), np.float32), match="even")
    raises(S.BAD_PARAM, hd.unpack_fp4, np.zeros(4, np.float32), match="uint8")


@pytest.mark.parametrize("sdt, block", [(DT.FP8_E4M3, 16), (DT.FP8_E8M0, 32)], ids=["NVFP4", "MXFP4"])
def test_fp4_buffers_two_codes_per_byte(cpu, rng, sdt, block):
    # FP4 outputs and inputs as packed bytes (the module's own buffers), bit-exact against the
    # reference packed here; an ml_dtypes float4 array per element gives the same bytes (staged)
    shape = (8, 4 * block)
    g = _build(cpu, shape, block, DT.FP4_E2M1, sdt)
    x = _data(rng, shape, block)
    packed = {2: np.full((8, 2 * block), 0xAA, np.uint8), 3: np.zeros((8, 4), NP[sdt]), 4: np.zeros(shape, np.float32)}
    g.execute(cpu, {1: x, **packed})
    ry, rs = quantize_ref(x, block, DT.FP4_E2M1, sdt)
    want = np.zeros((8, 2 * block), np.uint8)
    want |= ry.view(np.uint8)[:, 0::2] & 15
    want |= (ry.view(np.uint8)[:, 1::2] & 15) << 4
    assert np.array_equal(packed[2], want) and _same_bits(packed[3], rs)
    one = _bufs(shape, block, DT.FP4_E2M1, sdt)
    g.execute(cpu, {1: x, **one})
    assert _same_bits(one[2], ry) and np.array_equal(one[4], packed[4], equal_nan=True)
    # the packed bytes dequantized by a plan restored in a fresh graph, and by the reference engine
    def deq():
        d = hd.Graph(io_data_type=DT.FLOAT)
        q = d.tensor(name="q", uid=1, dim=list(shape), data_type=DT.FP4_E2M1)
        sc = d.tensor(name="s", uid=2, dim=[8, 4], data_type=sdt)
        z = d.block_scale_dequantize(q, sc, block)
        z.set_output(True).set_uid(3)
        return d, {3: z}
    got, ref, _ = run_engines(deq, {1: packed[2], 2: packed[3]}, cpu)
    assert np.array_equal(got[3], packed[4], equal_nan=True) and np.array_equal(ref[3], packed[4], equal_nan=True)
    # a reference-engine output in packed bytes
    d, _ = deq()
    r = hd.Graph(io_data_type=DT.FLOAT)
    xt = r.tensor(name="x", uid=1, dim=list(shape))
    ry2, rs2 = r.block_scale_quantize(xt, block, y_data_type=DT.FP4_E2M1, scale_data_type=sdt)
    ry2.set_output(True).set_uid(2)
    rs2.set_output(True).set_uid(3)
    r.set_preferred_engine_id_ext("NUMPY_REFERENCE")
    r.build(cpu)
    rb = {2: np.zeros((8, 2 * block), np.uint8), 3: np.zeros((8, 4), NP[sdt])}
    r.execute(cpu, {1: x, **rb})
    assert np.array_equal(rb[2], want)


def test_fp4_packs_along_the_innermost_memory_axis(cpu, rng):
    # a channels-last FP4 input [N, C, W] (C innermost in memory): its bytes pair up C neighbours
    n, c, w = 2, 6, 4
    g = hd.Graph(io_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    q = g.tensor(name="q", uid=1, dim=[n, c, w], stride=[c * w, 1, c], data_type=DT.FP4_E2M1)
    g.pointwise(q, mode=hd.PointwiseMode.IDENTITY).set_output(True).set_uid(2).set_stride([c * w, w, 1])
    g.build(cpu)
    vals = rng.choice(np.arange(16, dtype=np.uint8), (n, w, c)).view(ml_dtypes.float4_e2m1fn)   # memory order
    out = np.zeros((n, c, w), np.float32)
    g.execute(cpu, {1: hd.pack_fp4(vals), 2: out})
    assert np.array_equal(out, vals.astype(np.float32).transpose(0, 2, 1))
    raises(S.BAD_PARAM, g.execute, cpu, {1: hd.pack_fp4(vals.transpose(0, 2, 1)), 2: out}, match="shape")


@pytest.mark.parametrize("dims, strides, match", [
    ([4, 7], None, "multiple of 2"),                 # an odd innermost memory axis
    ([4, 8], [16, 1], "dense"),                       # a strided view
])
def test_fp4_layouts_that_cannot_pack(cpu, dims, strides, match):
    g = hd.Graph(io_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    q = g.tensor(name="q", uid=1, dim=dims, stride=strides, data_type=DT.FP4_E2M1)
    g.pointwise(q, mode=hd.PointwiseMode.IDENTITY).set_output(True).set_uid(2)
    raises(S.NOT_SUPPORTED, g.build, cpu, match=match)


def test_f8_128x4_helpers(rng):
    # the tile order on hand-checked positions, and the round trip with padding and a leading axis
    s = np.arange(130 * 5, dtype=np.uint8).reshape(130, 5)
    b = hd.to_f8_128x4(s)
    assert b.size == 256 * 8
    assert b[0] == s[0, 0] and b[1] == s[0, 1] and b[16] == s[1, 0] and b[4] == s[32, 0] and b[511] == s[127, 3]
    assert b[512] == s[0, 4] and b[1024] == s[128, 0] and b[1024 + 512] == s[128, 4]
    v = rng.integers(0, 255, (3, 40, 9)).astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)
    t = hd.to_f8_128x4(v)
    assert t.dtype == v.dtype and t.size == 3 * 128 * 12
    assert _same_bits(hd.from_f8_128x4(t, 40, 9, (3,)), v)
    raises(S.BAD_PARAM, hd.from_f8_128x4, t[:100], 40, 9, (3,), match="F8_128x4")
    raises(S.BAD_PARAM, hd.to_f8_128x4, np.zeros((4, 4), np.float32), match="1-byte")


def test_fp8_matmul_contracts_as_f16_on_gpu_targets():
    # GPU targets: FP8 operands decoded to f16 (exact) behind a barrier, so the contraction is a plain
    # f16 one with f32 sums (the tensor-core path; benchmarks/gpu_quant.py (retired; in git history at commit 9e99c4b) measured it 1.9x faster than
    # the decode fused into the contraction on an H200); the CPU keeps f32 operands
    import iree.compiler as ic
    g = hd.Graph(io_data_type=DT.BFLOAT16, compute_data_type=DT.FLOAT)
    a = g.tensor(name="a", uid=1, dim=[1, 32, 64], data_type=DT.FP8_E4M3)
    b = g.tensor(name="b", uid=2, dim=[1, 64, 16], stride=[1024, 1, 64], data_type=DT.FP8_E5M2)
    g.matmul(a, b).set_output(True).set_uid(3)
    gpu = g.get_mlir(target="cuda:sm_80")
    mm = [line for line in gpu.splitlines() if "linalg.batch_matmul" in line]
    assert len(mm) == 1 and "tensor<1x32x64xf16>, tensor<1x64x16xf16>" in mm[0] and "xf32>" in mm[0]
    assert gpu.count("iree_tensor_ext.compute_barrier.start") >= 2
    assert len(ic.compile_str(gpu, target_backends=["cuda"], extra_args=["--iree-cuda-target=sm_80"])) > 1000
    cpu = g.get_mlir(target="llvm-cpu")
    assert "tensor<1x32x64xf32>, tensor<1x64x16xf32>" in [line for line in cpu.splitlines()
                                                          if "linalg.batch_matmul" in line][0]
    # an FP8 operand beside a FLOAT one stays f32 (f16 would round the FLOAT side)
    h = hd.Graph(io_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    x = h.tensor(name="a", uid=1, dim=[1, 32, 64], data_type=DT.FP8_E4M3)
    h.matmul(x, h.tensor(name="b", uid=2, dim=[1, 64, 16])).set_output(True).set_uid(3)
    assert "xf16>" not in h.get_mlir(target="cuda:sm_80")


def test_fp8_conv_f32_accumulation(cpu, rng):
    # conv_fprop with E4M3 activations (NHWC) and E5M2 weights, f32 accumulation, FLOAT output,
    # against a float64 loop over the decoded values
    n, c, k, hw, r = 2, 8, 6, 7, 3
    g = hd.Graph(io_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[n, c, hw, hw], stride=[hw * hw * c, 1, hw * c, c], data_type=DT.FP8_E4M3)
    w = g.tensor(name="w", uid=2, dim=[k, c, r, r], data_type=DT.FP8_E5M2)
    g.conv_fprop(x, w, padding=[1, 1]).set_output(True).set_uid(3).set_stride([k * hw * hw, hw * hw, hw, 1])
    g.build(cpu)
    xv = (rng.standard_normal((n, hw, hw, c)) * 8).astype(ml_dtypes.float8_e4m3fn)     # NHWC memory
    wv = rng.standard_normal((k, c, r, r)).astype(ml_dtypes.float8_e5m2)
    out = np.full((n, k, hw, hw), np.nan, np.float32)
    g.execute(cpu, {1: xv, 2: wv, 3: out})
    xp = np.pad(xv.astype(np.float64).transpose(0, 3, 1, 2), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((n, k, hw, hw))
    for i in range(r):
        for j in range(r):
            ref += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + hw, j:j + hw], wv.astype(np.float64)[:, :, i, j])
    assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()


def test_self_check_reads_torch_float8_and_packed_fp4_buffers(rng):
    # the self-check copies outputs to the host: torch float8 and float4_e2m1fn_x2 tensors (which
    # numpy cannot import) are read as their codes, and the check agrees with the reference
    torch = pytest.importorskip("torch")
    h = hd.create_handle(self_check=True)
    g = hd.Graph(io_data_type=DT.FLOAT)
    y, s = g.block_scale_quantize(g.tensor(name="x", uid=1, dim=[4, 64]), 16, y_data_type=DT.FP4_E2M1)
    y.set_output(True).set_uid(2)
    s.set_output(True).set_uid(3)
    g.build(h)
    xv = rng.standard_normal((4, 64)).astype(np.float32) * 3
    yb = torch.zeros(4, 32, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    sb = torch.zeros(4, 4, dtype=torch.float8_e4m3fn)
    g.execute(h, {1: torch.from_numpy(xv), 2: yb, 3: sb})
    ry, rs = quantize_ref(xv, 16, DT.FP4_E2M1, DT.FP8_E4M3)
    assert _same_bits(sb.view(torch.uint8).numpy(), rs)
    assert np.array_equal(yb.view(torch.uint8).numpy(), hd.pack_fp4(ry))


# -- the scale rule against the OCP MX specification's, infinities, NVFP4 saturation, dequantize's type --

def _ocp_scale(amax, emax_elem):
    """The OCP MX v1.0 shared scale (section 6.3), written from the specification alone:
    ``2^(floor(log2(amax)) - emax_elem)``, emax_elem the exponent of the element type's largest
    normal (E4M3 8, E5M2 15, E2M1 2)."""
    return np.exp2(np.floor(np.log2(amax)) - emax_elem)


@pytest.mark.parametrize("ydt, emax_elem, vmax_significand, lo, hi", [
    (DT.FP8_E4M3, 8, 1.75, 0.14, 0.19), (DT.FP8_E5M2, 15, 1.75, 0.14, 0.20), (DT.FP4_E2M1, 2, 1.5, 0.27, 0.33)],
    ids=["MXFP8_E4M3", "MXFP8_E5M2", "MXFP4"])
def test_e8m0_scale_is_cudnns_round_up_not_the_ocp_floor(cpu, ydt, emax_elem, vmax_significand, lo, hi):
    # cuDNN's rule (this engine): the smallest 2^e >= amax / vmax. OCP's: 2^(floor(log2 amax) - emax_elem).
    # They agree unless amax's significand exceeds vmax's (1.75 for E4M3/E5M2, 1.5 for E2M1), where
    # cuDNN's scale is twice OCP's (OCP saturates those amax elements instead). On standard-normal
    # blocks of 32 that is 16% (E4M3), 17% (E5M2) and 30% (E2M1) of the blocks (docs/api.md 8.1).
    shape, block = (2048, 64), 32
    g = _build(cpu, shape, block, ydt, DT.FP8_E8M0, dequant=False)
    x = np.random.default_rng(44).standard_normal(shape).astype(np.float32)
    bufs = _bufs(shape, block, ydt, DT.FP8_E8M0, dequant=False)
    g.execute(cpu, {1: x, **bufs})
    s = bufs[3].astype(np.float64)
    amax = np.abs(x.astype(np.float64)).reshape(shape[0], -1, block).max(-1)
    ocp = _ocp_scale(amax, emax_elem)
    up = amax / np.exp2(np.floor(np.log2(amax))) > vmax_significand
    assert np.array_equal(s[~up], ocp[~up]) and np.array_equal(s[up], 2 * ocp[up])
    assert lo <= up.mean() <= hi, up.mean()


RECIPES_E8M0 = [(DT.FP8_E4M3, 32), (DT.FP8_E5M2, 32), (DT.FP4_E2M1, 32)]


@pytest.mark.parametrize("ydt, block", RECIPES_E8M0, ids=["MXFP8_E4M3", "MXFP8_E5M2", "MXFP4"])
def test_infinity_in_an_e8m0_block(cpu, ydt, block):
    # the scale is 2^127 (no power of two reaches inf); +-inf saturate to +-vmax, the rest is x / 2^127
    # (0 here); dequantized, vmax * 2^127 overflows f32: the infinities come back, the rest is 0
    x = np.ones((1, 2 * block), np.float32)
    x[0, 0], x[0, 1] = np.inf, -np.inf
    g = _build(cpu, x.shape, block, ydt, DT.FP8_E8M0)
    bufs = _bufs(x.shape, block, ydt, DT.FP8_E8M0)
    g.execute(cpu, {1: x, **bufs})
    y, s, d = bufs[2].astype(np.float64), bufs[3].astype(np.float64), bufs[4]
    assert s[0, 0] == 2.0 ** 127 and s[0, 1] == 2.0 ** -(8 if ydt == DT.FP8_E4M3 else 15 if ydt == DT.FP8_E5M2 else 2)
    assert list(y[0, :3]) == [VMAX[ydt], -VMAX[ydt], 0.0] and (y[0, 2:block] == 0).all()
    assert list(d[0, :2]) == [np.inf, -np.inf] and (d[0, 2:block] == 0).all() and (d[0, block:] == 1).all()


def test_infinity_in_an_nvfp4_block(cpu):
    # E4M3 scale: amax / 6 = inf saturates to 448 (E4M3's largest); y = x / 448 saturates: +-inf and
    # 1e30 give +-6, ones 0; dequantized, the block holds +-2688 (6 * 448) and zeros
    x = np.ones((1, 32), np.float32)
    x[0, 0], x[0, 1], x[0, 2] = np.inf, -np.inf, 1e30
    g = _build(cpu, x.shape, 16, DT.FP4_E2M1, DT.FP8_E4M3)
    bufs = _bufs(x.shape, 16, DT.FP4_E2M1, DT.FP8_E4M3)
    g.execute(cpu, {1: x, **bufs})
    y, s, d = bufs[2].astype(np.float64), bufs[3].astype(np.float64), bufs[4]
    assert s[0, 0] == 448.0 and list(y[0, :4]) == [6.0, -6.0, 6.0, 0.0]
    # the next block of ones: scale 0.171875 (the smallest E4M3 >= 1/6), y = 6
    assert list(d[0, :4]) == [2688.0, -2688.0, 2688.0, 0.0] and (d[0, 16:] == 6 * 0.171875).all()


def test_infinity_in_a_float_scaled_block(cpu):
    # FLOAT scale: amax / vmax = inf; y = x / inf is NaN at the infinities and 0 elsewhere, and the
    # dequantized block is NaN throughout (0 * inf)
    x = np.ones((1, 32), np.float32)
    x[0, 0] = np.inf
    g = _build(cpu, x.shape, 16, DT.FP8_E4M3, DT.FLOAT)
    bufs = _bufs(x.shape, 16, DT.FP8_E4M3, DT.FLOAT)
    g.execute(cpu, {1: x, **bufs})
    y = bufs[2].astype(np.float64)
    assert bufs[3][0, 0] == np.inf and np.isnan(y[0, 0]) and (y[0, 1:16] == 0).all()
    assert np.isnan(bufs[4][0, :16]).all() and (bufs[4][0, 16:] == 1).all()


def test_nvfp4_scale_saturates_at_448(cpu):
    # amax / 6 above 448 (amax > 2688): the E4M3 scale saturates at 448 and y at +-6, so the block
    # comes back clipped to +-2688; below that the round-up rule holds (amax 2688 -> 448 exactly)
    x = np.zeros((3, 16), np.float32)
    x[0, :3] = [3000.0, -6000.0, 1.0]
    x[1, :2] = [2688.0, 1.0]
    x[2, :2] = [1e30, 2688.0]
    g = _build(cpu, x.shape, 16, DT.FP4_E2M1, DT.FP8_E4M3)
    bufs = _bufs(x.shape, 16, DT.FP4_E2M1, DT.FP8_E4M3)
    g.execute(cpu, {1: x, **bufs})
    s, d = bufs[3].astype(np.float64)[:, 0], bufs[4]
    assert list(s) == [448.0, 448.0, 448.0]
    assert list(d[0, :3]) == [2688.0, -2688.0, 0.0] and list(d[1, :2]) == [2688.0, 0.0]
    assert list(d[2, :2]) == [2688.0, 2688.0]


@pytest.mark.parametrize("io, out", [(DT.HALF, None), (DT.FLOAT, DT.BFLOAT16), (DT.FLOAT, None)])
def test_dequantize_result_takes_the_io_type_or_its_own(cpu, rng, io, out):
    # the result is the graph's io type unless set; the value is y * scale in f32 converted once to it
    g = hd.Graph(io_data_type=io)
    y = g.tensor(name="y", uid=1, dim=[4, 32], data_type=DT.FP8_E4M3)
    s = g.tensor(name="s", uid=2, dim=[4, 2], data_type=DT.FLOAT)
    r = g.block_scale_dequantize(y, s, 16)
    if out is not None:
        r.set_data_type(out)
    r.set_output(True).set_uid(3)
    g.build(cpu)
    want_dt = out or io
    assert r.get_data_type() == want_dt
    yv = (rng.standard_normal((4, 32)) * 50).astype(ml_dtypes.float8_e4m3fn)
    sv = rng.uniform(0.1, 3.0, (4, 2)).astype(np.float32)
    npdt = {DT.HALF: np.float16, DT.BFLOAT16: ml_dtypes.bfloat16, DT.FLOAT: np.float32}[want_dt]
    res = np.zeros((4, 32), npdt)
    g.execute(cpu, {1: yv, 2: sv, 3: res})
    want = (yv.astype(np.float32) * sv.repeat(16, -1)).astype(npdt)
    assert _same_bits(res, want)
