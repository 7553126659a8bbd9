"""A transformer MLP block with a post-layernorm (BERT style), in one plan.

    h = GELU(x @ W1^T + b1)          exact (erf) GELU, as torch.nn.GELU()
    y = LayerNorm(h @ W2^T + b2 + x) per token, over the hidden size D

1. The weights are used as PyTorch's nn.Linear stores them ([out_features, in_features]): the
   transpose is only strides (matmul's B operand [D, F] with strides [1, D]), no copy.
2. layernorm normalizes over every axis but axis 0, so the tokens go in as [B*S, D] (the same
   memory as [B, S, D]): one row per token, statistics over D only.
3. Build, serialize, restore, execute, and compare with a float64 numpy reference written from the
   definitions (not the library's own reference engine).

Prints PASS and exits 0 when the results match; exits 1 otherwise. Runs on the CPU.
"""
from __future__ import annotations

import math
import sys

import numpy as np

import hipdnn_iree as hd

B, S, D, F = 2, 16, 64, 256           # batch, sequence, hidden, MLP width
T = B * S                             # tokens
EPS = 1e-5
X, W1, B1, W2, B2, GAMMA, BETA, Y = range(1, 9)   # tensor UIDs
RTOL, ATOL = 1e-4, 1e-4               # float32 (tests/tolerances.py)
P = hd.PointwiseMode


def build_graph() -> hd.Graph:
    g = hd.Graph(name="mlp_layernorm", io_data_type=hd.DataType.FLOAT,
                 intermediate_data_type=hd.DataType.FLOAT, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=X, dim=[T, D])
    # nn.Linear weights are [out, in] row-major; as matmul's B ([in, out]) that is strides [1, in].
    w1 = g.tensor(name="fc1.weight", uid=W1, dim=[D, F], stride=[1, D])
    b1 = g.tensor(name="fc1.bias", uid=B1, dim=[1, F])
    w2 = g.tensor(name="fc2.weight", uid=W2, dim=[F, D], stride=[1, F])
    b2 = g.tensor(name="fc2.bias", uid=B2, dim=[1, D])
    gamma = g.tensor(name="ln.weight", uid=GAMMA, dim=[1, D])
    beta = g.tensor(name="ln.bias", uid=BETA, dim=[1, D])

    h = g.pointwise(g.matmul(x, w1, name="fc1"), b1, mode=P.ADD, name="fc1_bias")
    h = g.pointwise(h, mode=P.GELU_FWD, name="gelu")                    # exact GELU
    o = g.pointwise(g.matmul(h, w2, name="fc2"), b2, mode=P.ADD, name="fc2_bias")
    r = g.pointwise(o, x, mode=P.ADD, name="residual")
    y, _, _ = g.layernorm(r, gamma, beta, epsilon=EPS, forward_phase=hd.NormFwdPhase.INFERENCE, name="ln")
    y.set_output(True).set_uid(Y).set_name("y")
    return g


def reference(x, w1, b1, w2, b2, gamma, beta) -> np.ndarray:
    """The block in float64, from the definitions."""
    x, w1, b1, w2, b2, gamma, beta = (np.asarray(a, np.float64) for a in (x, w1, b1, w2, b2, gamma, beta))
    erf = np.vectorize(math.erf)
    a = x @ w1.T + b1
    h = a * 0.5 * (1.0 + erf(a / math.sqrt(2.0)))
    r = h @ w2.T + b2 + x
    mean = r.mean(axis=-1, keepdims=True)
    var = ((r - mean) ** 2).mean(axis=-1, keepdims=True)
    return (r - mean) / np.sqrt(var + EPS) * gamma + beta


def main() -> int:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, S, D), dtype=np.float32)
    w1 = (rng.standard_normal((F, D)) / math.sqrt(D)).astype(np.float32)   # nn.Linear(D, F).weight
    b1 = rng.standard_normal(F).astype(np.float32) * 0.1
    w2 = (rng.standard_normal((D, F)) / math.sqrt(F)).astype(np.float32)   # nn.Linear(F, D).weight
    b2 = rng.standard_normal(D).astype(np.float32) * 0.1
    gamma = 1.0 + 0.1 * rng.standard_normal(D).astype(np.float32)
    beta = 0.1 * rng.standard_normal(D).astype(np.float32)

    handle = hd.create_handle()
    graph = build_graph()
    graph.build(handle)
    plan = graph.serialize_compiled_plan()
    restored = hd.Graph.from_compiled_plan(handle, plan)
    print(f"plan: {len(plan)} bytes, tensor uids {restored.get_compiled_plan_tensor_uids()}")

    y = hd.empty_aligned((B, S, D), np.float32)
    pack = {
        X: x.reshape(T, D),             # [B, S, D] -> [B*S, D]: a view, no copy
        W1: w1.T, W2: w2.T,             # logical [in, out] views of the [out, in] weights
        B1: b1.reshape(1, F), B2: b2.reshape(1, D),
        GAMMA: gamma.reshape(1, D), BETA: beta.reshape(1, D),
        Y: y.reshape(T, D),             # written in place: y holds the result afterwards
    }
    restored.execute(handle, pack)

    ref = reference(x.reshape(T, D), w1, b1, w2, b2, gamma, beta).reshape(B, S, D)
    err = np.abs(y - ref)
    print(f"max |hipdnn-iree - float64 reference| = {err.max():.3e}")
    if not np.all(err <= ATOL + RTOL * np.abs(ref)):
        print("FAIL: result differs from the reference")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
