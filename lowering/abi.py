"""The module ABI's wire constants: one home for each (``_lower.py`` writes them; the IREE engine's
restore, ``inspect`` and the compile cache key read them).

A compiled module's entry function carries, in ``iree.reflection``, the JSON of its ABI under
:data:`REFLECTION_KEY` (``{"version", "graph", "target", "entry", "tensors": [...]}``) and the op
graph's FlatBuffer (base64) under :data:`GRAPH_KEY`.
"""
from __future__ import annotations

ENTRY_POINT = "main"
STATIC_ENTRY = "main_static"   # a specialized dynamic module's second function: the static lowering at the built dims
REFLECTION_KEY = "hipdnn_iree.abi"
GRAPH_KEY = "hipdnn_iree.graph"
# History: 1 (2026-11-29) first layout: {"version", "graph", "target", "tensors": [...]}.
ABI_FORMAT_VERSION = 1
# What a reader of this release accepts (a module whose ABI says another version is refused).
SUPPORTED_ABI_VERSIONS = (1,)
