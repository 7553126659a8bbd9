"""Scaled dot-product attention -> a chain of ``linalg.generic`` ops.

``o = softmax(q k^T * scale + mask) v`` over logical shapes q ``[B, Hq, Sq, D]``,
k ``[B, Hk, Skv, D]``, v ``[B, Hk, Skv, Dv]``, o ``[B, Hq, Sq, Dv]``. The chain:

1. ``s = q k^T`` (contraction over D),
2. ``l = s * scale`` then the mask (boolean: keep where true; float: added) and
   the causal mask (key ``j`` kept for query ``i`` iff ``j <= i``, top-left aligned),
3. ``m = max_j l`` (numerically stable softmax), ``e = exp(l - m)``, ``z = sum_j e``,
4. ``acc = e v`` (contraction over Skv), ``o = acc / z``.

Everything runs in the compute type (f32 unless set) and is rounded once to
o's type. Grouped-query attention (``Hk < Hq``, ``Hq % Hk == 0``) splits the
query head axis into ``[Hk, G]`` with ``tensor.expand_shape`` so every
indexing map stays a projected permutation: query head ``h`` reads kv head
``h // G``.
"""
from __future__ import annotations

import math

from lowering._context import LowerContext, is_nan
from lowering._emit import FLOAT_TYPES, Emitter, Value, tensor_type
from lowering._registry import register_lowering
from lowering.graph_ir import ABSENT, LoweringError, NodeDesc, OpKind

_INF = math.inf


def sdpa_shape(q: tuple, k: tuple, v: tuple) -> tuple[int, ...]:
    """Output dims ``[B, Hq, Sq, Dv]``; raises LoweringError naming the field on a mismatch.

    Example:
        >>> sdpa_shape((2, 4, 8, 16), (2, 2, 6, 16), (2, 2, 6, 32))
        (2, 4, 8, 32)
    """
    for field, dims in (("q_uid", q), ("k_uid", k), ("v_uid", v)):
        if len(dims) != 4:
            raise LoweringError(f"field '{field}' has rank {len(dims)} (dims {list(dims)}); sdpa needs rank 4 "
                                f"[batch, heads, seq, head_dim]")
    if k[3] != q[3]:
        raise LoweringError(f"field 'k_uid' head dim {k[3]} differs from q's head dim {q[3]} "
                            f"(q {list(q)}, k {list(k)})")
    for field, dims in (("k_uid", k), ("v_uid", v)):
        if dims[0] != q[0]:
            raise LoweringError(f"field '{field}' batch size {dims[0]} differs from q's batch size {q[0]} "
                                f"(broadcast a batch through stride 0 instead)")
    if v[1] != k[1]:
        raise LoweringError(f"field 'v_uid' head count {v[1]} differs from k's head count {k[1]}")
    if v[2] != k[2]:
        raise LoweringError(f"field 'v_uid' sequence length {v[2]} differs from k's sequence length {k[2]} "
                            f"(k {list(k)}, v {list(v)})")
    if k[1] < 1 or q[1] % k[1] != 0:
        raise LoweringError(f"field 'k_uid' head count {k[1]}: q's head count {q[1]} must be a multiple of it "
                            f"(grouped-query attention)")
    return (q[0], q[1], q[2], v[3])


def mask_broadcasts(mask: tuple, scores: tuple) -> bool:
    """Whether ``mask`` broadcasts (right-aligned, as PyTorch) to ``scores`` ``[B, Hq, Sq, Skv]``."""
    if len(mask) > len(scores):
        return False
    return all(m in (1, s) for m, s in zip(mask[::-1], scores[::-1]))


def _amap(rank: int, exprs) -> str:
    dims = ", ".join(f"d{i}" for i in range(rank))
    return f"affine_map<({dims}) -> ({', '.join(exprs)})>"


def _split_heads(em: Emitter, v: Value, axis: int, hk: int, g: int) -> Value:
    """``tensor.expand_shape`` of head axis ``axis`` (size ``hk * g``) into ``[hk, g]``."""
    shape = v.shape[:axis] + (hk, g) + v.shape[axis + 1:]
    groups, j = [], 0
    for i in range(len(v.shape)):
        groups.append([j, j + 1] if i == axis else [j])
        j += 2 if i == axis else 1
    reassoc = "[" + ", ".join("[" + ", ".join(map(str, grp)) + "]" for grp in groups) + "]"
    name = em.op(f"tensor.expand_shape {v.ssa} {reassoc} output_shape [{', '.join(map(str, shape))}] "
                 f": {v.type} into {tensor_type(shape, v.elem)}", "r")
    return Value(name, shape, v.elem)


def _merge_heads(em: Emitter, v: Value, axis: int) -> Value:
    """Inverse of :func:`_split_heads`: collapses axes ``axis, axis + 1``."""
    shape = v.shape[:axis] + (v.shape[axis] * v.shape[axis + 1],) + v.shape[axis + 2:]
    groups = [[i] for i in range(axis)] + [[axis, axis + 1]] + [[i] for i in range(axis + 2, len(v.shape))]
    reassoc = "[" + ", ".join("[" + ", ".join(map(str, grp)) + "]" for grp in groups) + "]"
    name = em.op(f"tensor.collapse_shape {v.ssa} {reassoc} : {v.type} into {tensor_type(shape, v.elem)}", "r")
    return Value(name, shape, v.elem)


@register_lowering(OpKind.SDPA)
def lower_sdpa(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    em = ctx.em
    q, k, v = ctx.value(at.q_uid), ctx.value(at.k_uid), ctx.value(at.v_uid)
    try:
        sdpa_shape(q.shape, k.shape, v.shape)
    except LoweringError as e:
        raise LoweringError(f"sdpa '{node.name}': {e}") from None
    ct = ctx.compute_elem(node)
    if ct not in FLOAT_TYPES:
        ct = "f32"  # NOTE: softmax needs a float type; an integer compute type falls back to f32
    b, hq, sq, d = q.shape
    hk, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    grp = hq // hk
    scale = 1.0 / math.sqrt(d) if is_nan(at.attn_scale) else float(at.attn_scale)

    # Head axes of the iteration domain: [Hq], or [Hk, G] for grouped-query attention.
    heads = (hq,) if grp == 1 else (hk, grp)
    if grp > 1:
        q = _split_heads(em, q, 1, hk, grp)
    rows = (b,) + heads + (sq,)            # one softmax row per (batch, heads..., query)
    nr = len(rows)
    dn = [f"d{i}" for i in range(nr + 2)]  # rows..., then two more axes
    row_d, kv_head = dn[:nr], [dn[0], dn[1]]  # kv tensors index batch and the first head axis

    def mm(x, y, ct=ct):
        return em.op(f"arith.mulf {x}, {y} : {ct}")

    # 1. s[rows, j] = sum_d q[rows, d] * k[b, hk, j, d]
    s_shape = rows + (skv,)
    j_ax, r_ax = dn[nr], dn[nr + 1]
    s = em.generic(
        [(q, _amap(nr + 2, row_d + [r_ax])), (k, _amap(nr + 2, kv_head + [j_ax, r_ax]))],
        s_shape, ct, ["parallel"] * (nr + 1) + ["reduction"], _amap(nr + 2, row_d + [j_ax]),
        lambda a: em.op(f"arith.addf {a[2]}, {mm(em.cast(a[0], q.elem, ct), em.cast(a[1], k.elem, ct))} : {ct}"),
        init=em.filled(s_shape, ct, 0.0))

    # 2. logits: scale, then the user mask and the causal mask (masked -> -inf).
    inputs = [s]
    mask = None
    if at.mask_uid != ABSENT:
        mask = ctx.value(at.mask_uid)
        if mask.elem not in FLOAT_TYPES and mask.elem != "i1":
            raise LoweringError(f"sdpa '{node.name}': mask element type {mask.elem} is not supported; use a "
                                f"BOOLEAN (true = keep) or a float (additive) mask", "unsupported")
        if not mask_broadcasts(mask.shape, (b, hq, sq, skv)):
            raise LoweringError(f"sdpa '{node.name}': field 'mask_uid' dims {list(mask.shape)} do not broadcast "
                                f"to the scores [{b}, {hq}, {sq}, {skv}]")
        if grp > 1 and len(mask.shape) >= 3:
            mask = em.reshape(mask, (1,) * (4 - len(mask.shape)) + mask.shape)
            mask = _split_heads(em, mask, 1, *((hk, grp) if mask.shape[1] == hq else (1, 1)))
        inputs.append(mask)

    def logits(a):
        x = mm(a[0], em.const(scale, ct))
        if mask is not None and mask.elem == "i1":
            x = em.op(f"arith.select {a[1]}, {x}, {em.const(-_INF, ct)} : {ct}")
        elif mask is not None:
            x = em.op(f"arith.addf {x}, {em.cast(a[1], mask.elem, ct)} : {ct}")
        if at.is_causal:
            i = em.op(f"linalg.index {nr - 1} : index")
            j = em.op(f"linalg.index {nr} : index")
            future = em.op(f"arith.cmpi ugt, {j}, {i} : index")
            x = em.op(f"arith.select {future}, {em.const(-_INF, ct)}, {x} : {ct}")
        return x

    lg = em.elementwise(inputs, s_shape, ct, logits)

    # 3. numerically stable softmax pieces: row max, exp(l - max), row sum.
    full, row = _amap(nr + 1, dn[:nr + 1]), _amap(nr + 1, row_d)
    red = ["parallel"] * nr + ["reduction"]
    m = em.generic([(lg, full)], rows, ct, red, row,
                   lambda a: em.op(f"arith.maximumf {a[0]}, {a[1]} : {ct}"),
                   init=em.filled(rows, ct, -_INF))

    def exp_shifted(a):
        # NOTE: a row whose keys are all masked has max -inf; shifting by 0 there makes every
        # exp(-inf) = 0 instead of exp(-inf - -inf) = NaN, so the row's output comes out 0
        # (PyTorch's behaviour) rather than NaN.
        ninf = em.op(f"arith.cmpf oeq, {a[1]}, {em.const(-_INF, ct)} : {ct}")
        shift = em.op(f"arith.select {ninf}, {em.const(0.0, ct)}, {a[1]} : {ct}")
        return em.op(f"math.exp {em.op(f'arith.subf {a[0]}, {shift} : {ct}')} : {ct}")

    e = em.generic([(lg, full), (m, row)], s_shape, ct, ["parallel"] * (nr + 1), full, exp_shifted)
    z = em.generic([(e, full)], rows, ct, red, row,
                   lambda a: em.op(f"arith.addf {a[0]}, {a[1]} : {ct}"), init=em.filled(rows, ct, 0.0))

    # 4. acc[rows, e] = sum_j e[rows, j] * v[b, hk, j, e]; o = acc / z.
    acc_shape = rows + (dv,)
    e_ax, j_ax = dn[nr], dn[nr + 1]
    acc = em.generic(
        [(e, _amap(nr + 2, row_d + [j_ax])), (v, _amap(nr + 2, kv_head + [j_ax, e_ax]))],
        acc_shape, ct, ["parallel"] * (nr + 1) + ["reduction"], _amap(nr + 2, row_d + [e_ax]),
        lambda a: em.op(f"arith.addf {a[2]}, {mm(a[0], em.cast(a[1], v.elem, ct))} : {ct}"),
        init=em.filled(acc_shape, ct, 0.0))

    def normalize(a):
        # NOTE: z >= 1 whenever a key is kept (the max term is exp(0) = 1) and z = 0 (with
        # acc = 0) when none is; clamping at 1 gives the fully masked row 0 without a branch.
        one = em.const(1.0, ct)
        return em.op(f"arith.divf {a[0]}, {em.op(f'arith.maximumf {a[1]}, {one} : {ct}')} : {ct}")

    o = em.generic([(acc, full), (z, row)], acc_shape, ct, ["parallel"] * (nr + 1), full, normalize)
    if grp > 1:
        o = _merge_heads(em, o, 1)
    ctx.define(at.o_uid, o)
