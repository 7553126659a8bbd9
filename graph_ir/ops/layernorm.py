"""layernorm: its OpDef (rules in _norm.py)."""
from __future__ import annotations

from graph_ir.desc import LayernormAttrs, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._norm import check_layernorm, dynamic_rownorm


def infer(node, dims) -> dict:
    return check_layernorm(node.attrs, dims)


OPDEF = register(OpDef(OpKind.LAYERNORM, LayernormAttrs, infer, dynamic_rownorm, frontend_method="layernorm",
                       facade_methods=("layernorm",), traits=frozenset({"normalization"}),
                       stride_order_from=(("y_uid", "x_uid"), ("mean_uid", "x_uid"), ("inv_variance_uid", "x_uid"))))
