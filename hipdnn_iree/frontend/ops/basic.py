"""Validation and shape inference of the ops ``hd.Graph`` defines itself: matmul and pointwise."""
from __future__ import annotations

import math

from hipdnn_iree.frontend.ops.registry import bad, register_frontend, register_infer
from graph_ir.desc import GraphError, NodeDesc, OpKind

register_frontend(OpKind.MATMUL, "matmul")
register_frontend(OpKind.POINTWISE, "pointwise")


@register_infer(OpKind.MATMUL)
def infer_matmul(node: NodeDesc, dims) -> dict:
    from graph_ir.ops.matmul import matmul_shape
    at = node.attrs
    try:
        return {at.c_uid: matmul_shape(dims(at.a_uid), dims(at.b_uid), node.name)}
    except GraphError as e:
        raise bad(node, str(e)) from None


@register_infer(OpKind.POINTWISE)
def infer_pointwise(node: NodeDesc, dims) -> dict:
    from graph_ir.ops.pointwise import ARITY, broadcast_shape
    from hipdnn_iree.plugin_sdk.types import PointwiseMode
    at = node.attrs
    mode = at.operation
    if mode not in ARITY:
        raise bad(node, f"mode {mode} is not a supported pointwise mode")
    _check_pointwise_floats(node)
    n = len(at.inputs())
    if n != ARITY[mode]:
        raise bad(node, f"mode {PointwiseMode(mode).name} takes {ARITY[mode]} input(s), got {n}")
    try:
        return {at.out_0_uid: broadcast_shape([dims(u) for u in at.inputs()])}
    except GraphError as e:
        raise bad(node, str(e)) from None


# field -> the one infinity it may hold (ReLU clips may be open-ended); NaN means unset.
_POINTWISE_FLOATS = {"elu_alpha": None, "swish_beta": None, "softplus_beta": None,
                     "relu_lower_clip_slope": None, "relu_lower_clip": -math.inf, "relu_upper_clip": math.inf}


def _check_pointwise_floats(node: NodeDesc) -> None:
    """Graphs from JSON or hipDNN bytes skip ``Graph.pointwise``'s argument checks: same rule here."""
    for field, infinity in _POINTWISE_FLOATS.items():
        v = getattr(node.attrs, field)
        if math.isinf(v) and v != infinity:
            allowed = "" if infinity is None else f" or {infinity}"
            raise bad(node, f"field '{field}' value {v}: it must be a finite number{allowed} (or unset)")
