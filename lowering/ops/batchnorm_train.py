"""Lowering of batchnorm (training), batchnorm_backward and batchnorm_inference_variance_ext to linalg.

- ``batchnorm``: per-channel statistics over every axis but axis 1, in the compute type (FLOAT
  for f16/bf16 io): a pivot ``x[0, c, 0, ...]`` per channel, the sum of ``x - pivot`` (mean =
  pivot + sum / n), then the sum of squared deviations from that mean (two passes, as layernorm's
  ``_row_stats``); ``inv_variance = rsqrt(ss / n + eps)``; with running statistics,
  ``(1 - momentum) * old + momentum * batch`` with the unbiased variance ``ss / (n - 1)``; one
  elementwise generic applies the statistics.
- ``batchnorm_backward``: two per-channel reductions (``dbias = sum(dy)``,
  ``sum(dy * (x - mean))``, times ``inv_variance`` for dscale) and one elementwise generic for
  ``dx = scale * inv * (dy - dbias / n - xhat * dscale / n)``.
- ``batchnorm_inference_variance_ext``: one broadcasting elementwise generic,
  ``(x - mean) * rsqrt(variance + eps) * scale + bias``.

The per-channel results are ``[C]`` values, reshaped to ``[1, C, 1, ...]`` for the outputs and
for broadcasting.
"""
from __future__ import annotations

import math

from lowering._context import LowerContext
from lowering._emit import Emitter, Value
from lowering._registry import register_lowering
from graph_ir.desc import ABSENT, NodeDesc, OpKind
from graph_ir.ops.batchnorm import check_batchnorm_train
from graph_ir.ops.batchnorm_backward import check_batchnorm_backward
from graph_ir.ops.batchnorm_inference_variance_ext import check_batchnorm_variance_ext
from lowering.ops.norm import _checked, _compute, _fconst, reduce_rows
from lowering.ops.pointwise import _Math


def _axes(x: Value) -> tuple[int, ...]:
    return tuple(i for i in range(len(x.shape)) if i != 1)


def _count(x: Value) -> float:
    return float(math.prod(x.shape[i] for i in _axes(x)))


def _channel(em: Emitter, v: Value) -> Value:
    """A per-channel ``[1, C, 1, ...]`` value as ``[C]``."""
    return em.reshape(v, (v.shape[1],))


def _per_channel_shape(x: Value) -> tuple:
    return (1, x.shape[1]) + (1,) * (len(x.shape) - 2)


def _channel_stats(em: Emitter, x: Value, acc: str) -> tuple[Value, Value, Value, Value]:
    """``(pivot, shift, mean, sum of squared deviations)`` per channel, all ``[C]`` in ``acc``;
    ``mean = pivot + shift``."""
    rank = len(x.shape)
    n = _count(x)
    mm = _Math(em, acc)
    row = "affine_map<(d0) -> (d0)>"
    # NOTE: the first pass sums x - x[0, c, 0, ...] (shifted data): a plain f32 sum loses digits
    # of the mean when |mean| >> std. The pivot is materialized first (a [C] pass) and read as a
    # per-channel operand, as layernorm's _row_stats does (reading x twice inside one reduction
    # gave NaN with IREE 3.13's CUDA codegen there).
    pivot_map = "affine_map<(d0) -> (0, d0" + ", 0" * (rank - 2) + ")>"
    pv = em.generic([(x, pivot_map)], (x.shape[1],), acc, ["parallel"], row,
                    lambda args: em.cast(args[0], x.elem, acc))
    s = reduce_rows(em, x, _axes(x), acc, 0.0, lambda m, xv, st, a: m.add(a, m.sub(xv, st[0])), stats=[pv])
    shift = em.generic([(s, row)], s.shape, acc, ["parallel"], row,
                       lambda args: mm.div(args[0], _fconst(em, n, acc)))
    mean = em.generic([(pv, row), (shift, row)], s.shape, acc, ["parallel"], row,
                      lambda args: mm.add(args[0], args[1]))

    # NOTE: deviations as (x - pivot) - shift, not x - mean: the mean rounded to f32 is off by
    # half an ulp of |mean|, which is much of the deviation when |mean| >> std.
    def sq_dev(m, xv, st, a):
        dev = m.sub(m.sub(xv, st[0]), st[1])
        return m.add(a, m.mul(dev, dev))

    ss = reduce_rows(em, x, _axes(x), acc, 0.0, sq_dev, stats=[pv, shift])
    return pv, shift, mean, ss


@register_lowering(OpKind.BATCHNORM)
def lower_batchnorm(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_batchnorm_train(at, d, s))
    x, scale, bias = ctx.value(at.x_uid), ctx.value(at.scale_uid), ctx.value(at.bias_uid)
    acc, out = _compute(ctx, node), ctx.out_elem(at.y_uid)
    em = ctx.em
    n = _count(x)
    eps = ctx.tensor(at.epsilon_uid).scalar_value
    pv, shift, mean, ss = _channel_stats(em, x, acc)
    inv = em.elementwise([ss], ss.shape, acc, lambda a: _Math(em, acc).un(
        "math.rsqrt", _Math(em, acc).add(_Math(em, acc).div(a[0], _fconst(em, n, acc)), _fconst(em, eps, acc))))
    stat_shape = _per_channel_shape(x)
    mean4, inv4 = em.reshape(mean, stat_shape), em.reshape(inv, stat_shape)
    ins = [x, em.reshape(pv, stat_shape), em.reshape(shift, stat_shape), inv4, scale, bias]

    def body(args):
        m = _Math(em, acc)
        xv, pvv, shv, iv, sv, bv = (em.cast(a, v.elem, acc) for a, v in zip(args, ins))
        return em.cast(m.add(m.mul(m.mul(m.sub(m.sub(xv, pvv), shv), iv), sv), bv), acc, out)

    ctx.define(at.y_uid, em.elementwise(ins, x.shape, out, body))
    if at.mean_uid != ABSENT:
        ctx.define(at.mean_uid, mean4)
    if at.inv_variance_uid != ABSENT:
        ctx.define(at.inv_variance_uid, inv4)
    if at.prev_running_mean_uid == ABSENT:
        return
    mom = float(ctx.tensor(at.momentum_uid).scalar_value)
    old_mean, old_var = ctx.value(at.prev_running_mean_uid), ctx.value(at.prev_running_variance_uid)

    def update(old: Value, batch: Value, divisor: float | None) -> Value:
        def body(args):
            m = _Math(em, acc)
            o, b = em.cast(args[0], old.elem, acc), args[1]
            if divisor is not None:
                # NOTE: n == 1 gives 0 / 0 = NaN, as the unbiased variance of one sample is undefined
                b = m.div(b, _fconst(em, divisor, acc))
            return m.add(m.mul(o, _fconst(em, 1.0 - mom, acc)), m.mul(b, _fconst(em, mom, acc)))

        return em.elementwise([old, em.reshape(batch, stat_shape)], stat_shape, acc, body)

    ctx.define(at.next_running_mean_uid, update(old_mean, mean, None))
    ctx.define(at.next_running_variance_uid, update(old_var, ss, n - 1.0))


def _channel_sum(em: Emitter, inputs: list[tuple[Value, bool]], acc: str, term) -> Value:
    """``sum over every axis but 1`` of ``term(math, elems)``, a ``[C]`` value; ``inputs`` pairs each
    value with whether it is per-channel ``[C]`` (else x-shaped)."""
    full = next(v for v, pc in inputs if not pc)
    rank = len(full.shape)
    d = [f"d{i}" for i in range(rank)]
    dom = f"({', '.join(d)})"
    full_map = f"affine_map<{dom} -> ({', '.join(d)})>"
    chan_map = f"affine_map<{dom} -> (d1)>"
    init = em.filled((full.shape[1],), acc, 0.0)

    def body(args):
        m = _Math(em, acc)
        vals = [em.cast(a, v.elem, acc) for a, (v, _) in zip(args[:-1], inputs)]
        return m.add(args[-1], term(m, vals))

    its = ["parallel" if i == 1 else "reduction" for i in range(rank)]
    return em.generic([(v, chan_map if pc else full_map) for v, pc in inputs], (full.shape[1],), acc, its,
                      chan_map, body, init=init)


@register_lowering(OpKind.BATCHNORM_BACKWARD)
def lower_batchnorm_backward(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_batchnorm_backward(at, d))
    dy, x, scale = ctx.value(at.dy_uid), ctx.value(at.x_uid), ctx.value(at.scale_uid)
    mean4, inv4 = ctx.value(at.mean_uid), ctx.value(at.inv_variance_uid)
    acc, out = _compute(ctx, node), ctx.out_elem(at.dx_uid)
    em = ctx.em
    n = _count(x)
    mean, inv = _channel(em, mean4), _channel(em, inv4)
    dbias = _channel_sum(em, [(dy, False)], acc, lambda m, v: v[0])
    dyxc = _channel_sum(em, [(dy, False), (x, False), (mean, True)], acc,
                        lambda m, v: m.mul(v[0], m.sub(v[1], v[2])))
    row = "affine_map<(d0) -> (d0)>"
    dscale = em.generic([(dyxc, row), (inv, row)], dyxc.shape, acc, ["parallel"], row,
                        lambda a: _Math(em, acc).mul(a[0], em.cast(a[1], inv.elem, acc)))
    stat_shape = _per_channel_shape(x)
    dbias4, dscale4 = em.reshape(dbias, stat_shape), em.reshape(dscale, stat_shape)
    ins = [dy, x, mean4, inv4, scale, dbias4, dscale4]

    def body(args):
        m = _Math(em, acc)
        g, xv, mv, iv, sv, db, ds = (em.cast(a, v.elem, acc) for a, v in zip(args, ins))
        xhat = m.mul(m.sub(xv, mv), iv)
        nn = _fconst(em, n, acc)
        r = m.sub(m.sub(g, m.div(db, nn)), m.div(m.mul(xhat, ds), nn))
        return em.cast(m.mul(m.mul(sv, iv), r), acc, out)

    ctx.define(at.dx_uid, em.elementwise(ins, x.shape, out, body))
    ctx.define(at.dscale_uid, dscale4)
    ctx.define(at.dbias_uid, dbias4)


@register_lowering(OpKind.BATCHNORM_INFERENCE_VARIANCE_EXT)
def lower_batchnorm_inference_variance_ext(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_batchnorm_variance_ext(at, d, s))
    ins = [ctx.value(u) for u in (at.x_uid, at.mean_uid, at.variance_uid, at.scale_uid, at.bias_uid)]
    eps = ctx.tensor(at.epsilon_uid).scalar_value
    acc, out = _compute(ctx, node), ctx.out_elem(at.y_uid)
    em = ctx.em

    def body(args):
        m = _Math(em, acc)
        x, mean, var, scale, bias = (em.cast(a, v.elem, acc) for a, v in zip(args, ins))
        inv = m.un("math.rsqrt", m.add(var, _fconst(em, eps, acc)))
        return em.cast(m.add(m.mul(m.mul(m.sub(x, mean), inv), scale), bias), acc, out)

    ctx.define(at.y_uid, em.elementwise(ins, ins[0].shape, out, body))
