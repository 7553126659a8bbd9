"""The random cases that were silently wrong on the GPU (grouped half-precision convs, odd-shaped matmuls),
run through the cuDNN facade with torch tensors on the device, against float64 torch.

Each conv case runs in NCHW and NHWC with a 3x3 (padding 1) and a 1x1 filter; each matmul case in 9
layouts (A and B each row-major, column-major, padded rows). Diagnostics for the matmuls whose operands
are contiguous (where a few NaNs were seen): the same plan with each operand at the start of a buffer
whose tail is NaN (a read past the operand's end shows as NaN), and with the output prefilled with NaN
(an element the plan never writes stays NaN).

    python benchmarks/facade_cases.py --device cuda [--shard 1/4] [--json F]
    python benchmarks/facade_cases.py --device cpu --tiny     (the CPU check in tests/test_benchmarks.py)

``--without-workarounds`` builds the same cases with the two CUDA workarounds of docs/known_issues.md 10 and
11 turned off (grouped convs not split per group; a transposed A not kept apart from the matmul), with the
compile cache off: the faults they work around, measured on the same machine in the same run.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import torch  # noqa: E402

import hipdnn_iree as hd  # noqa: E402
import hipdnn_iree.cudnn as cudnn  # noqa: E402
from fuzz_ops import tolerance  # noqa: E402

# (N, C, K, groups, H, W, dtype, op, bias): the table
CONV = [(1, 8, 144, 2, 16, 64, "f16", "wgrad", False), (4, 88, 232, 2, 32, 16, "bf16", "fprop", True),
        (1, 144, 144, 4, 8, 32, "f16", "fprop", True), (1, 88, 176, 4, 64, 88, "f16", "fprop", False),
        (4, 200, 88, 4, 64, 8, "bf16", "fprop", False), (2, 16, 32, 2, 64, 16, "f16", "wgrad", False)]
# (batch, M, N, K, dtype, bias)
MATMUL = [(5, 1376, 40, 2120, "f16", False), (32, 1024, 232, 296, "f16", False),
          (5, 1768, 200, 1096, "bf16", True), (5, 1232, 1296, 40, "bf16", False),
          (4, 1688, 4096, 488, "bf16", False), (7, 144, 2032, 3256, "f16", True),
          (5, 1232, 1296, 40, "f32", False)]   # f32 takes another CUDA code path (not in the 2026-12-06 runs)
TINY_CONV = [(1, 4, 6, 2, 5, 7, "f16", "fprop", True), (1, 4, 6, 2, 5, 7, "bf16", "wgrad", False)]
TINY_MATMUL = [(2, 9, 7, 5, "f16", True)]
TD = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
CD = {"f16": cudnn.data_type.HALF, "bf16": cudnn.data_type.BFLOAT16, "f32": cudnn.data_type.FLOAT}


def _check(got, want, dt, red):
    got64 = got.double().cpu()
    scale = max(float(want.abs().max()), 1e-6)
    tol = tolerance(dt, red)
    nan = int(torch.isnan(got64).sum())
    err = float((got64 - want).abs().max() / scale) if nan == 0 else float("inf")
    bad = ~((got64 - want).abs() <= tol * scale)
    r = {"status": "right" if err <= tol else "WRONG", "err": err, "tol": tol,
         "bad_fraction": round(float(bad.double().mean()), 5), "nan": nan}
    if nan:
        idx = torch.nonzero(torch.isnan(got64))
        r["nan_where"] = {"first": idx[0].tolist(), "last": idx[-1].tolist(),
                          "rows": sorted(set(idx[:, -2].tolist()))[:12], "cols": sorted(set(idx[:, -1].tolist()))[:12]}
    return r


def _build(graph):
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    return graph.get_workspace_size()


def conv_case(handle, dev, case, layout, r, gen):
    n, c, k, g, h, w, dt, op, bias = case
    t = TD[dt]
    cl = layout == "NHWC"
    mf = torch.channels_last if cl else torch.contiguous_format
    pad = r // 2
    x = gen(n, c, h, w).to(t)
    wt = (gen(k, c // g, r, r) / math.sqrt(c // g * r * r)).to(t)
    dy = gen(n, k, h, w).to(t)
    b = gen(1, k, 1, 1).to(t)
    graph = cudnn.pygraph(io_data_type=CD[dt], intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    xd, wd, dyd, bd = (a.to(memory_format=mf).to(dev) for a in (x, wt, dy, b))
    if op == "fprop":
        ref = torch.nn.functional.conv2d(x.double(), wt.double(), padding=pad, groups=g)
        if bias:
            ref = ref + b.double()
        X, W = graph.tensor_like(xd, name="X"), graph.tensor_like(wd, name="W")
        Y = graph.conv_fprop(image=X, weight=W, padding=[pad, pad], stride=[1, 1], dilation=[1, 1])
        pack = {X: xd, W: wd}
        if bias:
            B = graph.tensor_like(bd, name="B")
            Y = graph.bias(input=Y, bias=B)
            pack[B] = bd
        Y.set_output(True).set_data_type(CD[dt])
        out = torch.empty(ref.shape, dtype=t).to(memory_format=mf).to(dev)
        Y.set_stride(list(out.stride()))
        red = c // g * r * r
    else:
        ref = torch.nn.grad.conv2d_weight(x.double(), wt.shape, dy.double(), padding=pad, groups=g)
        X, DY = graph.tensor_like(xd, name="X"), graph.tensor_like(dyd, name="DY")
        Y = graph.conv_wgrad(image=X, loss=DY, padding=[pad, pad], stride=[1, 1], dilation=[1, 1])
        Y.set_output(True).set_dim(list(wt.shape)).set_data_type(CD[dt])
        out = torch.empty(wt.shape, dtype=t).to(memory_format=mf).to(dev)
        Y.set_stride(list(out.stride()))
        pack = {X: xd, DY: dyd}
        red = n * h * w
    ws = _build(graph)
    pack[Y] = out
    graph.execute(pack, torch.empty(max(ws, 1), dtype=torch.uint8, device=dev), handle=handle)
    if dev == "cuda":
        torch.cuda.synchronize()
    return _check(out, ref, dt, red)


def _mat(gen, b, rows, cols, t, layout, dev):
    """A (b, rows, cols) operand on ``dev`` in ``layout``: row (contiguous), col (column-major), pad (rows
    padded by 3 elements)."""
    v = gen(b, rows, cols).to(t)
    if layout == "row":
        d = v.to(dev)
    elif layout == "col":
        d = v.transpose(1, 2).contiguous().transpose(1, 2).to(dev)
    else:
        store = torch.zeros(b, rows, cols + 3, dtype=t)
        store[:, :, :cols] = v
        d = store.to(dev)[:, :, :cols]
    return v, d


def _nan_tailed(v, dev, extra=1 << 20):
    """``v`` (contiguous) at the start of a device buffer whose next ``extra`` elements are NaN."""
    store = torch.full((v.numel() + extra,), float("nan"), dtype=v.dtype, device=dev)
    store[:v.numel()] = v.reshape(-1).to(dev)
    return store[:v.numel()].view(v.shape)


def matmul_case(handle, dev, case, la, lb, gen, diag=None):
    bt, m, n, k, dt, bias = case
    t = TD[dt]
    a, ad = _mat(gen, bt, m, k, t, la, dev)
    b, bd = _mat(gen, bt, k, n, t, lb, dev)
    bias_t = gen(1, 1, n).to(t)
    if diag == "a_tail_nan":
        ad = _nan_tailed(a, dev)
    elif diag == "b_tail_nan":
        bd = _nan_tailed(b, dev)
    ref = a.double() @ b.double()
    if bias:
        ref = ref + bias_t.double()
    graph = cudnn.pygraph(io_data_type=CD[dt], intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    A, B = graph.tensor_like(ad, name="A"), graph.tensor_like(bd, name="B")
    Y = graph.matmul(A, B)
    pack = {A: ad, B: bd}
    if bias:
        bb = bias_t.to(dev)
        BB = graph.tensor_like(bb, name="bias")
        Y = graph.bias(input=Y, bias=BB)
        pack[BB] = bb
    Y.set_output(True).set_data_type(CD[dt])
    ws = _build(graph)
    out = (torch.full(ref.shape, float("nan"), dtype=t, device=dev) if diag == "y_prefill_nan"
           else torch.zeros(ref.shape, dtype=t, device=dev))
    pack[Y] = out
    graph.execute(pack, torch.empty(max(ws, 1), dtype=torch.uint8, device=dev), handle=handle)
    if dev == "cuda":
        torch.cuda.synchronize()
    return _check(out, ref, dt, k)


def jobs(tiny):
    out = []
    for i, cs in enumerate(TINY_CONV if tiny else CONV):
        for layout in ("NHWC", "NCHW"):
            for r in (3, 1):
                out.append(("conv", i, cs, (layout, r), None))
    for i, cs in enumerate(TINY_MATMUL if tiny else MATMUL):
        for la in ("row", "col", "pad"):
            for lb in ("row", "col", "pad"):
                out.append(("matmul", i, cs, (la, lb), None))
        for diag in ("b_tail_nan", "a_tail_nan", "y_prefill_nan"):
            out.append(("matmul", i, cs, ("row", "row"), diag))
    return out


def describe(kind, cs, var, diag):
    if kind == "conv":
        n, c, k, g, h, w, dt, op, bias = cs
        return f"conv N{n} {c}->{k} g{g} {h}x{w} {dt} {op}{' + bias' if bias else ''} {var[0]} r{var[1]}"
    bt, m, n, k, dt, bias = cs
    return f"matmul b{bt} {m}x{n}x{k} {dt}{' + bias' if bias else ''} A:{var[0]} B:{var[1]}{' ' + diag if diag else ''}"


def _without_workarounds():
    """Turns off the CUDA workarounds of known issues 10 and 11 in this process (compile cache off: the second
    is not in the policy, so not in the cache key)."""
    os.environ["HIPDNN_IREE_CACHE"] = "0"
    from lowering import policy as pol
    from lowering.ops import matmul as mm
    base = pol.LoweringPolicy.for_target.__func__
    pol.LoweringPolicy.for_target = classmethod(lambda cls, target: base(cls, target).with_(conv_split_groups=False))
    mm._is_transpose = lambda em, v: False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--target", default=None, help="e.g. cuda:sm_80 (default: the handle's)")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--shard", default="1/1")
    ap.add_argument("--json", default=None)
    ap.add_argument("--without-workarounds", action="store_true")
    a = ap.parse_args(argv)
    if a.without_workarounds:
        _without_workarounds()
    si, sn = (int(x) for x in a.shard.split("/"))
    handle = (cudnn.create_handle(device="cpu") if a.device == "cpu"
              else cudnn.create_handle(device="cuda", target=a.target) if a.target else cudnn.create_handle())
    results = []
    for j, (kind, i, cs, var, diag) in enumerate(jobs(a.tiny)):
        if j % sn != si - 1:
            continue
        g = torch.Generator().manual_seed(1000 * i + j)
        gen = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
        name = describe(kind, cs, var, diag)
        t0 = time.perf_counter()
        try:
            r = (conv_case(handle, a.device, cs, var[0], var[1], gen) if kind == "conv"
                 else matmul_case(handle, a.device, cs, var[0], var[1], gen, diag))
        except hd.HipdnnError as e:
            r = {"status": "refused" if e.status != hd.Status.INTERNAL_ERROR else "error",
                 "why": f"{e.status.name}: {str(e)[:300]}"}
        except Exception as e:  # noqa: BLE001 - reported per case, the run goes on
            r = {"status": "error", "why": f"{type(e).__name__}: {str(e)[:300]}"}
        r.update(case=name, kind=kind, diag=diag, s=round(time.perf_counter() - t0, 2),
                 workarounds=not a.without_workarounds)
        print(json.dumps(r), flush=True)
        results.append(r)
    summ = {"total": len(results), **{s: sum(r["status"] == s for r in results) for s in ("right", "WRONG", "refused", "error")}}
    print(json.dumps(summ))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summ, "results": results}, f, indent=1)
    return 0 if summ["WRONG"] == 0 and summ["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
