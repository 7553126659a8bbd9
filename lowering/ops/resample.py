"""Pooling -> linalg: resample (RESAMPLE_FWD) and resample_backward (RESAMPLE_BWD).

Values are logical channels-first: x ``[N, C, *S]``, y/index/dy ``[N, C, *O]``; per spatial axis
``O = (S + pre + post - window) // stride + 1`` (graph_ir/ops/_resample.py). Arithmetic runs in the
compute type (f32 unless a float type is set); each result is rounded once to its tensor's type.

- forward: ``tensor.pad`` of x (-inf for MAXPOOL, 0 for the averages), then one ``linalg.generic``
  over ``(n, c, o..., k...)`` with ``"reduction"`` iterators on the window offsets ``k`` and the input
  map ``o * stride + k``. A second input, a constant ``[*window]`` i32 tensor of the flat row-major
  offsets, gives each ``k`` its index. MAXPOOL's maximum is ``arith.maximumf`` (NaN propagates, as in
  torch); its index is a second reduction over the same window, the minimum of the offsets whose
  value equals that maximum (NaN equal to NaN): the first maximum whatever order a GPU reduction
  combines in. (NOTE: one two-result ``(value, index)`` generic is the other form; IREE 3.13's
  PropagateLinalgTransposePass breaks it when a result is transposed to a channels-last output:
  "expected number of yield values (2) to match the number of inits".) The averages sum, then one elementwise
  generic divides: by ``prod(window)`` (AVGPOOL_INCLUDE_PADDING) or by the in-bounds count, the product
  of per-axis counts held in one small constant vector per spatial axis (AVGPOOL_EXCLUDE_PADDING).
- backward: one ``linalg.generic`` over ``(n, c, i..., k...)`` (reduction on ``k``): the window
  offset ``k`` of input position ``i`` belongs to output ``o = (i + pre - k) / stride`` when that
  divides exactly and ``0 <= o < O``; the region reads dy and, for MAXPOOL, the index at ``o``
  with ``tensor.extract`` (a gather), and adds dy where the offset is valid (and, for MAXPOOL, equals the index); the averages divide the
  gathered dy by its window's divisor there (the in-bounds count from index arithmetic for
  AVGPOOL_EXCLUDE_PADDING).
"""
from __future__ import annotations

import itertools
import math
from typing import Callable

from graph_ir.desc import ABSENT, GraphError, NodeDesc, OpKind
from graph_ir.ops._resample import (AVG_EXCLUDE, AVG_INCLUDE, MAXPOOL, PoolParams, check_index, forward_dims,
                                    pool_params, spatial_rank)
from lowering._context import LowerContext
from lowering._emit import FLOAT_TYPES, Emitter, Value, float_literal, tensor_type
from lowering._registry import register_lowering

_INDEX_TYPES = ("i32", "i64")


def _checked(node: NodeDesc, fn: Callable):
    try:
        return fn()
    except GraphError as e:
        raise GraphError(f"{node.kind.name.lower()} '{node.name}': {e}", e.kind) from None


def _compute(ctx: LowerContext, node: NodeDesc) -> str:
    # NOTE: an integer compute type (set graph-wide for another op) falls back to f32, as in the norms.
    ct = ctx.compute_elem(node)
    return ct if ct in FLOAT_TYPES else "f32"


def _pad(em: Emitter, v: Value, p: PoolParams, value: float) -> Value:
    """``tensor.pad`` of the spatial axes of ``v`` by ``p.pre``/``p.post`` with ``value``."""
    if not any(p.pre) and not any(p.post):
        return v
    shape = v.shape[:2] + tuple(s + a + b for s, a, b in zip(v.shape[2:], p.pre, p.post))
    c = em.const(value, v.elem)
    name = em.fresh("pad")
    em.emit(f"{name} = tensor.pad {v.ssa} low[0, 0, {', '.join(map(str, p.pre))}] "
            f"high[0, 0, {', '.join(map(str, p.post))}] {{")
    bargs = ", ".join(f"{em.fresh('i')}: index" for _ in v.shape)
    em.emit(f"^bb0({bargs}):")
    em.emit(f"  tensor.yield {c} : {v.elem}")
    em.emit(f"}} : {v.type} to {tensor_type(shape, v.elem)}")
    return Value(name, shape, v.elem)


def _nested(values, shape) -> str:
    """Nested list text of a row-major flat ``values`` of ``shape`` (a dense<> literal)."""
    if len(shape) == 1:
        return "[" + ", ".join(values) + "]"
    step = len(values) // shape[0]
    return "[" + ", ".join(_nested(values[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"


def _offsets(em: Emitter, window) -> Value:
    """Constant ``[*window]`` i32: each window offset's flat row-major index."""
    window = tuple(window)
    vals = [str(i) for i in range(math.prod(window))]
    ssa = em.op(f"arith.constant dense<{_nested(vals, window)}> : {tensor_type(window, 'i32')}", "koff")
    return Value(ssa, window, "i32")


def _axis_counts(em: Emitter, sizes, p: PoolParams, out_sp, acc: str) -> list[Value]:
    """Per spatial axis: a constant vector over that axis's outputs of the window's in-bounds count."""
    out = []
    for i, (s, o) in enumerate(zip(sizes, out_sp)):
        counts = []
        for j in range(o):
            start = j * p.stride[i] - p.pre[i]
            counts.append(min(start + p.window[i], s) - max(start, 0))
        lits = ", ".join(float_literal(float(c), acc) for c in counts)
        ssa = em.op(f"arith.constant dense<[{lits}]> : {tensor_type((o,), acc)}", "cnt")
        out.append(Value(ssa, (o,), acc))
    return out


def _count_at(em: Emitter, pos, sizes, p: PoolParams, acc: str) -> str:
    """In a region: the in-bounds count of the window of output position ``pos`` (index values),
    ``prod_a min(o*s - pre + w, S) - max(o*s - pre, 0)``, as an ``acc`` float."""
    zero, cnt = em.const(0, "index"), None
    for a, q in enumerate(pos):
        stride, pre = em.const(p.stride[a], "index"), em.const(p.pre[a], "index")
        win, size = em.const(p.window[a], "index"), em.const(sizes[a], "index")
        start = em.op(f"arith.subi {em.op(f'arith.muli {q}, {stride} : index')}, {pre} : index")
        end = em.op(f"arith.minsi {em.op(f'arith.addi {start}, {win} : index')}, {size} : index")
        n = em.op(f"arith.subi {end}, {em.op(f'arith.maxsi {start}, {zero} : index')} : index")
        cnt = n if cnt is None else em.op(f"arith.muli {cnt}, {n} : index")
    i = em.op(f"arith.index_cast {cnt} : index to i32")
    return em.op(f"arith.sitofp {i} : i32 to {acc}")


def _divided(em: Emitter, v: Value, sizes, p: PoolParams, acc: str) -> Value:
    """``v [N, C, *O]`` (in ``acc``) divided by each window's divisor for the average modes."""
    rank = p.rank
    d = [f"d{i}" for i in range(2 + rank)]
    dom = f"({', '.join(d)})"
    full = f"affine_map<{dom} -> ({', '.join(d)})>"
    ins = [(v, full)]
    if p.mode == AVG_EXCLUDE:
        ins += [(c, f"affine_map<{dom} -> (d{2 + i})>") for i, c in enumerate(_axis_counts(em, sizes, p, v.shape[2:], acc))]
    size = float_literal(float(p.size), acc) if p.mode == AVG_INCLUDE else None

    def body(args):
        val = em.cast(args[0], v.elem, acc)
        if p.mode == AVG_INCLUDE:
            div = em.op(f"arith.constant {size} : {acc}", "cst")
        else:
            div = args[1]
            for a in args[2:-1]:
                div = em.op(f"arith.mulf {div}, {a} : {acc}")
        return em.op(f"arith.divf {val}, {div} : {acc}")

    return em.generic(ins, v.shape, acc, ["parallel"] * (2 + rank), full, body)


def _index_elem(ctx: LowerContext, node: NodeDesc, uid: int) -> str:
    elem = ctx.out_elem(uid)
    if elem not in _INDEX_TYPES:
        t = ctx.tensor(uid)
        raise GraphError(f"{node.kind.name.lower()} '{node.name}': field 'index_uid' tensor '{t.name}' has element "
                         f"type {elem}; the index must be INT32 (or INT64)", "unsupported")
    return elem


# ---------------------------------------------------------------------------
# Lowerings
# ---------------------------------------------------------------------------


@register_lowering(OpKind.RESAMPLE_FWD)
def lower_resample_fwd(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    x_static = ctx.tensor(at.x_uid).dims

    def check():
        _, p = forward_dims(x_static, at)
        check_index(at, p, generate=True)
        return p

    p = _checked(node, check)
    has_index = at.index_uid != ABSENT
    if has_index:
        _index_elem(ctx, node, at.index_uid)
    em, acc, rank = ctx.em, _compute(ctx, node), p.rank
    x = ctx.value(at.x_uid)
    y_dims = ctx.dims(at.y_uid)
    xp = _pad(em, x, p, -math.inf if p.mode == MAXPOOL else 0.0)
    koff = _offsets(em, p.window)
    d = [f"d{i}" for i in range(2 + 2 * rank)]
    o, k = d[2:2 + rank], d[2 + rank:]
    dom = f"({', '.join(d)})"
    xmap = f"affine_map<{dom} -> (d0, d1, " + ", ".join(
        f"{o[i]}{f' * {p.stride[i]}' if p.stride[i] != 1 else ''} + {k[i]}" for i in range(rank)) + ")>"
    kmap = f"affine_map<{dom} -> ({', '.join(k)})>"
    omap = f"affine_map<{dom} -> (d0, d1, {', '.join(o)})>"
    its = ["parallel"] * (2 + rank) + ["reduction"] * rank
    shape = tuple(y_dims)
    init = em.filled(shape, acc, -math.inf if p.mode == MAXPOOL else 0.0)
    op = "maximumf" if p.mode == MAXPOOL else "addf"

    def body(args):
        v = em.cast(args[0], xp.elem, acc)
        return em.op(f"arith.{op} {args[2]}, {v} : {acc}")

    # NOTE: maximumf propagates NaN, as torch's max pooling does.
    r = em.generic([(xp, xmap), (koff, kmap)], shape, acc, its, omap, body, init=init)
    if p.mode != MAXPOOL:
        r = _divided(em, r, x_static[2:], p, acc)
    elif has_index:
        ctx.define(at.index_uid, _argmax(em, xp, koff, r, xmap, kmap, omap, its, shape))
    ctx.define(at.y_uid, r)


def _argmax(em: Emitter, xp: Value, koff: Value, ymax: Value, xmap, kmap, omap, its, shape) -> Value:
    """The first window offset holding the maximum ``ymax`` (a second reduction: min of the
    matching offsets, NaN matching NaN)."""
    acc = ymax.elem
    init = em.filled(shape, "i32", 2**31 - 1)

    def body(args):
        v = em.cast(args[0], xp.elem, acc)
        eq = em.op(f"arith.cmpf oeq, {v}, {args[2]} : {acc}")
        both_nan = em.op(f"arith.andi {em.op(f'arith.cmpf uno, {v}, {v} : {acc}')}, "
                         f"{em.op(f'arith.cmpf uno, {args[2]}, {args[2]} : {acc}')} : i1")
        hit = em.op(f"arith.ori {eq}, {both_nan} : i1")
        first = em.op(f"arith.minsi {args[1]}, {args[3]} : i32")
        return em.op(f"arith.select {hit}, {first}, {args[3]} : i32")

    return em.generic([(xp, xmap), (koff, kmap), (ymax, omap)], shape, "i32", its, omap, body, init=init)


@register_lowering(OpKind.RESAMPLE_BWD)
def lower_resample_bwd(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    dy_static, dx_static = ctx.tensor(at.dy_uid).dims, ctx.tensor(at.dx_uid).dims

    def check():
        p = pool_params(at, spatial_rank(dy_static, "dy_uid"))
        check_index(at, p, generate=False)
        if p.mode == MAXPOOL and at.index_uid == ABSENT:
            raise GraphError("field 'index_uid': MAXPOOL's backward needs the forward's index")
        want, _ = forward_dims(dx_static, at, "dx_uid")
        if tuple(want) != tuple(dy_static):
            raise GraphError(f"field 'dx_uid' dims {list(dx_static)} do not fit: pooling them gives "
                             f"{list(want)}, but dy is {list(dy_static)}")
        return p

    p = _checked(node, check)
    em, acc, rank = ctx.em, _compute(ctx, node), p.rank
    dy = ctx.value(at.dy_uid)
    if p.mode == MAXPOOL:
        idx_elem = ctx.value(at.index_uid).elem
        if idx_elem not in _INDEX_TYPES:
            raise GraphError(f"resample_bwd '{node.name}': field 'index_uid' has element type {idx_elem}; the "
                             f"index must be INT32 (or INT64)", "unsupported")
        src, index = dy, ctx.value(at.index_uid)
    else:
        # NOTE: the divisor is computed in the gather's body. (The H200 FAIL rows that led here were
        # the reference's: torch's CUDA channels-last average-pool backward, see
        # benchmarks/torch_avgpool_channels_last.py (retired; in git history at commit 9e99c4b); the engine was right on every path.)
        src, index = dy, None
    out_sp = dy_static[2:]
    in_sp = dx_static[2:]
    dx_shape = tuple(ctx.dims(at.dx_uid))
    koff = _offsets(em, p.window)
    d = [f"d{i}" for i in range(2 + 2 * rank)]
    k = d[2 + rank:]
    dom = f"({', '.join(d)})"
    kmap = f"affine_map<{dom} -> ({', '.join(k)})>"
    omap = f"affine_map<{dom} -> (d0, d1, {', '.join(d[2:2 + rank])})>"
    its = ["parallel"] * (2 + rank) + ["reduction"] * rank
    init = em.filled(dx_shape, acc, 0.0)

    def body(args):
        ix = [em.op(f"linalg.index {j} : index", "ix") for j in range(2 + 2 * rank)]
        zero = em.const(0, "index")
        valid, pos = None, []
        for a in range(rank):
            i, kk = ix[2 + a], ix[2 + rank + a]
            s = em.const(p.stride[a], "index")
            pre = em.const(p.pre[a], "index")
            q = em.op(f"arith.subi {em.op(f'arith.addi {i}, {pre} : index')}, {kk} : index")
            ok = em.op(f"arith.cmpi sge, {q}, {zero} : index")
            if p.stride[a] != 1:
                rem = em.op(f"arith.remsi {q}, {s} : index")
                ok = em.op(f"arith.andi {ok}, {em.op(f'arith.cmpi eq, {rem}, {zero} : index')} : i1")
                q = em.op(f"arith.divsi {q}, {s} : index")
            top = em.const(out_sp[a], "index")
            ok = em.op(f"arith.andi {ok}, {em.op(f'arith.cmpi slt, {q}, {top} : index')} : i1")
            valid = ok if valid is None else em.op(f"arith.andi {valid}, {ok} : i1")
            pos.append(q)
        pos = [em.op(f"arith.select {valid}, {q}, {zero} : index") for q in pos]
        at_o = f"[{ix[0]}, {ix[1]}, {', '.join(pos)}]"
        g = em.op(f"tensor.extract {src.ssa}{at_o} : {src.type}")
        g = em.cast(g, src.elem, acc)
        if p.mode == AVG_INCLUDE:
            g = em.op(f"arith.divf {g}, {em.const(float(p.size), acc)} : {acc}")
        elif p.mode == AVG_EXCLUDE:
            g = em.op(f"arith.divf {g}, {_count_at(em, pos, in_sp, p, acc)} : {acc}")
        if index is not None:
            j = em.op(f"tensor.extract {index.ssa}{at_o} : {index.type}")
            j = em.cast(j, index.elem, "i32")
            valid = em.op(f"arith.andi {valid}, {em.op(f'arith.cmpi eq, {j}, {args[0]} : i32')} : i1")
        contrib = em.op(f"arith.select {valid}, {g}, {em.const(0.0, acc)} : {acc}")
        return em.op(f"arith.addf {args[1]}, {contrib} : {acc}")

    r = em.generic([(koff, kmap)], dx_shape, acc, its, omap, body, init=init)
    ctx.define(at.dx_uid, r)
