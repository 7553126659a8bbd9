"""Lowering of layernorm_backward and rmsnorm_backward to linalg.

Per row (one index of the axes before the normalized ones), with ``xhat = (x - mean) * inv``
(rmsnorm: ``x * inv``), ``gh = dy * scale`` and ``n`` the row's element count:

- layernorm: ``dx = inv * (gh - sum(gh)/n - xhat * sum(gh*xhat)/n)``;
- rmsnorm: ``dx = inv * (gh - xhat * sum(gh*xhat)/n)``;
- both: ``dscale = sum(dy * xhat)`` and ``dbias = sum(dy)`` over the axes where the scale is 1
  (its broadcast axes), reshaped to the scale's dims.

Each sum is one ``linalg.generic`` with ``"reduction"`` iterators that reads x, dy, the scale
and the per-row statistics through broadcasting maps and accumulates in the compute type (f32
unless a float type is set); one elementwise generic gives dx, rounded once to its type.
Layernorm without saved statistics recomputes them from x as the forward does
(``lowering.ops.norm._row_stats``).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from graph_ir.desc import ABSENT, NodeDesc, OpKind
from graph_ir.ops._norm import check_layernorm_backward, check_rmsnorm_backward, norm_axes
from lowering._context import LowerContext
from lowering._emit import Emitter, Value
from lowering._registry import register_lowering
from lowering.ops.norm import _checked, _compute, _fconst, _row_stats
from lowering.ops.pointwise import _Math


def _bcast_map(shape: Sequence, full: Sequence) -> str:
    """The affine map reading ``shape`` (right-aligned, size-1 axes broadcast) at each index of ``full``."""
    rank = len(full)
    d = [f"d{i}" for i in range(rank)]
    off = rank - len(shape)
    exprs = [d[off + i] if s == full[off + i] else "0" for i, s in enumerate(shape)]
    return f"affine_map<({', '.join(d)}) -> ({', '.join(exprs)})>"


def _sum(em: Emitter, ins: Sequence[Value], full: Sequence, axes: Sequence[int], acc: str,
         term: Callable[[_Math, list[str]], str]) -> Value:
    """``sum over axes`` of ``term(math, operands in acc)``, the operands read at each index of
    ``full`` (right-aligned broadcast); the result has the kept axes of ``full``, in order."""
    rank = len(full)
    d = [f"d{i}" for i in range(rank)]
    kept = [i for i in range(rank) if i not in axes]
    kept_map = f"affine_map<({', '.join(d)}) -> ({', '.join(d[i] for i in kept)})>"
    shape = tuple(full[i] for i in kept)
    init = em.filled(shape, acc, 0.0)
    mm = _Math(em, acc)

    def body(args):
        vals = [em.cast(a, v.elem, acc) for a, v in zip(args[:-1], ins)]
        return mm.add(args[-1], term(mm, vals))

    its = ["reduction" if i in axes else "parallel" for i in range(rank)]
    return em.generic([(v, _bcast_map(v.shape, full)) for v in ins], shape, acc, its, kept_map, body, init=init)


def _param_sums(ctx: LowerContext, at, ins: Sequence[Value], scale_dims: Sequence, acc: str,
                xhat: Callable[[_Math, list[str]], str]) -> None:
    """Defines dscale = sum(dy * xhat) and (when set) dbias = sum(dy) over the scale's broadcast axes.
    ``ins`` starts with dy."""
    em = ctx.em
    full = ins[0].shape
    rank = len(full)
    s = (1,) * (rank - len(scale_dims)) + tuple(scale_dims)
    axes = [i for i in range(rank) if s[i] != full[i]]
    dscale = _sum(em, ins, full, axes, acc, lambda m, v: m.mul(v[0], xhat(m, v)))
    ctx.define(at.dscale_uid, em.reshape(dscale, tuple(scale_dims)))
    if at.dbias_uid != ABSENT:
        dbias = _sum(em, ins[:1], full, axes, acc, lambda m, v: v[0])
        ctx.define(at.dbias_uid, em.reshape(dbias, tuple(scale_dims)))


def _stat_shape(x: Value, first: int) -> tuple:
    return tuple(x.shape[:first]) + (1,) * (len(x.shape) - first)


@register_lowering(OpKind.LAYERNORM_BACKWARD)
def lower_layernorm_backward(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_layernorm_backward(at, d, s))
    dy, x, scale = ctx.value(at.dy_uid), ctx.value(at.x_uid), ctx.value(at.scale_uid)
    acc, out = _compute(ctx, node), ctx.out_elem(at.dx_uid)
    em = ctx.em
    axes = norm_axes(x.shape, scale.shape, at.normalized_dim_count)
    first = axes[0]
    if at.mean_uid != ABSENT:
        mean, inv = ctx.value(at.mean_uid), ctx.value(at.inv_variance_uid)
    else:
        mean, inv = _row_stats(em, x, acc, ctx.tensor(at.epsilon_uid).scalar_value, centered=True, first=first)
    n = float(math.prod(x.shape[first:]))
    full = x.shape

    # operands: dy, x, scale, mean, inv (v[0..4])
    def xh(m, v):
        return m.mul(m.sub(v[1], v[3]), v[4])

    ins = [dy, x, scale, mean, inv]
    s1 = _sum(em, ins, full, axes, acc, lambda m, v: m.mul(v[0], v[2]))
    s2 = _sum(em, ins, full, axes, acc, lambda m, v: m.mul(m.mul(v[0], v[2]), xh(m, v)))
    s1, s2 = em.reshape(s1, _stat_shape(x, first)), em.reshape(s2, _stat_shape(x, first))
    dx_ins = ins + [s1, s2]

    def dx_body(args):
        m = _Math(em, acc)
        v = [em.cast(a, t.elem, acc) for a, t in zip(args, dx_ins)]
        inv_n = _fconst(em, 1.0 / n, acc)
        gh = m.mul(v[0], v[2])
        r = m.sub(m.sub(gh, m.mul(v[5], inv_n)), m.mul(xh(m, v), m.mul(v[6], inv_n)))
        return em.cast(m.mul(v[4], r), acc, out)

    ctx.define(at.dx_uid, em.elementwise(dx_ins, full, out, dx_body))
    _param_sums(ctx, at, [dy, x, scale, mean, inv], scale.shape, acc, xh)


@register_lowering(OpKind.RMSNORM_BACKWARD)
def lower_rmsnorm_backward(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_rmsnorm_backward(at, d, s))
    dy, x, scale, inv = (ctx.value(u) for u in (at.dy_uid, at.x_uid, at.scale_uid, at.inv_rms_uid))
    acc, out = _compute(ctx, node), ctx.out_elem(at.dx_uid)
    em = ctx.em
    axes = norm_axes(x.shape, scale.shape)
    first = axes[0]
    n = float(math.prod(x.shape[first:]))
    full = x.shape

    # operands: dy, x, scale, inv (v[0..3])
    def xh(m, v):
        return m.mul(v[1], v[3])

    ins = [dy, x, scale, inv]
    s2 = em.reshape(_sum(em, ins, full, axes, acc, lambda m, v: m.mul(m.mul(v[0], v[2]), xh(m, v))),
                    _stat_shape(x, first))
    dx_ins = ins + [s2]

    def dx_body(args):
        m = _Math(em, acc)
        v = [em.cast(a, t.elem, acc) for a, t in zip(args, dx_ins)]
        gh = m.mul(v[0], v[2])
        r = m.sub(gh, m.mul(xh(m, v), m.mul(v[4], _fconst(em, 1.0 / n, acc))))
        return em.cast(m.mul(v[3], r), acc, out)

    ctx.define(at.dx_uid, em.elementwise(dx_ins, full, out, dx_body))
    _param_sums(ctx, at, ins, scale.shape, acc, xh)
