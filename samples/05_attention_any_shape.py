"""A BERT-style attention block served at any batch size (1-32) and sequence length (7-512) from
ONE plan file: built once with override shapes, saved, restored, executed at shapes never built.

The block, one graph (E = H * D, per-head weights so no reshape is needed):

    q, k, v = x @ Wq + bq, x @ Wk + bk, x @ Wv + bv   x [B, 1, S, E] @ W [1, H, E, D] -> [B, H, S, D]
    o       = sdpa(q, k, v)                            [B, H, S, D]
    proj    = sum over heads of o @ Wo                 [B, H, S, E] -> [B, 1, S, E]
    y       = layernorm(x + proj + bo)                 [B, 1, S, E]

``g.set_override_shape_enabled(True)`` compiles it with symbolic batch and sequence dims; the
plan file then carries the shape spec (which dims vary) and the envelope says so to hipDNN
(``is_override_shape_enabled``). Each execute takes its buffers' own shapes. Results are compared
with a float64 numpy reference. Prints PASS and exits 0 when every shape matches; exits 1
otherwise. Runs on the CPU. ``--all`` runs more shapes (up to batch 32 x sequence 512).
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

import hipdnn_iree as hd

H, D = 4, 16
E = H * D
F = hd.DataType.FLOAT
BUILT = (4, 64)                                   # the shape the plan is built at (B, S)
SHAPES = [(1, 7), (3, 100), (32, 128)]            # served from the plan file (none of them built)
MORE = [(32, 512), (17, 333), (1, 512), (8, 7)]
RTOL, ATOL = 2e-4, 2e-4


def block(b: int, s: int) -> hd.Graph:
    g = hd.Graph(name="bert_attention_block", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[b, 1, s, E])
    proj = {}
    for i, n in enumerate("qkv"):
        w = g.tensor(name=f"w{n}", uid=10 + i, dim=[1, H, E, D])
        bias = g.tensor(name=f"b{n}", uid=20 + i, dim=[1, H, 1, D])
        proj[n] = g.pointwise(g.matmul(x, w), bias, mode=hd.PointwiseMode.ADD)
    o = g.sdpa(proj["q"], proj["k"], proj["v"], attn_scale=1.0 / np.sqrt(D))
    o = o[0] if isinstance(o, tuple) else o
    wo = g.tensor(name="wo", uid=13, dim=[1, H, D, E])
    per_head = g.matmul(o, wo)                                          # [B, H, S, E]
    heads = g.reduction(per_head, mode=hd.ReductionMode.ADD)
    heads.set_dim([b, 1, s, E])
    bo = g.tensor(name="bo", uid=23, dim=[1, 1, 1, E])
    res = g.pointwise(g.pointwise(heads, bo, mode=hd.PointwiseMode.ADD), x, mode=hd.PointwiseMode.ADD)
    gamma, beta = g.tensor(name="gamma", uid=30, dim=[1, 1, 1, E]), g.tensor(name="beta", uid=31, dim=[1, 1, 1, E])
    y = g.layernorm(res, gamma, beta, epsilon=1e-5)[0]
    y.set_output(True).set_uid(2).set_name("y")
    g.set_override_shape_enabled(True)
    return g


def reference(x, p):
    x = x.astype(np.float64)
    q, k, v = (x @ p[f"w{n}"] + p[f"b{n}"] for n in "qkv")
    sc = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(D)
    a = np.exp(sc - sc.max(-1, keepdims=True))
    o = (a / a.sum(-1, keepdims=True)) @ v
    r = (o @ p["wo"]).sum(1, keepdims=True) + p["bo"] + x
    mu, var = r.mean(-1, keepdims=True), r.var(-1, keepdims=True)
    return (r - mu) / np.sqrt(var + 1e-5) * p["gamma"] + p["beta"]


def main(argv) -> int:
    rng = np.random.default_rng(0)
    params = {f"w{n}": rng.standard_normal((1, H, E, D)) / np.sqrt(E) for n in "qkv"}
    params.update({f"b{n}": rng.standard_normal((1, H, 1, D)) * 0.1 for n in "qkv"})
    params.update(wo=rng.standard_normal((1, H, D, E)) / np.sqrt(E), bo=rng.standard_normal((1, 1, 1, E)) * 0.1,
                  gamma=1 + 0.1 * rng.standard_normal((1, 1, 1, E)), beta=0.1 * rng.standard_normal((1, 1, 1, E)))
    params = {k: v.astype(np.float32) for k, v in params.items()}
    uids = {"wq": 10, "wk": 11, "wv": 12, "wo": 13, "bq": 20, "bk": 21, "bv": 22, "bo": 23, "gamma": 30, "beta": 31}

    handle = hd.create_handle()
    g = block(*BUILT)
    g.build(handle)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "attention.plan")
        with open(path, "wb") as f:
            f.write(g.serialize_compiled_plan())
        size = os.path.getsize(path)
        plan = hd.Graph.from_compiled_plan_file(handle, path)      # what a server loads, once
    ok = True
    for b, s in SHAPES + (MORE if "--all" in argv else []):
        x = rng.standard_normal((b, 1, s, E)).astype(np.float32)
        y = np.full((b, 1, s, E), np.nan, np.float32)
        plan.execute(handle, {1: x, 2: y, **{u: params[k] for k, u in uids.items()}})
        want = reference(x, params)
        err = float(np.max(np.abs(y - want)))
        good = bool(np.allclose(y, want, rtol=RTOL, atol=ATOL))
        ok &= good
        print(f"  batch {b:2d} x sequence {s:3d}: max |err| = {err:.2e} {'ok' if good else 'MISMATCH'}")
    print(f"BERT-style attention block [H={H}, D={D}] built at batch {BUILT[0]} x sequence {BUILT[1]}, one "
          f"{size}-byte plan file, served at {len(SHAPES) + (len(MORE) if '--all' in argv else 0)} other shapes: "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
