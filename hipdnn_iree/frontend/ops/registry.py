"""Per-op validation and output-shape inference, run at ``Graph.validate()``.

Each function gets the node and a ``dims(uid)`` lookup for already-known
tensors, raises ``HipdnnError(BAD_PARAM)`` naming the op, the field and the
value, and returns ``{output_uid: inferred_dims}``.
"""
from __future__ import annotations

from typing import Callable

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from lowering.graph_ir import LoweringError, NodeDesc, OpKind

INFER: dict[OpKind, Callable] = {}
# op kind -> name of the Graph method that adds it (checked by the op-completeness test)
FRONTEND_METHODS: dict[OpKind, str] = {}


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

