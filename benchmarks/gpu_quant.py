"""Issue 30 on a GPU: FP8/FP4 block-scale quantization, fp8 matmul, dequantize+matmul, a custom op,
every graph built on the GPU machine itself (the IREE compiler carried there) through the public API,
with torch device tensors as buffers (float8 dtypes, FP4 as packed uint8 / float4_e2m1fn_x2), and an
fp8 matmul timed against torch._scaled_mm (cuBLASLt) and a bf16 torch matmul.

Checks (each a row of the JSON, PASS/FAIL):
  - quantize, bit for bit against tests/test_block_scale.py's exact reference (numpy float64 +
    ml_dtypes, run on the host copy of the same input): MXFP8 E4M3/E5M2 (E8M0 scales, block 32), NVFP4
    (E4M3 scales, block 16, y packed two per byte), MXFP4 (E8M0, block 32, packed), on random data with
    zero, NaN, inf, saturating, tiny and tie blocks; dequantize(quantize(x)) equal to y * scale; a
    transposed quantize (axis 0, transpose=True)
  - fp8 matmul (E4M3 x E4M3 and E5M2 x E4M3, f32 accumulation; bf16 and f32 outputs) against float64
    of the decoded values; a dequantize+matmul of MXFP8 and NVFP4 weights against float64
  - a custom op (registered MLIR) built for the GPU, the plan saved, restored and run in a subprocess
    that registered nothing
  - cuDNN FE's NVFP4 matmul on the facade (hipdnn_iree.cudnn): float4_e2m1fn_x2 operands, E4M3 scales
    in F8_128x4 tiles
Timing (``--bench``): ours (an E4M3 x E4M3 -> bf16 plan; also the variant with the decode fused
into the contraction's dispatch, and the same matmul from f16 operands) against torch._scaled_mm
(E4M3, unit scales, bf16 out) and torch.matmul in bf16, interleaved round by round (a round: 10 calls then one
synchronize; 30 rounds after warm-up), two passes A and B; medians per call and TFLOP/s.

    python3 benchmarks/gpu_quant.py --device cuda --target cuda:sm_80 --bench --json out.json
    python3 benchmarks/gpu_quant.py --device local-task --small          # the same checks on the CPU
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))

import ml_dtypes  # noqa: E402

import hipdnn_iree as hd  # noqa: E402
from test_block_scale import NP, _data, quantize_ref  # noqa: E402  (the tests' exact reference)

DT = hd.DataType
RESULTS: list[dict] = []


def record(name, ok, **info):
    row = {"check": name, "result": "PASS" if ok else "FAIL", **info}
    RESULTS.append(row)
    print(f"| {name} | {row['result']} | " + ", ".join(f"{k}={v}" for k, v in info.items()) + " |", flush=True)
    return ok


class Side:
    """Buffers on the run's device: torch CUDA tensors on a GPU, numpy arrays on the CPU."""

    def __init__(self, device):
        self.gpu = device.startswith(("cuda", "hip"))
        if self.gpu:
            import torch
            self.torch = torch

    def put(self, arr: np.ndarray, data_type=None):
        """A host array on the device, float8 codes as torch float8 tensors."""
        if not self.gpu:
            return np.ascontiguousarray(arr)
        t = self.torch
        name = arr.dtype.name
        if name.startswith("float8_"):
            return t.from_numpy(np.ascontiguousarray(arr).view(np.uint8)).cuda().view(getattr(t, name))
        return t.from_numpy(np.ascontiguousarray(arr)).cuda()

    def empty(self, shape, dtype_name):
        if not self.gpu:
            dt = getattr(ml_dtypes, dtype_name, None) or np.dtype(dtype_name)
            return np.zeros(shape, dt)
        t = self.torch
        if dtype_name == "float4_e2m1fn_x2":      # NOTE: torch has no fill for it
            return t.zeros(shape, dtype=t.uint8, device="cuda").view(t.float4_e2m1fn_x2)
        return t.zeros(shape, dtype=getattr(t, dtype_name), device="cuda")

    def get(self, buf) -> np.ndarray:
        """The device buffer's bytes on the host, as the numpy dtype of its torch dtype."""
        if not self.gpu:
            return np.asarray(buf)
        t = self.torch
        name = str(buf.dtype).rsplit(".", 1)[-1]
        if name.startswith(("float8_", "float4_")):
            from hipdnn_iree.plugin_sdk.buffers import _host_from_dlpack
            return _host_from_dlpack(buf.cpu())
        if name == "bfloat16":
            return buf.float().cpu().numpy()
        return buf.cpu().numpy()


def _bytes(a) -> np.ndarray:
    return np.asarray(a).view(np.uint8)


def _packed(codes) -> np.ndarray:
    c = _bytes(codes) & 15
    return c[..., 0::2] | (c[..., 1::2] << 4)


RECIPES = [("mxfp8_e4m3", DT.FP8_E4M3, DT.FP8_E8M0, 32), ("mxfp8_e5m2", DT.FP8_E5M2, DT.FP8_E8M0, 32),
           ("nvfp4", DT.FP4_E2M1, DT.FP8_E4M3, 16), ("mxfp4", DT.FP4_E2M1, DT.FP8_E8M0, 32)]


def check_quantize(h, side, rows, cols, rng):
    for name, ydt, sdt, block in RECIPES:
        shape = (rows, cols)
        g = hd.Graph(name=f"q_{name}", io_data_type=DT.FLOAT)
        x = g.tensor(name="x", uid=1, dim=list(shape))
        y, s = g.block_scale_quantize(x, block, y_data_type=ydt, scale_data_type=sdt)
        y.set_output(True).set_uid(2)
        s.set_output(True).set_uid(3)
        g.block_scale_dequantize(y, s, block).set_output(True).set_uid(4)
        t0 = time.perf_counter()
        g.build(h)
        build_s = time.perf_counter() - t0
        xv = _data(rng, shape, block)
        fp4 = ydt == DT.FP4_E2M1
        # FP4 as packed bytes: uint8 for NVFP4, torch's float4_e2m1fn_x2 for MXFP4 (both bind)
        ybuf = side.empty((rows, cols // 2), "float4_e2m1fn_x2" if (name == "mxfp4" and side.gpu) else "uint8") \
            if fp4 else side.empty(shape, NP[ydt].__name__)
        sbuf = side.empty((rows, cols // block), NP[sdt].__name__)
        zbuf = side.empty(shape, "float32")
        g.execute(h, {1: side.put(xv), 2: ybuf, 3: sbuf, 4: zbuf})
        if side.gpu:
            side.torch.cuda.synchronize()
        ry, rs = quantize_ref(xv, block, ydt, sdt)
        got_y, got_s, got_z = side.get(ybuf), side.get(sbuf), side.get(zbuf)
        want_y = _packed(ry) if fp4 else _bytes(ry)
        y_bad = int((_bytes(got_y) != want_y).sum())
        s_bad = int((_bytes(got_s) != _bytes(rs)).sum())
        want_z = (ry.astype(np.float64) * rs.astype(np.float64).repeat(block, -1)).astype(np.float32)
        with np.errstate(invalid="ignore"):
            z_ok = np.array_equal(got_z, want_z, equal_nan=True)
        record(f"quantize_{name}", y_bad == 0 and s_bad == 0 and z_ok, shape=list(shape), block=block,
               y_mismatches=y_bad, scale_mismatches=s_bad, dequantized_equal=z_ok, build_s=round(build_s, 2))
    # transpose=True along axis 0: y and scale laid out with the block axis innermost
    g = hd.Graph(name="q_transposed", io_data_type=DT.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[cols, rows])
    y, s = g.block_scale_quantize(x, 32, axis=0, transpose=True)
    y.set_output(True).set_uid(2)
    s.set_output(True).set_uid(3)
    g.build(h)
    xv = (rng.standard_normal((cols, rows)) * 10).astype(np.float32)
    ybuf, sbuf = side.empty((rows, cols), "float8_e4m3fn"), side.empty((rows, cols // 32), "float8_e8m0fnu")
    g.execute(h, {1: side.put(xv), 2: ybuf, 3: sbuf})
    ry, rs = quantize_ref(np.ascontiguousarray(xv.T), 32, DT.FP8_E4M3, DT.FP8_E8M0)
    ok = np.array_equal(_bytes(side.get(ybuf)), _bytes(ry)) and np.array_equal(_bytes(side.get(sbuf)), _bytes(rs))
    record("quantize_transposed_axis0", ok, y_strides=list(y.get_stride()))


def _fp8(rng, shape, dtype, scale=4.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def fp8_matmul_graph(m, k, n, adt, bdt, out_dt, name="fp8_mm"):
    """[1, m, k] @ [1, k, n], B column-major (cuBLASLt's fp8 layout: K innermost for both)."""
    g = hd.Graph(name=name, io_data_type=out_dt, compute_data_type=DT.FLOAT)
    a = g.tensor(name="a", uid=1, dim=[1, m, k], data_type=adt)
    b = g.tensor(name="b", uid=2, dim=[1, k, n], stride=[k * n, 1, k], data_type=bdt)
    g.matmul(a, b).set_output(True).set_uid(3)
    return g


def check_matmuls(h, side, m, k, n, rng):
    for adt, bdt, odt in ((DT.FP8_E4M3, DT.FP8_E4M3, DT.BFLOAT16), (DT.FP8_E4M3, DT.FP8_E4M3, DT.FLOAT),
                          (DT.FP8_E5M2, DT.FP8_E4M3, DT.FLOAT)):
        g = fp8_matmul_graph(m, k, n, adt, bdt, odt)
        g.build(h)
        av, bt = _fp8(rng, (1, m, k), NP[adt]), _fp8(rng, (1, n, k), NP[bdt])      # bt: B's memory order
        out = side.empty((1, m, n), "bfloat16" if odt == DT.BFLOAT16 else "float32")
        bdev = side.put(bt)
        bdev = bdev.transpose(1, 2) if side.gpu else bdev.transpose(0, 2, 1)
        g.execute(h, {1: side.put(av), 2: bdev, 3: out})
        ref = av.astype(np.float64)[0] @ bt.astype(np.float64)[0].T
        err = float(np.abs(side.get(out)[0] - ref).max() / np.abs(ref).max())
        tol = 8e-3 if odt == DT.BFLOAT16 else 1e-5
        record(f"matmul_{DT(adt).name}x{DT(bdt).name}_to_{DT(odt).name}", err <= tol, mkn=[m, k, n],
               max_rel_err=f"{err:.2e}", tol=tol)
    for label, wdt, sdt, blk in (("mxfp8", DT.FP8_E4M3, DT.FP8_E8M0, 32), ("nvfp4", DT.FP4_E2M1, DT.FP8_E4M3, 16)):
        g = hd.Graph(name=f"deq_mm_{label}", io_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
        a = g.tensor(name="a", uid=1, dim=[1, m, k])
        # weights [k, n] stored n-major (k innermost), blocks along k: FP4 packs along k
        wq = g.tensor(name="wq", uid=2, dim=[1, k, n], stride=[k * n, 1, k], data_type=wdt)
        ws = g.tensor(name="ws", uid=3, dim=[1, k // blk, n], stride=[k // blk * n, 1, k // blk], data_type=sdt)
        g.matmul(a, g.block_scale_dequantize(wq, ws, [blk, 1])).set_output(True).set_uid(4)
        g.build(h)
        av = rng.standard_normal((1, m, k)).astype(np.float32)
        codes = rng.integers(0, 256 if wdt != DT.FP4_E2M1 else 16, (1, n, k)).astype(np.uint8)
        if wdt == DT.FP8_E4M3:
            codes[(codes & 0x7F) == 0x7F] = 0        # no NaN codes
        wv = codes.view(NP[wdt])
        sv = (np.exp2(rng.integers(-6, 6, (1, n, k // blk)).astype(np.float64)) if sdt == DT.FP8_E8M0 else
              rng.uniform(0.01, 2, (1, n, k // blk))).astype(NP[sdt])
        wbuf = side.put(_packed(wv) if wdt == DT.FP4_E2M1 else wv)
        sbuf = side.put(sv)
        out = side.empty((1, m, n), "float32")
        g.execute(h, {1: side.put(av), 2: wbuf.transpose(1, 2) if (side.gpu and wdt != DT.FP4_E2M1) else
                      (wbuf if wdt == DT.FP4_E2M1 else wbuf.transpose(0, 2, 1)),
                      3: sbuf.transpose(1, 2) if side.gpu else sbuf.transpose(0, 2, 1), 4: out})
        wf = wv.astype(np.float64)[0] * sv.astype(np.float64)[0].repeat(blk, -1)     # [n, k]
        ref = av.astype(np.float64)[0] @ wf.T
        err = float(np.abs(side.get(out)[0] - ref).max() / np.abs(ref).max())
        record(f"dequantize_matmul_{label}", err <= 1e-5, mkn=[m, k, n], max_rel_err=f"{err:.2e}",
               dispatches=g.get_execution_plan().context.dispatch_count)


CUSTOM_MLIR = """
func.func @scale_add(%x: tensor<64x128xf32>, %y: tensor<64x128xf32>) -> tensor<64x128xf32> {
  %e = tensor.empty() : tensor<64x128xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>,
                                        affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<64x128xf32>, tensor<64x128xf32>) outs(%e : tensor<64x128xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %c = arith.constant 3.0 : f32
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %m, %b : f32
    linalg.yield %s : f32
  } -> tensor<64x128xf32>
  return %r : tensor<64x128xf32>
}
"""


def check_custom_op(h, side, device, rng):
    hd.register_custom_op("bench.scale_add", CUSTOM_MLIR)
    g = hd.Graph(name="custom", io_data_type=DT.FLOAT)
    x, y = g.tensor(name="x", uid=1, dim=[64, 128]), g.tensor(name="y", uid=2, dim=[64, 128])
    (z,) = g.custom_op("bench.scale_add", [x, y], [([64, 128], DT.FLOAT)])
    g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3)
    g.build(h)
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "custom.plan")
    hd.save_plan(path, g.serialize_compiled_plan())
    xv, yv = rng.standard_normal((2, 64, 128)).astype(np.float32)
    np.save(os.path.join(tmp, "x.npy"), xv)
    np.save(os.path.join(tmp, "y.npy"), yv)
    code = textwrap.dedent(f"""
        import json, numpy as np, hipdnn_iree as hd
        gpu = {side.gpu!r}
        h = hd.create_handle(device={device!r})
        r = hd.Graph.from_compiled_plan(h, hd.load_plan({path!r}))
        x, y = np.load({os.path.join(tmp, 'x.npy')!r}), np.load({os.path.join(tmp, 'y.npy')!r})
        if gpu:
            import torch
            bufs = {{1: torch.from_numpy(x).cuda(), 2: torch.from_numpy(y).cuda(), 3: torch.zeros(64, 128, device="cuda")}}
        else:
            bufs = {{1: x, 2: y, 3: np.zeros((64, 128), np.float32)}}
        r.execute(h, bufs)
        out = bufs[3].cpu().numpy() if gpu else bufs[3]
        np.save({os.path.join(tmp, 'z.npy')!r}, out)
        print(json.dumps({{"registered": hd.registered_custom_ops()}}))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    ok = p.returncode == 0
    err = None
    if ok:
        z = np.load(os.path.join(tmp, "z.npy"))
        err = float(np.abs(z - np.maximum(3 * xv.astype(np.float64) + yv, 0)).max())
        ok = err <= 1e-5 and json.loads(p.stdout.strip().splitlines()[-1])["registered"] == []
    record("custom_op_restored_in_subprocess", ok, max_abs_err=err, rc=p.returncode,
           stderr=p.stderr[-400:] if p.returncode else "")


def _build_fused(g, h):
    """The variant without lowering/ops/matmul.py's decode barrier (the decode fused into the
    contraction's dispatch), for the comparison; the handle's compile cache is off."""
    import lowering.ops.matmul as mm
    keep = mm.decoded_apart
    mm.decoded_apart = lambda ctx, v: v
    try:
        g.build(h)
    finally:
        mm.decoded_apart = keep


def check_facade_nvfp4(device, target, side, rng):
    """cuDNN FE's NVFP4 matmul as its own examples write it, on the facade: FP4 operands as
    float4_e2m1fn_x2 tensors, E4M3 scales in reordering_type=F8_128x4 tiles (rows padded)."""
    import hipdnn_iree.cudnn as cudnn
    from hipdnn_iree.plugin_sdk.scale_layout import to_f8_128x4
    m, n, k, bs = 200, 136, 256, 16
    sk = k // bs
    from test_cudnn_facade import nvfp4_matmul_graph      # the facade test's graph
    handle = cudnn.create_handle(device=device, target=target) if side.gpu else cudnn.create_handle(device="cpu")
    g, (A, SA, B, SB, C) = nvfp4_matmul_graph(cudnn, handle, m, n, k, bs)
    ac, bc = rng.integers(0, 16, (m, k)).astype(np.uint8), rng.integers(0, 16, (n, k)).astype(np.uint8)
    sa = rng.uniform(0.05, 4, (m, sk)).astype(ml_dtypes.float8_e4m3fn)
    sb = rng.uniform(0.05, 4, (n, sk)).astype(ml_dtypes.float8_e4m3fn)
    if side.gpu:
        t = side.torch
        fp4_dev = lambda c: t.from_numpy(_packed(c)[None].copy()).cuda().view(t.float4_e2m1fn_x2)
        tiles = lambda s: t.from_numpy(to_f8_128x4(s).view(np.uint8)).cuda().view(t.float8_e4m3fn)
        out = t.full((1, m, n), float("nan"), device="cuda")
        ws = t.zeros(max(g.get_workspace_size(), 1), dtype=t.uint8, device="cuda")
    else:
        fp4_dev = lambda c: _packed(c)[None].copy()
        tiles = to_f8_128x4
        out = np.full((1, m, n), np.nan, np.float32)
        ws = np.zeros(max(g.get_workspace_size(), 1), np.uint8)
    g.execute({A: fp4_dev(ac), SA: tiles(sa), B: fp4_dev(bc), SB: tiles(sb), C: out}, ws)
    got = side.get(out)[0]
    f = lambda c, s: c.view(ml_dtypes.float4_e2m1fn).astype(np.float64) * s.astype(np.float64).repeat(bs, 1)
    ref = f(ac, sa) @ f(bc, sb).T
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    record("facade_nvfp4_matmul_f8_128x4_scales", err <= 1e-5, mnk=[m, n, k], max_rel_err=f"{err:.2e}")


def bench(h, side, shapes, rounds=30, burst=10):
    torch = side.torch
    rows = []
    for m, k, n in shapes:
        g = fp8_matmul_graph(m, k, n, DT.FP8_E4M3, DT.FP8_E4M3, DT.BFLOAT16, name=f"bench_{m}x{k}x{n}")
        t0 = time.perf_counter()
        g.build(h)
        build_s = time.perf_counter() - t0
        gf = fp8_matmul_graph(m, k, n, DT.FP8_E4M3, DT.FP8_E4M3, DT.BFLOAT16, name=f"bench_fused_{m}x{k}x{n}")
        _build_fused(gf, h)
        g16 = fp8_matmul_graph(m, k, n, DT.HALF, DT.HALF, DT.BFLOAT16, name=f"bench_f16_{m}x{k}x{n}")
        g16.build(h)
        disp = {"ours_fp8": g.get_execution_plan().context.dispatch_count,
                "ours_fp8_fused_decode": gf.get_execution_plan().context.dispatch_count,
                "ours_f16": g16.get_execution_plan().context.dispatch_count}
        a = (torch.randn(m, k, device="cuda") * 4).to(torch.float8_e4m3fn)
        bt = (torch.randn(n, k, device="cuda") * 4).to(torch.float8_e4m3fn)
        b = bt.t()                                   # [k, n], column-major
        ours_out = torch.empty(1, m, n, dtype=torch.bfloat16, device="cuda")
        pack = {1: a[None], 2: b[None], 3: ours_out}
        one = torch.ones((), device="cuda")
        a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)

        fused_out = torch.empty(1, m, n, dtype=torch.bfloat16, device="cuda")
        fused_pack = {1: a[None], 2: b[None], 3: fused_out}
        a16h, b16h = a.to(torch.float16), b.to(torch.float16)
        f16_pack = {1: a16h[None], 2: b16h[None], 3: torch.empty(1, m, n, dtype=torch.bfloat16, device="cuda")}

        def ours():
            g.execute(h, pack)

        def ours_fused():
            gf.execute(h, fused_pack)

        def ours_f16():
            g16.execute(h, f16_pack)

        def scaled():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        def bf16():
            return torch.matmul(a16, b16)

        sides = {"ours_fp8": ours, "ours_fp8_fused_decode": ours_fused, "ours_f16": ours_f16,
                 "torch_scaled_mm_fp8": scaled, "torch_matmul_bf16": bf16}
        ref = scaled().float()
        ours()
        ours_fused()
        torch.cuda.synchronize()
        err = float((ours_out[0].float() - ref).abs().max() / ref.abs().max())
        err_fused = float((fused_out[0].float() - ref).abs().max() / ref.abs().max())
        for passname in ("A", "B"):
            times = {s: [] for s in sides}
            for f in sides.values():
                for _ in range(3):
                    f()
            torch.cuda.synchronize()
            for _ in range(rounds):
                for s, f in sides.items():
                    t0 = time.perf_counter()
                    for _ in range(burst):
                        f()
                    torch.cuda.synchronize()
                    times[s].append((time.perf_counter() - t0) / burst)
            med = {s: float(np.median(v)) for s, v in times.items()}
            flops = 2.0 * m * k * n
            row = {"mkn": [m, k, n], "pass": passname, "build_s": round(build_s, 2),
                   "ours_vs_scaled_mm_max_rel_diff": f"{err:.2e}", "fused_vs_scaled_mm_max_rel_diff": f"{err_fused:.2e}",
                   "dispatches": disp,
                   **{f"{s}_ms": round(v * 1e3, 4) for s, v in med.items()},
                   **{f"{s}_tflops": round(flops / v / 1e12, 1) for s, v in med.items()},
                   "ours_over_scaled_mm": round(med["ours_fp8"] / med["torch_scaled_mm_fp8"], 2)}
            rows.append(row)
            print("| bench | " + ", ".join(f"{k}={v}" for k, v in row.items()) + " |", flush=True)
    return rows


def run_steps(steps, clip: int = 600) -> None:
    """Runs each step; one that raises becomes a FAIL row and the others still run."""
    for step in steps:
        try:
            step()
        except Exception as e:
            import traceback
            record(f"error_{len(RESULTS)}", False, error=f"{type(e).__name__}: {e}"[:clip],
                   where=traceback.format_exc()[-clip:])


def finish(json_path, info: dict, **extra) -> int:
    """Writes the checks (and ``extra`` tables) to ``json_path``, prints the tally; the exit status."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"info": info, "checks": RESULTS, **extra}, f, indent=1)
    failed = [r["check"] for r in RESULTS if r["result"] != "PASS"]
    print(f"{len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="local-task")
    ap.add_argument("--target", default=None)
    ap.add_argument("--small", action="store_true", help="small shapes (a CPU check of the script)")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(30)
    gpu = a.device.startswith(("cuda", "hip"))
    h = hd.create_handle(device=a.device, target=a.target if gpu else None, cache=False)
    side = Side(a.device)
    info = {"device": a.device, "target": a.target, "numpy": np.__version__}
    if gpu:
        info.update(torch=side.torch.__version__, gpu=side.torch.cuda.get_device_name())
    rows, cols = (16, 256) if a.small else (256, 2048)
    m, k, n = (32, 128, 48) if a.small else (512, 1024, 768)
    run_steps([lambda: check_quantize(h, side, rows, cols, rng), lambda: check_matmuls(h, side, m, k, n, rng),
               lambda: check_custom_op(h, side, a.device, rng),
               lambda: check_facade_nvfp4(a.device, a.target, side, rng)])
    bench_rows = []
    if a.bench and gpu:
        try:
            bench_rows = bench(h, side, [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 1024)])
        except Exception as e:
            record("bench_error", False, error=f"{type(e).__name__}: {e}"[:600])
    return finish(a.json, info, bench=bench_rows)


if __name__ == "__main__":
    sys.exit(main())
