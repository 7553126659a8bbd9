"""conv_dgrad: the data gradient of the convolution, its OpDef (rules in _conv.py)."""
from __future__ import annotations

from graph_ir.desc import ConvDgradAttrs, GraphError, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._conv import check_forward, conv_params, dynamic, given, same_rank, spatial_rank


def infer(node, dims) -> dict:
    """Checks dy, w and the attributes (and dx's dims when set); dx cannot be inferred."""
    at = node.attrs
    dy, w = dims(at.y_uid), dims(at.w_uid)
    dx = given(dims, at.x_uid)
    conv_params(at, spatial_rank(dy, "y_uid"))
    same_rank(dy, "dy", w, "w_uid")
    if dy[1] != w[0]:
        raise GraphError(f"field 'w_uid' dims {list(w)}: w.dims[0] = {w[0]} output channels but dy has "
                         f"{dy[1]} channels (dy dims {list(dy)})")
    if dx is not None:
        same_rank(dy, "dy", dx, "x_uid")
        check_forward(dx, w, dy, at, "x_uid")
    return {at.x_uid: dx} if dx is not None else {}


OPDEF = register(OpDef(OpKind.CONV_DGRAD, ConvDgradAttrs, infer, dynamic, frontend_method="conv_dgrad",
                       facade_methods=("conv_dgrad",), traits=frozenset({"conv", "conv_dgrad"}),
                       stride_order_from=(("x_uid", "y_uid"),)))
