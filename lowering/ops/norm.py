"""Lowering of reduction and normalization ops to linalg.

- ``reduction``: one ``linalg.generic`` with ``"reduction"`` iterators over the
  reduced axes that accumulates in the compute type, then one elementwise
  generic that finishes the mode (AVG divides, NORM2 takes the root) and
  rounds once to the output type; a ``tensor.expand_shape`` puts the size-1
  reduced axes back.
- ``batchnorm_inference``: one broadcasting elementwise generic.
- ``layernorm`` / ``rmsnorm``: per-row statistics over the normalized axes (the
  trailing axes where the scale has x's extents, :func:`norm_axes`; axes 1.. for a scale
  of dims ``[1, *x.dims[1:]]``) in the compute
  type (two passes for layernorm: the sum, then the sum of squared deviations
  from that mean), a small elementwise generic turning them into
  ``inv_variance``, and one elementwise generic that applies them.

The attribute and shape checks at the top are shared with the frontend's
validation (``hipdnn_iree/_ops_norm.py``) so both report the same message.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from lowering._context import LowerContext
from lowering._emit import FLOAT_TYPES, Emitter, Value
from graph_ir._fbs.graph_generated import NormFwdPhase, ReductionMode
from lowering._registry import register_lowering
from graph_ir.desc import ABSENT, GraphError, NodeDesc, OpKind
from graph_ir.ops._norm import (REDUCTION_MODES, check_batchnorm, check_layernorm, check_reduction_mode, check_rmsnorm,
                               norm_axes, reduced_axes)
from lowering.ops.pointwise import _Math


# ---------------------------------------------------------------------------
# Checks shared with the frontend. Messages name the field and the bad value;
# callers prefix the op kind and node name.
# ---------------------------------------------------------------------------
























def _checked(ctx: LowerContext, node: NodeDesc, check: Callable):
    """Runs ``check(dims, scalar)`` against the graph's tensors, prefixing the op and node name."""
    def dims(uid):
        return ctx.tensor(uid).dims

    def scalar(uid):
        t = ctx.tensor(uid)
        return t.scalar_value if t.is_scalar else None

    try:
        return check(dims, scalar)
    except GraphError as e:
        raise GraphError(f"{node.kind.name.lower()} '{node.name}': {e}", e.kind) from None


# ---------------------------------------------------------------------------
# Emission helpers
# ---------------------------------------------------------------------------


def _compute(ctx: LowerContext, node: NodeDesc) -> str:
    # NOTE: statistics only make sense in a float type; an integer compute type
    # (set graph-wide for some other op) falls back to f32 as in pointwise.
    ct = ctx.compute_elem(node)
    return ct if ct in FLOAT_TYPES else "f32"


def reduce_rows(em: Emitter, x: Value, axes: Sequence[int], acc: str, init: float,
                step: Callable[[_Math, str, list[str], str], str], stats: Sequence[Value] = ()) -> Value:
    """``linalg.generic`` reducing ``x`` over ``axes`` into a value of the kept axes.

    Args:
        em: the emitter.
        x: the input, any element type (cast to ``acc`` inside the region).
        axes: axes of ``x`` to reduce; the result has the other axes, in order.
        acc: accumulator element type.
        init: the accumulator's initial value.
        step: ``(math, x_elem, stat_elems, acc_elem) -> new_acc`` emitted in the region.
        stats: values shaped like the result, read at the output's position
            (e.g. the mean in the variance pass).
    """
    rank = len(x.shape)
    d = [f"d{i}" for i in range(rank)]
    dom = f"({', '.join(d)})"
    kept = [i for i in range(rank) if i not in axes]
    kept_map = f"affine_map<{dom} -> ({', '.join(d[i] for i in kept)})>"
    full_map = f"affine_map<{dom} -> ({', '.join(d)})>"
    shape = tuple(x.shape[i] for i in kept)
    init_v = em.filled(shape, acc, init)
    mm = _Math(em, acc)
    extra = [(s, kept_map) for s in stats]

    def body(args):
        xv = em.cast(args[0], x.elem, acc)
        sv = [em.cast(a, v.elem, acc) for a, (v, _) in zip(args[1:-1], extra)]
        return step(mm, xv, sv, args[-1])

    its = ["reduction" if i in axes else "parallel" for i in range(rank)]
    return em.generic([(x, full_map)] + extra, shape, acc, its, kept_map, body, init=init_v)


def _fconst(em: Emitter, value: float, elem: str) -> str:
    """A float constant whose literal always parses.

    NOTE: ``repr`` writes 1e-05 with no '.', which MLIR's lexer reads as the
    integer 1 followed by junk; give the mantissa a fraction part.
    """
    text = repr(float(value))
    if "e" in text and "." not in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    if not math.isfinite(value):
        return em.const(value, elem)
    return em.op(f"arith.constant {text} : {elem}", "cst")


# mode -> (initial value, step(math, x, acc) -> acc)
_REDUCERS: dict[int, tuple[float, Callable[[_Math, str, str], str]]] = {
    ReductionMode.ADD: (0.0, lambda m, x, a: m.add(a, x)),
    ReductionMode.MUL: (1.0, lambda m, x, a: m.mul(a, x)),
    # NOTE: minimumf/maximumf propagate NaN, as numpy's min/max do.
    ReductionMode.MIN_OP: (math.inf, lambda m, x, a: m.bin("minimumf", a, x)),
    ReductionMode.MAX_OP: (-math.inf, lambda m, x, a: m.bin("maximumf", a, x)),
    ReductionMode.AMAX: (0.0, lambda m, x, a: m.bin("maximumf", a, m.un("math.absf", x))),
    ReductionMode.AVG: (0.0, lambda m, x, a: m.add(a, x)),
    ReductionMode.NORM1: (0.0, lambda m, x, a: m.add(a, m.un("math.absf", x))),
    ReductionMode.NORM2: (0.0, lambda m, x, a: m.add(a, m.mul(x, x))),
    # NOTE: zeros are skipped by multiplying by 1 instead; an all-zero slice gives 1.
    ReductionMode.MUL_NO_ZEROS: (1.0, lambda m, x, a: m.mul(a, m.select(m.cmp("oeq", x, m.c(0.0)), m.c(1.0), x))),
}
assert tuple(_REDUCERS) == REDUCTION_MODES, "graph_ir.ops._norm.REDUCTION_MODES and the emitters' reducers differ"


# ---------------------------------------------------------------------------
# Lowerings
# ---------------------------------------------------------------------------


@register_lowering(OpKind.REDUCTION)
def lower_reduction(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_reduction_mode(at.mode))
    x = ctx.value(at.x_uid)
    y_dims = ctx.dims(at.y_uid)
    axes = _checked(ctx, node, lambda d, s: reduced_axes(x.shape, y_dims))
    acc, out = _compute(ctx, node), ctx.out_elem(at.y_uid)
    em = ctx.em
    init, step = _REDUCERS[at.mode]
    r = reduce_rows(em, x, axes, acc, init, lambda m, xv, _s, a: step(m, xv, a))
    count = math.prod(x.shape[i] for i in axes)

    def finish(args):
        m = _Math(em, acc)
        v = args[0]
        if at.mode == ReductionMode.AVG:
            v = m.div(v, _fconst(em, count, acc))
        elif at.mode == ReductionMode.NORM2:
            v = m.un("math.sqrt", v)
        return em.cast(v, acc, out)

    if at.mode in (ReductionMode.AVG, ReductionMode.NORM2) or acc != out:
        r = em.elementwise([r], r.shape, out, finish)
    ctx.define(at.y_uid, em.reshape(r, y_dims))


@register_lowering(OpKind.BATCHNORM_INFERENCE)
def lower_batchnorm_inference(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_batchnorm(at, d))
    ins = [ctx.value(u) for u in (at.x_uid, at.mean_uid, at.inv_variance_uid, at.scale_uid, at.bias_uid)]
    acc, out = _compute(ctx, node), ctx.out_elem(at.y_uid)
    em = ctx.em

    def body(args):
        m = _Math(em, acc)
        x, mean, inv, scale, bias = (em.cast(a, v.elem, acc) for a, v in zip(args, ins))
        y = m.add(m.mul(m.mul(m.sub(x, mean), inv), scale), bias)
        return em.cast(y, acc, out)

    ctx.define(at.y_uid, em.elementwise(ins, ins[0].shape, out, body))


def _row_stats(em: Emitter, x: Value, acc: str, eps: float, centered: bool,
               first: int = 1) -> tuple[Value | None, Value]:
    """Per-row mean (if ``centered``) and ``1/sqrt(var + eps)`` over axes ``first``.., in ``acc``.

    A row is one index of the outer axes ``0..first-1``. With ``centered`` the variance is
    the biased one around the mean, computed in a second pass; without it, the mean of
    squares (RMSNorm). The results have x's dims with 1 on the normalized axes.
    """
    axes = tuple(range(first, len(x.shape)))
    n = float(math.prod(x.shape[first:]))
    mean = None
    if centered:
        # NOTE: the first pass sums x - x[n, 0, ...] (shifted data): summing x itself
        # in f32 loses digits of the mean when |mean| >> std, and every later step
        # inherits that error. mean = pivot + shifted_sum / n.
        # NOTE: the pivot row x[n, 0, ...] is materialized first (a tiny [N] pass) and fed to the
        # reduction as a per-row operand. Reading x twice inside one reduction (once broadcast
        # from its first element) gave NaN on an H200 in f32 with IREE 3.13's CUDA codegen.
        mm = _Math(em, acc)
        outer = ", ".join(f"d{i}" for i in range(first))
        row = f"affine_map<({outer}) -> ({outer})>"
        pivot_map = f"affine_map<({outer}) -> ({outer}{', 0' * len(axes)})>"
        pv = em.generic([(x, pivot_map)], tuple(x.shape[:first]), acc, ["parallel"] * first, row,
                        lambda args: em.cast(args[0], x.elem, acc))
        s = reduce_rows(em, x, axes, acc, 0.0, lambda m, xv, st, a: m.add(a, m.sub(xv, st[0])), stats=[pv])

        def mean_body(args):
            return mm.add(args[1], mm.div(args[0], _fconst(em, n, acc)))

        mean = em.generic([(s, row), (pv, row)], s.shape, acc, ["parallel"] * first, row, mean_body)

        def sq_dev(m, xv, st, a):
            dev = m.sub(xv, st[0])
            return m.add(a, m.mul(dev, dev))

        ss = reduce_rows(em, x, axes, acc, 0.0, sq_dev, stats=[mean])
    else:
        ss = reduce_rows(em, x, axes, acc, 0.0, lambda m, xv, _s, a: m.add(a, m.mul(xv, xv)))

    def inv_std(args):
        m = _Math(em, acc)
        return m.un("math.rsqrt", m.add(m.div(args[0], _fconst(em, n, acc)), _fconst(em, eps, acc)))

    inv = em.elementwise([ss], ss.shape, acc, inv_std)
    # NOTE: [N] -> [N, 1, ...] so the elementwise pass broadcasts the stats over each row.
    stat_shape = tuple(x.shape[:first]) + (1,) * len(axes)
    return (em.reshape(mean, stat_shape) if mean is not None else None), em.reshape(inv, stat_shape)


def _shifted_sums(em: Emitter, x: Value, acc: str, first: int) -> tuple[Value, Value, Value]:
    """One pass over ``x``: per row (axes ``0..first-1``) the pivot ``p = x[row, 0, ...]``, ``S = sum(x - p)``
    and ``Q = sum((x - p)^2)`` over axes ``first..``, in ``acc``, shaped ``[outer..., 1, ...]``."""
    axes = tuple(range(first, len(x.shape)))
    rank = len(x.shape)
    outer = ", ".join(f"d{i}" for i in range(first))
    row = f"affine_map<({outer}) -> ({outer})>"
    pivot_map = f"affine_map<({outer}) -> ({outer}{', 0' * len(axes)})>"
    # NOTE: the pivot is its own tiny pass, fed to the reduction as a per-row operand (see _row_stats)
    pv = em.generic([(x, pivot_map)], tuple(x.shape[:first]), acc, ["parallel"] * first, row,
                    lambda args: em.cast(args[0], x.elem, acc))
    d = [f"d{i}" for i in range(rank)]
    dom = f"({', '.join(d)})"
    kept = f"affine_map<{dom} -> ({', '.join(d[:first])})>"
    full = f"affine_map<{dom} -> ({', '.join(d)})>"
    zero = em.filled(tuple(x.shape[:first]), acc, 0.0)
    mm = _Math(em, acc)

    def body(args):
        dev = mm.sub(em.cast(args[0], x.elem, acc), args[1])
        return [mm.add(args[2], dev), mm.add(args[3], mm.mul(dev, dev))]

    its = ["parallel"] * first + ["reduction"] * len(axes)
    s, q = em.generic_multi([(x, full), (pv, kept)], tuple(x.shape[:first]), [acc, acc], its, kept, body,
                            [zero, zero])
    stat_shape = tuple(x.shape[:first]) + (1,) * len(axes)
    return tuple(em.reshape(v, stat_shape) for v in (pv, s, q))


def _one_pass_stats(m: _Math, em: Emitter, s: str, q: str, n: float, eps: float, acc: str) -> tuple[str, str]:
    """(mean of the shifted data, 1/sqrt(var + eps)) from the shifted sums; var clamped at 0."""
    ms = m.div(s, _fconst(em, n, acc))
    var = m.sub(m.div(q, _fconst(em, n, acc)), m.mul(ms, ms))
    var = m.bin("maximumf", var, m.c(0.0))
    return ms, m.un("math.rsqrt", m.add(var, _fconst(em, eps, acc)))


def _lower_layernorm_one_pass(ctx: LowerContext, at, x: Value, scale: Value, bias: Value, acc: str, out: str,
                              first: int) -> None:
    """Layernorm with one pass of statistics (policy ``norm_one_pass``): the normalize reads the row's
    pivot and shifted sums and derives the mean and 1/std itself, so IREE fuses the reduction and the
    normalize into one dispatch (a per-row stats pass between them kept two on a CPU, and was slower)."""
    em = ctx.em
    n = float(math.prod(x.shape[first:]))
    eps = ctx.tensor(at.epsilon_uid).scalar_value
    pv, s, q = _shifted_sums(em, x, acc, first)
    ins = [x, pv, s, q, scale, bias]

    def body(args):
        m = _Math(em, acc)
        xv, pvv, sv, qv, scv, bv = (em.cast(a, v.elem, acc) for a, v in zip(args, ins))
        ms, inv = _one_pass_stats(m, em, sv, qv, n, eps, acc)
        centred = m.sub(m.sub(xv, pvv), ms)
        return em.cast(m.add(m.mul(m.mul(centred, inv), scv), bv), acc, out)

    ctx.define(at.y_uid, em.elementwise(ins, x.shape, out, body))
    if at.phase == NormFwdPhase.TRAINING:
        def mean_body(args):
            m = _Math(em, acc)
            return m.add(args[0], m.div(args[1], _fconst(em, n, acc)))

        def inv_body(args):
            return _one_pass_stats(_Math(em, acc), em, args[0], args[1], n, eps, acc)[1]

        ctx.define(at.mean_uid, em.elementwise([pv, s], pv.shape, acc, mean_body))
        ctx.define(at.inv_variance_uid, em.elementwise([s, q], s.shape, acc, inv_body))


@register_lowering(OpKind.LAYERNORM)
def lower_layernorm(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_layernorm(at, d, s))
    x, scale, bias = ctx.value(at.x_uid), ctx.value(at.scale_uid), ctx.value(at.bias_uid)
    acc, out = _compute(ctx, node), ctx.out_elem(at.y_uid)
    em = ctx.em
    first = norm_axes(x.shape, scale.shape, at.normalized_dim_count)[0]
    if ctx.policy.norm_one_pass:
        _lower_layernorm_one_pass(ctx, at, x, scale, bias, acc, out, first)
        return
    mean, inv = _row_stats(em, x, acc, ctx.tensor(at.epsilon_uid).scalar_value, centered=True, first=first)
    ins = [x, mean, inv, scale, bias]

    def body(args):
        m = _Math(em, acc)
        xv, mv, iv, sv, bv = (em.cast(a, v.elem, acc) for a, v in zip(args, ins))
        return em.cast(m.add(m.mul(m.mul(m.sub(xv, mv), iv), sv), bv), acc, out)

    ctx.define(at.y_uid, em.elementwise(ins, x.shape, out, body))
    if at.phase == NormFwdPhase.TRAINING:
        ctx.define(at.mean_uid, mean)
        ctx.define(at.inv_variance_uid, inv)


@register_lowering(OpKind.RMSNORM)
def lower_rmsnorm(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_rmsnorm(at, d, s))
    x, scale = ctx.value(at.x_uid), ctx.value(at.scale_uid)
    acc, out = _compute(ctx, node), ctx.out_elem(at.y_uid)
    em = ctx.em
    first = norm_axes(x.shape, scale.shape)[0]
    _, inv = _row_stats(em, x, acc, ctx.tensor(at.epsilon_uid).scalar_value, centered=False, first=first)
    ins = [x, inv, scale]
    if at.bias_uid != ABSENT:
        ins.append(ctx.value(at.bias_uid))

    def body(args):
        m = _Math(em, acc)
        vals = [em.cast(a, v.elem, acc) for a, v in zip(args, ins)]
        y = m.mul(m.mul(vals[0], vals[1]), vals[2])
        if len(vals) == 4:
            y = m.add(y, vals[3])
        return em.cast(y, acc, out)

    ctx.define(at.y_uid, em.elementwise(ins, x.shape, out, body))
    if at.phase == NormFwdPhase.TRAINING:
        ctx.define(at.inv_rms_uid, inv)
