"""Scaled dot-product attention: its shape and attribute rules, dynamic-shape rule and OpDef (no MLIR)."""
from __future__ import annotations

import math

from graph_ir._fbs.graph_generated import DataType as D
from graph_ir.desc import ABSENT, GraphError, OpKind, SdpaAttrs
from graph_ir.dtypes import data_type_name
from graph_ir.dynamic import FIXED, VARY, Facts
from graph_ir.opdef import OpDef, register


def sdpa_shape(q: tuple, k: tuple, v: tuple) -> tuple[int, ...]:
    """Output dims ``[B, Hq, Sq, Dv]``; raises GraphError naming the field on a mismatch.

    Example:
        >>> sdpa_shape((2, 4, 8, 16), (2, 2, 6, 16), (2, 2, 6, 32))
        (2, 4, 8, 32)
        >>> sdpa_shape((2, 4, 8, 16), (2, 1, 6, 16), (2, 4, 6, 32))   # h_k != h_v
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
    if v[2] != k[2]:
        raise GraphError(f"field 'v_uid' sequence length {v[2]} differs from k's sequence length {k[2]} "
                            f"(k {list(k)}, v {list(v)})")
    for field, dims in (("k_uid", k), ("v_uid", v)):
        # NOTE: as cuDNN, k and v may have different head counts; each must divide q's (query head
        # h reads k head h // (Hq / Hk) and v head h // (Hq / Hv)).
        if dims[1] < 1 or q[1] % dims[1] != 0:
            raise GraphError(f"field '{field}' head count {dims[1]}: q's head count {q[1]} must be a multiple of "
                             f"it (grouped-query attention)")
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


_FLOAT_COMPUTE = (D.UNSET, D.FLOAT, D.HALF, D.BFLOAT16, D.DOUBLE)


def check_common(node, dims) -> tuple:
    """Checks q/k/v/mask dims, the scale and the compute type (shared with sdpa_backward); returns
    o's dims ``[B, Hq, Sq, Dv]``."""
    at = node.attrs
    q, k, v = dims(at.q_uid), dims(at.k_uid), dims(at.v_uid)
    out = sdpa_shape(q, k, v)
    scale = at.attn_scale
    if not math.isnan(scale) and not (math.isfinite(scale) and scale > 0):
        raise GraphError(f"field 'attn_scale' value {scale}: it must be a positive finite number "
                         f"(or unset for 1/sqrt(head_dim))")
    if at.scale_uid != ABSENT:
        if not math.isnan(scale):
            raise GraphError(f"both attn_scale ({scale}) and scale_tensor_uid ({at.scale_uid}) are set; give the "
                             "scale one way")
        check_scale_dims(tuple(dims(at.scale_uid)))
    if at.mask_uid != ABSENT:
        scores = (q[0], q[1], q[2], k[2])
        if not mask_broadcasts(dims(at.mask_uid), scores):
            raise GraphError(f"field 'mask_uid' dims {list(dims(at.mask_uid))} do not broadcast to the scores "
                             f"{list(scores)} [B, Hq, Sq, Skv]: each mask dim must be 1 or match")
    if node.compute_data_type not in _FLOAT_COMPUTE:
        raise GraphError(f"field 'compute_data_type' value {data_type_name(node.compute_data_type)}: "
                         f"sdpa computes in a float type")
    return out


def stats_shape(q: tuple) -> tuple[int, ...]:
    """The statistics' dims ``[B, Hq, Sq, 1]`` (one log-sum-exp per query row).

    Example:
        >>> stats_shape((2, 4, 8, 16))
        (2, 4, 8, 1)
    """
    return (q[0], q[1], q[2], 1)


def infer(node, dims) -> dict:
    """Checks q/k/v/mask dims, attn_scale, the compute type and the stats flag; returns o's (and
    stats') dims."""
    at = node.attrs
    out = check_common(node, dims)
    if at.generate_stats and at.stats_uid == ABSENT:
        raise GraphError("field 'generate_stats' is true but 'stats_uid' names no tensor")
    if at.generate_stats is False and at.stats_uid != ABSENT:
        raise GraphError(f"field 'stats_uid' ({at.stats_uid}) is set but generate_stats is false")
    res = {at.o_uid: out}
    if at.stats_uid != ABSENT:
        res[at.stats_uid] = stats_shape(dims(at.q_uid))
    return res


def dynamic_stats(f: Facts, q: int, stats: int) -> None:
    """stats ``[B, Hq, Sq, 1]`` follows q's batch, heads and query length."""
    for i in range(3):
        f.union((q, i), (stats, i))
    f.mark((stats, 3), FIXED)


def dynamic(f: Facts, node):
    at = node.attrs
    dynamic_qkvo(f, at)
    if at.stats_uid != ABSENT:
        dynamic_stats(f, at.q_uid, at.stats_uid)


def dynamic_qkvo(f: Facts, at) -> None:
    """The rule for q, k, v, o, the mask and the scale tensor (sdpa's, shared with sdpa_backward):
    B, S_q and S_kv vary, heads and head dims are fixed."""
    q, k, v, o = at.q_uid, at.k_uid, at.v_uid, at.o_uid
    for u in (k, v, o):
        f.union((q, 0), (u, 0))
    f.mark((q, 0), VARY, "B")
    f.union((q, 1), (o, 1))
    for u, i in ((q, 1), (k, 1), (v, 1), (q, 3), (v, 3)):
        f.mark((u, i), FIXED)
    f.union((q, 3), (k, 3))
    f.union((v, 3), (o, 3))
    f.union((q, 2), (o, 2))
    f.mark((q, 2), VARY, "S_q")
    f.union((k, 2), (v, 2))
    f.mark((k, 2), VARY, "S_kv")
    scores = ((q, 0), (q, 1), (q, 2), (k, 2))
    for name in ("mask_uid",):
        u = getattr(at, name)
        if u == ABSENT or f.graph.tensor(u).is_scalar:
            continue
        m = f.dims(u)
        sd = (f.dims(q)[0], f.dims(q)[1], f.dims(q)[2], f.dims(k)[2])
        off = 4 - len(m)
        for i, d in enumerate(m):
            if d == 1 and sd[off + i] != 1:
                f.mark((u, i), FIXED)
            elif d == 1:
                f.mark((u, i), FIXED)   # NOTE: a size-1 mask axis is read as broadcasting
            else:
                f.union((u, i), scores[off + i])
    for name in ("scale_uid",):
        u = getattr(at, name)
        if u != ABSENT:
            for i in range(len(f.dims(u))):
                f.mark((u, i), FIXED)


OPDEF = register(OpDef(OpKind.SDPA, SdpaAttrs, infer, dynamic, frontend_method="sdpa",
                       facade_methods=("sdpa", "scaled_dot_product_flash_attention"),
                       traits=frozenset({"attention"}),
                       stride_order_from=(("o_uid", "q_uid"),)))
