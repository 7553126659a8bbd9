"""layernorm_backward: its OpDef (rules in _norm.py)."""
from __future__ import annotations

from graph_ir.desc import LayernormBackwardAttrs, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._norm import check_layernorm_backward, dynamic_rownorm_backward


def infer(node, dims) -> dict:
    return check_layernorm_backward(node.attrs, dims)


OPDEF = register(OpDef(OpKind.LAYERNORM_BACKWARD, LayernormBackwardAttrs, infer, dynamic_rownorm_backward,
                       frontend_method="layernorm_backward", facade_methods=("layernorm_backward",),
                       traits=frozenset({"normalization"}), stride_order_from=(("dx_uid", "x_uid"),)))
