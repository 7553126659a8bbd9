"""block_scale_quantize: its OpDef (rules in _block_scale.py)."""
from __future__ import annotations

from graph_ir.desc import BlockScaleQuantizeAttrs, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._block_scale import check_quantize, fixed


def infer(node, dims) -> dict:
    return check_quantize(node.attrs, dims)


OPDEF = register(OpDef(OpKind.BLOCK_SCALE_QUANTIZE, BlockScaleQuantizeAttrs, infer,
                       fixed("x_uid", "y_uid", "scale_uid"), frontend_method="block_scale_quantize",
                       facade_methods=("block_scale_quantize",), stride_order_from=(("y_uid", "x_uid"),)))
