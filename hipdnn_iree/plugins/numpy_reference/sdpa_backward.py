"""numpy reference for sdpa_backward, in float64 from the definitions (no math shared with the lowering).

``p = exp(logits - stats)`` (0 where masked or where stats is -inf), ``dv = p^T do``,
``dp = do v^T``, ``delta = rowsum(do * o)``, ``ds = p * (dp - delta)``, ``dq = scale * ds k``,
``dk = scale * ds^T q``; with grouped-query attention dk and dv are summed over the query heads
that share a kv head.
"""
from __future__ import annotations

import math

import numpy as np

from hipdnn_iree.plugins.numpy_reference.registry import register_reference
from hipdnn_iree.plugins.numpy_reference.sdpa import logits, mask_and_scale
from graph_ir.desc import NodeDesc, OpKind


def sdpa_backward(q, k, v, o, do, stats, scale: float | None = None, is_causal: bool = False, mask=None):
    """``(dq, dk, dv)`` of sdpa at q ``[B, Hq, Sq, D]``, k ``[B, Hk, Skv, D]``, v ``[B, Hv, Skv, Dv]``
    given o, do ``[B, Hq, Sq, Dv]`` and stats ``[B, Hq, Sq, 1]``.

    Example:
        >>> import numpy as np
        >>> q, k, v = np.zeros((1, 1, 1, 2)), np.zeros((1, 1, 2, 2)), np.array([[[[1.0, 0.0], [3.0, 0.0]]]])
        >>> o, do = np.array([[[[2.0, 0.0]]]]), np.array([[[[1.0, 0.0]]]])   # two equal scores: o = mean of v
        >>> dq, dk, dv = sdpa_backward(q, k, v, o, do, np.log(2.0) * np.ones((1, 1, 1, 1)))
        >>> dv.tolist()   # each key weighs 1/2
        [[[[0.5, 0.0], [0.5, 0.0]]]]
    """
    q, k, v, o, do, stats = (np.asarray(x, dtype=np.float64) for x in (q, k, v, o, do, stats))
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    hq = q.shape[1]
    s = logits(q, k, scale, is_causal, mask)
    empty = np.isneginf(stats)
    with np.errstate(invalid="ignore"):
        p = np.where(empty | np.isneginf(s), 0.0, np.exp(s - np.where(empty, 0.0, stats)))
    kr, vr = np.repeat(k, hq // k.shape[1], axis=1), np.repeat(v, hq // v.shape[1], axis=1)
    dv = np.einsum("bhij,bhie->bhje", p, do)
    dp = np.einsum("bhie,bhje->bhij", do, vr)
    delta = (do * o).sum(axis=-1, keepdims=True)
    ds = p * (dp - delta)
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, kr)
    dk = scale * np.einsum("bhij,bhid->bhjd", ds, q)

    def per_kv_head(x, h):   # [B, Hq, ...] -> [B, h, ...]: the sum over each kv head's query heads
        return x.reshape(x.shape[0], h, hq // h, *x.shape[2:]).sum(axis=2)

    return dq, per_kv_head(dk, k.shape[1]), per_kv_head(dv, v.shape[1])


@register_reference(OpKind.SDPA_BACKWARD)
def ref_sdpa_backward(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    mask, scale = mask_and_scale(node, env)
    dq, dk, dv = sdpa_backward(env[at.q_uid], env[at.k_uid], env[at.v_uid], env[at.o_uid], env[at.do_uid],
                               env[at.stats_uid], scale, at.is_causal, mask)
    return {at.dq_uid: dq, at.dk_uid: dk, at.dv_uid: dv}
