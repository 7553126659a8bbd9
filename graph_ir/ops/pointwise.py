"""Pointwise's arity table and broadcasting rule (no MLIR)."""
from __future__ import annotations

from graph_ir._fbs.graph_generated import PointwiseMode as M
from graph_ir.desc import GraphError

ARITY = {
    **{m: 2 for m in (M.ADD, M.SUB, M.MUL, M.DIV, M.MAX_OP, M.MIN_OP, M.POW, M.MOD, M.ADD_SQUARE,
                      M.CMP_EQ, M.CMP_NEQ, M.CMP_GT, M.CMP_GE, M.CMP_LT, M.CMP_LE,
                      M.LOGICAL_AND, M.LOGICAL_OR,
                      M.RELU_BWD, M.SIGMOID_BWD, M.TANH_BWD, M.GELU_BWD, M.GELU_APPROX_TANH_BWD,
                      M.SWISH_BWD, M.ELU_BWD, M.SOFTPLUS_BWD)},
    **{m: 1 for m in (M.RELU_FWD, M.SIGMOID_FWD, M.TANH_FWD, M.GELU_FWD, M.GELU_APPROX_TANH_FWD,
                      M.SWISH_FWD, M.ELU_FWD, M.SOFTPLUS_FWD, M.EXP, M.LOG, M.SQRT, M.RSQRT, M.ABS,
                      M.NEG, M.RECIPROCAL, M.ERF, M.SIN, M.COS, M.TAN, M.CEIL, M.FLOOR, M.IDENTITY,
                      M.LOGICAL_NOT, M.GEN_INDEX)},
    M.BINARY_SELECT: 3,
}


def broadcast_shape(shapes) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        ds = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(ds) > 1:
            raise GraphError(f"shapes {[list(s) for s in shapes]} do not broadcast together")
        out.append(ds.pop() if ds else 1)
    return tuple(out)
