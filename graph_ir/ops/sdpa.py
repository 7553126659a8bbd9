"""Scaled dot-product attention's shape and attribute rules (no MLIR)."""
from __future__ import annotations

import math

from graph_ir.desc import GraphError

def sdpa_shape(q: tuple, k: tuple, v: tuple) -> tuple[int, ...]:
    """Output dims ``[B, Hq, Sq, Dv]``; raises GraphError naming the field on a mismatch.

    Example:
        >>> sdpa_shape((2, 4, 8, 16), (2, 2, 6, 16), (2, 2, 6, 32))
        (2, 4, 8, 32)
    """
    for field, dims in (("q_uid", q), ("k_uid", k), ("v_uid", v)):
        if len(dims) != 4:
            raise GraphError(f"field '{field}' has rank {len(dims)} (dims {list(dims)}); sdpa needs rank 4 "
                                f"[batch, heads, seq, head_dim]")
    if k[3] != q[3]:
        raise GraphError(f"field 'k_uid' head dim {k[3]} differs from q's head dim {q[3]} "
                            f"(q {list(q)}, k {list(k)})")
    for field, dims in (("k_uid", k), ("v_uid", v)):
        if dims[0] != q[0]:
            raise GraphError(f"field '{field}' batch size {dims[0]} differs from q's batch size {q[0]} "
                                f"(broadcast a batch through stride 0 instead)")
    if v[1] != k[1]:
        raise GraphError(f"field 'v_uid' head count {v[1]} differs from k's head count {k[1]}")
    if v[2] != k[2]:
        raise GraphError(f"field 'v_uid' sequence length {v[2]} differs from k's sequence length {k[2]} "
                            f"(k {list(k)}, v {list(v)})")
    if k[1] < 1 or q[1] % k[1] != 0:
        raise GraphError(f"field 'k_uid' head count {k[1]}: q's head count {q[1]} must be a multiple of it "
                            f"(grouped-query attention)")
    return (q[0], q[1], q[2], v[3])


def mask_broadcasts(mask: tuple, scores: tuple) -> bool:
    """Whether ``mask`` broadcasts (right-aligned, as PyTorch) to ``scores`` ``[B, Hq, Sq, Skv]``."""
    if len(mask) > len(scores):
        return False
    return all(m in (1, s) for m, s in zip(mask[::-1], scores[::-1]))


def check_scale_value(value: float) -> None:
    """A constant scale must be a positive finite number (as ``attn_scale``)."""
    if not (math.isfinite(value) and value > 0):
        raise GraphError(f"field 'scale_tensor_uid' value {value}: it must be a positive finite number "
                            "(or unset for 1/sqrt(head_dim))")


def check_scale_dims(dims: tuple) -> None:
    """The scale tensor holds one value: dims ``[]``, ``[1]``, ``[1, 1, 1, 1]`` ..."""
    if any(d != 1 for d in dims):
        raise GraphError(f"field 'scale_tensor_uid' dims {list(dims)}: the scale tensor must hold one value "
                            "(dims [1], or a scalar g.tensor(value=...))")
