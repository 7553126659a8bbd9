"""Generated kernels against IREE's own code and torch, on a CUDA GPU (knob GPU_KERNELS).

For each case (matmul, optional bias + gelu epilogue; bf16/f16; row- or column-major B; and attention
forward: sdpa, causal or not, GQA, [B, H, S, D] or [B, S, H, D] storage) it builds two plans on the GPU
handle, GPU_KERNELS=IREE and =GENERATED, checks both against float64 torch, and times them interleaved
with torch (torch.matmul / scaled_dot_product_attention; device-resident tensors, outputs in place,
CUDA-synchronized medians), writing a JSON summary with medians, spread and TFLOP/s (attention: 4 B H Sq
Skv D flops, half of it when causal; and conv fprop: NHWC, bias + relu, against torch's conv2d on
channels-last tensors, 2 N K C R S P Q flops). ``--only matmul|attention|conv`` runs one kind. Needs the
IREE compiler and Triton on the GPU machine (benchmarks/gpu_run.sh kernels installs the carried compiler;
Triton 3.6.0 is there). First full run: an H100, docs/generated_kernels.md.

    python benchmarks/gpu_kernels.py --json gpu_results/kernels.json            # the full set
    python benchmarks/gpu_kernels.py --tiny --device cpu-check                 # build-only smoke (CPU)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

# (name, batch, M, N, K, dtype, B column-major, bias+gelu)
CASES = [
    ("mm4096_bf16", 1, 4096, 4096, 4096, "bf16", False, False),
    ("mm4096_f16_bt", 1, 4096, 4096, 4096, "f16", True, False),
    ("mm4096_bf16_bias_gelu", 1, 4096, 4096, 4096, "bf16", False, True),
    ("bmm8_1000x1000x520_f16", 8, 1000, 1000, 520, "f16", False, False),
    ("odd_777x1531x333_bf16_bt_gelu", 1, 777, 1531, 333, "bf16", True, True),
    ("mlp_8192x3072x768_f16_bias_gelu", 1, 8192, 3072, 768, "f16", True, True),
]
TINY = [("tiny_bf16_bias_gelu", 2, 64, 80, 96, "bf16", True, True), ("tiny_f16", 1, 33, 65, 40, "f16", False, False)]


class Attn(tuple):
    """An attention case: (name, B, Hq, Hkv, S (= Sq = Skv), D, dtype, causal, layout "bhsd" or "bshd")."""

    def __new__(cls, *fields):
        return super().__new__(cls, fields)


ATTN_CASES = [
    Attn("attn_b4_h16_s2048_d64_causal_bf16", 4, 16, 16, 2048, 64, "bf16", True, "bhsd"),
    Attn("attn_b2_h16_s4096_d128_causal_bf16", 2, 16, 16, 4096, 128, "bf16", True, "bhsd"),
    Attn("attn_b1_h32_s4096_d128_causal_bf16_bshd", 1, 32, 32, 4096, 128, "bf16", True, "bshd"),
    Attn("attn_b4_h32_s2048_d128_bf16", 4, 32, 32, 2048, 128, "bf16", False, "bhsd"),
    Attn("attn_b2_h32_hkv8_s4096_d128_causal_bf16", 2, 32, 8, 4096, 128, "bf16", True, "bhsd"),
    Attn("attn_b4_h16_s2048_d64_causal_f16", 4, 16, 16, 2048, 64, "f16", True, "bhsd"),
]
ATTN_TINY = [Attn("tiny_attn_gqa_causal_bf16", 1, 4, 2, 96, 64, "bf16", True, "bshd")]


class Conv(tuple):
    """A conv fprop case: (name, N, C, K, H (= W), R (= S), stride, pad, dtype, bias + relu); x, w, y
    channels-last (NHWC, KRSC)."""

    def __new__(cls, *fields):
        return super().__new__(cls, fields)


CONV_CASES = [
    Conv("conv3x3_64to64_56x56_n32_bf16_bias_relu", 32, 64, 64, 56, 3, 1, 1, "bf16", True),   # ResNet stage 1
    Conv("conv1x1_256to64_56x56_n32_bf16_bias_relu", 32, 256, 64, 56, 1, 1, 0, "bf16", True),
    Conv("conv3x3_s2_128to128_56x56_n32_f16", 32, 128, 128, 56, 3, 2, 1, "f16", False),
]
CONV_TINY = [Conv("tiny_conv3x3_bf16_bias_relu", 2, 32, 48, 12, 3, 1, 1, "bf16", True)]
TOL = {"bf16": 2e-2, "f16": 5e-3}


def _nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


def _built(g, handle, knob):
    """``(g, seconds of build_plans)``: ``g`` built on the IREE engine with ``GPU_KERNELS=knob``."""
    g.validate()
    g.build_operation_graph(handle)
    g.create_execution_plan("IREE_LINALG", {"GPU_KERNELS": knob})
    g.check_support()
    t = time.perf_counter()
    g.build_plans()
    return g, time.perf_counter() - t


def build_conv(hd, handle, case, knob):
    name, n, c, k, hw, r, stride, pad, dt, epi = case
    dtype = {"bf16": hd.DataType.BFLOAT16, "f16": hd.DataType.HALF}[dt]
    g = hd.Graph(name=name, io_data_type=dtype, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="X", uid=1, dim=[n, c, hw, hw], stride=_nhwc(n, c, hw, hw))
    w = g.tensor(name="W", uid=2, dim=[k, c, r, r], stride=_nhwc(k, c, r, r))
    y = g.conv_fprop(x, w, padding=[pad, pad], stride=[stride, stride])
    if epi:
        b = g.tensor(name="bias", uid=3, dim=[1, k, 1, 1], stride=[k, 1, k, k])
        y = g.pointwise(g.pointwise(y, b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.RELU_FWD)
    o = (hw + 2 * pad - r) // stride + 1
    y.set_output(True).set_uid(4).set_stride(_nhwc(n, k, o, o))
    return _built(g, handle, knob)


def prepare_conv(torch, case, dev):
    """(flops, variant pack, output, float64 reference of the first 2 images, that slice of the output,
    torch's fn)."""
    name, n, c, k, hw, r, stride, pad, dt, epi = case
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[dt]
    gen = torch.Generator(device="cpu").manual_seed(0)
    cl = torch.channels_last
    x = torch.randn(n, c, hw, hw, generator=gen).to(tdt).to(dev).contiguous(memory_format=cl)
    w = (torch.randn(k, c, r, r, generator=gen) / (c * r * r) ** 0.5).to(tdt).to(dev).contiguous(memory_format=cl)
    b = torch.randn(1, k, 1, 1, generator=gen).to(tdt).to(dev)
    o = (hw + 2 * pad - r) // stride + 1
    out = torch.empty(n, k, o, o, dtype=tdt, device=dev).contiguous(memory_format=cl)
    F = torch.nn.functional
    ref = F.conv2d(x[:2].double(), w.double(), padding=pad, stride=stride)
    if epi:
        ref = torch.relu(ref + b.double())
    fn = (lambda: torch.relu(F.conv2d(x, w, b.reshape(-1), padding=pad, stride=stride))) if epi else \
        (lambda: F.conv2d(x, w, padding=pad, stride=stride))
    pack = {1: x, 2: w, 4: out}
    if epi:
        pack[3] = b
    return 2.0 * n * k * c * r * r * o * o, pack, out, ref, (lambda: out[:2]), fn


def _attn_strides(dims, layout):
    b, h, s, d = dims
    return [h * s * d, s * d, d, 1] if layout == "bhsd" else [s * h * d, d, h * d, 1]


def build_attn(hd, handle, case, knob):
    name, b, hq, hkv, s, d, dt, causal, layout = case
    dtype = {"bf16": hd.DataType.BFLOAT16, "f16": hd.DataType.HALF}[dt]
    g = hd.Graph(name=name, io_data_type=dtype, compute_data_type=hd.DataType.FLOAT)
    q = g.tensor(name="Q", uid=1, dim=[b, hq, s, d], stride=_attn_strides((b, hq, s, d), layout))
    k = g.tensor(name="K", uid=2, dim=[b, hkv, s, d], stride=_attn_strides((b, hkv, s, d), layout))
    v = g.tensor(name="V", uid=3, dim=[b, hkv, s, d], stride=_attn_strides((b, hkv, s, d), layout))
    o = g.sdpa(q, k, v, attn_scale=1.0 / d ** 0.5, is_causal=causal)
    o.set_output(True).set_uid(4).set_stride(_attn_strides((b, hq, s, d), layout))
    return _built(g, handle, knob)


def prepare_attn(torch, case, dev):
    """(flops, variant pack, output, float64 reference of a slice, the slice of the output, torch's fn)."""
    name, b, hq, hkv, s, d, dt, causal, layout = case
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[dt]
    gen = torch.Generator(device="cpu").manual_seed(0)

    def make(h):
        if layout == "bshd":
            return torch.randn(b, s, h, d, generator=gen).to(tdt).to(dev).transpose(1, 2)
        return torch.randn(b, h, s, d, generator=gen).to(tdt).to(dev)

    q, k, v = make(hq), make(hkv), make(hkv)
    out = make(hq)
    flops = 4.0 * b * hq * s * s * d * (0.5 if causal else 1.0)
    # NOTE: the float64 reference of batch 0 and up to 4 heads (first, last and two between; all of
    # [B, H, S, S] in float64 would not fit): the error is measured on that slice
    heads = sorted({0, hq - 1, hq // 3, (2 * hq) // 3})
    grp = hq // hkv
    qs = q[0, heads].double()
    ks = k[0, [h // grp for h in heads]].double()
    vs = v[0, [h // grp for h in heads]].double()
    sc = torch.matmul(qs, ks.transpose(-1, -2)) / d ** 0.5
    if causal:
        keep = torch.ones(s, s, dtype=torch.bool, device=dev).tril()   # top-left aligned, as the lowering
        sc = sc.masked_fill(~keep, float("-inf"))
    ref = torch.matmul(torch.softmax(sc, dim=-1), vs)
    fn = (lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                   enable_gqa=hkv != hq))
    return flops, {1: q, 2: k, 3: v, 4: out}, out, ref, (lambda: out[0, heads]), fn


def build(hd, handle, case, knob):
    if isinstance(case, Attn):
        return build_attn(hd, handle, case, knob)
    if isinstance(case, Conv):
        return build_conv(hd, handle, case, knob)
    name, batch, m, n, k, dt, bt, epi = case
    dtype = {"bf16": hd.DataType.BFLOAT16, "f16": hd.DataType.HALF}[dt]
    g = hd.Graph(name=name, io_data_type=dtype, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="X", uid=1, dim=[batch, m, k])
    w = g.tensor(name="W", uid=2, dim=[1, k, n], stride=[k * n, 1, k] if bt else [k * n, n, 1])
    y = g.matmul(x, w)
    if epi:
        b = g.tensor(name="bias", uid=3, dim=[1, 1, n])
        y = g.pointwise(g.pointwise(y, b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.GELU_FWD)
    y.set_output(True).set_uid(4)
    return _built(g, handle, knob)


def tensors(torch, case, dev):
    name, batch, m, n, k, dt, bt, epi = case
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[dt]
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = (torch.randn(batch, m, k, generator=gen) / k ** 0.5).to(tdt).to(dev)
    w = torch.randn(1, n, k, generator=gen).to(tdt).to(dev).transpose(1, 2) if bt else \
        torch.randn(1, k, n, generator=gen).to(tdt).to(dev)
    b = torch.randn(1, 1, n, generator=gen).to(tdt).to(dev)
    out = torch.empty(batch, m, n, dtype=tdt, device=dev)
    return x, w, b, out


def reference(torch, case, x, w, b):
    epi = case[7]
    y = torch.matmul(x.double(), w.double())
    if epi:
        y = torch.nn.functional.gelu(y + b.double())
    return y


def torch_fn(torch, case, x, w, b):
    epi = case[7]
    if epi:
        return lambda: torch.nn.functional.gelu(torch.addmm(b[0], x[0], w[0]) if x.shape[0] == 1
                                                else torch.matmul(x, w) + b)
    return lambda: torch.matmul(x, w)


def timed(torch, fn, reps):
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--tiny", action="store_true", help="two small cases (a smoke run)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu-check: build both plans for cuda:sm_80 only")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (IREE, generated, torch)")
    ap.add_argument("--only", choices=("matmul", "attention", "conv"), default=None, help="one kind of case")
    a = ap.parse_args(argv)
    import hipdnn_iree as hd
    only = lambda kind: a.only in (None, kind)   # noqa: E731
    cases = ((TINY if a.tiny else CASES) if only("matmul") else []) + \
        ((ATTN_TINY if a.tiny else ATTN_CASES) if only("attention") else []) + \
        ((CONV_TINY if a.tiny else CONV_CASES) if only("conv") else [])
    rows = []
    if a.device == "cpu-check":
        handle = hd.create_handle(device=None, target="cuda:sm_80")
        for case in cases:
            for knob in ("IREE", "GENERATED"):
                g, secs = build(hd, handle, case, knob)
                plan = g.serialize_compiled_plan()
                rows.append({"case": case[0], "knob": knob, "build_s": round(secs, 2), "plan_bytes": len(plan),
                             "reported": g.get_engine_config_at_index(0).knobs.get("GPU_KERNELS")})
        print(json.dumps(rows, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"mode": "cpu-check", "rows": rows}, f, indent=1)
        return 0
    import torch
    handle = hd.create_handle(device="cuda")
    dev = torch.device("cuda")
    failures = 0
    for case in cases:
        if isinstance(case, Attn):
            name, batch, hq, hkv, s, d, dt, causal, layout = case
            flops, pack, out, ref, got, tfn = prepare_attn(torch, case, dev)
            row = {"case": name, "op": "sdpa", "batch": batch, "Hq": hq, "Hkv": hkv, "S": s, "D": d, "dtype": dt,
                   "causal": causal, "layout": layout}
        elif isinstance(case, Conv):
            name, n, c, k, hw, r, stride, pad, dt, epi = case
            flops, pack, out, ref, got, tfn = prepare_conv(torch, case, dev)
            row = {"case": name, "op": "conv_fprop", "N": n, "C": c, "K": k, "HW": hw, "R": r, "stride": stride,
                   "pad": pad, "dtype": dt, "bias_relu": epi, "layout": "NHWC/KRSC"}
        else:
            name, batch, m, n, k, dt, bt, epi = case
            flops = 2.0 * batch * m * n * k
            x, w, b, out = tensors(torch, case, dev)
            ref = reference(torch, case, x, w, b)
            got = (lambda out=out: out)
            pack = {1: x, 2: w, 4: out}
            if epi:
                pack[3] = b
            row = {"case": name, "batch": batch, "M": m, "N": n, "K": k, "dtype": dt, "b_col_major": bt,
                   "bias_gelu": epi}
            tfn = torch_fn(torch, case, x, w, b)
        fns = {"torch": tfn}
        for knob in ("IREE", "GENERATED"):
            try:
                g, secs = build(hd, handle, case, knob)
            except Exception as e:   # noqa: BLE001  (a failed build is a result of its own)
                row[knob] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
                failures += 1
                continue
            out.fill_(float("nan"))   # NOTE: a plan that writes nothing must not pass
            try:
                g.execute(handle, pack)
                torch.cuda.synchronize()
            except Exception as e:   # noqa: BLE001  (a failed launch is a result too; the other cases go on)
                row[knob] = {"build_s": round(secs, 2), "error": f"execute: {type(e).__name__}: {str(e)[:500]}"}
                failures += 1
                continue
            err = ((got().double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
            ok = err <= TOL[dt]
            failures += not ok
            row[knob] = {"build_s": round(secs, 2), "max_rel_err": err, "ok": ok,
                         "reported": g.get_engine_config_at_index(0).knobs.get("GPU_KERNELS")}
            fns[knob] = (lambda g=g: g.execute(handle, pack))
        times = {key: [] for key in fns}
        for key, fn in fns.items():
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        for _ in range(a.rounds):
            for key, fn in fns.items():
                times[key] += timed(torch, fn, a.reps)
        for key, ts in times.items():
            med = statistics.median(ts)
            stat = {"median_ms": round(med, 4), "p10_ms": round(sorted(ts)[len(ts) // 10], 4),
                    "p90_ms": round(sorted(ts)[9 * len(ts) // 10], 4), "n": len(ts),
                    "tflops": round(flops / med / 1e9, 1)}
            row.setdefault(key, {}).update(stat)
        rows.append(row)
        print(json.dumps(row), flush=True)
        summary = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "triton": _version("triton"), "iree_runtime": _version("iree-base-runtime"),
                   "conditions": f"{a.rounds} interleaved rounds x {a.reps} calls, CUDA events, device-resident inputs",
                   "rows": rows, "failures": failures}
        if a.json:   # after every case: a run cut by a time limit keeps what it measured
            with open(a.json, "w") as f:
                json.dump(summary, f, indent=1)
    print("| case | IREE ms (TFLOP/s) | generated ms (TFLOP/s) | torch ms (TFLOP/s) | gen err |")
    print("|---|---|---|---|---|")
    for r in rows:
        cell = lambda k: (f"{r[k]['median_ms']} ({r[k]['tflops']})" if "median_ms" in r.get(k, {})  # noqa: E731
                          else r.get(k, {}).get("error", "-")[:60])
        print(f"| {r['case']} | {cell('IREE')} | {cell('GENERATED')} | {cell('torch')} | "
              f"{r.get('GENERATED', {}).get('max_rel_err', '-')} |")
    return 1 if failures else 0


def _version(pkg):
    from importlib import metadata
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
