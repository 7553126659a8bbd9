"""sdpa_backward -> a chain of ``linalg.generic`` ops (contractions, row reductions, elementwise).

Given q ``[B, Hq, Sq, D]``, k ``[B, Hk, Skv, D]``, v ``[B, Hk, Skv, Dv]``, the forward's o and its
gradient do ``[B, Hq, Sq, Dv]`` and stats ``[B, Hq, Sq, 1]`` (the log-sum-exp of each query's
logits, as sdpa's ``generate_stats`` writes it), in the compute type (f32 unless set):

1. ``l`` = the forward's logits (``s = q k^T``, times the scale, the mask and the causal mask;
   masked -> -inf): sdpa's composition steps 1-2 (:func:`lowering.ops.sdpa.masked_logits`);
2. ``p = exp(l - stats)``, 0 where ``stats`` is -inf (a fully masked row: no key contributes
   and no NaN from ``-inf - -inf``); a masked key has ``exp(-inf) = 0``;
3. ``dv[b, hk, j, e] = sum over the query heads of kv head hk and the queries i of p * do``;
4. ``dp = do v^T`` (contraction over Dv), ``delta = rowsum(do * o)``;
5. ``ds = scale * p * (dp - delta)`` (the scale folded in once: both gradients below carry it);
6. ``dq = ds k`` (contraction over Skv), ``dk[b, hk, j, d] = sum over heads and queries of ds * q``.

Grouped-query attention splits the query head axis into ``[Hk, G]`` as the forward does
(:class:`lowering.ops.sdpa._Rows`): dk and dv reduce over G with the queries, so they are summed
over the query heads that share a kv head. When k and v have different head counts both are
repeated to ``lcm(Hk, Hv)`` heads first (:func:`lowering.ops.sdpa.common_kv_heads`) and dk, dv
summed back over the repeats. Each output is rounded once to its declared type.
"""
from __future__ import annotations

import math

from lowering._context import LowerContext
from lowering._emit import FLOAT_TYPES, Emitter, Value
from lowering._registry import register_lowering
from graph_ir.desc import GraphError, NodeDesc, OpKind
from graph_ir.ops.sdpa import sdpa_shape
from lowering.ops.sdpa import (_amap, _ident, _Rows, common_kv_heads, masked_logits, sdpa_scale, sum_head_groups,
                               user_mask)

_INF = math.inf


@register_lowering(OpKind.SDPA_BACKWARD)
def lower_sdpa_backward(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    q, k, v = ctx.value(at.q_uid), ctx.value(at.k_uid), ctx.value(at.v_uid)
    o, do, stats = ctx.value(at.o_uid), ctx.value(at.do_uid), ctx.value(at.stats_uid)
    try:
        sdpa_shape(q.shape, k.shape, v.shape)
    except GraphError as e:
        raise GraphError(f"sdpa_backward '{node.name}': {e}") from None
    for x, what in ((stats, "stats"), (o, "o"), (do, "do")):
        if x.elem not in FLOAT_TYPES:
            raise GraphError(f"sdpa_backward '{node.name}': {what} has element type {x.elem}; it must be a float",
                             "unsupported")
    ct = ctx.compute_elem(node)
    if ct not in FLOAT_TYPES:
        ct = "f32"  # NOTE: as sdpa: an integer compute type falls back to f32
    b, hq, sq, d = q.shape
    scale = sdpa_scale(ctx, node, d)
    mask = user_mask(ctx, node, (b, hq, sq, k.shape[2]))
    kc, vc = common_kv_heads(ctx.em, k, v)
    dq, dk, dv = lower_backward(ctx.em, q, kc, vc, o, do, stats, mask, scale, at.is_causal, ct)
    dk, dv = sum_head_groups(ctx.em, dk, k.shape[1]), sum_head_groups(ctx.em, dv, v.shape[1])
    ctx.define(at.dq_uid, dq)
    ctx.define(at.dk_uid, dk)
    ctx.define(at.dv_uid, dv)


def lower_backward(em: Emitter, q: Value, k: Value, v: Value, o: Value, do: Value, stats: Value,
                   mask: Value | None, scale: float | Value, causal: bool, ct: str):
    """``(dq, dk, dv)`` in ``ct`` (steps in the module doc)."""
    lay = _Rows(em, q, k, ct)
    o, do, st = lay.split(o), lay.split(do), lay.stats_in(stats)
    nr, rows = lay.nr, lay.rows
    full, row = _ident(nr + 1), _amap(nr + 1, lay.row_d)
    par = ["parallel"] * (nr + 1)

    lg = masked_logits(em, lay, k, mask, scale, causal)

    def prob(a):
        s = em.cast(a[1], st.elem, ct)
        ninf = em.op(f"arith.cmpf oeq, {s}, {em.const(-_INF, ct)} : {ct}")
        x = em.op(f"math.exp {em.op(f'arith.subf {a[0]}, {s} : {ct}')} : {ct}")
        return em.op(f"arith.select {ninf}, {em.const(0.0, ct)}, {x} : {ct}")

    p = em.generic([(lg, full), (st, row)], lg.shape, ct, par, full, prob)
    dv = _kv_grad(em, lay, p, do, v.shape[3])
    dp = _row_dot_kv(em, lay, do, v)

    def dot(a):
        x = lay.mul(em.cast(a[0], do.elem, ct), em.cast(a[1], o.elem, ct))
        return em.op(f"arith.addf {a[2]}, {x} : {ct}")

    red = ["parallel"] * nr + ["reduction"]
    delta = em.generic([(do, full), (o, full)], rows, ct, red, row, dot, init=em.filled(rows, ct, 0.0))

    inputs = [(p, full), (dp, full), (delta, row)]
    if isinstance(scale, Value):
        inputs.append((scale, _amap(nr + 1, [])))

    def dscore(a):
        sc = em.cast(a[3], scale.elem, ct) if isinstance(scale, Value) else em.const(scale, ct)
        x = lay.mul(a[0], em.op(f"arith.subf {a[1]}, {a[2]} : {ct}"))
        return lay.mul(x, sc)

    ds = em.generic(inputs, lg.shape, ct, par, full, dscore)
    dq = lay.merge(_row_times_kv(em, lay, ds, k))
    dk = _kv_grad(em, lay, ds, lay.q, q.shape[3])
    return dq, dk, dv


def _row_dot_kv(em: Emitter, lay: _Rows, x: Value, kv: Value) -> Value:
    """``out[rows, j] = sum_r x[rows, r] * kv[b, hk, j, r]`` (as ``q k^T``)."""
    nr, dn, ct = lay.nr, lay.dn, lay.ct
    j_ax, r_ax = dn[nr], dn[nr + 1]
    shape = lay.rows + (kv.shape[2],)
    return em.generic(
        [(x, _amap(nr + 2, lay.row_d + [r_ax])), (kv, _amap(nr + 2, lay.kv_head + [j_ax, r_ax]))],
        shape, ct, ["parallel"] * (nr + 1) + ["reduction"], _amap(nr + 2, lay.row_d + [j_ax]),
        lambda a: em.op(f"arith.addf {a[2]}, {lay.mul(em.cast(a[0], x.elem, ct), em.cast(a[1], kv.elem, ct))} : {ct}"),
        init=em.filled(shape, ct, 0.0))


def _row_times_kv(em: Emitter, lay: _Rows, w: Value, kv: Value) -> Value:
    """``out[rows, e] = sum_j w[rows, j] * kv[b, hk, j, e]`` (as ``p v``)."""
    nr, dn, ct = lay.nr, lay.dn, lay.ct
    e_ax, j_ax = dn[nr], dn[nr + 1]
    shape = lay.rows + (kv.shape[3],)
    return em.generic(
        [(w, _amap(nr + 2, lay.row_d + [j_ax])), (kv, _amap(nr + 2, lay.kv_head + [j_ax, e_ax]))],
        shape, ct, ["parallel"] * (nr + 1) + ["reduction"], _amap(nr + 2, lay.row_d + [e_ax]),
        lambda a: em.op(f"arith.addf {a[2]}, {lay.mul(a[0], em.cast(a[1], kv.elem, ct))} : {ct}"),
        init=em.filled(shape, ct, 0.0))


def _kv_grad(em: Emitter, lay: _Rows, w: Value, x: Value, width: int) -> Value:
    """``out[b, hk, j, e] = sum over (G, i) of w[rows, j] * x[rows, e]``: a kv-side gradient, summed
    over the queries and over the query heads that share kv head ``hk``.

    Domain ``[b, hk, j, e, G?, i]``: the rows' axes are ``b, hk, (G,) i`` there."""
    nr, ct = lay.nr, lay.ct
    n = nr + 2
    dom = [f"d{i}" for i in range(n)]
    bd, hd, jd, ed = dom[:4]
    row_axes = [bd, hd] + dom[4:]          # b, first head axis, then G (GQA) and the query axis
    shape = (lay.rows[0], lay.hk, lay.skv, width)
    return em.generic(
        [(w, _amap(n, row_axes + [jd])), (x, _amap(n, row_axes + [ed]))],
        shape, ct, ["parallel"] * 4 + ["reduction"] * (n - 4), _amap(n, [bd, hd, jd, ed]),
        lambda a: em.op(f"arith.addf {a[2]}, {lay.mul(em.cast(a[0], w.elem, ct), em.cast(a[1], x.elem, ct))} : {ct}"),
        init=em.filled(shape, ct, 0.0))
