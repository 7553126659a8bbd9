"""conv_fprop: the forward convolution's OpDef (rules in _conv.py)."""
from __future__ import annotations

from graph_ir.desc import ConvFpropAttrs, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._conv import dynamic, forward_shape


def infer(node, dims) -> dict:
    """Checks x, w and the attributes; returns y's dims."""
    at = node.attrs
    y, _, _ = forward_shape(dims(at.x_uid), dims(at.w_uid), at)
    return {at.y_uid: y}


OPDEF = register(OpDef(OpKind.CONV_FPROP, ConvFpropAttrs, infer, dynamic, frontend_method="conv_fprop",
                       facade_methods=("conv_fprop",), traits=frozenset({"conv", "conv_fprop"}),
                       stride_order_from=(("y_uid", "x_uid"),)))
