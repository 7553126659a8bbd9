"""GPU correctness gate made of real model blocks: plans compiled HERE, run on a GPU, checked
against a float64 PyTorch reference from the same inputs and timed against PyTorch eager.

    python benchmarks/gpu_blocks.py compile --target cuda:sm_80 --out .gpu_blocks   # build machine
    python benchmarks/gpu_blocks.py run --plans .gpu_blocks --device cuda --out DIR   # GPU machine

Run it for every change that touches GPU lowering or GPU flags. Blocks (each one graph, FLOAT, HALF
and BFLOAT16 io with FLOAT compute): ResNet-50 bottleneck (NHWC) and stem (7x7/2 conv, bn, relu;
no max-pool: hipDNN's graph API has none here), BERT-base attention with its Q/K/V projections
and the output/FFN half (output projection, residual, layernorm, GELU FFN, layernorm), a
Llama-style block (rmsnorm, projections, causal grouped-query sdpa) and its SwiGLU MLP, a MobileNet
depthwise-separable block (NHWC), a 1-D conv and a 3-D conv (NDHWC). Shapes are moderate so the
27 plans compile in a few minutes on a 2-core machine.

The run step needs only the IREE runtime, hipdnn-iree's sources and torch; it never compiles.
Output: ``blocks.json`` and ``blocks.md`` (block x dtype: error, hipdnn-iree ms, torch eager ms, ratio).
Timing: medians over interleaved rounds (hipdnn-iree, then torch eager, on the same inputs),
device-resident buffers, a device sync after each call.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import hipdnn_iree as hd

DT = {"f32": hd.DataType.FLOAT, "f16": hd.DataType.HALF, "bf16": hd.DataType.BFLOAT16}
TORCH_DT = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
TOL = {"f32": 2e-3, "f16": 2e-2, "bf16": 6e-2}   # max |err| / max |ref| per output, by io type
P = hd.PointwiseMode
BLOCKS = {}


def block(fn):
    BLOCKS[fn.__name__] = fn
    return fn


def nhwc(n, c, h, w):
    """Strides of logical NCHW dims stored channels-last."""
    return [h * w * c, 1, w * c, c]


def ndhwc(n, c, d, h, w):
    return [d * h * w * c, 1, h * w * c, w * c, c]


def linear_w(g, name, uid, n_in, n_out):
    """An nn.Linear weight [out, in] seen as the matmul operand [in, out] (strides [1, in])."""
    return g.tensor(name=name, uid=uid, dim=[n_in, n_out], stride=[1, n_in])


class _Uids:
    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1
        return self.n


# Each block(dt) returns (graph, forward, special) where forward(torch, t) computes every output
# (uid -> tensor) from the inputs t (uid -> tensor) in whatever dtype they come: float64 copies for
# the reference, the io dtype for the torch eager timing. special maps input names to value kinds.

def _bn(g, uid, x, c, name):
    m, v, s, b = (g.tensor(name=f"{name}_{k}", uid=uid(), dim=[1, c, 1, 1]) for k in ("mean", "inv_var", "scale", "bias"))
    return g.batchnorm_inference(x, m, v, s, b), (m.get_uid(), v.get_uid(), s.get_uid(), b.get_uid())


def _bn_t(t, x, ids):
    m, v, s, b = (t[i] for i in ids)
    return (x - m) * v * s + b


@block
def resnet50_bottleneck(dt):
    n, c, mid, hw = 2, 256, 64, 56
    g = hd.Graph(name="resnet50_bottleneck", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    uid = _Uids()
    x = g.tensor(name="x", uid=uid(), dim=[n, c, hw, hw], stride=nhwc(n, c, hw, hw))
    w1 = g.tensor(name="w1", uid=uid(), dim=[mid, c, 1, 1], stride=nhwc(mid, c, 1, 1))
    w2 = g.tensor(name="w2", uid=uid(), dim=[mid, mid, 3, 3], stride=nhwc(mid, mid, 3, 3))
    w3 = g.tensor(name="w3", uid=uid(), dim=[c, mid, 1, 1], stride=nhwc(c, mid, 1, 1))
    y = g.conv_fprop(x, w1, padding=[0, 0], stride=[1, 1], dilation=[1, 1])
    y, bn1 = _bn(g, uid, y, mid, "bn1")
    y = g.pointwise(y, mode=P.RELU_FWD)
    y = g.conv_fprop(y, w2, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    y, bn2 = _bn(g, uid, y, mid, "bn2")
    y = g.pointwise(y, mode=P.RELU_FWD)
    y = g.conv_fprop(y, w3, padding=[0, 0], stride=[1, 1], dilation=[1, 1])
    y, bn3 = _bn(g, uid, y, c, "bn3")
    y = g.pointwise(g.pointwise(y, x, mode=P.ADD), mode=P.RELU_FWD)
    y.set_output(True).set_uid(100).set_stride(nhwc(n, c, hw, hw))

    def forward(torch, t):
        F = torch.nn.functional
        z = torch.relu(_bn_t(t, F.conv2d(t[1], t[2]), bn1))
        z = torch.relu(_bn_t(t, F.conv2d(z, t[3], padding=1), bn2))
        return {100: torch.relu(_bn_t(t, F.conv2d(z, t[4]), bn3) + t[1])}
    return g, forward


@block
def resnet50_stem(dt):
    n, hw = 2, 224
    g = hd.Graph(name="resnet50_stem", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    uid = _Uids()
    x = g.tensor(name="x", uid=uid(), dim=[n, 3, hw, hw], stride=nhwc(n, 3, hw, hw))
    w = g.tensor(name="w", uid=uid(), dim=[64, 3, 7, 7], stride=nhwc(64, 3, 7, 7))
    y = g.conv_fprop(x, w, padding=[3, 3], stride=[2, 2], dilation=[1, 1])
    y, bn = _bn(g, uid, y, 64, "bn")
    y = g.pointwise(y, mode=P.RELU_FWD)
    y.set_output(True).set_uid(100).set_stride(nhwc(n, 64, hw // 2, hw // 2))

    def forward(torch, t):
        return {100: torch.relu(_bn_t(t, torch.nn.functional.conv2d(t[1], t[2], stride=2, padding=3), bn))}
    return g, forward


@block
def bert_attention(dt):
    """The graph of issue 15: x -> Q/K/V per-head projections + biases -> sdpa, output BSHD."""
    b, s, heads, d = 2, 128, 12, 64
    e = heads * d
    g = hd.Graph(name="bert_attention", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[b, 1, s, e])
    qkv, uid = [], 2
    for n in "qkv":
        w = g.tensor(name="w" + n, uid=uid, dim=[1, heads, e, d], stride=[heads * d * e, d * e, 1, e])
        bias = g.tensor(name="b" + n, uid=uid + 1, dim=[1, heads, 1, d])
        qkv.append(g.pointwise(g.matmul(x, w), bias, mode=P.ADD))
        uid += 2
    o = g.sdpa(*qkv, attn_scale=1.0 / 8)
    o.set_output(True).set_uid(100).set_stride([s * e, d, e, 1])

    def forward(torch, t):
        q, k, v = (t[1] @ t[i] + t[i + 1] for i in (2, 4, 6))
        return {100: torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0 / 8)}
    return g, forward


@block
def bert_output_ffn(dt):
    """Tokens [B*S, 768]: LN(attn Wo + bo + x), then LN(gelu(y W1 + b1) W2 + b2 + y)."""
    tok, e, f = 256, 768, 3072
    g = hd.Graph(name="bert_output_ffn", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    attn = g.tensor(name="attn", uid=1, dim=[tok, e])
    x = g.tensor(name="x", uid=2, dim=[tok, e])
    wo, bo = linear_w(g, "wo", 3, e, e), g.tensor(name="bo", uid=4, dim=[1, e])
    g1, b1 = g.tensor(name="ln1_scale", uid=5, dim=[1, e]), g.tensor(name="ln1_bias", uid=6, dim=[1, e])
    w1, bb1 = linear_w(g, "w1", 7, e, f), g.tensor(name="b1", uid=8, dim=[1, f])
    w2, bb2 = linear_w(g, "w2", 9, f, e), g.tensor(name="b2", uid=10, dim=[1, e])
    g2, b2 = g.tensor(name="ln2_scale", uid=11, dim=[1, e]), g.tensor(name="ln2_bias", uid=12, dim=[1, e])
    y = g.pointwise(g.pointwise(g.matmul(attn, wo), bo, mode=P.ADD), x, mode=P.ADD)
    y, _, _ = g.layernorm(y, g1, b1, epsilon=1e-12)
    h = g.pointwise(g.pointwise(g.matmul(y, w1), bb1, mode=P.ADD), mode=P.GELU_FWD)
    z = g.pointwise(g.pointwise(g.matmul(h, w2), bb2, mode=P.ADD), y, mode=P.ADD)
    z, _, _ = g.layernorm(z, g2, b2, epsilon=1e-12)
    z.set_output(True).set_uid(100)

    def forward(torch, t):
        F = torch.nn.functional
        y = F.layer_norm(t[1] @ t[3] + t[4] + t[2], (e,), t[5][0], t[6][0], eps=1e-12)
        h = F.gelu(y @ t[7] + t[8])
        return {100: F.layer_norm(h @ t[9] + t[10] + y, (e,), t[11][0], t[12][0], eps=1e-12)}
    return g, forward


@block
def llama_gqa_attention(dt):
    """Batch 1: rmsnorm over tokens [S, E], per-head projections, causal GQA sdpa, output BSHD."""
    s, e, hq, hk, d = 256, 1024, 16, 4, 64
    g = hd.Graph(name="llama_gqa_attention", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[s, e])
    gamma = g.tensor(name="norm_scale", uid=2, dim=[1, e])
    xn = g.rmsnorm(x, gamma, epsilon=1e-5)
    outs = []
    for i, (n, heads) in enumerate((("q", hq), ("k", hk), ("v", hk))):
        w = g.tensor(name="w" + n, uid=3 + i, dim=[1, heads, e, d], stride=[heads * d * e, d * e, 1, e])
        outs.append(g.matmul(xn, w))
    o = g.sdpa(*outs, is_causal=True)
    o.set_output(True).set_uid(100).set_stride([s * hq * d, d, hq * d, 1])

    def forward(torch, t):
        xn = t[1] * torch.rsqrt(t[1].pow(2).mean(-1, keepdim=True) + 1e-5) * t[2]
        q, k, v = (xn @ t[i] for i in (3, 4, 5))
        return {100: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)}
    return g, forward


@block
def llama_swiglu_mlp(dt):
    tok, e, f = 256, 1024, 2816
    g = hd.Graph(name="llama_swiglu_mlp", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[tok, e])
    gamma = g.tensor(name="norm_scale", uid=2, dim=[1, e])
    wg, wu, wd = linear_w(g, "w_gate", 3, e, f), linear_w(g, "w_up", 4, e, f), linear_w(g, "w_down", 5, f, e)
    xn = g.rmsnorm(x, gamma, epsilon=1e-5)
    hmid = g.pointwise(g.pointwise(g.matmul(xn, wg), mode=P.SWISH_FWD), g.matmul(xn, wu), mode=P.MUL)
    y = g.pointwise(g.matmul(hmid, wd), x, mode=P.ADD)
    y.set_output(True).set_uid(100)

    def forward(torch, t):
        F = torch.nn.functional
        xn = t[1] * torch.rsqrt(t[1].pow(2).mean(-1, keepdim=True) + 1e-5) * t[2]
        return {100: (F.silu(xn @ t[3]) * (xn @ t[4])) @ t[5] + t[1]}
    return g, forward


@block
def mobilenet_dw_separable(dt):
    n, c, co, hw = 2, 128, 256, 56
    g = hd.Graph(name="mobilenet_dw_separable", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    uid = _Uids()
    x = g.tensor(name="x", uid=uid(), dim=[n, c, hw, hw], stride=nhwc(n, c, hw, hw))
    wd = g.tensor(name="w_dw", uid=uid(), dim=[c, 1, 3, 3], stride=nhwc(c, 1, 3, 3))
    wp = g.tensor(name="w_pw", uid=uid(), dim=[co, c, 1, 1], stride=nhwc(co, c, 1, 1))
    six = g.tensor(name="six", uid=uid(), dim=[1], value=6.0)
    y = g.conv_fprop(x, wd, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    y, bn1 = _bn(g, uid, y, c, "bn1")
    y = g.pointwise(g.pointwise(y, mode=P.RELU_FWD), six, mode=P.MIN_OP)
    y = g.conv_fprop(y, wp, padding=[0, 0], stride=[1, 1], dilation=[1, 1])
    y, bn2 = _bn(g, uid, y, co, "bn2")
    y = g.pointwise(g.pointwise(y, mode=P.RELU_FWD), six, mode=P.MIN_OP)
    y.set_output(True).set_uid(100).set_stride(nhwc(n, co, hw, hw))

    def forward(torch, t):
        F = torch.nn.functional
        z = F.relu6(_bn_t(t, F.conv2d(t[1], t[2], padding=1, groups=c), bn1))
        return {100: F.relu6(_bn_t(t, F.conv2d(z, t[3]), bn2))}
    return g, forward


@block
def conv1d_bias_gelu(dt):
    n, c, co, length = 4, 256, 256, 400
    g = hd.Graph(name="conv1d_bias_gelu", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[n, c, length])
    w = g.tensor(name="w", uid=2, dim=[co, c, 3])
    b = g.tensor(name="b", uid=3, dim=[1, co, 1])
    y = g.conv_fprop(x, w, padding=[1], stride=[1], dilation=[1])
    y = g.pointwise(g.pointwise(y, b, mode=P.ADD), mode=P.GELU_FWD)
    y.set_output(True).set_uid(100)

    def forward(torch, t):
        F = torch.nn.functional
        return {100: F.gelu(F.conv1d(t[1], t[2], padding=1) + t[3])}
    return g, forward


@block
def conv3d_ndhwc_bias_relu(dt):
    n, c, co, d, hw = 2, 32, 64, 8, 28
    g = hd.Graph(name="conv3d_ndhwc_bias_relu", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[n, c, d, hw, hw], stride=ndhwc(n, c, d, hw, hw))
    w = g.tensor(name="w", uid=2, dim=[co, c, 3, 3, 3], stride=ndhwc(co, c, 3, 3, 3))
    b = g.tensor(name="b", uid=3, dim=[1, co, 1, 1, 1])
    y = g.conv_fprop(x, w, padding=[1, 1, 1], stride=[1, 1, 1], dilation=[1, 1, 1])
    y = g.pointwise(g.pointwise(y, b, mode=P.ADD), mode=P.RELU_FWD)
    y.set_output(True).set_uid(100).set_stride(ndhwc(n, co, d, hw, hw))

    def forward(torch, t):
        return {100: torch.relu(torch.nn.functional.conv3d(t[1], t[2], padding=1) + t[3])}
    return g, forward


# -- compile (build machine) ---------------------------------------------------------------------
def compile_all(target: str, out: str, names=None, dtypes=None) -> None:
    os.makedirs(out, exist_ok=True)
    h = hd.create_handle(device=None, target=target, cache=False)
    manifest = []
    for name, fn in BLOCKS.items():
        if names and name not in names:
            continue
        for dt in dtypes or DT:
            g, _ = fn(dt)
            t0 = time.perf_counter()
            try:
                g.build(h)
            except hd.HipdnnError as ex:
                print(f"FAILED {name} {dt}: {str(ex).splitlines()[0][:200]}", flush=True)
                manifest.append({"block": name, "dtype": dt, "plan": None, "compile_error": str(ex)[:3000]})
                continue
            path = os.path.join(out, f"{name}.{dt}.plan")
            hd.save_plan(path, g.serialize_compiled_plan())
            ctx = g.get_execution_plan().context
            manifest.append({"block": name, "dtype": dt, "plan": os.path.basename(path),
                             "dispatches": ctx.dispatch_count, "compile_s": round(time.perf_counter() - t0, 2),
                             "workarounds": workarounds_in(ctx.mlir, ctx.compile_flags)})
            print(f"compiled {name} {dt}: {ctx.dispatch_count} dispatches, {time.perf_counter() - t0:.1f} s", flush=True)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"target": target, "blocks": manifest}, f, indent=1)


def workarounds_in(mlir: str, flags) -> list[str]:
    """Which of docs/known_issues.md's workarounds a compiled plan carries."""
    found = []
    if "iree_tensor_ext.compute_barrier.start" in (mlir or ""):
        found.append("mma-transpose-barrier")
    if any("convert-conv-to-channels-last" in f for f in flags or ()):
        found.append("conv-channels-last")
    return found


# -- run (GPU machine) ---------------------------------------------------------------------------
def _inputs(torch, tensors, dt, device, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    tdt = getattr(torch, TORCH_DT[dt])
    out = {}
    for t in tensors:
        buf = torch.empty_strided(list(t.dims), list(t.strides), dtype=tdt, device=device)
        if t.role == "input":
            vals = torch.randn(list(t.dims), generator=gen, device=device, dtype=torch.float32)
            fan_in = _fan_in(t)
            if t.name.endswith("inv_var"):
                vals = vals.abs() * 0.5 + 0.5
            elif fan_in:
                vals = vals / math.sqrt(fan_in)   # weights at the usual init scale keep activations O(1)
            elif t.name.endswith(("_scale", "norm_scale")):
                vals = 1.0 + 0.1 * vals
            elif t.name.endswith(("_bias", "_mean")) or t.name in ("b", "bo", "b1", "b2", "bq", "bk", "bv"):
                vals = 0.1 * vals
            buf.copy_(vals)
        else:
            buf.fill_(float("nan"))
        out[t.uid] = buf
    return out


def _fan_in(t) -> int:
    """The reduction length a weight is contracted over (0 for anything that is not a weight)."""
    name, dims = t.name, list(t.dims)
    if not name.startswith("w"):
        return 0
    if len(dims) >= 3 and len(dims) != 4 or name.startswith("w_dw"):
        return int(math.prod(dims[1:]))           # conv filters [K, C, *R]
    if len(dims) == 4 and dims[0] > 1:
        return int(math.prod(dims[1:]))           # 2-D conv filters
    if len(dims) == 4:
        return dims[2]                            # per-head projection [1, H, E, D]
    return dims[0]                                # linear [in, out]


def _median_ms(xs):
    xs = sorted(xs)
    return 1e3 * xs[len(xs) // 2]


def _spread_ms(xs) -> dict:
    """Quartiles (25th/75th sample), min, max and sample count in ms: kept beside each median."""
    xs = sorted(x * 1e3 for x in xs)
    return {"q1": round(xs[len(xs) // 4], 4), "q3": round(xs[(3 * len(xs)) // 4], 4), "min": round(xs[0], 4),
            "max": round(xs[-1], 4), "n": len(xs)}


def run_all(plans: str, device: str, out: str | None, rounds: int = 5, calls: int = 10) -> int:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tdev = "cuda" if device.startswith(("cuda", "hip")) else "cpu"
    sync = torch.cuda.synchronize if tdev == "cuda" else (lambda: None)
    manifest = json.load(open(os.path.join(plans, "manifest.json")))
    h = hd.create_handle(device=device, target=manifest["target"] if tdev == "cuda" else None)
    results, failures = [], 0
    for entry in manifest["blocks"]:
        name, dt = entry["block"], entry["dtype"]
        row = {"block": name, "dtype": dt, "ok": False, "max_rel_err": None, "iree_ms": None, "torch_eager_ms": None,
               "ratio": None, "dispatches": entry.get("dispatches"), "compile_s": entry.get("compile_s"),
               "workarounds": entry.get("workarounds"), "error": ""}
        if entry.get("plan") is None:
            row["error"] = "compile failed: " + entry["compile_error"].splitlines()[0][:200]
            results.append(row)
            failures += 1
            print(json.dumps(row), flush=True)
            continue
        _, forward = BLOCKS[name](dt)
        try:
            r = hd.Graph.from_compiled_plan(h, hd.load_plan(os.path.join(plans, entry["plan"])))
            tensors = r.get_compiled_plan_tensors()
            t = _inputs(torch, tensors, dt, tdev)
            if tdev == "cpu":
                from hipdnn_iree.backend.selfcheck import to_host
                pack = {u: (to_host(v) if v.dtype != torch.bfloat16 else v) for u, v in t.items()}
            else:
                pack = t
            r.execute(h, pack)
            sync()
            with torch.no_grad():
                want = forward(torch, {u: v.double() for u, v in t.items()})
            errs = {}
            for uid, ref in want.items():
                got = t[uid].double()
                scale = max(float(ref.abs().max()), 1e-6)
                errs[uid] = float((got - ref).abs().max()) / scale if torch.isfinite(got).all() else float("nan")
            row["max_rel_err"] = max(errs.values())
            row["ok"] = all(math.isfinite(e) and e <= TOL[dt] for e in errs.values())
            # timing: interleaved rounds of hipdnn-iree and torch eager on the same device tensors
            ti, tt = [], []
            ins = {u: v for u, v in t.items() if u not in want}
            with torch.no_grad():
                for _ in range(2):
                    r.execute(h, pack), forward(torch, ins)
                sync()
                for _ in range(rounds):
                    for _ in range(calls):
                        s = time.perf_counter()
                        r.execute(h, pack)
                        sync()
                        ti.append(time.perf_counter() - s)
                    for _ in range(calls):
                        s = time.perf_counter()
                        forward(torch, ins)
                        sync()
                        tt.append(time.perf_counter() - s)
            row["iree_ms"], row["torch_eager_ms"] = round(_median_ms(ti), 4), round(_median_ms(tt), 4)
            row["iree_ms_spread"], row["torch_eager_ms_spread"] = _spread_ms(ti), _spread_ms(tt)
            row["ratio"] = round(row["iree_ms"] / row["torch_eager_ms"], 2)
        except Exception as e:  # reported, not raised: the gate should finish
            row["error"] = f"{type(e).__name__}: {e}"[:400]
        failures += not row["ok"]
        results.append(row)
        print(json.dumps(row), flush=True)
    table = markdown(results)
    print("\n" + table)
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "blocks.json"), "w") as f:
            json.dump({"target": manifest["target"], "device": device, "torch": torch.__version__,
                       "gpu": torch.cuda.get_device_name() if tdev == "cuda" else "cpu", "results": results}, f, indent=1)
        with open(os.path.join(out, "blocks.md"), "w") as f:
            f.write(table + "\n")
    return 1 if failures else 0


def markdown(results) -> str:
    lines = ["| block | dtype | ok | max rel err | hipdnn-iree ms | torch eager ms | / eager | dispatches |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        err = "-" if r["max_rel_err"] is None else f"{r['max_rel_err']:.2e}"
        ok = "PASS" if r["ok"] else ("FAIL " + r["error"][:80]).strip()
        lines.append(f"| {r['block']} | {r['dtype']} | {ok} | {err} | {r['iree_ms']} | {r['torch_eager_ms']} | "
                     f"{r['ratio']} | {r['dispatches']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("--target", default="cuda:sm_80")
    c.add_argument("--out", default=".gpu_blocks")
    c.add_argument("--only", nargs="*")
    c.add_argument("--dtypes", nargs="*", choices=list(DT))
    r = sub.add_parser("run")
    r.add_argument("--plans", default=".gpu_blocks")
    r.add_argument("--device", default="cuda")
    r.add_argument("--out", default=None)
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument("--calls", type=int, default=10)
    args = ap.parse_args(argv)
    if args.cmd == "compile":
        compile_all(args.target, args.out, args.only, args.dtypes)
        return 0
    return run_all(args.plans, args.device, args.out, args.rounds, args.calls)


if __name__ == "__main__":
    sys.exit(main())
