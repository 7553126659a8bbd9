"""Matmul's shape rule (no MLIR)."""
from __future__ import annotations

from graph_ir.desc import GraphError
from graph_ir.ops.pointwise import broadcast_shape

def matmul_shape(a: tuple, b: tuple, name: str = "matmul") -> tuple[int, ...]:
    if len(a) < 2 or len(b) < 2:
        raise GraphError(f"matmul '{name}': operands need rank >= 2, got {list(a)} and {list(b)}")
    if a[-1] != b[-2]:
        raise GraphError(f"matmul '{name}': inner dims differ: A is {list(a)} and B is {list(b)} "
                            f"(A[-1]={a[-1]} vs B[-2]={b[-2]})")
    batch = broadcast_shape([a[:-2], b[:-2]]) if (a[:-2] or b[:-2]) else ()
    return tuple(batch) + (a[-2], b[-1])
