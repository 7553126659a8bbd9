"""A transformer self-attention block with packed QKV, as three plans chained through buffers.

This is the layout cuDNN and hipDNN users feed attention with: one projection writes Q, K and V
side by side, and attention reads them as strided views of that one buffer.

1. QKV projection: ``qkv = x @ W_qkv + b_qkv`` with x ``[B, S, E]`` and the fused weight in
   ``nn.Linear`` layout (``[3E, E]``, transposed through strides). Its output buffer,
   ``[B, S, 3E]``, is the packed ``[B, S, 3, H, D]`` QKV buffer.
2. Attention: Q, K and V are views of that buffer with dims ``[B, H, S, D]`` and strides
   ``[S*3*H*D, D, 3*H*D, 1]`` (K and V start D*H and 2*D*H elements in), no copies. The output O
   is written as a ``[B, H, S, D]`` view with strides ``[S*H*D, D, H*D, 1]`` into a ``[B, S, E]``
   buffer: heads interleaved per token, ready for the output projection.
3. Output projection: ``y = O @ W_o + b_o``.

Each plan is serialized and restored before it runs. The result is compared with a float64
reference written from the formulas (softmax(Q K^T * scale) V per head). Prints PASS and exits 0
when the results match; exits 1 otherwise. Runs on the CPU.
"""
from __future__ import annotations

import sys

import numpy as np

import hipdnn_iree as hd

B, S, H, D = 2, 64, 4, 32
E = H * D
SCALE = 1.0 / np.sqrt(D)
F = hd.DataType.FLOAT
RTOL, ATOL = 1e-4, 1e-4


def linear(name: str, rows: int, n_in: int, n_out: int) -> hd.Graph:
    """``y[B, rows, n_out] = x @ W^T + b`` with W given as nn.Linear stores it: ``[n_out, n_in]``."""
    g = hd.Graph(name=name, io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[B, rows, n_in])
    w = g.tensor(name="w", uid=2, dim=[1, n_in, n_out], stride=[n_in * n_out, 1, n_in])   # W^T via strides
    b = g.tensor(name="b", uid=3, dim=[1, 1, n_out])
    g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD).set_output(True).set_uid(4)
    return g


def attention() -> hd.Graph:
    g = hd.Graph(name="attention_packed_qkv", io_data_type=F)
    packed = [S * 3 * H * D, D, 3 * H * D, 1]            # [B, H, S, D] views of [B, S, 3, H, D]
    q, k, v = (g.tensor(name=n, uid=u, dim=[B, H, S, D], stride=packed) for n, u in (("q", 1), ("k", 2), ("v", 3)))
    o = g.sdpa(q, k, v, attn_scale=SCALE)
    o.set_output(True).set_uid(4).set_stride([S * H * D, D, H * D, 1])   # into a [B, S, E] buffer
    return g


def restored(handle, graph: hd.Graph) -> hd.Graph:
    graph.build(handle)
    return hd.Graph.from_compiled_plan(handle, graph.serialize_compiled_plan())


def reference(x, w_qkv, b_qkv, w_o, b_o):
    x, w_qkv, b_qkv, w_o, b_o = (a.astype(np.float64) for a in (x, w_qkv, b_qkv, w_o, b_o))
    qkv = (x @ w_qkv.T + b_qkv).reshape(B, S, 3, H, D)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * SCALE
    p = np.exp(s - s.max(-1, keepdims=True))
    o = (p / p.sum(-1, keepdims=True)) @ v                            # [B, H, S, D]
    return o.transpose(0, 2, 1, 3).reshape(B, S, E) @ w_o.T + b_o


def main() -> int:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, S, E)).astype(np.float32)
    w_qkv = (rng.standard_normal((3 * E, E)) / np.sqrt(E)).astype(np.float32)   # nn.Linear(E, 3E).weight
    b_qkv = rng.standard_normal((1, 1, 3 * E)).astype(np.float32)
    w_o = (rng.standard_normal((E, E)) / np.sqrt(E)).astype(np.float32)
    b_o = rng.standard_normal((1, 1, E)).astype(np.float32)

    handle = hd.create_handle()
    qkv_proj, attn, out_proj = (restored(handle, g) for g in
                                (linear("qkv_proj", S, E, 3 * E), attention(), linear("out_proj", S, E, E)))

    qkv = hd.empty_aligned((B, S, 3 * E), np.float32)                 # the packed buffer
    qkv_proj.execute(handle, {1: x, 2: w_qkv.T[None], 3: b_qkv, 4: qkv})
    packed = qkv.reshape(B, S, 3, H, D)
    q, k, v = (packed[:, :, i].transpose(0, 2, 1, 3) for i in range(3))   # views, no copies
    heads = hd.empty_aligned((B, S, E), np.float32)
    attn.execute(handle, {1: q, 2: k, 3: v, 4: heads.reshape(B, S, H, D).transpose(0, 2, 1, 3)})
    y = np.empty((B, S, E), np.float32)
    out_proj.execute(handle, {1: heads, 2: w_o.T[None], 3: b_o, 4: y})

    want = reference(x, w_qkv, b_qkv, w_o, b_o)
    err = float(np.max(np.abs(y - want)))
    ok = np.allclose(y, want, rtol=RTOL, atol=ATOL)
    print(f"attention block [B={B}, S={S}, H={H}, D={D}] through a packed QKV buffer: "
          f"max |err| = {err:.2e}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
