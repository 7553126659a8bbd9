"""Side by side (issue 27, item 6): the same cuDNN-frontend Python code, run once with ``import cudnn``
= NVIDIA's package (nvidia-cudnn-frontend) and once with ``hipdnn_iree.cudnn``, against torch eager.

Every case is written once, as ``build(cudnn, handle, torch) -> (graph, inputs, outputs)`` functions
(one per cuDNN-FE graph; a model block is a short sequence of them, one graph per fused op group,
executed in order) that take either module. ``inputs`` / ``outputs`` map a *binding key* to the
graph's tensor: ``"x"`` names a buffer, ``"qkv+768"`` the buffer ``qkv`` seen from element 768 with
the tensor's own dims and strides (a Q/K/V head view into a fused QKV projection), and
``"eps=1e-05"`` a one-element host value (a pass-by-value tensor). Buffers are shared by name
between the graphs of a block; the inputs no graph produces are filled once (fixed seed) and shared
by cuDNN, hipdnn-iree and torch; each side writes its own intermediates and outputs.

Cases (f16/bf16 io, FLOAT intermediate and compute):

  train (backward graphs; each a training step's forward-with-statistics graph and its backward graph,
       timed together): sdpa fwd+Stats then sdpa_backward, causal f16 B4 H16 S1024 D64 and bf16 B8 H12
       S512 D64; layernorm TRAINING then layernorm_backward f16 4096x1024; batchnorm training (running
       statistics) then batchnorm_backward f16 NHWC N32 C64 56x56; conv 3x3 dgrad then wgrad f16 NHWC
       N32 56x56 64->64

  1-3  conv + bias + relu, NHWC: 3x3 f16 N32 56x56 64->64 pad 1; 1x1 f16 N32 56x56 256->64 (ResNet-50's
       reduce); 3x3 bf16 N8 28x28 128->128 pad 1
  4-5  matmul + bias + gelu: f16 [4,512,1024] @ [1,1024,4096]; bf16 [8,128,4096] @ [1,4096,4096]
  6-8  sdpa (inference, no Stats, BHSD): causal f16 B4 H16 S1024 D64; f16 B8 H12 S512 D64; causal bf16
       B2 H32 S2048 D128
  9    layernorm f16 4096x1024 (as [4,1024,1024], scale + bias [1,1,1024], eps 1e-5, inference)
  blocks (weights at 1/sqrt(fan_in), so activations stay O(1) through the chain):
   - ResNet-50 bottleneck, f16 NHWC N32 56x56 256->64->64->256: 1x1+bias+relu, 3x3+bias+relu,
     1x1+bias+residual add+relu (the residual add+relu is the expand conv's epilogue: cuDNN fuses
     pointwise ops into a conv or matmul graph, and a graph of pointwise ops alone is not one it runs)
   - BERT-base encoder layer, f16 B8 S512 hidden 768 12 heads: QKV matmul+bias, sdpa on Q/K/V views of
     the QKV buffer (output BSHD), out-proj matmul+bias+residual add, layernorm, FFN matmul+bias+gelu,
     matmul+bias+residual add, layernorm (the residual adds are the matmuls' epilogues, as above)
   - Llama-7B-style block, bf16 B1 S2048 hidden 4096 32 heads D128 FFN 11008: rmsnorm, QKV matmul, causal
     sdpa, out-proj matmul+residual add, rmsnorm, gate matmul+silu, up matmul*gate, down matmul+residual
     add (no RoPE: the facade has no rope node)

Correctness: ours (hipdnn-iree) and cuDNN against a float32 torch reference of the same inputs
(rounded to the io type after each graph) and ours against cuDNN, with the tolerances cuDNN FE's
own tests use for that op and dtype (``TOL``; for blocks, which FE has no test of, max |err| /
max |ref| as benchmarks/gpu_blocks.py).

Timing, as issue 27 measured it: one call is one ``execute`` (a block: its graphs' executes in
order); a round is a burst of 10 calls then one ``torch.cuda.synchronize()``; 30 rounds after a
short warm-up; cuDNN, ours and torch eager interleaved round by round (ABAB: the same order every
round); the median per-call time. Achieved TFLOP/s (contractions, attention; causal attention counts
half) or GB/s (norms) for each side beside the H200's peaks. Geomeans of ours/cuDNN over the nine
op cases and over everything, and of ours/torch eager over the blocks (the acceptance figure).
ours runs with no stream set on its handle: its execute returns when IREE's work is done; cuDNN
runs on torch's current stream (``cudnn.set_stream``), as cuDNN FE's tests do.

Commands (plans are compiled here, for cuda:sm_80; the GPU machine has no IREE compiler)::

    # build machine
    python benchmarks/cudnn_side_by_side.py compile --out .gpu_side_by_side
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 -d .cudnn_whl nvidia-cudnn-frontend      # NVIDIA's frontend wheel

    # GPU machine, after gpu_run.sh's setup block (IREE runtime from .whl in /tmp/site, PYTHONPATH,
    # the checkout's entry points), carrying .gpu_side_by_side and .cudnn_whl:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .cudnn_whl/*.whl
    python3 benchmarks/cudnn_side_by_side.py run --plans .gpu_side_by_side \\
        --json "$OUT/side_by_side.json" --md "$OUT/side_by_side.md" > "$OUT/side_by_side.txt" 2>&1
    echo "side_by_side rc=$?"; cat "$OUT/side_by_side.md"

    # here, the whole flow on the CPU (ours only, tiny shapes, plans compiled on the fly):
    python benchmarks/cudnn_side_by_side.py run --cpu-check --json /tmp/sbs.json --md /tmp/sbs.md

``run`` writes the JSON after every case, so a run cut short keeps what it measured. It exits 0
when every comparison that ran passed. Each row also records the plans cuDNN picked
(``cudnn_plans``, its engine and knob names) and their workspace sizes. On an H200 (cuDNN 9.19,
frontend 1.32.0, torch 2.11) a whole run, builds included, took 25 to 45 s.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time

TARGET = "cuda:sm_80"
PEAKS = {"fp16_bf16_tensor_tflops": 989, "tf32_tflops": 494, "fp32_tflops": 67, "hbm_gbs": 4800}
PEAK_TEXT = "H200 SXM peaks: 989 TFLOP/s dense FP16/BF16 tensor, 494 TF32, 67 FP32; 4.8 TB/s HBM3e"
TORCH_DT = {"HALF": "float16", "BFLOAT16": "bfloat16", "FLOAT": "float32"}
CUDNN_DT = {"f16": "HALF", "bf16": "BFLOAT16", "f32": "FLOAT"}
# (atol, rtol) of cuDNN FE's own tests (its test/python files), by op kind and io type
TOL = {
    ("conv", "f16"): (5e-2, 1e-2),        # test_conv_bias.py, conv+bias+relu f16
    ("conv", "bf16"): (1.0, 2e-2),        # no bf16 conv test in FE: its bf16 matmul+bias tolerance
    ("matmul", "f16"): (0.25, 1e-2),      # test_matmul_bias_relu.py, f16
    ("matmul", "bf16"): (1.0, 2e-2),      # test_matmul_bias_relu.py, bf16
    ("sdpa", "f16"): (2e-2, 2e-2),        # test_mhas.py, O
    ("sdpa", "bf16"): (2e-2, 2e-2),
    ("layernorm", "f16"): (1e-2, 1e-2),   # test_layernorm.py
    ("layernorm", "bf16"): (0.125, 0.125),
}
BLOCK_TOL = {"f16": 2e-2, "bf16": 6e-2}   # max |err| / max |ref| (benchmarks/gpu_blocks.py)


# -- how a case is written ----------------------------------------------------------------------------
class Stage:
    """One cuDNN-FE graph: ``build(cudnn, handle, torch) -> (graph, inputs, outputs)`` and the same math
    in torch (``eager(torch, bufs) -> {key: tensor}``, reading the buffers by name)."""

    def __init__(self, name, build, eager, flops=0, nbytes=0):
        self.name, self.build, self.eager, self.flops, self.nbytes = name, build, eager, flops, nbytes


class Case:
    def __init__(self, name, group, kind, dtype, shape, stages, fills=None, check=None, causal=False):
        self.name, self.group, self.kind, self.dtype, self.shape = name, group, kind, dtype, shape
        self.stages, self.fills, self.causal = stages, fills or {}, causal
        self.check = check or list(stages[-1].out_keys)

    @property
    def flops(self):
        return sum(s.flops for s in self.stages)

    @property
    def nbytes(self):
        return sum(s.nbytes for s in self.stages)


def _is_ours(cudnn) -> bool:
    return cudnn.__name__.startswith("hipdnn_iree")


def _dt(cudnn, dt):
    return getattr(cudnn.data_type, CUDNN_DT[dt])


def _graph(cudnn, handle, dt):
    return cudnn.pygraph(io_data_type=_dt(cudnn, dt), intermediate_data_type=cudnn.data_type.FLOAT,
                         compute_data_type=cudnn.data_type.FLOAT, handle=handle)


def _tensor(g, cudnn, name, dims, strides, dt):
    return g.tensor(name=name, dim=list(dims), stride=list(strides), data_type=_dt(cudnn, dt))


def _output(t, cudnn, dims, strides, dt):
    t.set_output(True).set_dim(list(dims)).set_stride(list(strides)).set_data_type(_dt(cudnn, dt))
    return t


def _epsilon(cudnn, g, value, ins):
    """cuDNN's norms take epsilon as a pass-by-value tensor (NVIDIA's frontend refuses a float). The
    facade bakes a pass-by-value epsilon into the plan at the first execute and cannot serialize
    before it, so for it the value goes in as a Python float, which it bakes at build."""
    if _is_ours(cudnn):
        return float(value)
    t = g.tensor(name="epsilon", dim=[1, 1, 1], stride=[1, 1, 1], is_pass_by_value=True,
                 data_type=cudnn.data_type.FLOAT)
    ins[f"eps={value!r}"] = t
    return t


def nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


def packed(dims):
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return out[::-1]


def conv_stage(name, dt, n, c, k, hw, r, pad, x="x", w="w", b="b", y="y", relu=True, residual=None):
    def build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        X = _tensor(g, cudnn, x, [n, c, hw, hw], nhwc(n, c, hw, hw), dt)
        W = _tensor(g, cudnn, w, [k, c, r, r], nhwc(k, c, r, r), dt)
        B = _tensor(g, cudnn, b, [1, k, 1, 1], nhwc(1, k, 1, 1), dt)
        ins = {x: X, w: W, b: B}
        Y = g.conv_fprop(image=X, weight=W, padding=[pad, pad], stride=[1, 1], dilation=[1, 1])
        Y = g.bias(input=Y, bias=B)
        if residual:
            R = ins[residual] = _tensor(g, cudnn, residual, [n, k, hw, hw], nhwc(n, k, hw, hw), dt)
            Y = g.add(a=Y, b=R)
        if relu:
            Y = g.relu(input=Y)
        return g, ins, {y: _output(Y, cudnn, [n, k, hw, hw], nhwc(n, k, hw, hw), dt)}

    def eager(torch, t):
        z = torch.nn.functional.conv2d(t[x], t[w], t[b].reshape(-1), padding=pad)
        if residual:
            z = z + t[residual]
        return {y: torch.relu(z) if relu else z}
    s = Stage(name, build, eager, flops=2 * n * k * hw * hw * c * r * r)
    s.out_keys = [y]
    return s


def matmul_stage(name, dt, bsz, m, kk, n, a="a", w="w", bias=None, act=None, mul=None, residual=None, y="y"):
    """[bsz, m, kk] @ [1, kk, n] (+ bias [1, 1, n]) (gelu | silu) (* mul) (+ residual), row-major."""
    def build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        A = _tensor(g, cudnn, a, [bsz, m, kk], packed([bsz, m, kk]), dt)
        W = _tensor(g, cudnn, w, [1, kk, n], packed([1, kk, n]), dt)
        ins = {a: A, w: W}
        C = g.matmul(A=A, B=W)
        if bias:
            ins[bias] = _tensor(g, cudnn, bias, [1, 1, n], packed([1, 1, n]), dt)
            C = g.bias(input=C, bias=ins[bias])
        if act == "gelu":
            C = g.gelu(input=C)
        elif act == "silu":
            C = g.swish(input=C, swish_beta=1.0)
        for key, op in ((mul, "mul"), (residual, "add")):
            if key:
                ins[key] = _tensor(g, cudnn, key, [bsz, m, n], packed([bsz, m, n]), dt)
                C = getattr(g, op)(a=C, b=ins[key])
        return g, ins, {y: _output(C, cudnn, [bsz, m, n], packed([bsz, m, n]), dt)}

    def eager(torch, t):
        F = torch.nn.functional
        z = F.linear(_bse(torch, t[a], (bsz, m), kk), t[w][0].t(), t[bias].reshape(-1) if bias else None)
        if act == "gelu":
            z = F.gelu(z)
        elif act == "silu":
            z = F.silu(z)
        if mul:
            z = z * t[mul].reshape(bsz, m, n)
        if residual:
            z = z + t[residual].reshape(bsz, m, n)
        return {y: z}
    s = Stage(name, build, eager, flops=2 * bsz * m * n * kk)
    s.out_keys = [y]
    return s


def sdpa_stage(name, dt, b, h, s, d, causal, q="q", k="k", v="v", o="o", qkv=None):
    """Inference sdpa, no Stats. ``qkv=None``: Q, K, V and O packed BHSD. ``qkv="buf"``: Q, K, V are
    head views of the fused projection ``buf`` [B, S, 3*H*D] and O is BSHD ([B, S, H*D] row-major)."""
    e = h * d
    dims = [b, h, s, d]
    if qkv:
        in_stride, o_stride = [s * 3 * e, d, 3 * e, 1], [s * e, d, e, 1]
        keys = [f"{qkv}+0", f"{qkv}+{e}", f"{qkv}+{2 * e}"]
    else:
        in_stride = o_stride = packed(dims)
        keys = [q, k, v]

    def build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        Q, K, V = (_tensor(g, cudnn, n, dims, in_stride, dt) for n in ("Q", "K", "V"))
        O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=1.0 / math.sqrt(d), generate_stats=False, use_causal_mask=causal)
        return g, dict(zip(keys, (Q, K, V))), {o: _output(O, cudnn, dims, o_stride, dt)}

    def eager(torch, t):
        if qkv:
            parts = t[qkv].reshape(b, s, 3, h, d).unbind(2)
            qq, kk, vv = (p.transpose(1, 2) for p in parts)
        else:
            qq, kk, vv = t[q], t[k], t[v]
        return {o: torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal,
                                                                    scale=1.0 / math.sqrt(d))}
    st = Stage(name, build, eager, flops=4 * b * h * s * s * d // (2 if causal else 1))
    st.out_keys = [o]
    return st


def _bse(torch, x, rows, e):
    """A [B, H, S, D] attention output (BHSD from torch, a BSHD view from a graph) as the [B, S, E]
    rows of the next matmul; any other buffer reshaped."""
    if x.dim() == 4:
        return x.transpose(1, 2).reshape(rows[0], rows[1], e)
    return x.reshape(rows[0], rows[1], e)


def norm_stage(name, dt, kind, bsz, s, e, x="x", scale="scale", bias=None, y="y", eps=1e-5):
    """layernorm (scale + bias) or rmsnorm (scale) over the last axis of [bsz, s, e], INFERENCE."""
    def build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        X = _tensor(g, cudnn, x, [bsz, s, e], packed([bsz, s, e]), dt)
        S = _tensor(g, cudnn, scale, [1, 1, e], packed([1, 1, e]), dt)
        ins = {x: X, scale: S}
        if bias:
            B = ins[bias] = _tensor(g, cudnn, bias, [1, 1, e], packed([1, 1, e]), dt)
        ep = _epsilon(cudnn, g, eps, ins)
        phase = cudnn.norm_forward_phase.INFERENCE
        if kind == "layernorm":
            Y = g.layernorm(norm_forward_phase=phase, input=X, scale=S, bias=B, epsilon=ep)[0]
        else:
            Y = g.rmsnorm(norm_forward_phase=phase, input=X, scale=S, bias=None, epsilon=ep)[0]
        return g, ins, {y: _output(Y, cudnn, [bsz, s, e], packed([bsz, s, e]), dt)}

    def eager(torch, t):
        F = torch.nn.functional
        xx = t[x].reshape(bsz, s, e)
        if kind == "layernorm":
            return {y: F.layer_norm(xx, [e], t[scale].reshape(-1), t[bias].reshape(-1), eps=eps)}
        if hasattr(F, "rms_norm"):
            return {y: F.rms_norm(xx, [e], t[scale].reshape(-1), eps=eps)}
        return {y: xx * torch.rsqrt(xx.float().pow(2).mean(-1, keepdim=True) + eps).to(xx.dtype) * t[scale]}
    # bytes moved: read x, write y, read scale (and bias)
    item = 2
    st = Stage(name, build, eager, nbytes=item * (2 * bsz * s * e + (2 if bias else 1) * e))
    st.out_keys = [y]
    return st


def _scalar(cudnn, g, name, value, ins):
    """A pass-by-value scalar (momentum, as epsilon in :func:`_epsilon`)."""
    if _is_ours(cudnn):
        return float(value)
    t = g.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True,
                 data_type=cudnn.data_type.FLOAT)
    ins[f"{name}={value!r}"] = t
    return t


def _stat(t, cudnn, dims):
    t.set_output(True).set_dim(list(dims)).set_stride(packed(dims)).set_data_type(cudnn.data_type.FLOAT)
    return t


def _grads(torch, fn, inputs: dict, wrt, dy):
    """``{name: d(sum(fn(...) * dy))/d input}`` for the inputs named in ``wrt`` (torch autograd)."""
    # NOTE: the runner times under torch.inference_mode(), whose tensors autograd refuses: leave it
    # and clone every input (a clone made outside inference mode is an ordinary tensor)
    with torch.inference_mode(False), torch.enable_grad():
        leaves = {k: (v.clone().requires_grad_(True) if k in wrt else v.clone()) for k, v in inputs.items()}
        out = fn(**leaves)
        out.backward(dy.clone())
    return {k: leaves[k].grad for k in wrt}


def sdpa_train_stages(dt, b, h, s, d, causal):
    """sdpa forward with Stats, then sdpa_backward (BHSD), as a training step runs them."""
    dims, st_dims = [b, h, s, d], [b, h, s, 1]
    scale = 1.0 / math.sqrt(d)

    def fwd_build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        Q, K, V = (_tensor(g, cudnn, n, dims, packed(dims), dt) for n in ("Q", "K", "V"))
        O, Stats = g.sdpa(q=Q, k=K, v=V, attn_scale=scale, generate_stats=True, use_causal_mask=causal)
        return g, {"q": Q, "k": K, "v": V}, {"o": _output(O, cudnn, dims, packed(dims), dt),
                                             "stats": _stat(Stats, cudnn, st_dims)}

    def _scores(torch, q, k):
        sc = (q.float() @ k.float().transpose(-1, -2)) * scale
        if causal:
            keep = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
            sc = sc.masked_fill(~keep, float("-inf"))
        return sc

    def fwd_eager(torch, t):
        o = torch.nn.functional.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=causal, scale=scale)
        return {"o": o, "stats": torch.logsumexp(_scores(torch, t["q"], t["k"]), -1, keepdim=True)}

    def bwd_build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        Q, K, V, O, dO = (_tensor(g, cudnn, n, dims, packed(dims), dt) for n in ("Q", "K", "V", "O", "dO"))
        St = g.tensor(name="Stats", dim=st_dims, stride=packed(st_dims), data_type=cudnn.data_type.FLOAT)
        dQ, dK, dV = g.sdpa_backward(q=Q, k=K, v=V, o=O, dO=dO, stats=St, attn_scale=scale, use_causal_mask=causal)
        outs = {n: _output(t, cudnn, dims, packed(dims), dt) for n, t in (("dq", dQ), ("dk", dK), ("dv", dV))}
        return g, {"q": Q, "k": K, "v": V, "o": O, "do": dO, "stats": St}, outs

    def bwd_eager(torch, t):
        def f(q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        gr = _grads(torch, f, {"q": t["q"], "k": t["k"], "v": t["v"]}, ("q", "k", "v"), t["do"])
        return {"dq": gr["q"], "dk": gr["k"], "dv": gr["v"]}

    div = 2 if causal else 1
    f1 = Stage("sdpa fwd + stats", fwd_build, fwd_eager, flops=4 * b * h * s * s * d // div)
    f1.out_keys = ["o", "stats"]
    f2 = Stage("sdpa_backward", bwd_build, bwd_eager, flops=10 * b * h * s * s * d // div)
    f2.out_keys = ["dq", "dk", "dv"]
    return [f1, f2]


def layernorm_train_stages(dt, bsz, s, e, eps=1e-5):
    """layernorm TRAINING (Y, mean, inv_var) then layernorm_backward, over the last axis of [bsz, s, e]."""
    xd, sd, stat = [bsz, s, e], [1, 1, e], [bsz, s, 1]

    def fwd_build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        X, S, B = _tensor(g, cudnn, "x", xd, packed(xd), dt), _tensor(g, cudnn, "scale", sd, packed(sd), dt), \
            _tensor(g, cudnn, "bias", sd, packed(sd), dt)
        ins = {"x": X, "scale": S, "bias": B}
        Y, M, IV = g.layernorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=X, scale=S, bias=B,
                               epsilon=_epsilon(cudnn, g, eps, ins))
        return g, ins, {"y": _output(Y, cudnn, xd, packed(xd), dt), "mean": _stat(M, cudnn, stat),
                        "inv_var": _stat(IV, cudnn, stat)}

    def fwd_eager(torch, t):
        x = t["x"].float()
        m = x.mean(-1, keepdim=True)
        iv = torch.rsqrt(((x - m) ** 2).mean(-1, keepdim=True) + eps)
        y = torch.nn.functional.layer_norm(t["x"], [e], t["scale"].reshape(-1), t["bias"].reshape(-1), eps=eps)
        return {"y": y, "mean": m, "inv_var": iv}

    def bwd_build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        DY, X = _tensor(g, cudnn, "dy", xd, packed(xd), dt), _tensor(g, cudnn, "x", xd, packed(xd), dt)
        S = _tensor(g, cudnn, "scale", sd, packed(sd), dt)
        M, IV = (g.tensor(name=n, dim=stat, stride=packed(stat), data_type=cudnn.data_type.FLOAT)
                 for n in ("mean", "inv_var"))
        DX, DS, DB = g.layernorm_backward(grad=DY, input=X, scale=S, mean=M, inv_variance=IV)
        return g, {"dy": DY, "x": X, "scale": S, "mean": M, "inv_var": IV}, {
            "dx": _output(DX, cudnn, xd, packed(xd), dt), "dscale": _output(DS, cudnn, sd, packed(sd), dt),
            "dbias": _output(DB, cudnn, sd, packed(sd), dt)}

    def bwd_eager(torch, t):
        def f(x, scale, bias):
            return torch.nn.functional.layer_norm(x, [e], scale.reshape(-1), bias.reshape(-1), eps=eps)
        gr = _grads(torch, f, {"x": t["x"], "scale": t["scale"], "bias": t["scale"] * 0}, ("x", "scale", "bias"),
                    t["dy"])
        return {"dx": gr["x"], "dscale": gr["scale"], "dbias": gr["bias"]}

    item = 2
    f1 = Stage("layernorm training", fwd_build, fwd_eager, nbytes=item * 2 * bsz * s * e)
    f1.out_keys = ["y", "mean", "inv_var"]
    f2 = Stage("layernorm_backward", bwd_build, bwd_eager, nbytes=item * 3 * bsz * s * e)
    f2.out_keys = ["dx", "dscale", "dbias"]
    return [f1, f2]


def batchnorm_train_stages(dt, n, c, hw, eps=1e-5, momentum=0.1):
    """batchnorm training (NHWC, running statistics) then batchnorm_backward."""
    xd, xs, cd = [n, c, hw, hw], nhwc(n, c, hw, hw), [1, c, 1, 1]
    cs = nhwc(1, c, 1, 1)

    def fwd_build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        X = _tensor(g, cudnn, "x", xd, xs, dt)
        S, B = (g.tensor(name=nm, dim=cd, stride=cs, data_type=cudnn.data_type.FLOAT) for nm in ("scale", "bias"))
        RM, RV = (g.tensor(name=nm, dim=cd, stride=cs, data_type=cudnn.data_type.FLOAT) for nm in ("rmean", "rvar"))
        ins = {"x": X, "scale": S, "bias": B, "rmean": RM, "rvar": RV}
        Y, M, IV, NM, NV = g.batchnorm(input=X, scale=S, bias=B, in_running_mean=RM, in_running_var=RV,
                                       epsilon=_epsilon(cudnn, g, eps, ins),
                                       momentum=_scalar(cudnn, g, "momentum", momentum, ins))
        return g, ins, {"y": _output(Y, cudnn, xd, xs, dt), "mean": _stat(M, cudnn, cd), "inv_var": _stat(IV, cudnn, cd),
                        "next_rmean": _stat(NM, cudnn, cd), "next_rvar": _stat(NV, cudnn, cd)}

    def fwd_eager(torch, t):
        x = t["x"].float()
        m = x.mean((0, 2, 3), keepdim=True)
        var = ((x - m) ** 2).mean((0, 2, 3), keepdim=True)
        cnt = n * hw * hw
        y = torch.nn.functional.batch_norm(t["x"], None, None, t["scale"].reshape(-1).to(t["x"].dtype),
                                           t["bias"].reshape(-1).to(t["x"].dtype), training=True, eps=eps)
        return {"y": y, "mean": m, "inv_var": torch.rsqrt(var + eps),
                "next_rmean": (1 - momentum) * t["rmean"] + momentum * m,
                "next_rvar": (1 - momentum) * t["rvar"] + momentum * var * cnt / (cnt - 1)}

    def bwd_build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        DY, X = _tensor(g, cudnn, "dy", xd, xs, dt), _tensor(g, cudnn, "x", xd, xs, dt)
        S, M, IV = (g.tensor(name=nm, dim=cd, stride=cs, data_type=cudnn.data_type.FLOAT)
                    for nm in ("scale", "mean", "inv_var"))
        DX, DS, DB = g.batchnorm_backward(grad=DY, input=X, scale=S, mean=M, inv_variance=IV)
        return g, {"dy": DY, "x": X, "scale": S, "mean": M, "inv_var": IV}, {
            "dx": _output(DX, cudnn, xd, xs, dt), "dscale": _stat(DS, cudnn, cd), "dbias": _stat(DB, cudnn, cd)}

    def bwd_eager(torch, t):
        def f(x, scale, bias):
            return torch.nn.functional.batch_norm(x.float(), None, None, scale.reshape(-1), bias.reshape(-1),
                                                  training=True, eps=eps)
        gr = _grads(torch, f, {"x": t["x"], "scale": t["scale"], "bias": t["scale"] * 0}, ("x", "scale", "bias"),
                    t["dy"].float())
        return {"dx": gr["x"], "dscale": gr["scale"].reshape(cd), "dbias": gr["bias"].reshape(cd)}

    item = 2
    f1 = Stage("batchnorm training", fwd_build, fwd_eager, nbytes=item * 3 * n * c * hw * hw)
    f1.out_keys = ["y", "mean", "inv_var", "next_rmean", "next_rvar"]
    f2 = Stage("batchnorm_backward", bwd_build, bwd_eager, nbytes=item * 5 * n * c * hw * hw)
    f2.out_keys = ["dx", "dscale", "dbias"]
    return [f1, f2]


def conv_backward_stages(dt, n, c, k, hw, r, pad):
    """conv dgrad then wgrad (NHWC) of one 3x3 convolution, from the same dy."""
    xd, xs, wd, ws, yd, ys = [n, c, hw, hw], nhwc(n, c, hw, hw), [k, c, r, r], nhwc(k, c, r, r), [n, k, hw, hw], \
        nhwc(n, k, hw, hw)

    def dgrad_build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        DY, W = _tensor(g, cudnn, "dy", yd, ys, dt), _tensor(g, cudnn, "w", wd, ws, dt)
        DX = g.conv_dgrad(loss=DY, filter=W, padding=[pad, pad], stride=[1, 1], dilation=[1, 1])
        return g, {"dy": DY, "w": W}, {"dx": _output(DX, cudnn, xd, xs, dt)}

    def wgrad_build(cudnn, handle, torch):
        g = _graph(cudnn, handle, dt)
        DY, X = _tensor(g, cudnn, "dy", yd, ys, dt), _tensor(g, cudnn, "x", xd, xs, dt)
        DW = g.conv_wgrad(image=X, loss=DY, padding=[pad, pad], stride=[1, 1], dilation=[1, 1])
        return g, {"dy": DY, "x": X}, {"dw": _output(DW, cudnn, wd, ws, dt)}

    def dgrad_eager(torch, t):
        return {"dx": torch.nn.grad.conv2d_input(xd, t["w"], t["dy"], padding=pad)}

    def wgrad_eager(torch, t):
        return {"dw": torch.nn.grad.conv2d_weight(t["x"], wd, t["dy"], padding=pad)}

    fl = 2 * n * k * hw * hw * c * r * r
    a = Stage("conv_dgrad", dgrad_build, dgrad_eager, flops=fl)
    a.out_keys = ["dx"]
    b = Stage("conv_wgrad", wgrad_build, wgrad_eager, flops=fl)
    b.out_keys = ["dw"]
    return [a, b]


def _training_cases(tiny: bool) -> list:
    """Backward graphs: each case is a training step's forward-with-statistics graph and its backward
    graph (conv: dgrad and wgrad), timed together; every output of both is checked."""
    T = tiny
    out = []
    for name, dt, b, h, s, d, causal in (("sdpa_train_causal_f16", "f16", 4, 16, 1024, 64, True),
                                         ("sdpa_train_bf16", "bf16", 8, 12, 512, 64, False)):
        if T:
            b, h, s, d = 1, 2, 16, 16
        st = sdpa_train_stages(dt, b, h, s, d, causal)
        out.append(Case(name, "train", "sdpa", dt, f"B{b} H{h} S{s} D{d}{' causal' if causal else ''} fwd+bwd", st,
                        fills=FE_FILLS["sdpa"], check=["o", "stats", "dq", "dk", "dv"], causal=causal))
    bsz, s, e = (4, 1024, 1024) if not T else (2, 4, 64)
    st = layernorm_train_stages("f16", bsz, s, e)
    out.append(Case("layernorm_train_f16", "train", "layernorm", "f16", f"{bsz * s}x{e} fwd+bwd", st,
                    check=["y", "mean", "inv_var", "dx", "dscale", "dbias"]))
    n, c, hw = (32, 64, 56) if not T else (2, 8, 4)
    st = batchnorm_train_stages("f16", n, c, hw)
    out.append(Case("batchnorm_train_f16", "train", "layernorm", "f16", f"N{n} C{c} {hw}x{hw} NHWC fwd+bwd", st,
                    check=["y", "mean", "inv_var", "next_rmean", "next_rvar", "dx", "dscale", "dbias"]))
    n, c, k, hw = (32, 64, 64, 56) if not T else (1, 8, 8, 6)
    st = conv_backward_stages("f16", n, c, k, hw, 3, 1)
    out.append(Case("conv3x3_backward_f16", "train", "conv", "f16", f"N{n} {hw}x{hw} C{c}->{k} 3x3 dgrad+wgrad", st,
                    check=["dx", "dw"]))
    return out


# -- the cases --------------------------------------------------------------------------------------------
FE_FILLS = {"conv": {}, "matmul": {}, "sdpa": {"*": (1.0, -0.5)},            # test_mhas: randn - 0.5
            "layernorm": {"x": (3.0, -0.5), "scale": (5.0, -1.0), "bias": (7.0, -2.0)}}   # test_layernorm


def _op_cases(tiny: bool) -> list:
    T = tiny
    out = []
    for name, dt, n, c, k, hw, r in (("conv3x3_bias_relu_f16", "f16", 32, 64, 64, 56, 3),
                                     ("conv1x1_bias_relu_f16", "f16", 32, 256, 64, 56, 1),
                                     ("conv3x3_bias_relu_bf16", "bf16", 8, 128, 128, 28, 3)):
        if T:
            n, c, k, hw = 1, min(c, 16), min(k, 8), 6
        pad = 1 if r == 3 else 0
        out.append(Case(name, "op", "conv", dt, f"N{n} {hw}x{hw} C{c}->{k} {r}x{r} pad {pad} NHWC",
                        [conv_stage("conv", dt, n, c, k, hw, r, pad)]))
    for name, dt, bsz, m, kk, nn in (("matmul_bias_gelu_f16", "f16", 4, 512, 1024, 4096),
                                     ("matmul_bias_gelu_bf16", "bf16", 8, 128, 4096, 4096)):
        if T:
            bsz, m, kk, nn = 2, 8, 32, 48
        out.append(Case(name, "op", "matmul", dt, f"[{bsz},{m},{kk}] @ [1,{kk},{nn}]",
                        [matmul_stage("matmul", dt, bsz, m, kk, nn, bias="bias", act="gelu")]))
    for name, dt, b, h, s, d, causal in (("sdpa_causal_f16", "f16", 4, 16, 1024, 64, True),
                                         ("sdpa_f16", "f16", 8, 12, 512, 64, False),
                                         ("sdpa_causal_bf16", "bf16", 2, 32, 2048, 128, True)):
        if T:
            b, h, s, d = 1, 2, 16, 16
        out.append(Case(name, "op", "sdpa", dt, f"B{b} H{h} S{s} D{d}{' causal' if causal else ''} BHSD",
                        [sdpa_stage("sdpa", dt, b, h, s, d, causal)], fills=FE_FILLS["sdpa"], causal=causal))
    bsz, s, e = (4, 1024, 1024) if not T else (2, 4, 64)
    out.append(Case("layernorm_f16", "op", "layernorm", "f16", f"{bsz * s}x{e} (as [{bsz},{s},{e}])",
                    [norm_stage("layernorm", "f16", "layernorm", bsz, s, e, bias="bias")],
                    fills=FE_FILLS["layernorm"]))
    return out


def _block_cases(tiny: bool) -> list:
    T = tiny
    # ResNet-50 bottleneck
    n, c, mid, hw = (32, 256, 64, 56) if not T else (1, 32, 8, 6)
    resnet = Case("resnet50_bottleneck_f16", "block", "block", "f16", f"N{n} {hw}x{hw} {c}->{mid}->{mid}->{c} NHWC", [
        conv_stage("reduce 1x1+bias+relu", "f16", n, c, mid, hw, 1, 0, x="x", w="w1", b="b1", y="h1"),
        conv_stage("3x3+bias+relu", "f16", n, mid, mid, hw, 3, 1, x="h1", w="w2", b="b2", y="h2"),
        conv_stage("expand 1x1+bias+add+relu", "f16", n, mid, c, hw, 1, 0, x="h2", w="w3", b="b3", y="y",
                   residual="x")])
    # BERT-base encoder layer
    b, s, heads, d, f = (8, 512, 12, 64, 3072) if not T else (1, 16, 2, 16, 64)
    e = heads * d
    bert = Case("bert_base_layer_f16", "block", "block", "f16", f"B{b} S{s} hidden {e} {heads} heads FFN {f}", [
        matmul_stage("qkv matmul+bias", "f16", b, s, e, 3 * e, a="x", w="w_qkv", bias="b_qkv", y="qkv"),
        sdpa_stage("sdpa", "f16", b, heads, s, d, False, o="o", qkv="qkv"),
        matmul_stage("out-proj matmul+bias+add", "f16", b, s, e, e, a="o", w="w_o", bias="b_o", residual="x",
                     y="a"),
        norm_stage("layernorm", "f16", "layernorm", b, s, e, x="a", scale="ln1_scale", bias="ln1_bias", y="y1",
                   eps=1e-12),
        matmul_stage("ffn1 matmul+bias+gelu", "f16", b, s, e, f, a="y1", w="w_1", bias="b_1", act="gelu", y="h"),
        matmul_stage("ffn2 matmul+bias+add", "f16", b, s, f, e, a="h", w="w_2", bias="b_2", residual="y1", y="z"),
        norm_stage("layernorm", "f16", "layernorm", b, s, e, x="z", scale="ln2_scale", bias="ln2_bias", y="y",
                   eps=1e-12)])
    # Llama-7B-style block
    s, heads, d, f = (2048, 32, 128, 11008) if not T else (16, 2, 16, 64)
    e = heads * d
    llama = Case("llama7b_block_bf16", "block", "block", "bf16", f"B1 S{s} hidden {e} {heads} heads D{d} FFN {f}", [
        norm_stage("rmsnorm", "bf16", "rmsnorm", 1, s, e, x="x", scale="norm1_scale", y="xn"),
        matmul_stage("qkv matmul", "bf16", 1, s, e, 3 * e, a="xn", w="w_qkv", y="qkv"),
        sdpa_stage("causal sdpa", "bf16", 1, heads, s, d, True, o="o", qkv="qkv"),
        matmul_stage("out-proj matmul+add", "bf16", 1, s, e, e, a="o", w="w_o", residual="x", y="h"),
        norm_stage("rmsnorm", "bf16", "rmsnorm", 1, s, e, x="h", scale="norm2_scale", y="hn"),
        matmul_stage("gate matmul+silu", "bf16", 1, s, e, f, a="hn", w="w_gate", act="silu", y="g"),
        matmul_stage("up matmul*gate", "bf16", 1, s, e, f, a="hn", w="w_up", mul="g", y="m"),
        matmul_stage("down matmul+add", "bf16", 1, s, f, e, a="m", w="w_down", residual="h", y="y")], causal=True)
    return [resnet, bert, llama]


def all_cases(tiny: bool = False) -> list:
    return _op_cases(tiny) + _block_cases(tiny) + _training_cases(tiny)


# -- compile (build machine) / the facade's side ------------------------------------------------------
def _name_of_dtype(t) -> str:
    return str(getattr(t.get_data_type(), "name", t.get_data_type())).rsplit(".", 1)[-1]


def _describe(key, t, role) -> dict:
    return {"key": key, "uid": t.get_uid(), "dim": list(t.get_dim()), "stride": list(t.get_stride()),
            "dtype": _name_of_dtype(t), "role": role}


def _build_ours(cudnn, handle, torch, case) -> list:
    """Builds every graph of ``case`` through the facade; returns ``[(graph, bindings)]``. Raises on
    the first graph the facade cannot build."""
    built = []
    for st in case.stages:
        g, ins, outs = st.build(cudnn, handle, torch)
        g.build([cudnn.heur_mode.A])
        binds = [_describe(k, t, "in") for k, t in ins.items()] + [_describe(k, t, "out") for k, t in outs.items()]
        built.append((g, binds))
    return built


def _unsupported(e: Exception) -> str:
    first = (str(e).strip().splitlines() or [""])[0][:400]
    return f"unsupported by facade: {type(e).__name__}: {first}"


def compile_plans(out: str, tiny: bool = False, only=None, target: str = TARGET) -> dict:
    import torch
    import hipdnn_iree.cudnn as cudnn
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(out, "*.plan")):
        os.remove(old)
    handle = cudnn.create_handle(device=None, target=target)
    manifest = {"target": target, "tiny": tiny, "peaks": PEAKS, "cases": []}
    for case in all_cases(tiny):
        if only and case.name not in only:
            continue
        entry = {"name": case.name, "group": case.group, "kind": case.kind, "dtype": case.dtype, "shape": case.shape}
        t0 = time.perf_counter()
        try:
            built = _build_ours(cudnn, handle, torch, case)
            stages = []
            for i, (g, binds) in enumerate(built):
                path = f"{case.name}.{i}.plan"
                data = g.serialize()
                with open(os.path.join(out, path), "wb") as f:
                    f.write(bytes(data))
                stages.append({"stage": case.stages[i].name, "plan": path, "bytes": len(data), "bind": binds})
            entry["stages"] = stages
        except Exception as e:  # noqa: BLE001 -- recorded: the run reports it for this case
            entry["error"] = _unsupported(e)
        entry["compile_s"] = round(time.perf_counter() - t0, 2)
        manifest["cases"].append(entry)
        print(f"compiled {case.name}: {entry.get('error') or str(len(entry['stages'])) + ' plan(s)'} "
              f"in {entry['compile_s']} s", flush=True)
        with open(os.path.join(out, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out, "*.plan")))
    manifest["plan_bytes"] = total
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"plans: {total / 1e6:.1f} MB in {out}", flush=True)
    return manifest


# -- run (GPU machine, or --cpu-check here) ---------------------------------------------------------------
def _import_nvidia_cudnn(torch):
    """NVIDIA's frontend, found next to torch's own cuDNN (its loader looks in LD_LIBRARY_PATH first)."""
    try:
        torch.backends.cudnn.version()          # loads torch's libcudnn
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "libcudnn.so" in line}
        dirs = sorted({os.path.dirname(p) for p in libs if os.path.isabs(p)})
        if dirs:
            os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(dirs + [os.environ.get("LD_LIBRARY_PATH", "")])
    except Exception:  # noqa: BLE001 -- best effort: the frontend has its own search
        pass
    import cudnn
    if _is_ours(cudnn):
        raise ImportError("`import cudnn` resolves to hipdnn_iree's facade")
    return cudnn


class Buffers:
    """The case's buffers, by name: external inputs (shared by every side) and, per side, what its
    graphs write. A binding key ``name+off`` views the buffer from element ``off`` with the tensor's
    dims and strides."""

    def __init__(self, torch, device, case, seed=0):
        self.torch, self.device, self.case = torch, device, case
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.shared = {}

    @staticmethod
    def split(key):
        if "+" in key:
            name, off = key.rsplit("+", 1)
            return name, int(off)
        return key, 0

    def _fill(self, name, base):
        torch = self.torch
        if self.case.group == "block":
            fan = _fan_in(name, base)
            vals = torch.randn(base.shape, generator=self.gen, device=self.device, dtype=torch.float32)
            if fan:
                vals = vals / math.sqrt(fan)
            elif name.endswith("_scale"):
                vals = 1.0 + 0.1 * vals
            elif name.startswith(("b_", "b1", "b2", "b3")) or name.endswith("_bias"):
                vals = 0.1 * vals
        else:
            mul, add = self.case.fills.get(name, self.case.fills.get("*", (1.0, 0.0)))
            vals = mul * torch.randn(base.shape, generator=self.gen, device=self.device, dtype=torch.float32) + add
        base.copy_(vals)

    def alloc(self, desc, produced: set, own: dict):
        """The view a binding describes (``desc``: key, dim, stride, dtype); inputs no graph produces
        are made (and filled) once in ``shared``, the rest in ``own``."""
        torch = self.torch
        key = desc["key"]
        if "=" in key:                             # a host value (pass-by-value epsilon)
            return torch.full([1] * len(desc["dim"]), float(key.split("=", 1)[1]), dtype=torch.float32)
        name, off = self.split(key)
        pool = own if name in produced else self.shared
        dtype = getattr(torch, TORCH_DT[desc["dtype"]])
        base = pool.get(name)
        if base is None:
            span = 1 + sum((d - 1) * s for d, s in zip(desc["dim"], desc["stride"]))
            if off:
                raise ValueError(f"{key}: a view of a buffer not made yet")
            base = torch.empty_strided(desc["dim"], desc["stride"], dtype=dtype, device=self.device)
            assert base.untyped_storage().nbytes() >= span * base.element_size()
            if pool is self.shared:
                self._fill(name, base)
            else:
                base.fill_(float("nan"))
            pool[name] = base
        return base.as_strided(desc["dim"], desc["stride"], base.storage_offset() + off)


def _fan_in(name, t) -> int:
    """A block's weight: the reduction length it is contracted over (0 for anything else)."""
    if not name.startswith("w"):
        return 0
    dims = list(t.shape)
    if len(dims) == 4:          # conv filter [K, C, R, S]
        return dims[1] * dims[2] * dims[3]
    return dims[-2]             # matmul operand [1, K, N]


def _produced(case) -> set:
    return {Buffers.split(k)[0] for st in case.stages for k in st.out_keys}


def _make_inputs(cudnn, handle, torch, case, bufs) -> None:
    """The inputs no graph produces, made and filled once, in binding order, from the graphs as the
    case writes them (written only, not built: no compiler needed), so every side and torch eager
    see the same data whichever sides run."""
    produced = _produced(case)
    for st in case.stages:
        _, ins, _ = st.build(cudnn, handle, torch)
        for k, t in ins.items():
            if "=" not in k and Buffers.split(k)[0] not in produced:
                bufs.alloc({"key": k, "dim": list(t.get_dim()), "stride": list(t.get_stride()),
                            "dtype": _name_of_dtype(t)}, produced, {})


def _packs(bufs, case, stage_binds, own):
    """Per graph, ``[(pack by uid, pack by tensor or None)]`` over one side's buffers."""
    produced = _produced(case)
    return [{d["uid"]: bufs.alloc(d, produced, own) for d in binds} for binds in stage_binds]


def _nvidia_side(cudnn, torch, case, bufs, handle):
    """Builds the case's graphs with NVIDIA's cuDNN; returns (graphs, packs, workspaces, own buffers)."""
    graphs, packs, wss, own, names = [], [], [], {}, []
    produced = _produced(case)
    stream = torch.cuda.current_stream().cuda_stream
    cudnn.set_stream(handle=handle, stream=stream)
    for st in case.stages:
        g, ins, outs = st.build(cudnn, handle, torch)
        try:
            g.build([cudnn.heur_mode.A])
        except Exception:  # noqa: BLE001 -- cuDNN FE tests ask for A then FALLBACK
            g, ins, outs = st.build(cudnn, handle, torch)
            g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        pack = {}
        for role, d in (("in", ins), ("out", outs)):
            for k, t in d.items():
                desc = {"key": k, "dim": list(t.get_dim()), "stride": list(t.get_stride()),
                        "dtype": _name_of_dtype(t) if "=" not in k else "FLOAT"}
                pack[t] = bufs.alloc(desc, produced, own)
        graphs.append(g)
        packs.append(pack)
        names.append(_plan_name(g))
        wss.append(torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device="cuda"))
    return graphs, packs, wss, own, names


def _plan_name(g):
    """The plan cuDNN runs (its engine and knobs), when the frontend says."""
    try:
        return str(g.get_plan_name_at_index(int(getattr(g, "_plan_index", 0) or 0)))
    except Exception:  # noqa: BLE001 -- informational only
        return None


def _eager_fn(torch, case, inputs: dict):
    def run():
        t = dict(inputs)
        for st in case.stages:
            t.update(st.eager(torch, t))
        return t
    return run


def _reference(torch, case, shared: dict) -> dict:
    """float32 torch math from the same inputs, each graph's outputs rounded to the io type."""
    io = getattr(torch, TORCH_DT[CUDNN_DT[case.dtype]])
    t = {k: v.float() for k, v in shared.items()}
    for st in case.stages:
        for k, v in st.eager(torch, t).items():
            t[k] = v.to(io).float()
    return t


def _logical(torch, x, like):
    """A side's output buffer seen with the reference's logical shape."""
    if list(x.shape) == list(like.shape):
        return x
    if x.dim() == 4 and like.dim() == 3:
        return x.transpose(1, 2).reshape(like.shape)
    return x.reshape(like.shape)


def _compare(torch, case, got: dict, want: dict) -> dict:
    """cuDNN FE's check (|a - b| <= atol + rtol |b| everywhere) for op cases, max |err| / max |ref| for
    blocks; per output key the worst error and whether it passed."""
    res = {"ok": True, "outputs": {}}
    for key in case.check:
        b = want[key].float()
        a = _logical(torch, got[key], b).float()
        err = (a - b).abs()
        finite = bool(torch.isfinite(a).all())
        r = {"max_abs_err": float(err.max()) if finite else float("nan"), "max_abs_ref": float(b.abs().max())}
        if case.group in ("block", "train"):
            tol = BLOCK_TOL[case.dtype]
            r["max_rel_err"] = r["max_abs_err"] / max(r["max_abs_ref"], 1e-6) if finite else float("nan")
            r["ok"] = finite and r["max_rel_err"] <= tol
            r["tol"] = f"max|err|/max|ref| <= {tol}"
        else:
            atol, rtol = TOL[(case.kind, case.dtype)]
            bound = atol + rtol * b.abs()
            r["tol_used"] = float((err / bound).max()) if finite else float("nan")   # <= 1 passes
            r["ok"] = finite and r["tol_used"] <= 1.0
            r["tol"] = f"atol {atol} rtol {rtol}"
        res["outputs"][key] = r
        res["ok"] = res["ok"] and r["ok"]
    return res


def _summary(xs) -> dict:
    xs = sorted(x * 1e3 for x in xs)
    n = len(xs)
    return {"median": round(statistics.median(xs), 5), "q1": round(xs[n // 4], 5), "q3": round(xs[(3 * n) // 4], 5),
            "min": round(xs[0], 5), "max": round(xs[-1], 5), "n": n}


def interleaved(variants: dict, sync, rounds: int, burst: int, warm: int) -> dict:
    """Per variant: ``warm`` bursts, then ``rounds`` rounds in which each variant (same order every
    round) runs ``burst`` calls and one sync; per-call time of each round's burst, in ms."""
    for fn in variants.values():
        for _ in range(warm):
            for _ in range(burst):
                fn()
            sync()
    per = {k: [] for k in variants}
    for _ in range(rounds):
        for k, fn in variants.items():
            t0 = time.perf_counter()
            for _ in range(burst):
                fn()
            sync()
            per[k].append((time.perf_counter() - t0) / burst)
    return {k: _summary(v) for k, v in per.items()}


def _rate(case, ms):
    """(value, unit) of achieved work: TFLOP/s for contractions and attention, GB/s for norms."""
    if ms is None or ms <= 0:
        return None, None
    if case.flops:
        return case.flops / (ms * 1e-3) / 1e12, "TFLOP/s"
    return case.nbytes / (ms * 1e-3) / 1e9, "GB/s"


def _geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return round(math.exp(sum(map(math.log, xs)) / len(xs)), 3) if xs else None


def run(plans: str | None, out_json: str | None, out_md: str | None, cpu_check: bool = False,
        rounds: int = 30, burst: int = 10, warm: int = 2, only=None) -> int:
    import torch
    import hipdnn_iree.cudnn as ours
    torch.backends.cuda.matmul.allow_tf32 = False      # the float32 reference stays IEEE
    torch.backends.cudnn.allow_tf32 = False
    device = "cpu" if cpu_check else "cuda"
    sync = (lambda: None) if cpu_check else torch.cuda.synchronize
    res = {"mode": "cpu-check" if cpu_check else "gpu", "peaks": PEAKS, "torch": torch.__version__,
           "timing": {"rounds": rounds, "burst": burst, "warmup_bursts": warm, "order": "cuDNN, ours, torch each round"},
           "cases": []}
    if cpu_check:
        manifest = {"tiny": True, "cases": None}
        handle = ours.create_handle(device="cpu")
        nv, res["cudnn"] = None, "not run (--cpu-check)"
        res["device"] = "cpu"
    else:
        with open(os.path.join(plans, "manifest.json")) as f:
            manifest = json.load(f)
        handle = ours.create_handle(device="cuda", target=manifest["target"])
        res["device"] = torch.cuda.get_device_name(0)
        try:
            nv = _import_nvidia_cudnn(torch)
            nv_handle = nv.create_handle()
            res["cudnn"] = {"frontend": getattr(nv, "__version__", "?"), "backend": nv.backend_version(),
                            "torch_cudnn": torch.backends.cudnn.version()}
        except Exception as e:  # noqa: BLE001 -- recorded; ours alone is still measured
            nv = None
            res["cudnn"] = f"import cudnn failed: {type(e).__name__}: {str(e)[:300]}"
        print("cuDNN:", res["cudnn"], flush=True)
    res["tiny"] = bool(manifest.get("tiny"))
    entries = {c["name"]: c for c in manifest["cases"]} if manifest["cases"] is not None else None
    fails = 0
    for case in all_cases(res["tiny"]):
        if (only and case.name not in only) or (entries is not None and case.name not in entries):
            continue
        row = {"name": case.name, "group": case.group, "kind": case.kind, "dtype": case.dtype, "shape": case.shape,
               "graphs": len(case.stages), "flops": case.flops, "bytes": case.nbytes, "errors": {}}
        t_case = time.perf_counter()
        bufs = Buffers(torch, device, case)
        variants, outs = {}, {}
        try:
            _make_inputs(ours, handle, torch, case, bufs)
        except Exception as e:  # noqa: BLE001 -- the sides below make them as they bind them
            row["errors"]["inputs"] = f"{type(e).__name__}: {str(e)[:300]}"
        # ours: restored from the plans (GPU) or built now for the CPU
        try:
            if cpu_check:
                built = _build_ours(ours, handle, torch, case)
                graphs, binds = [g for g, _ in built], [b for _, b in built]
            else:
                e = entries[case.name]
                if "error" in e:
                    raise RuntimeError(e["error"])
                graphs, binds = [], []
                for st in e["stages"]:
                    g = ours.pygraph()
                    with open(os.path.join(plans, st["plan"]), "rb") as f:
                        g.deserialize(handle, f.read())
                    graphs.append(g)
                    binds.append(st["bind"])
            own = {}
            packs = _packs(bufs, case, binds, own)

            def ours_call(graphs=graphs, packs=packs):
                for g, p in zip(graphs, packs):
                    g.execute(p, None, handle=handle)
            ours_call()
            sync()
            variants["ours"], outs["ours"] = ours_call, own
        except Exception as e:  # noqa: BLE001 -- recorded per case
            msg = str(e) if str(e).startswith("unsupported by facade") else f"{type(e).__name__}: {str(e)[:400]}"
            row["errors"]["ours"] = msg
        # NVIDIA's cuDNN: built now from the same code
        if nv is not None:
            try:
                ngraphs, npacks, nws, nown, row["cudnn_plans"] = _nvidia_side(nv, torch, case, bufs, nv_handle)
                row["cudnn_workspace_bytes"] = [int(g.get_workspace_size()) for g in ngraphs]

                def nv_call(ngraphs=ngraphs, npacks=npacks, nws=nws):
                    for g, p, w in zip(ngraphs, npacks, nws):
                        g.execute(p, w, handle=nv_handle)
                nv_call()
                sync()
                variants = {"cudnn": nv_call, **variants}
                outs["cudnn"] = nown
            except Exception as e:  # noqa: BLE001
                row["errors"]["cudnn"] = f"{type(e).__name__}: {str(e)[:400]}"
        # torch eager on the shared inputs
        try:
            with torch.inference_mode():
                eager = _eager_fn(torch, case, bufs.shared)
                outs["torch"] = eager()
                sync()
                variants["torch"] = eager
        except Exception as e:  # noqa: BLE001
            row["errors"]["torch"] = f"{type(e).__name__}: {str(e)[:400]}"
        # correctness
        checks = {}
        if bufs.shared:
            with torch.inference_mode():
                ref = _reference(torch, case, bufs.shared)
            for side in ("ours", "cudnn"):
                if side in outs:
                    checks[f"{side}_vs_ref"] = _compare(torch, case, outs[side], ref)
            if "ours" in outs and "cudnn" in outs:
                checks["ours_vs_cudnn"] = _compare(torch, case, outs["ours"],
                                                   {k: _logical(torch, outs["cudnn"][k], ref[k]) for k in case.check})
            if "torch" in outs:
                checks["torch_vs_ref"] = _compare(torch, case, outs["torch"], ref)
            del ref
        row["checks"] = checks
        row["ok"] = "ours" in outs and all(c["ok"] for k, c in checks.items() if k != "torch_vs_ref")
        fails += not row["ok"]
        # timing
        if variants:
            try:
                with torch.inference_mode():
                    t = interleaved(variants, sync, rounds, burst, warm)
            except Exception as e:  # noqa: BLE001
                t = {}
                row["errors"]["timing"] = f"{type(e).__name__}: {str(e)[:400]}"
            row["ms"] = t
            med = {k: v["median"] for k, v in t.items()}
            for k, ms in med.items():
                v, unit = _rate(case, ms)
                row.setdefault("rate", {})[k] = round(v, 2) if v is not None else None
                row["rate_unit"] = unit
            if "ours" in med and "cudnn" in med:
                row["ours_over_cudnn"] = round(med["ours"] / med["cudnn"], 3)
            if "ours" in med and "torch" in med:
                row["ours_over_torch"] = round(med["ours"] / med["torch"], 3)
            if "cudnn" in med and "torch" in med:
                row["cudnn_over_torch"] = round(med["cudnn"] / med["torch"], 3)
        row["wall_s"] = round(time.perf_counter() - t_case, 2)
        res["cases"].append(row)
        _geomeans(res)
        print(_line(row), flush=True)
        if out_json:
            with open(out_json, "w") as f:
                json.dump(res, f, indent=1)
        del variants, outs, bufs
        if not cpu_check:
            torch.cuda.empty_cache()
    table = markdown(res)
    print("\n" + table, flush=True)
    if out_json:
        with open(out_json, "w") as f:
            json.dump(res, f, indent=1)
    if out_md:
        with open(out_md, "w") as f:
            f.write(table + "\n")
    return 1 if fails else 0


def _geomeans(res) -> None:
    rows = res["cases"]
    ops = [r for r in rows if r["group"] == "op"]
    blocks = [r for r in rows if r["group"] == "block"]
    res["geomean"] = {
        "ours_over_cudnn_ops": _geomean([r.get("ours_over_cudnn") for r in ops]),
        "ours_over_cudnn_all": _geomean([r.get("ours_over_cudnn") for r in rows]),
        "ours_over_torch_blocks": _geomean([r.get("ours_over_torch") for r in blocks]),
        "ours_over_torch_all": _geomean([r.get("ours_over_torch") for r in rows]),
        "cudnn_over_torch_blocks": _geomean([r.get("cudnn_over_torch") for r in blocks]),
        "ours_over_cudnn_train": _geomean([r.get("ours_over_cudnn") for r in rows if r["group"] == "train"]),
        "n_ops_with_both": sum(1 for r in ops if r.get("ours_over_cudnn")),
        "n_blocks_with_torch": sum(1 for r in blocks if r.get("ours_over_torch")),
    }


def _line(row) -> str:
    ms = {k: v["median"] for k, v in row.get("ms", {}).items()}
    return (f"{row['name']}: ok={row['ok']} ms={ms} ours/cudnn={row.get('ours_over_cudnn')} "
            f"ours/torch={row.get('ours_over_torch')} errors={row['errors'] or '-'} ({row['wall_s']} s)")


def _fmt(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def markdown(res) -> str:
    def ok_cell(r):
        c = r.get("checks", {})
        parts = []
        for k, label in (("ours_vs_ref", "ours"), ("cudnn_vs_ref", "cuDNN"), ("ours_vs_cudnn", "ours~cuDNN")):
            if k in c:
                parts.append(f"{label} {'PASS' if c[k]['ok'] else 'FAIL'}")
        errs = "; ".join(f"{k}: {v[:90]}" for k, v in r["errors"].items())
        return ", ".join(parts) + (f" ({errs})" if errs else "")

    lines = [f"{PEAK_TEXT}. Device: {res.get('device')}; cuDNN: {res.get('cudnn')}; torch {res.get('torch')}.",
             f"Per-call median ms: bursts of {res['timing']['burst']} calls + one synchronize, "
             f"{res['timing']['rounds']} rounds, {res['timing']['order']}.", "",
             "| case | shape | check | cuDNN ms | ours ms | ours/cuDNN | torch ms | ours/torch | "
             "cuDNN rate | ours rate | torch rate | unit (peak) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["cases"]:
        ms = {k: v["median"] for k, v in r.get("ms", {}).items()}
        rate = r.get("rate", {})
        unit = r.get("rate_unit")
        peak = {"TFLOP/s": "989", "GB/s": "4800"}.get(unit, "")
        lines.append(f"| {r['name']} | {r['shape']} | {ok_cell(r)} | {_fmt(ms.get('cudnn'), 4)} | "
                     f"{_fmt(ms.get('ours'), 4)} | {_fmt(r.get('ours_over_cudnn'), 2)} | {_fmt(ms.get('torch'), 4)} | "
                     f"{_fmt(r.get('ours_over_torch'), 2)} | {_fmt(rate.get('cudnn'), 1)} | {_fmt(rate.get('ours'), 1)} | "
                     f"{_fmt(rate.get('torch'), 1)} | {unit or '-'} ({peak}) |")
    g = res.get("geomean", {})
    lines += ["", f"Geomean ours/cuDNN: op cases {g.get('ours_over_cudnn_ops')} ({g.get('n_ops_with_both')} cases), "
              f"training steps (fwd+bwd) {g.get('ours_over_cudnn_train')}, "
              f"everything {g.get('ours_over_cudnn_all')}. Geomean ours/torch eager: blocks "
              f"{g.get('ours_over_torch_blocks')} ({g.get('n_blocks_with_torch')} blocks), everything "
              f"{g.get('ours_over_torch_all')}; cuDNN/torch eager on blocks {g.get('cudnn_over_torch_blocks')}."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("compile", help="build every case through the facade for cuda:sm_80 and serialize the plans")
    c.add_argument("--out", default=".gpu_side_by_side")
    c.add_argument("--target", default=TARGET)
    c.add_argument("--tiny", action="store_true", help="the scaled-down shapes (tests)")
    c.add_argument("--cases", nargs="*", help="only these cases")
    r = sub.add_parser("run", help="cuDNN vs ours vs torch eager on the GPU (or --cpu-check: ours on the CPU)")
    r.add_argument("--plans", default=".gpu_side_by_side")
    r.add_argument("--json")
    r.add_argument("--md")
    r.add_argument("--cpu-check", action="store_true",
                   help="ours on the CPU, tiny shapes, plans compiled on the fly (no cuDNN, no plans folder)")
    r.add_argument("--cases", nargs="*", help="only these cases")
    r.add_argument("--rounds", type=int)
    r.add_argument("--burst", type=int)
    r.add_argument("--warmup", type=int)
    a = ap.parse_args(argv)
    if a.mode == "compile":
        compile_plans(a.out, a.tiny, a.cases, a.target)
        return 0
    cpu = a.cpu_check
    return run(None if cpu else a.plans, a.json, a.md, cpu_check=cpu,
               rounds=a.rounds or (3 if cpu else 30), burst=a.burst or (2 if cpu else 10),
               warm=a.warmup if a.warmup is not None else (1 if cpu else 2), only=a.cases)


if __name__ == "__main__":
    sys.exit(main())
