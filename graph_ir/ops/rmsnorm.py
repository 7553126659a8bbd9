"""rmsnorm: its OpDef (rules in _norm.py)."""
from __future__ import annotations

from graph_ir.desc import OpKind, RmsnormAttrs
from graph_ir.opdef import OpDef, register
from graph_ir.ops._norm import check_rmsnorm, dynamic_rownorm


def infer(node, dims) -> dict:
    return check_rmsnorm(node.attrs, dims)


OPDEF = register(OpDef(OpKind.RMSNORM, RmsnormAttrs, infer, dynamic_rownorm, frontend_method="rmsnorm",
                       facade_methods=("rmsnorm",), traits=frozenset({"normalization"}),
                       stride_order_from=(("y_uid", "x_uid"), ("inv_rms_uid", "x_uid"))))
