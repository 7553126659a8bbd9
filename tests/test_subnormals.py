"""f32 subnormals on the CPU: IREE's runtime flushes them (FTZ and DAZ), as docs/known_issues.md
documents, and the block-scale ops are exact at E8M0 code 0 (2^-127, a subnormal) anyway.

References: numpy float64 and ml_dtypes, on random data."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import hipdnn_iree as hd

DT = hd.DataType
NP = {DT.FP8_E4M3: ml_dtypes.float8_e4m3fn, DT.FP8_E5M2: ml_dtypes.float8_e5m2, DT.FP4_E2M1: ml_dtypes.float4_e2m1fn}
VMAX = {DT.FP8_E4M3: 448.0, DT.FP8_E5M2: 57344.0, DT.FP4_E2M1: 6.0}
MX = [(DT.FP8_E4M3, 32), (DT.FP8_E5M2, 32), (DT.FP4_E2M1, 32)]   # y type, block (E8M0 scales)


def quantize_ref(x, block, ydt):
    """E8M0 scales along the last axis (finite x): scale = the smallest 2^e >= amax / vmax, e in
    [-127, 127]; y = x / scale rounded to nearest even (ml_dtypes) and saturated."""
    xb = x.astype(np.float64).reshape(x.shape[:-1] + (-1, block))
    amax = np.abs(xb).max(-1)
    e = np.full(amax.shape, -127)
    while np.any((e < 127) & (VMAX[ydt] * 2.0 ** e < amax)):
        e = np.where((e < 127) & (VMAX[ydt] * 2.0 ** e < amax), e + 1, e)
    s = 2.0 ** e
    q = np.clip(xb / s[..., None], -VMAX[ydt], VMAX[ydt]).reshape(x.shape)
    return q.astype(NP[ydt]), s.astype(ml_dtypes.float8_e8m0fnu)


def _grid(ydt):
    """Every finite value of y's type (both signs)."""
    n = 16 if ydt == DT.FP4_E2M1 else 256
    v = np.arange(n, dtype=np.uint8).view(NP[ydt]).astype(np.float64)
    return v[np.isfinite(v)]


@pytest.mark.parametrize("device", ["local-task", "local-sync"])
def test_documented_flush_mode(device):
    """What docs/known_issues.md says: a subnormal f32 input reads as 0 (DAZ), a subnormal result
    is written as 0 (FTZ); numpy keeps both. If IREE stops flushing, this fails: update the docs."""
    h = hd.create_handle(device=device, cache=False)
    g = hd.Graph(name="ftz", io_data_type=DT.FLOAT)
    a, b = g.tensor(name="A", uid=1, dim=[64]), g.tensor(name="B", uid=2, dim=[64])
    g.pointwise(a, b, mode=hd.PointwiseMode.MUL).set_output(True).set_uid(3)
    g.build(h)
    y = np.full(64, np.nan, np.float32)
    g.execute(h, {1: np.full(64, 1e-40, np.float32), 2: np.full(64, 1e30, np.float32), 3: y})
    assert np.float32(1e-40) * np.float32(1e30) > 0 and np.all(y == 0), y[:4]           # DAZ
    g.execute(h, {1: np.full(64, 1e-20, np.float32), 2: np.full(64, 1e-20, np.float32), 3: y})
    assert np.float32(1e-20) * np.float32(1e-20) > 0 and np.all(y == 0), y[:4]          # FTZ
    g.execute(h, {1: np.full(64, 1e-18, np.float32), 2: np.full(64, 1e-18, np.float32), 3: y})
    np.testing.assert_array_equal(y, np.float32(1e-18) * np.float32(1e-18))           # normal: IEEE


@pytest.mark.parametrize("dt, np_t, a, b, flushed", [
    (DT.BFLOAT16, ml_dtypes.bfloat16, 1e-40, 1e30, True),   # f32's exponent range: flushed
    (DT.DOUBLE, np.float64, 1e-310, 1e300, True),           # MXCSR governs f64 too
    (DT.HALF, np.float16, 1e-7, 2.0, False),                # f16 subnormals are normal f32: kept
], ids=["bf16", "f64", "f16"])
def test_documented_flush_mode_other_types(dt, np_t, a, b, flushed):
    h = hd.create_handle(cache=False)
    g = hd.Graph(name="ftz", io_data_type=dt, compute_data_type=DT.DOUBLE if dt == DT.DOUBLE else DT.FLOAT)
    x, w = g.tensor(name="A", uid=1, dim=[8]), g.tensor(name="B", uid=2, dim=[8])
    g.pointwise(x, w, mode=hd.PointwiseMode.MUL).set_output(True).set_uid(3)
    g.build(h)
    xs, ws, y = np.full(8, a, np_t), np.full(8, b, np_t), np.full(8, np.nan, np_t)
    assert 0 < abs(float(xs[0])) < np.finfo(np_t).tiny   # a subnormal of its type
    g.execute(h, {1: xs, 2: ws, 3: y})
    want = np.asarray(xs.astype(np.float64) * ws.astype(np.float64)).astype(np_t)
    if flushed:
        assert np.all(y.astype(np.float64) == 0) and np.all(want.astype(np.float64) > 0), y
    else:
        np.testing.assert_array_equal(y.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("ydt, block", MX, ids=lambda v: getattr(v, "name", str(v)))
def test_e8m0_code_0_round_trip(rng, ydt, block):
    """Blocks whose amax is at most vmax * 2^-127 (scale code 0, 2^-127), subnormal inputs among
    them, next to blocks of codes 1-3: quantize bit for bit against the reference, dequantize
    exactly x_q * 2^(code - 127) (subnormal results kept as their bits)."""
    h = hd.create_handle(cache=False)
    rows, cols = 8, 4 * block
    g = hd.Graph(name="mx0", io_data_type=DT.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[rows, cols])
    y, s = g.block_scale_quantize(x, block, y_data_type=ydt, scale_data_type=DT.FP8_E8M0)
    y.set_output(True).set_uid(2)
    s.set_output(True).set_uid(3)
    g.block_scale_dequantize(y, s, block).set_output(True).set_uid(4)
    g.build(h)
    grid = _grid(ydt)
    xs = rng.choice(grid, (rows, cols)) * 2.0 ** -127                  # on y's grid at code 0: exact
    xs = xs.reshape(rows, cols // block, block)
    xs[:, :, 0] = VMAX[ydt] * 2.0 ** -127 * rng.choice([-1, 1], (rows, cols // block))   # amax: code 0 exactly
    xs[:, 1] *= 2.0 ** rng.integers(1, 4, (rows, 1))                      # codes 1..3 beside them
    xs[:, 2] = rng.uniform(-1, 1, (rows, block)) * 2.0 ** -130            # off-grid subnormals: rounded
    xs = xs.reshape(rows, cols).astype(np.float32)
    assert np.count_nonzero(np.abs(xs) < np.finfo(np.float32).tiny) > cols   # many subnormal inputs
    yb = np.zeros((rows, cols), NP[ydt])
    sb = np.zeros((rows, cols // block), ml_dtypes.float8_e8m0fnu)
    out = np.full((rows, cols), np.nan, np.float32)
    g.execute(h, {1: xs, 2: yb, 3: sb, 4: out})
    y_ref, s_ref = quantize_ref(xs, block, ydt)
    codes = sb.view(np.uint8)
    assert np.array_equal(codes, s_ref.view(np.uint8)) and (codes == 0).sum() >= rows * 3, codes
    assert np.array_equal(yb.view(np.uint8), y_ref.view(np.uint8))
    # code-0 blocks on the grid come back exactly (nothing written as 0 that is not 0)
    on_grid = xs.reshape(rows, -1, block)[:, [0, 3]]
    assert np.count_nonzero(yb.astype(np.float32).reshape(rows, -1, block)[:, [0, 3]]) == np.count_nonzero(on_grid)
    deq = (y_ref.astype(np.float64).reshape(rows, -1, block) * s_ref.astype(np.float64)[..., None]).reshape(rows, cols)
    assert np.array_equal(out.view(np.uint32), deq.astype(np.float32).view(np.uint32))
    np.testing.assert_array_equal(out.reshape(rows, -1, block)[:, [0, 3]], on_grid)


def test_dequantize_every_e8m0_code(rng):
    """Dequantize alone, on scale codes 0..255 (255: NaN) and E4M3 values: x * 2^(code - 127)
    exactly, subnormal and overflowing products included."""
    h = hd.create_handle(cache=False)
    block = 32
    g = hd.Graph(name="deq", io_data_type=DT.FLOAT)
    q = g.tensor(name="q", uid=1, dim=[256, block], data_type=DT.FP8_E4M3)
    s = g.tensor(name="s", uid=2, dim=[256, 1], data_type=DT.FP8_E8M0)
    g.block_scale_dequantize(q, s, block).set_output(True).set_uid(3)
    g.build(h)
    vals = _grid(DT.FP8_E4M3)
    qs = rng.choice(vals[~np.isnan(vals)], (256, block)).astype(ml_dtypes.float8_e4m3fn)
    ss = np.arange(256, dtype=np.uint8).reshape(256, 1).view(ml_dtypes.float8_e8m0fnu)
    out = np.zeros((256, block), np.float32)
    g.execute(h, {1: qs, 2: ss, 3: out})
    with np.errstate(over="ignore"):
        ref = (qs.astype(np.float64) * ss.astype(np.float64)).astype(np.float32)
    assert np.isnan(ss.astype(np.float64)[255, 0]) and np.all(np.isnan(out[255]))
    assert np.array_equal(out[:255].view(np.uint32), ref[:255].view(np.uint32))
    assert np.count_nonzero(out[0]) == np.count_nonzero(qs[0].astype(np.float32))   # code 0 is not 0


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="patches x86 MXCSR code")
def test_subnormal_cost_benchmark_runs_tiny(tmp_path):
    """benchmarks/subnormal_cost.py at a tiny size: the stock runtime flushes the subnormal data
    (every output 0), the patched copy keeps it (none 0): the flush comes from the runtime."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, os.path.join(repo, "benchmarks", "subnormal_cost.py"), "--tiny", "--rounds",
                        "1", "-n", "2", "--cases", "matmul", "--json", str(out)], capture_output=True, text=True,
                       timeout=600, cwd=repo)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {r["data"]: r for r in json.loads(out.read_text())["results"]}
    sub = rows["subnormal"]
    assert sub["flush (IREE as shipped)"]["output_zeros"] == 32 * 32 and sub["keep (patched copy)"]["output_zeros"] == 0
    assert rows["normal"]["flush (IREE as shipped)"]["output_zeros"] == 0
