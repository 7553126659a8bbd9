"""Graph FlatBuffer -> verified linalg-on-tensors MLIR.

Pure: bytes in, text out. Knows nothing of runtimes, devices or plugins.

Example:
    >>> from lowering import lower                      # doctest: +SKIP
    >>> lowered = lower(graph_bytes, target="llvm-cpu:host")
    >>> print(lowered.mlir)
"""
from __future__ import annotations

from lowering._lower import ABI_FORMAT_VERSION, ENTRY_POINT, Lowered, lower, verify_mlir
from lowering._registry import LOWERINGS
from lowering.graph_ir import (ABSENT, ATTRS_BY_KIND, GraphDesc, LoweringError, NodeDesc, OpKind,
                               TensorDesc, decode_graph, encode_graph)
from lowering.layout import Layout, packed_strides, physical_layout

__all__ = [
    "ABI_FORMAT_VERSION", "ABSENT", "ATTRS_BY_KIND", "ENTRY_POINT", "GraphDesc", "LOWERINGS", "Layout",
    "Lowered", "LoweringError", "NodeDesc", "OpKind", "TensorDesc", "decode_graph", "encode_graph",
    "lower", "packed_strides", "physical_layout", "verify_mlir",
]
