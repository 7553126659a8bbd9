"""The graph IR: what every layer shares about an op graph, and nothing about running it.

Descriptors and attributes (``desc``), the FlatBuffer codec and its bounds checks (``desc``,
``fbverify``, ``_fbs``: flatc's code for schemas/graph.fbs), data types (``dtypes``), memory
layouts (``layout``), the dynamic-shape analysis (``dynamic``) and one definition per op kind
(``opdef.OPS``, filled by ``ops/``: one module per op, imported here so the registry is always
complete), and the custom ops registered in this process (``custom_ops``: what a CUSTOM_OP node's
id resolves to, the one piece of process state). It imports nothing of the frontend, the engines
or the MLIR emitters (``lowering/``), and reads no environment.
"""
from __future__ import annotations

from graph_ir.desc import (ABSENT, ATTRS_BY_KIND, GraphDesc, GraphError, NodeDesc, OpKind, TensorDesc,
                           decode_graph, encode_graph)
from graph_ir.layout import Layout, packed_strides, physical_layout
from graph_ir import ops  # noqa: F401  (registers every OpDef)
from graph_ir.opdef import OPS, OpDef

__all__ = [
    "ABSENT", "ATTRS_BY_KIND", "GraphDesc", "Layout", "GraphError", "NodeDesc", "OPS", "OpDef", "OpKind",
    "TensorDesc", "decode_graph", "encode_graph", "packed_strides", "physical_layout",
]
