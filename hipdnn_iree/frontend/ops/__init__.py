"""Per-op frontend code: each module adds its ``hd.Graph`` methods (a mixin); every op kind's
validation and shape inference is its OpDef's (``graph_ir/ops/<kind>.py``, ``graph_ir.opdef.OPS``),
which ``registry.infer`` runs at ``Graph.validate()``. To add an op: its OpDef in
``graph_ir/ops/<kind>.py`` (attributes class in ``graph_ir/desc.py``), its method here, its emitter
in ``lowering/ops/`` and its reference in ``plugins/numpy_reference/``; each layer checks at import
that no supported OpDef lacks its piece (``registry.check_frontend`` for ``hd.Graph``).
May import: ``plugin_sdk``, ``graph_ir``.
"""
from hipdnn_iree.frontend.ops import conv, norm, sdpa  # noqa: F401  (hd.Graph's op mixins)
