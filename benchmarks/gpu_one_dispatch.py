"""Issue 30's one-dispatch forms on a GPU (or the CPU with --small): built on the machine that runs them
(the IREE compiler carried there; compile cache off), checked against float64 references written
here, then timed against the forms they replace, interleaved, medians of two passes (A, B).

- MoE grouped matmul (NONE, GATHER, SCATTER, backward), HALF: the lowering's ``flow.dispatch.region``
  (1 dispatch) against the same ops without the region (``Emitter.dispatch_region`` patched to emit the
  body alone: IREE's own dispatches, 2 or 3), on random routings with an empty expert and a
  one-token expert.
- Dequantize + matmul (MXFP8, NVFP4 with FP4 bytes), HALF activations: knob DEQUANT_MATMUL=ONE_DISPATCH
  against SPLIT (AUTO).
- cuDNN FE's NVFP4 matmul with F8_128x4 scale tiles on the facade (benchmarks/gpu_quant.py's check).

Usage: python3 benchmarks/gpu_one_dispatch.py --device cuda --target cuda:sm_80 --json out.json
       python3 benchmarks/gpu_one_dispatch.py --small          (the CPU: a check of the script)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, HERE)

import ml_dtypes  # noqa: E402

import hipdnn_iree as hd  # noqa: E402
from lowering._emit import Emitter  # noqa: E402
import gpu_quant  # noqa: E402
from gpu_quant import record  # noqa: E402  (one results table with gpu_quant's checks)
from cudnn_side_by_side import interleaved  # noqa: E402

DT = hd.DataType
MODE = hd.MoeGroupedMatmulMode
TIMINGS: list[dict] = []


class NoRegions:
    """While active, ``Emitter.dispatch_region`` emits its body without the region (the split form)."""

    def __enter__(self):
        self.keep = Emitter.dispatch_region
        Emitter.dispatch_region = lambda em, body: body()

    def __exit__(self, *exc):
        Emitter.dispatch_region = self.keep


class Buffers(gpu_quant.Side):
    """gpu_quant's buffers (torch CUDA tensors on a GPU, numpy arrays on the CPU), with NaN-filled
    outputs and a device sync."""

    def __init__(self, gpu: bool):
        super().__init__("cuda" if gpu else "local-task")

    def out(self, shape, dtype=np.float16):
        if not self.gpu:
            return np.full(shape, np.nan, dtype)
        return self.torch.full(shape, float("nan"), dtype=getattr(self.torch, np.dtype(dtype).name), device="cuda")

    def sync(self):
        if self.gpu:
            self.torch.cuda.synchronize()


def timed(bufs: Buffers, fns: dict, rounds: int, burst: int) -> dict:
    """Medians (ms) of ``rounds`` interleaved bursts per function (cudnn_side_by_side.interleaved), two
    passes; 5 rounds of single calls when one call of some function took over 50 ms (a slow form would
    hold the device for minutes)."""
    out = {}
    for passname in ("A", "B"):
        slowest = 0.0
        for f in fns.values():
            t0 = time.perf_counter()
            f()
            bufs.sync()
            slowest = max(slowest, time.perf_counter() - t0)
        if slowest > 0.05:
            rounds, burst = min(rounds, 5), 1
        t = interleaved(fns, bufs.sync, rounds, burst, warm=0)
        out[passname] = {k: round(v["median"], 4) for k, v in t.items()}
    return out


def _err(got, want) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


# -- MoE -----------------------------------------------------------------------------------------
def moe_reference(mode, tok, w, off, index=None, ks=None, top_k=0, rows=None):
    """float64, one expert (group) at a time, each a dense matmul of its rows."""
    tok, w = tok[0].astype(np.float64), w.astype(np.float64)
    rows = rows or tok.shape[0]
    out = np.zeros((rows, w.shape[2]))
    bounds = list(off) + [rows]
    for g in range(len(off)):
        r0, r1 = bounds[g], bounds[g + 1]
        if r1 <= r0:
            continue
        src = index[0, r0:r1, 0] if mode == MODE.GATHER else np.arange(r0, r1)
        y = tok[src] @ w[g % w.shape[0]]
        if mode == MODE.SCATTER:
            out[index[0, r0:r1, 0] * top_k + ks[0, r0:r1, 0]] = y
        else:
            out[r0:r1] = y
    return out[None]


def moe_backward_reference(dy, tok, off):
    dy, tok = dy[0].astype(np.float64), tok[0].astype(np.float64)
    bounds = list(off) + [tok.shape[0]]
    return np.stack([tok[bounds[g]:bounds[g + 1]].T @ dy[bounds[g]:bounds[g + 1]] for g in range(len(off))])


def _routing(rng, rows, e):
    """Offsets of e experts over rows: expert 1 empty, expert 2 one row, the rest random."""
    cuts = np.sort(rng.integers(0, rows, e - 3))
    return np.concatenate([[0, 0, 1], 1 + cuts]).astype(np.int32)[:e] if e >= 3 else np.zeros(e, np.int32)


def moe_cases(h, bufs, rng, tokens, k, n, e, rounds, burst):
    from test_moe import backward_graph, forward_graph
    top_k = 2
    cases = [("none", MODE.NONE), ("gather", MODE.GATHER), ("backward", None), ("scatter", MODE.SCATTER)]
    for name, mode in cases:
        graphs, disp = {}, {}
        for form in ("one_dispatch", "split"):
            if mode is None:
                build = backward_graph(tokens, k, n, e, DT.HALF)
            elif mode == MODE.GATHER:
                build = forward_graph(tokens, k, n, e, DT.HALF, mode=mode, routed=tokens * top_k)
            elif mode == MODE.SCATTER:
                build = forward_graph(tokens * top_k, k, n, e, DT.HALF, mode=mode, top_k=top_k)
            else:
                build = forward_graph(tokens, k, n, e, DT.HALF)
            g, _ = build()
            t0 = time.perf_counter()
            if form == "split":
                with NoRegions():
                    g.build(h)
            else:
                g.build(h)
            graphs[form] = g
            disp[form] = g.get_execution_plan().context.dispatch_count
            build_s = round(time.perf_counter() - t0, 1)
        m = tokens * top_k if mode in (MODE.GATHER, MODE.SCATTER) else tokens
        tok_rows = tokens if mode == MODE.GATHER else m
        tok = (rng.standard_normal((1, tok_rows, k)) / np.sqrt(k)).astype(np.float16)
        off = _routing(rng, m, e)
        pack = {1: None}
        if mode is None:
            dy = rng.standard_normal((1, m, n)).astype(np.float16)
            pack = {1: bufs.put(dy), 2: bufs.put(tok), 3: bufs.put(off.reshape(e, 1, 1))}
            want = moe_backward_reference(dy, tok, off)
            outs = {f: bufs.out((e, k, n)) for f in graphs}
        else:
            w = rng.standard_normal((e, k, n)).astype(np.float16)
            pack = {1: bufs.put(tok), 2: bufs.put(w), 3: bufs.put(off.reshape(e, 1, 1))}
            index = ks = None
            if mode == MODE.GATHER:
                index = rng.integers(0, tokens, (1, m, 1)).astype(np.int32)
                pack[5] = bufs.put(index)
            if mode == MODE.SCATTER:
                slot = rng.permutation(m)
                index = (slot // top_k).astype(np.int32).reshape(1, m, 1)
                ks = (slot % top_k).astype(np.int32).reshape(1, m, 1)
                pack[5], pack[6] = bufs.put(index), bufs.put(ks)
            want = moe_reference(mode, tok, w, list(off), index, ks, top_k, rows=m)
            outs = {f: bufs.out((1, m, n)) for f in graphs}
        errs = {}
        for form, g in graphs.items():
            g.execute(h, {**pack, 4: outs[form]})
            bufs.sync()
            errs[form] = _err(bufs.get(outs[form]), want)
        ok = all(v <= 2e-3 for v in errs.values()) and disp["one_dispatch"] == 1
        record(f"moe_{name}_half", ok, tokens=tokens, k=k, n=n, experts=e, dispatches=disp,
               max_rel_err={f: f"{v:.1e}" for f, v in errs.items()}, last_build_s=build_s)
        fns = {form: (lambda g=g, form=form: g.execute(h, {**pack, 4: outs[form]})) for form, g in graphs.items()}
        t = timed(bufs, fns, rounds, burst)
        row = {"case": f"moe_{name}_half", "shape": [tokens, k, n, e], "dispatches": disp, **t,
               "one_over_split": {p: round(t[p]["one_dispatch"] / t[p]["split"], 3) for p in t}}
        TIMINGS.append(row)
        print("| time | " + json.dumps(row) + " |", flush=True)


# -- dequantize + matmul -------------------------------------------------------------------------
def _deq_graph(m, k, n, block, ydt, sdt):
    g = hd.Graph(io_data_type=DT.HALF, compute_data_type=DT.FLOAT)
    a = g.tensor(name="a", uid=1, dim=[1, m, k])
    wq = g.tensor(name="wq", uid=2, dim=[1, k, n], data_type=ydt)
    ws = g.tensor(name="ws", uid=3, dim=[1, k // block, n], data_type=sdt)
    g.matmul(a, g.block_scale_dequantize(wq, ws, [1, block, 1])).set_output(True).set_uid(4)
    return g


def deq_cases(h, bufs, rng, m, k, n, rounds, burst, tiles=()):
    """DEQUANT_MATMUL=ONE_DISPATCH against SPLIT (AUTO), and with each GPU_MATMUL_TILE in ``tiles`` both."""
    forms = {"SPLIT": {"DEQUANT_MATMUL": "SPLIT"}, "ONE_DISPATCH": {"DEQUANT_MATMUL": "ONE_DISPATCH"},
             "AUTO": {}}
    for tile in tiles:
        for form in ("SPLIT", "ONE_DISPATCH"):
            forms[f"{form}+{tile}"] = {"DEQUANT_MATMUL": form, "GPU_MATMUL_TILE": tile}
    recipes = [("mxfp8", DT.FP8_E4M3, DT.FP8_E8M0, 32, 448.0), ("nvfp4", DT.FP4_E2M1, DT.FP8_E4M3, 16, 6.0)]
    for name, ydt, sdt, block, vmax in recipes:
        ynp = ml_dtypes.float8_e4m3fn if ydt == DT.FP8_E4M3 else ml_dtypes.float4_e2m1fn
        snp = ml_dtypes.float8_e8m0fnu if sdt == DT.FP8_E8M0 else ml_dtypes.float8_e4m3fn
        a = (rng.standard_normal((1, m, k)) / np.sqrt(k)).astype(np.float16)
        wv = np.clip(rng.standard_normal((1, k, n)) * vmax / 3, -vmax, vmax).astype(ynp)
        sv = (np.exp2(rng.integers(-3, 3, (1, k // block, n)).astype(np.float64))
              * (rng.uniform(0.5, 1.5, (1, k // block, n)) if sdt == DT.FP8_E4M3 else 1.0)).astype(snp)
        wf = wv.astype(np.float64) * sv.astype(np.float64).repeat(block, 1)
        want = a.astype(np.float64) @ wf
        if ydt == DT.FP4_E2M1:        # FP4 bytes: two codes per byte along n (the innermost memory axis)
            wbuf = bufs.put(hd.pack_fp4(wv))
        else:
            wbuf = bufs.put(wv)
        pack = {1: bufs.put(a), 2: wbuf, 3: bufs.put(sv)}
        graphs, disp, outs, errs = {}, {}, {}, {}
        for form, knobs in forms.items():
            g = _deq_graph(m, k, n, block, ydt, sdt)
            g.validate()
            g.build_operation_graph(h)
            g.create_execution_plan("IREE_LINALG", knobs)
            g.check_support()
            g.build_plans()
            graphs[form], disp[form] = g, g.get_execution_plan().context.dispatch_count
            outs[form] = bufs.out((1, m, n))
            g.execute(h, {**pack, 4: outs[form]})
            bufs.sync()
            errs[form] = _err(bufs.get(outs[form]), want)
        ok = all(v <= 2e-3 for v in errs.values()) and all(disp[f] == 1 for f in forms if f.startswith("ONE"))
        name = f"{name}_m{m}"
        record(f"dequantize_matmul_{name}", ok, mkn=[m, k, n], dispatches=disp,
               max_rel_err={f: f"{v:.1e}" for f, v in errs.items()})
        fns = {form: (lambda g=g, form=form: g.execute(h, {**pack, 4: outs[form]})) for form, g in graphs.items()}
        t = timed(bufs, fns, rounds, burst)
        row = {"case": f"dequantize_matmul_{name}", "shape": [m, k, n], "dispatches": disp, **t,
               "over_split": {p: {f: round(t[p][f] / t[p]["SPLIT"], 3) for f in forms if f != "SPLIT"} for p in t}}
        TIMINGS.append(row)
        print("| time | " + json.dumps(row) + " |", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="local-task")
    ap.add_argument("--target", default=None)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: moe,deq,facade")
    ap.add_argument("--deq-rows", default="2048", help="comma list of dequantize-matmul M values (K=N=4096)")
    ap.add_argument("--deq-tiles", default="64X64_SMEM,128X64_SMEM", help="GPU_MATMUL_TILE values tried with both forms")
    a = ap.parse_args(argv)
    gpu = a.device.startswith(("cuda", "hip"))
    rng = np.random.default_rng(30)
    h = hd.create_handle(device=a.device, target=a.target if gpu else None, cache=False)
    bufs = Buffers(gpu)
    info = {"device": a.device, "target": a.target, "numpy": np.__version__}
    if gpu:
        info.update(torch=bufs.torch.__version__, gpu=bufs.torch.cuda.get_device_name())
    skip = set(filter(None, a.skip.split(",")))
    rounds, burst = (5, 2) if a.small else (15, 5)
    steps = []
    if "deq" not in skip:
        tiles = tuple(filter(None, a.deq_tiles.split(","))) if gpu else ()
        for m in ([32] if a.small else [int(v) for v in a.deq_rows.split(",")]):
            steps.append(lambda m=m: deq_cases(h, bufs, rng, *((m, 128, 48) if a.small else (m, 4096, 4096)),
                                               rounds, burst, tiles))
    if "moe" not in skip:
        steps.append(lambda: moe_cases(h, bufs, rng, *((64, 32, 48, 5) if a.small else (2048, 1024, 1024, 8)),
                                       rounds, burst))
    if "facade" not in skip:
        def facade():
            gpu_quant.check_facade_nvfp4(a.device, a.target, gpu_quant.Side(a.device), rng)
        steps.insert(0, facade)
    gpu_quant.run_steps(steps, clip=800)
    return gpu_quant.finish(a.json, info, timings=TIMINGS)


if __name__ == "__main__":
    sys.exit(main())
