"""Matmul: its shape rule, dynamic-shape rule and OpDef (no MLIR)."""
from __future__ import annotations

from graph_ir.desc import GraphError, MatmulAttrs, OpKind
from graph_ir.dynamic import FIXED, VARY, Facts
from graph_ir.opdef import OpDef, register
from graph_ir.ops.pointwise import broadcast_shape


def matmul_shape(a: tuple, b: tuple, name: str = "matmul") -> tuple[int, ...]:
    if len(a) < 2 or len(b) < 2:
        raise GraphError(f"matmul '{name}': operands need rank >= 2, got {list(a)} and {list(b)}")
    if a[-1] != b[-2]:
        raise GraphError(f"matmul '{name}': inner dims differ: A is {list(a)} and B is {list(b)} "
                            f"(A[-1]={a[-1]} vs B[-2]={b[-2]})")
    batch = broadcast_shape([a[:-2], b[:-2]]) if (a[:-2] or b[:-2]) else ()
    return tuple(batch) + (a[-2], b[-1])


def infer(node, dims) -> dict:
    at = node.attrs
    return {at.c_uid: matmul_shape(dims(at.a_uid), dims(at.b_uid), node.name)}


def dynamic(f: Facts, node):
    at = node.attrs
    a, b, c = at.a_uid, at.b_uid, at.c_uid
    da, db, dc = f.dims(a), f.dims(b), f.dims(c)
    nb = len(dc) - 2
    for u, d in ((a, da), (b, db)):
        off = nb - (len(d) - 2)
        for i in range(len(d) - 2):
            if d[i] == dc[off + i] and not (u == b and d[i] == 1):
                f.union((u, i), (c, off + i))
            else:
                f.mark((u, i), FIXED)
    for i in range(nb):
        # NOTE: a batch dim no operand carries (both broadcast or absent) is made by the op: fixed
        carried = any(len(d) - 2 > i - (nb - (len(d) - 2)) >= 0 and d[i - (nb - (len(d) - 2))] == dc[i]
                      and not (u == b and dc[i] == 1) for u, d in ((a, da), (b, db)))
        f.mark((c, i), VARY if carried else FIXED, "B")
    f.union((a, len(da) - 2), (c, nb))
    f.mark((c, nb), VARY, "M")
    f.union((a, len(da) - 1), (b, len(db) - 2))
    f.mark((a, len(da) - 1), FIXED)
    f.union((b, len(db) - 1), (c, nb + 1))
    f.mark((c, nb + 1), FIXED)


OPDEF = register(OpDef(OpKind.MATMUL, MatmulAttrs, infer, dynamic, frontend_method="matmul",
                       facade_methods=("matmul",), traits=frozenset({"contraction"})))
