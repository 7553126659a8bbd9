"""moe_grouped_matmul_bwd: its OpDef (rules in _moe.py)."""
from __future__ import annotations

from graph_ir.desc import MoeGroupedMatmulBwdAttrs, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._moe import check_moe_backward, dynamic_fixed


def infer(node, dims) -> dict:
    return check_moe_backward(node.attrs, dims)


OPDEF = register(OpDef(OpKind.MOE_GROUPED_MATMUL_BWD, MoeGroupedMatmulBwdAttrs, infer, dynamic_fixed,
                       frontend_method="moe_grouped_matmul_backward", facade_methods=("moe_grouped_matmul_bwd",)))
