"""Pointwise: its arity table, broadcasting rule, checks, dynamic-shape rule and OpDef (no MLIR)."""
from __future__ import annotations

import math

from graph_ir._fbs.graph_generated import DataType
from graph_ir._fbs.graph_generated import PointwiseMode as M
from graph_ir.desc import GraphError, OpKind, PointwiseAttrs
from graph_ir.dynamic import BPARAM, BTOKEN, FIXED, PPARAM, PTOKEN, Facts, right_aligned
from graph_ir.opdef import OpDef, register

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


_MODE_NAMES = {v: k for k, v in vars(M).items() if not k.startswith("_") and isinstance(v, int)}
# field -> the one infinity it may hold (ReLU clips may be open-ended); NaN means unset.
_FLOATS = {"elu_alpha": None, "swish_beta": None, "softplus_beta": None,
           "relu_lower_clip_slope": None, "relu_lower_clip": -math.inf, "relu_upper_clip": math.inf}


def _check_floats(at) -> None:
    """Graphs from JSON or hipDNN bytes skip ``Graph.pointwise``'s argument checks: same rule here."""
    for name, infinity in _FLOATS.items():
        v = getattr(at, name)
        if math.isinf(v) and v != infinity:
            allowed = "" if infinity is None else f" or {infinity}"
            raise GraphError(f"field '{name}' value {v}: it must be a finite number{allowed} (or unset)")


def infer(node, dims) -> dict:
    at = node.attrs
    mode = at.operation
    if mode not in ARITY:
        raise GraphError(f"mode {mode} is not a supported pointwise mode")
    _check_floats(at)
    n = len(at.inputs())
    if n != ARITY[mode]:
        raise GraphError(f"mode {_MODE_NAMES[mode]} takes {ARITY[mode]} input(s), got {n}")
    return {at.out_0_uid: broadcast_shape([dims(u) for u in at.inputs()])}


def dynamic(f: Facts, node):
    at = node.attrs
    out = at.outputs()[0]
    o = f.dims(out)
    rank = len(o)
    ins = [u for u in at.inputs() if not f.graph.tensor(u).is_scalar]
    for u in ins:
        right_aligned(f, u, out)
    for u in ins:
        a = f.dims(u)
        off = rank - len(a)
        padded = (1,) * off + a
        if padded != o and any(d != 1 for d in padded):
            # a per-channel style operand: the axes it spans are parameters, the others tokens
            for i in range(rank):
                f.mark((out, i), BPARAM if padded[i] == o[i] and o[i] != 1 else BTOKEN)
    for i in range(rank):
        f.mark((out, i), PPARAM if (rank >= 2 and i == rank - 1) else PTOKEN, "S" if i else "N")
        carried = any(f.find((u, i - (rank - len(f.dims(u))))) == f.find((out, i))
                      for u in ins if i - (rank - len(f.dims(u))) >= 0)
        if not carried:
            f.mark((out, i), FIXED)    # every operand broadcasts here: the size is the op's, fixed


_FACADE = (   # cudnn.pygraph's methods that add one pointwise node (hipdnn_iree/cudnn/_ops.py)
    'pointwise', 'bias', 'scale', 'relu', 'leaky_relu', 'elu', 'swish', 'softplus', 'gen_index',
    'binary_select', 'relu_backward', 'leaky_relu_backward', 'abs', 'ceil', 'floor', 'exp', 'log', 'neg',
    'rsqrt', 'reciprocal', 'sqrt', 'sin', 'cos', 'tan', 'erf', 'identity', 'sigmoid', 'tanh', 'gelu',
    'gelu_approx_tanh', 'logical_not', 'add', 'sub', 'mul', 'div', 'add_square', 'logical_and', 'logical_or',
    'max', 'min', 'pow', 'mod', 'cmp_eq', 'cmp_neq', 'cmp_gt', 'cmp_ge', 'cmp_lt', 'cmp_le', 'tanh_backward',
    'sigmoid_backward', 'elu_backward', 'gelu_backward', 'gelu_approx_tanh_backward', 'softplus_backward',
    'swish_backward',
)

_BOOLEAN_OUT = frozenset((M.CMP_EQ, M.CMP_NEQ, M.CMP_GT, M.CMP_GE, M.CMP_LT, M.CMP_LE, M.LOGICAL_AND,
                          M.LOGICAL_OR, M.LOGICAL_NOT))


def output_type(params) -> int | None:
    """BOOLEAN for the compare and logical modes, else None (the frontend's defaults)."""
    return DataType.BOOLEAN if params.get("operation") in _BOOLEAN_OUT else None


OPDEF = register(OpDef(OpKind.POINTWISE, PointwiseAttrs, infer, dynamic, frontend_method="pointwise",
                       facade_methods=_FACADE, traits=frozenset({"elementwise"}),
                       stride_order_from=(("out_0_uid", "in_0_uid"), ("out_0_uid", "in_1_uid"),
                                          ("out_0_uid", "in_2_uid")),
                       output_type=output_type))
