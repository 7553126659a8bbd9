"""Matmul -> ``linalg.matmul`` / ``linalg.batch_matmul``, or a ``linalg.generic``
contraction when batch dims broadcast. Accumulates in the compute type."""
from __future__ import annotations

from lowering._context import LowerContext
from lowering._emit import FLOAT_TYPES, Value
from lowering._registry import register_lowering
from lowering.graph_ir import LoweringError, NodeDesc, OpKind
from lowering.ops.pointwise import broadcast_shape


def matmul_shape(a: tuple, b: tuple, name: str = "matmul") -> tuple[int, ...]:
    if len(a) < 2 or len(b) < 2:
        raise LoweringError(f"matmul '{name}': operands need rank >= 2, got {list(a)} and {list(b)}")
    if a[-1] != b[-2]:
        raise LoweringError(f"matmul '{name}': inner dims differ: A is {list(a)} and B is {list(b)} "
                            f"(A[-1]={a[-1]} vs B[-2]={b[-2]})")
    batch = broadcast_shape([a[:-2], b[:-2]]) if (a[:-2] or b[:-2]) else ()
    return tuple(batch) + (a[-2], b[-1])


@register_lowering(OpKind.MATMUL)
def lower_matmul(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    a, b = ctx.value(at.a_uid), ctx.value(at.b_uid)
    out_shape = matmul_shape(a.shape, b.shape, node.name)
    acc = ctx.compute_elem(node, default="f32" if a.elem in FLOAT_TYPES else "i32")
    em = ctx.em
    rank = len(out_shape)
    init = em.filled(out_shape, acc, 0.0)
    if rank == 2 or (rank == 3 and a.shape[:-2] == b.shape[:-2] == out_shape[:-2]):
        opname = "linalg.matmul" if rank == 2 else "linalg.batch_matmul"
        name = em.op(f"{opname} ins({a.ssa}, {b.ssa} : {a.type}, {b.type}) "
                     f"outs({init} : {Value('', out_shape, acc).type}) -> {Value('', out_shape, acc).type}", "mm")
        res = Value(name, out_shape, acc)
    else:
        nb = rank - 2
        dims = [f"d{i}" for i in range(rank + 1)]  # batch..., m, n, k
        dom = f"({', '.join(dims)})"
        m, n, k = dims[nb], dims[nb + 1], dims[nb + 2]

        def batch_exprs(shape):
            off = nb - (len(shape) - 2)
            return [dims[off + i] if shape[i] == out_shape[off + i] else "0" for i in range(len(shape) - 2)]

        amap = f"affine_map<{dom} -> ({', '.join(batch_exprs(a.shape) + [m, k])})>"
        bmap = f"affine_map<{dom} -> ({', '.join(batch_exprs(b.shape) + [k, n])})>"
        omap = f"affine_map<{dom} -> ({', '.join(dims[:nb] + [m, n])})>"

        def body(args):
            x = em.cast(args[0], a.elem, acc)
            y = em.cast(args[1], b.elem, acc)
            if acc in FLOAT_TYPES:
                return em.op(f"arith.addf {args[2]}, {em.op(f'arith.mulf {x}, {y} : {acc}')} : {acc}")
            return em.op(f"arith.addi {args[2]}, {em.op(f'arith.muli {x}, {y} : {acc}')} : {acc}")

        res = em.generic([(a, amap), (b, bmap)], out_shape, acc,
                         ["parallel"] * (nb + 2) + ["reduction"], omap, body, init=init)
    ctx.define(at.c_uid, res)
