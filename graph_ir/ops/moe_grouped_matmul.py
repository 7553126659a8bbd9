"""moe_grouped_matmul: its OpDef (rules in _moe.py)."""
from __future__ import annotations

from graph_ir.desc import MoeGroupedMatmulAttrs, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._moe import check_moe, dynamic_fixed


def infer(node, dims) -> dict:
    return check_moe(node.attrs, dims)


OPDEF = register(OpDef(OpKind.MOE_GROUPED_MATMUL, MoeGroupedMatmulAttrs, infer, dynamic_fixed,
                       frontend_method="moe_grouped_matmul", facade_methods=("moe_grouped_matmul",),
                       traits=frozenset({"gather"})))
