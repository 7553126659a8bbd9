"""GPU correctness matrix: plans compiled HERE (no GPU needed), restored and run on a GPU,
checked against PyTorch on the same GPU.

    python benchmarks/gpu_cases.py compile --target cuda:sm_80 --out .gpu_plans   # on the build machine
    python benchmarks/gpu_cases.py run --plans .gpu_plans --device cuda            # on the GPU machine

The run step needs only the IREE runtime, hipdnn-iree's sources and torch; it never compiles.
Every op family (matmul, conv fprop/dgrad/wgrad, pointwise chains, reductions, norms, sdpa) in
FLOAT, HALF and BFLOAT16 (FLOAT compute). Results: a JSON list and a markdown table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

import hipdnn_iree as hd

DT = {"f32": hd.DataType.FLOAT, "f16": hd.DataType.HALF, "bf16": hd.DataType.BFLOAT16}
TORCH_DT = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
TOL = {"f32": 2e-3, "f16": 2e-2, "bf16": 6e-2}   # relative-to-max-magnitude error bound per io type
CASES = {}
P = hd.PointwiseMode


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


# Each case(dt) returns (graph, refs) where refs(torch, t) maps output uid -> reference tensor,
# computed in float64 from the same inputs t (uid -> torch tensor on the GPU).

@case
def matmul_bias_gelu(dt):
    g = hd.Graph(name="matmul_bias_gelu", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[2, 128, 256])
    w = g.tensor(name="w", uid=2, dim=[1, 256, 192], stride=[256 * 192, 1, 256])
    b = g.tensor(name="b", uid=3, dim=[1, 1, 192])
    y = g.pointwise(g.pointwise(g.matmul(x, w), b, mode=P.ADD), mode=P.GELU_FWD)
    y.set_output(True).set_uid(4)
    return g, lambda torch, t: {4: torch.nn.functional.gelu(t[1].double() @ t[2].double() + t[3].double())}


@case
def conv_fprop_nhwc_bias_relu(dt):
    g = hd.Graph(name="conv_bias_relu", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[4, 32, 28, 28], stride=nhwc(4, 32, 28, 28))
    w = g.tensor(name="w", uid=2, dim=[64, 32, 3, 3], stride=nhwc(64, 32, 3, 3))
    b = g.tensor(name="b", uid=3, dim=[1, 64, 1, 1])
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    y = g.pointwise(g.pointwise(y, b, mode=P.ADD), mode=P.RELU_FWD)
    y.set_output(True).set_uid(4).set_stride(nhwc(4, 64, 28, 28))
    return g, lambda torch, t: {4: torch.relu(torch.nn.functional.conv2d(t[1].double(), t[2].double(), padding=1)
                                              + t[3].double())}


@case
def conv_fprop_1x1(dt):
    g = hd.Graph(name="conv_1x1", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[4, 64, 14, 14], stride=nhwc(4, 64, 14, 14))
    w = g.tensor(name="w", uid=2, dim=[128, 64, 1, 1])
    g.conv_fprop(x, w).set_output(True).set_uid(3).set_stride(nhwc(4, 128, 14, 14))
    return g, lambda torch, t: {3: torch.nn.functional.conv2d(t[1].double(), t[2].double())}


@case
def conv_dgrad_strided(dt):
    g = hd.Graph(name="conv_dgrad", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    dy = g.tensor(name="dy", uid=1, dim=[4, 64, 14, 14])
    w = g.tensor(name="w", uid=2, dim=[64, 32, 3, 3])
    dx = g.conv_dgrad(dy, w, padding=[1, 1], stride=[2, 2], dilation=[1, 1])
    dx.set_output(True).set_uid(3).set_dim([4, 32, 28, 28])
    return g, lambda torch, t: {3: torch.nn.grad.conv2d_input((4, 32, 28, 28), t[2].double(), t[1].double(),
                                                              stride=2, padding=1)}


@case
def conv_wgrad(dt):
    g = hd.Graph(name="conv_wgrad", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    dy = g.tensor(name="dy", uid=1, dim=[4, 64, 28, 28])
    x = g.tensor(name="x", uid=2, dim=[4, 32, 28, 28])
    dw = g.conv_wgrad(dy, x, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    dw.set_output(True).set_uid(3).set_dim([64, 32, 3, 3])
    return g, lambda torch, t: {3: torch.nn.grad.conv2d_weight(t[2].double(), (64, 32, 3, 3), t[1].double(),
                                                               padding=1)}


@case
def pointwise_chain(dt):
    g = hd.Graph(name="chain", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[1024, 1024])
    b = g.tensor(name="b", uid=2, dim=[1, 1024])
    y = g.pointwise(g.pointwise(x, b, mode=P.ADD), mode=P.RELU_FWD)
    y = g.pointwise(g.pointwise(y, y, mode=P.MUL), mode=P.TANH_FWD)
    y.set_output(True).set_uid(3)
    return g, lambda torch, t: {3: torch.tanh(torch.relu(t[1].double() + t[2].double()) ** 2)}


@case
def reductions(dt):
    g = hd.Graph(name="reductions", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[8, 64, 128])
    g.reduction(x, mode=hd.ReductionMode.ADD).set_output(True).set_uid(2).set_dim([8, 64, 1])
    g.reduction(x, mode=hd.ReductionMode.AMAX).set_output(True).set_uid(3).set_dim([8, 1, 1])
    g.reduction(x, mode=hd.ReductionMode.NORM2).set_output(True).set_uid(4).set_dim([1, 64, 1])
    return g, lambda torch, t: {2: t[1].double().sum(-1, keepdim=True),
                                3: t[1].double().abs().amax((1, 2), keepdim=True),
                                4: t[1].double().pow(2).sum((0, 2), keepdim=True).sqrt()}


@case
def layernorm_rmsnorm(dt):
    g = hd.Graph(name="norms", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[16, 128, 256])
    s = g.tensor(name="scale", uid=2, dim=[1, 128, 256])
    b = g.tensor(name="bias", uid=3, dim=[1, 128, 256])
    y, _, _ = g.layernorm(x, s, b, epsilon=1e-5)
    y.set_output(True).set_uid(4)
    g.rmsnorm(x, s, epsilon=1e-5).set_output(True).set_uid(5)

    def refs(torch, t):
        x64 = t[1].double()
        ln = torch.nn.functional.layer_norm(x64, x64.shape[1:], t[2].double()[0], t[3].double()[0], eps=1e-5)
        rms = x64 / torch.sqrt(x64.pow(2).mean((1, 2), keepdim=True) + 1e-5) * t[2].double()
        return {4: ln, 5: rms}
    return g, refs


@case
def layernorm_training(dt):
    g = hd.Graph(name="layernorm_training", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[16, 128, 256])
    s = g.tensor(name="scale", uid=2, dim=[1, 128, 256])
    b = g.tensor(name="bias", uid=3, dim=[1, 128, 256])
    y, mean, inv = g.layernorm(x, s, b, epsilon=1e-5, forward_phase=hd.NormFwdPhase.TRAINING)
    y.set_output(True).set_uid(4)
    mean.set_output(True).set_uid(5).set_data_type(hd.DataType.FLOAT)
    inv.set_output(True).set_uid(6).set_data_type(hd.DataType.FLOAT)

    def refs(torch, t):
        x64 = t[1].double()
        m = x64.mean((1, 2), keepdim=True)
        var = (x64 - m).pow(2).mean((1, 2), keepdim=True)
        return {4: (x64 - m) / torch.sqrt(var + 1e-5) * t[2].double() + t[3].double(), 5: m,
                6: 1 / torch.sqrt(var + 1e-5)}
    return g, refs


@case
def rmsnorm_only(dt):
    g = hd.Graph(name="rmsnorm", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[16, 128, 256])
    s = g.tensor(name="scale", uid=2, dim=[1, 128, 256])
    g.rmsnorm(x, s, epsilon=1e-5).set_output(True).set_uid(3)
    return g, lambda torch, t: {3: t[1].double() / torch.sqrt(t[1].double().pow(2).mean((1, 2), keepdim=True) + 1e-5)
                                * t[2].double()}


@case
def batchnorm_inference(dt):
    g = hd.Graph(name="bn", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[8, 64, 28, 28], stride=nhwc(8, 64, 28, 28))
    m, v, s, b = (g.tensor(name=n, uid=u, dim=[1, 64, 1, 1]) for n, u in
                  (("mean", 2), ("inv_var", 3), ("scale", 4), ("bias", 5)))
    g.batchnorm_inference(x, m, v, s, b).set_output(True).set_uid(6).set_stride(nhwc(8, 64, 28, 28))
    return g, lambda torch, t: {6: (t[1].double() - t[2].double()) * t[3].double().abs() * t[4].double()
                                + t[5].double()}


@case
def sdpa_causal_gqa(dt):
    g = hd.Graph(name="sdpa", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    q = g.tensor(name="q", uid=1, dim=[2, 8, 256, 64])
    k = g.tensor(name="k", uid=2, dim=[2, 2, 256, 64])
    v = g.tensor(name="v", uid=3, dim=[2, 2, 256, 64])
    g.sdpa(q, k, v, is_causal=True).set_output(True).set_uid(4)
    return g, lambda torch, t: {4: torch.nn.functional.scaled_dot_product_attention(
        t[1].double(), t[2].double(), t[3].double(), is_causal=True, enable_gqa=True)}


# Strided views (issue 13): cases whose inputs/outputs are views into shared buffers. VIEWS[name]
# rebinds the runner's tensors as such views and returns a check that the memory around them is intact.
VIEWS = {}
PB, PS, PH, PD = 2, 128, 4, 64


@case
def sdpa_packed_qkv_slot_out(dt):
    """Q, K, V as views of one packed [B, S, 3, H, D] buffer; O written into slot 1 of [B, S, 2, H, D]."""
    g = hd.Graph(name="sdpa_packed_qkv", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    st = [PS * 3 * PH * PD, PD, 3 * PH * PD, 1]
    q, k, v = (g.tensor(name=n, uid=u, dim=[PB, PH, PS, PD], stride=st) for n, u in (("q", 1), ("k", 2), ("v", 3)))
    g.sdpa(q, k, v, attn_scale=0.125).set_output(True).set_uid(4).set_stride([PS * 2 * PH * PD, PD, 2 * PH * PD, 1])
    return g, lambda torch, t: {4: torch.nn.functional.scaled_dot_product_attention(
        t[1].double(), t[2].double(), t[3].double(), scale=0.125)}


def _packed_views(torch, t):
    ref = t[1]
    qkv = torch.randn((PB, PS, 3, PH, PD), device=ref.device, dtype=torch.float32).to(ref.dtype)
    big = torch.full((PB, PS, 2, PH, PD), 7.0, device=ref.device, dtype=ref.dtype)
    t = dict(t)
    for i, u in enumerate((1, 2, 3)):
        t[u] = qkv[:, :, i].transpose(1, 2)
    t[4] = big[:, :, 1].transpose(1, 2)
    return t, lambda: bool((big[:, :, 0] == 7.0).all())


VIEWS["sdpa_packed_qkv_slot_out"] = _packed_views


@case
def matmul_sliced_input_slot_out(dt):
    """x: columns 64..576 of a [256, 640] activation; y written into columns 128..384 of [256, 512]."""
    g = hd.Graph(name="matmul_sliced", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[256, 512], stride=[640, 1])
    w = g.tensor(name="w", uid=2, dim=[512, 256])
    g.pointwise(g.matmul(x, w), mode=P.RELU_FWD).set_output(True).set_uid(3).set_stride([512, 1])
    return g, lambda torch, t: {3: torch.relu(t[1].double() @ t[2].double())}


def _sliced_views(torch, t):
    ref = t[1]
    wide = torch.randn((256, 640), device=ref.device, dtype=torch.float32).to(ref.dtype)
    big = torch.full((256, 512), -2.0, device=ref.device, dtype=ref.dtype)
    t = dict(t)
    t[1], t[3] = wide[:, 64:576], big[:, 128:384]
    return t, lambda: bool((big[:, :128] == -2.0).all() and (big[:, 384:] == -2.0).all())


VIEWS["matmul_sliced_input_slot_out"] = _sliced_views


# Flag variants for the conv cases (before/after of the GPU default flags, in one run):
# (keep the per-target default flags?, extra flags)
# NOTE: codegen options such as --iree-codegen-llvmgpu-use-igemm are global LLVM options that
# the in-process compiler session refuses, so only the preprocessing choice is varied here.
CONV_VARIANTS = {
    "no_conv_flags": (False, ()),
}


def compile_all(target: str, out: str, names=None, variants: bool = False) -> None:
    from hipdnn_iree.plugins.iree_linalg import targets as _targets
    from hipdnn_iree.plugins.iree_linalg import ENGINE_ID
    os.makedirs(out, exist_ok=True)
    default_gpu_flags = _targets.GPU_CONV_FLAGS
    manifest = []
    for name, fn in CASES.items():
        if names and name not in names:
            continue
        todo = {"default": (True, ())}
        if variants and name.startswith("conv"):
            todo.update(CONV_VARIANTS)
        for vname, (keep, extra) in todo.items():
            _targets.GPU_CONV_FLAGS = default_gpu_flags if keep else ()
            h = hd.create_handle(device=None, target=target)
            h.resource_manager.plugin_for(ENGINE_ID).compile_flags = tuple(extra)
            for dt in DT:
                g, _ = fn(dt)
                t0 = time.perf_counter()
                try:
                    g.build(h)
                except hd.HipdnnError as ex:
                    print(f"FAILED {name} {dt} {vname}: {str(ex).splitlines()[0][:200]}", flush=True)
                    manifest.append({"case": name, "dtype": dt, "variant": vname, "plan": None,
                                     "compile_error": str(ex)[:2000]})
                    continue
                path = os.path.join(out, f"{name}.{dt}.{vname}.plan")
                hd.save_plan(path, g.serialize_compiled_plan())
                dispatches = g.get_execution_plan().context.dispatch_count
                manifest.append({"case": name, "dtype": dt, "variant": vname, "plan": os.path.basename(path),
                                 "dispatches": dispatches, "compile_s": round(time.perf_counter() - t0, 2)})
                print(f"compiled {name} {dt} {vname}: {dispatches} dispatches", flush=True)
    _targets.GPU_CONV_FLAGS = default_gpu_flags
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"target": target, "cases": manifest}, f, indent=1)


def _torch_inputs(torch, tensors, dt, device):
    gen = torch.Generator(device=device).manual_seed(0)
    out = {}
    for t in tensors:
        dims, strides = list(t.dims), list(t.strides)
        tdt = {hd.DataType.FLOAT: "float32", hd.DataType.HALF: "float16", hd.DataType.BFLOAT16: "bfloat16",
               hd.DataType.BOOLEAN: "bool"}.get(t.data_type, TORCH_DT[dt])
        buf = torch.empty_strided(dims, strides, dtype=getattr(torch, tdt), device=device)
        if t.role == "input" and tdt == "bool":
            # a keep-mask [.., Sq, Skv]: about 70% kept, and every fifth query row masked entirely
            keep = torch.rand(dims, generator=gen, device=device) < 0.7
            keep[..., ::5, :] = False
            buf.copy_(keep)
        elif t.role == "input":
            vals = torch.randn(dims, generator=gen, device=device, dtype=torch.float32)
            if t.name in ("inv_var",):
                vals = vals.abs() + 0.5
            buf.copy_(vals)
        else:
            buf.fill_(float("nan"))
        out[t.uid] = buf
    return out


def run_all(plans: str, device: str, out_json: str | None) -> int:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tdev = "cuda" if device.startswith(("cuda", "hip")) else "cpu"
    manifest = json.load(open(os.path.join(plans, "manifest.json")))
    h = hd.create_handle(device=device, target=manifest["target"] if tdev == "cuda" else None)
    results, failures = [], 0
    for entry in manifest["cases"]:
        name, dt = entry["case"], entry["dtype"]
        if entry.get("plan") is None:
            results.append({"case": name, "dtype": dt, "variant": entry.get("variant", "default"), "ok": False, "max_rel_err": None, "restore_ms": None,
                            "first_exec_ms": None, "dispatches": None,
                            "error": "compile failed: " + entry["compile_error"].splitlines()[0][:150]})
            failures += 1
            continue
        _, refs = CASES[name](dt)
        t0 = time.perf_counter()
        r = hd.Graph.from_compiled_plan(h, hd.load_plan(os.path.join(plans, entry["plan"])))
        restore = time.perf_counter() - t0
        tensors = r.get_compiled_plan_tensors()
        t = _torch_inputs(torch, tensors, dt, tdev)
        intact = None
        if name in VIEWS:
            t, intact = VIEWS[name](torch, t)
        if tdev == "cpu":   # CPU smoke of this script: numpy views of the torch tensors
            import ml_dtypes
            pack = {u: v.numpy() if v.dtype != torch.bfloat16 else
                    np.lib.stride_tricks.as_strided(v.view(torch.int16).numpy().view(ml_dtypes.bfloat16),
                                                    v.shape, [s * 2 for s in v.stride()]) for u, v in t.items()}
        else:
            pack = t
        try:
            t1 = time.perf_counter()
            r.execute(h, pack)
            torch.cuda.synchronize() if tdev == "cuda" else None
            first = time.perf_counter() - t1
            want = refs(torch, t)
            errs = {}
            for uid, ref in want.items():
                got = t[uid].double()
                scale = max(float(ref.abs().max()), 1e-6)
                errs[uid] = float((got - ref).abs().max()) / scale
            ok = all(e <= TOL[dt] and math.isfinite(e) for e in errs.values())
            err_text = ""
            if intact is not None and not intact():
                ok, err_text = False, "memory around a strided view was changed"
        except Exception as e:  # reported, not raised: the matrix should finish
            ok, errs, first, err_text = False, {}, float("nan"), f"{type(e).__name__}: {e}"[:300]
        failures += not ok
        row = {"case": name, "dtype": dt, "variant": entry.get("variant", "default"), "ok": ok, "max_rel_err": max(errs.values()) if errs else None,
               "restore_ms": round(restore * 1e3, 2), "first_exec_ms": round(first * 1e3, 2),
               "dispatches": entry.get("dispatches"), "error": err_text}
        results.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n| case | dtype | variant | ok | max rel err | restore ms | first exec ms | dispatches |\n|---|---|---|---|---|---|---|---|")
    for row in results:
        err = "-" if row["max_rel_err"] is None else f"{row['max_rel_err']:.2e}"
        print(f"| {row['case']} | {row['dtype']} | {row['variant']} | {'PASS' if row['ok'] else 'FAIL ' + row['error']} | {err} | "
              f"{row['restore_ms']} | {row['first_exec_ms']} | {row['dispatches']} |")
    if out_json:
        with open(out_json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("--target", default="cuda:sm_80")
    c.add_argument("--out", default=".gpu_plans")
    c.add_argument("--only", nargs="*")
    c.add_argument("--variants", action="store_true", help="also compile the conv cases in CONV_VARIANTS")
    r = sub.add_parser("run")
    r.add_argument("--plans", default=".gpu_plans")
    r.add_argument("--device", default="cuda")
    r.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "compile":
        compile_all(args.target, args.out, args.only, args.variants)
        return 0
    return run_all(args.plans, args.device, args.json)


if __name__ == "__main__":
    sys.exit(main())
