"""Per-op validation and output-shape inference, run at ``Graph.validate()``.

Each function gets the node and a ``dims(uid)`` lookup for already-known
tensors, raises ``HipdnnError(BAD_PARAM)`` naming the op, the field and the
value, and returns ``{output_uid: inferred_dims}``.
"""
from __future__ import annotations

from typing import Callable

from hipdnn_iree._status import HipdnnError, Status
from lowering.graph_ir import LoweringError, NodeDesc, OpKind

INFER: dict[OpKind, Callable] = {}
# op kind -> name of the Graph method that adds it (checked by the op-completeness test)
FRONTEND_METHODS: dict[OpKind, str] = {OpKind.POINTWISE: "pointwise", OpKind.MATMUL: "matmul"}


def register_frontend(kind: OpKind, method: str) -> None:
    if kind in FRONTEND_METHODS:
        raise RuntimeError(f"duplicate frontend method for {kind.name}")
    FRONTEND_METHODS[kind] = method


def register_infer(kind: OpKind):
    def wrap(fn):
        if kind in INFER:
            raise RuntimeError(f"duplicate shape inference for {kind.name}")
        INFER[kind] = fn
        return fn
    return wrap


def bad(node: NodeDesc, message: str) -> HipdnnError:
    prefix = f"{node.kind.name.lower()} '{node.name}': "
    # NOTE: lowering's shape helpers name the op themselves; say it once.
    return HipdnnError(Status.BAD_PARAM, message if message.startswith(prefix) else prefix + message)


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
    from hipdnn_iree._types import PointwiseMode
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
