"""batchnorm_backward: its OpDef (operand rules beside batchnorm's, graph_ir/ops/batchnorm.py)."""
from __future__ import annotations

from graph_ir.desc import ABSENT, BatchnormBackwardAttrs, GraphError, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._norm import Dims
from graph_ir.ops.batchnorm import channel_dims, check_per_channel, dynamic_all_fixed


def check_batchnorm_backward(at, dims: Dims) -> dict[int, tuple[int, ...]]:
    """Validates batchnorm_backward operands; returns the dims of dx, dscale and dbias."""
    x, c = channel_dims(at, dims)
    if at.dy_uid == ABSENT:
        raise GraphError(f"field 'dy' is missing: pass the gradient of y (x's dims {list(x)})")
    dy = tuple(dims(at.dy_uid))
    if dy != x:
        raise GraphError(f"field 'dy' dims {list(dy)}: expected x's dims {list(x)}")
    check_per_channel(at, "scale", c, dims)
    m, v = at.mean_uid, at.inv_variance_uid
    if m == ABSENT and v == ABSENT:
        # NOTE: hipDNN's node has no epsilon, so it cannot recompute the statistics itself;
        # hd.Graph.batchnorm_backward without them adds a batchnorm node that outputs them.
        raise GraphError("fields 'mean' and 'inv_variance' are missing: this node reads the saved statistics "
                            "(hd.Graph.batchnorm_backward with epsilon= and no statistics adds a batchnorm node "
                            "that computes them)", "unsupported")
    if (m == ABSENT) != (v == ABSENT):
        have, miss = ("mean", "inv_variance") if v == ABSENT else ("inv_variance", "mean")
        raise GraphError(f"field '{miss}' is missing but '{have}' is set: pass both saved statistics or neither")
    check_per_channel(at, "mean", c, dims)
    check_per_channel(at, "inv_variance", c, dims)
    return {at.dx_uid: x, at.dscale_uid: c, at.dbias_uid: c}


def infer(node, dims) -> dict:
    return check_batchnorm_backward(node.attrs, dims)


OPDEF = register(OpDef(OpKind.BATCHNORM_BACKWARD, BatchnormBackwardAttrs, infer, dynamic_all_fixed,
                       frontend_method="batchnorm_backward", facade_methods=("batchnorm_backward",),
                       traits=frozenset({"normalization"}), stride_order_from=(("dx_uid", "x_uid"),)))
