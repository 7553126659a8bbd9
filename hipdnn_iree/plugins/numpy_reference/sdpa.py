"""numpy reference for Scaled dot-product attention: sdpa.

Straight from the definition, in float64: repeat each kv head over its query
heads, ``softmax(q k^T * scale + mask) v`` with masked scores at ``-inf``.
A query whose keys are all masked gets 0 (as PyTorch) and stats (the log-sum-exp of its
scaled, masked scores, when asked for) -inf.
"""
from __future__ import annotations

import math

import numpy as np

from hipdnn_iree.plugins.numpy_reference.registry import register_reference
from graph_ir.desc import ABSENT, GraphError, NodeDesc, OpKind


def logits(q: np.ndarray, k: np.ndarray, scale: float | None = None, is_causal: bool = False,
           mask: np.ndarray | None = None) -> np.ndarray:
    """The scaled, masked scores ``[B, Hq, Sq, Skv]`` in float64 (masked: -inf); kv heads repeated
    over their query heads."""
    q, k = (np.asarray(x, dtype=np.float64) for x in (q, k))
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)  # head h uses kv head h // group
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = np.einsum("bhid,bhjd->bhij", q, k) * scale
    keep = np.ones(scores.shape, dtype=bool)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:
            keep &= mask
        else:
            scores = scores + mask.astype(np.float64)
    if is_causal:
        sq, skv = scores.shape[-2:]
        keep &= np.arange(skv)[None, :] <= np.arange(sq)[:, None]
    return np.where(keep, scores, -np.inf)


def sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None = None, is_causal: bool = False,
         mask: np.ndarray | None = None, generate_stats: bool = False):
    """Attention of logical q ``[B, Hq, Sq, D]``, k ``[B, Hk, Skv, D]``, v ``[B, Hk, Skv, Dv]``; with
    ``generate_stats`` returns ``(o, stats)``, stats ``[B, Hq, Sq, 1]`` the log-sum-exp of the logits.

    Example:
        >>> import numpy as np
        >>> q, k = np.ones((1, 1, 2, 3)), np.ones((1, 1, 1, 3))
        >>> sdpa(q, k, np.full((1, 1, 1, 4), 7.0)).tolist()   # one key: o is its value row
        [[[[7.0, 7.0, 7.0, 7.0], [7.0, 7.0, 7.0, 7.0]]]]
    """
    v = np.asarray(v, dtype=np.float64)
    v = np.repeat(v, q.shape[1] // v.shape[1], axis=1)
    scores = logits(q, k, scale, is_causal, mask)
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(np.isneginf(top), 0.0, top)  # fully masked row: every weight exp(-inf) = 0
    w = np.exp(scores - top)
    total = w.sum(axis=-1, keepdims=True)
    w = np.divide(w, total, out=np.zeros_like(w), where=total > 0)
    o = np.einsum("bhij,bhje->bhie", w, v)
    if not generate_stats:
        return o
    with np.errstate(divide="ignore"):
        return o, top + np.log(total)


def mask_and_scale(node: NodeDesc, env: dict):
    """The node's mask (None without one) and scale (None: 1/sqrt(head_dim)) from ``env``."""
    at = node.attrs
    mask = None
    if at.mask_uid != ABSENT:
        mask = np.asarray(env[at.mask_uid])
        if mask.dtype.kind in "iu":  # NOTE: as the lowering: BOOLEAN keeps, floats add
            raise GraphError(f"{node.attrs.KIND.name.lower()} '{node.name}': mask type {mask.dtype} is not "
                             "supported", "unsupported")
    scale = None if math.isnan(at.attn_scale) else at.attn_scale
    if at.scale_uid != ABSENT:   # NOTE: a constant or a one-element tensor bound at execute
        scale = float(np.asarray(env[at.scale_uid], dtype=np.float64).reshape(-1)[0])
    return mask, scale


@register_reference(OpKind.SDPA)
def ref_sdpa(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    mask, scale = mask_and_scale(node, env)
    if at.stats_uid == ABSENT:
        return {at.o_uid: sdpa(env[at.q_uid], env[at.k_uid], env[at.v_uid], scale, at.is_causal, mask)}
    o, stats = sdpa(env[at.q_uid], env[at.k_uid], env[at.v_uid], scale, at.is_causal, mask, generate_stats=True)
    return {at.o_uid: o, at.stats_uid: stats}
