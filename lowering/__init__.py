"""Graph IR -> verified linalg-on-tensors MLIR: the MLIR emitters, and nothing else.

Pure: bytes in, text out. Knows nothing of runtimes, devices or plugins. The graph it reads
(descriptors, codec, layouts, dynamic shapes) is the ``graph_ir`` package below it.

Example:
    >>> from lowering import lower                      # doctest: +SKIP
    >>> lowered = lower(graph_bytes, target="llvm-cpu:host")
    >>> print(lowered.mlir)
"""
from __future__ import annotations

from lowering._lower import ABI_FORMAT_VERSION, ENTRY_POINT, Lowered, lower, verify_mlir
from lowering._registry import LOWERINGS

__all__ = ["ABI_FORMAT_VERSION", "ENTRY_POINT", "LOWERINGS", "Lowered", "lower", "verify_mlir"]
