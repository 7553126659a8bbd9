"""rmsnorm_backward: its OpDef (rules in _norm.py)."""
from __future__ import annotations

from graph_ir.desc import OpKind, RmsnormBackwardAttrs
from graph_ir.opdef import OpDef, register
from graph_ir.ops._norm import check_rmsnorm_backward, dynamic_rownorm_backward


def infer(node, dims) -> dict:
    return check_rmsnorm_backward(node.attrs, dims)


OPDEF = register(OpDef(OpKind.RMSNORM_BACKWARD, RmsnormBackwardAttrs, infer, dynamic_rownorm_backward,
                       frontend_method="rmsnorm_backward", facade_methods=("rmsnorm_backward",),
                       traits=frozenset({"normalization"}), stride_order_from=(("dx_uid", "x_uid"),)))
