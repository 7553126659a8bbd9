"""reduction: its OpDef (rules in _norm.py)."""
from __future__ import annotations

from graph_ir.desc import GraphError, OpKind, ReductionAttrs
from graph_ir.dynamic import FIXED, VARY, Facts
from graph_ir.opdef import OpDef, register
from graph_ir.ops._norm import check_reduction_mode, reduced_axes, x_dims


def infer(node, dims) -> dict:
    at = node.attrs
    check_reduction_mode(at.mode)
    x = x_dims(at, dims)
    if len(x) == 0:
        raise GraphError(f"field 'x' dims {list(x)}: a reduction needs an input of rank >= 1")
    # NOTE: the output dims say which axes are reduced, so they cannot be inferred;
    # when the lookup knows the user-set dims they are checked here, otherwise the
    # lowering checks them (same message) when the plan is built.
    try:
        y = dims(at.y_uid)
    except KeyError:
        y = None
    if y is not None:
        reduced_axes(x, y)
    return {}


def dynamic(f: Facts, node):
    at = node.attrs
    x, y = f.dims(at.x_uid), f.dims(at.y_uid)
    for i, (dx, dy) in enumerate(zip(x, y)):
        if dy == dx:
            f.union((at.x_uid, i), (at.y_uid, i))
            f.mark((at.y_uid, i), VARY, "N" if i == 0 else "S")
        else:
            f.mark((at.x_uid, i), FIXED)
            f.mark((at.y_uid, i), FIXED)


OPDEF = register(OpDef(OpKind.REDUCTION, ReductionAttrs, infer, dynamic, frontend_method="reduction",
                       facade_methods=("reduction",), traits=frozenset({"reduction"}),
                       stride_order_from=(("y_uid", "x_uid"),)))
