"""block_scale_dequantize: its OpDef (rules in _block_scale.py)."""
from __future__ import annotations

from graph_ir.desc import BlockScaleDequantizeAttrs, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._block_scale import check_dequantize, fixed


def infer(node, dims) -> dict:
    return check_dequantize(node.attrs, dims)


OPDEF = register(OpDef(OpKind.BLOCK_SCALE_DEQUANTIZE, BlockScaleDequantizeAttrs, infer,
                       fixed("x_uid", "scale_uid", "y_uid"), frontend_method="block_scale_dequantize",
                       facade_methods=("block_scale_dequantize",), stride_order_from=(("y_uid", "x_uid"),),
                       traits=frozenset({"dequantize"})))
