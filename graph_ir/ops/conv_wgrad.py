"""conv_wgrad: the filter gradient of the convolution, its OpDef (rules in _conv.py)."""
from __future__ import annotations

from graph_ir.desc import ConvWgradAttrs, GraphError, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._conv import check_forward, conv_params, dynamic, given, same_rank, spatial_rank


def infer(node, dims) -> dict:
    """Checks dy, x and the attributes (and dw's dims when set); dw cannot be inferred."""
    at = node.attrs
    dy, x = dims(at.y_uid), dims(at.x_uid)
    dw = given(dims, at.w_uid)
    conv_params(at, spatial_rank(x, "x_uid"))
    same_rank(x, "x", dy, "y_uid")
    if dy[0] != x[0]:
        raise GraphError(f"field 'y_uid' dims {list(dy)}: batch {dy[0]} differs from x's batch {x[0]} "
                         f"(x dims {list(x)})")
    if dw is not None:
        same_rank(x, "x", dw, "w_uid")
        check_forward(x, dw, dy, at, "w_uid")
    return {at.w_uid: dw} if dw is not None else {}


OPDEF = register(OpDef(OpKind.CONV_WGRAD, ConvWgradAttrs, infer, dynamic, frontend_method="conv_wgrad",
                       facade_methods=("conv_wgrad",), traits=frozenset({"conv", "conv_wgrad"}),
                       stride_order_from=(("w_uid", "x_uid"),)))
