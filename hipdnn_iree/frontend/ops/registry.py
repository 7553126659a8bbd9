"""Validation and output-shape inference at ``Graph.validate()``, from the op kinds' OpDefs.

:func:`infer` checks the node's integer fields, runs ``graph_ir.opdef.OPS[kind].infer`` (the op's
one shape and stride rule, shared with the emitters) and turns its ``GraphError`` into a
``HipdnnError`` naming the op through plugin_sdk/errors.py's table. :func:`check_frontend` is the import-time
check that every supported OpDef's ``frontend_method`` is an ``hd.Graph`` method.
"""
from __future__ import annotations

import dataclasses

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.errors import to_hipdnn
from graph_ir.desc import GraphError, NodeDesc
from graph_ir.opdef import OPS, check_complete


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


def infer(node: NodeDesc, dims) -> dict:
    """``{output uid: dims}`` of ``node`` given the ``dims(uid)`` lookup; HipdnnError(BAD_PARAM) naming
    the op, the field and the value when the node is wrong."""
    check_int64_fields(node)
    try:
        return OPS[node.kind].infer(node, dims)
    except GraphError as e:
        raise to_hipdnn(e, "graph", _prefix(node, str(e))) from None


def _prefix(node: NodeDesc, message: str) -> str:
    """The op's name before a message, unless the shape rule named it already (say it once)."""
    prefix = f"{node.kind.name.lower()} '{node.name}': "
    return "" if message.startswith(prefix) else prefix


def bad(node: NodeDesc, message: str) -> HipdnnError:
    """BAD_PARAM naming the op, for checks of the frontend's own (no GraphError involved)."""
    return HipdnnError(Status.BAD_PARAM, _prefix(node, message) + message)


def check_frontend(graph_cls) -> None:
    """Raises naming every supported op whose OpDef ``frontend_method`` is not a method of ``graph_cls``."""
    check_complete(f"{graph_cls.__name__} methods (OpDef.frontend_method)",
                   {k: d for k, d in OPS.items() if d.frontend_method
                    and callable(getattr(graph_cls, d.frontend_method, None))})
