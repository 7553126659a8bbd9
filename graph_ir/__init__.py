"""The graph IR: what every layer shares about an op graph, and nothing about running it.

Descriptors and attributes (``desc``), the FlatBuffer codec and its bounds checks (``desc``,
``fbverify``, ``_fbs``: flatc's code for schemas/graph.fbs), data types (``dtypes``), memory
layouts (``layout``) and the dynamic-shape analysis (``dynamic``). It imports nothing of the
frontend, the engines or the MLIR emitters (``lowering/``), and reads no environment.
"""
from __future__ import annotations

from graph_ir.desc import (ABSENT, ATTRS_BY_KIND, GraphDesc, GraphError, NodeDesc, OpKind, TensorDesc,
                           decode_graph, encode_graph)
from graph_ir.layout import Layout, packed_strides, physical_layout

__all__ = [
    "ABSENT", "ATTRS_BY_KIND", "GraphDesc", "Layout", "GraphError", "NodeDesc", "OpKind", "TensorDesc",
    "decode_graph", "encode_graph", "packed_strides", "physical_layout",
]
