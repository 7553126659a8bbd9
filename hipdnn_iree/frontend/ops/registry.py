"""Per-op validation and output-shape inference, run at ``Graph.validate()``.

Each function gets the node and a ``dims(uid)`` lookup for already-known
tensors, raises ``HipdnnError(BAD_PARAM)`` naming the op, the field and the
value, and returns ``{output_uid: inferred_dims}``.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from graph_ir.desc import GraphError, NodeDesc, OpKind

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
        INFER[kind] = _checking_int64(fn)
        return fn
    return wrap


def check_int64_fields(node: NodeDesc) -> None:
    """Every integer field of the node's attributes fits hipDNN's int64 (graphs from JSON carry
    arbitrary Python ints; without this, encoding them escaped as flatbuffers' TypeError)."""
    for f in dataclasses.fields(node.attrs):
        v = getattr(node.attrs, f.name)
        items = v if isinstance(v, tuple) else (v,)
        big = [e for e in items if isinstance(e, int) and not isinstance(e, bool) and not -2**63 <= e < 2**63]
        if big:
            raise bad(node, f"field '{f.name}' value {list(v) if isinstance(v, tuple) else v}: {big[0]} is out "
                            f"of the int64 range (-2**63 .. 2**63 - 1)")


def _checking_int64(fn):
    @functools.wraps(fn)
    def infer(node: NodeDesc, dims):
        check_int64_fields(node)
        return fn(node, dims)
    return infer


def bad(node: NodeDesc, message: str) -> HipdnnError:
    prefix = f"{node.kind.name.lower()} '{node.name}': "
    # NOTE: lowering's shape helpers name the op themselves; say it once.
    return HipdnnError(Status.BAD_PARAM, message if message.startswith(prefix) else prefix + message)



def _outputs_as_declared(node: NodeDesc, dims) -> dict:
    """Node types this project parses but does not lower: outputs keep the dims the graph gives
    (a hipDNN graph sets them all); ``check_support`` refuses the node by name."""
    return {}


def _register_parse_only() -> None:
    from graph_ir.desc import LOWERED_KINDS
    for kind in OpKind:
        if kind not in LOWERED_KINDS:
            INFER.setdefault(kind, _checking_int64(_outputs_as_declared))


_register_parse_only()
