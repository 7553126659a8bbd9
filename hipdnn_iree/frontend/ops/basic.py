"""Validation and shape inference of the ops ``hd.Graph`` defines itself: matmul and pointwise."""
from __future__ import annotations

from hipdnn_iree.frontend.ops.registry import bad, register_frontend, register_infer
from lowering.graph_ir import LoweringError, NodeDesc, OpKind

register_frontend(OpKind.MATMUL, "matmul")
register_frontend(OpKind.POINTWISE, "pointwise")


@register_infer(OpKind.MATMUL)
def infer_matmul(node: NodeDesc, dims) -> dict:
    from lowering.ops.matmul import matmul_shape
    at = node.attrs
    try:
        return {at.c_uid: matmul_shape(dims(at.a_uid), dims(at.b_uid), node.name)}
    except LoweringError as e:
        raise bad(node, str(e)) from None


@register_infer(OpKind.POINTWISE)
def infer_pointwise(node: NodeDesc, dims) -> dict:
    from lowering.ops.pointwise import ARITY, broadcast_shape
    from hipdnn_iree.plugin_sdk.types import PointwiseMode
    at = node.attrs
    mode = at.operation
    if mode not in ARITY:
        raise bad(node, f"mode {mode} is not a supported pointwise mode")
    n = len(at.inputs())
    if n != ARITY[mode]:
        raise bad(node, f"mode {PointwiseMode(mode).name} takes {ARITY[mode]} input(s), got {n}")
    try:
        return {at.out_0_uid: broadcast_shape([dims(u) for u in at.inputs()])}
    except LoweringError as e:
        raise bad(node, str(e)) from None
