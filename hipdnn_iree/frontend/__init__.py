"""The frontend layer: what users build graphs with.

Owns ``hd.Graph`` (tensors, ops, the validate/build lifecycle, execute and plan (de)serialization
calls), ``hd.TensorAttributes``, the per-op frontend methods and shape inference (``ops/``, a
registry that each op module registers into) and the graph's JSON form. It hands the backend a
graph FlatBuffer and never imports an engine package: ``mlir_view`` asks the installed plugin that
has the optional ``source_text`` hook (the IREE engine) for the MLIR it compiles. May import:
``backend``, ``plugin_sdk``, ``flatbuffers_sdk`` and ``lowering`` (the graph schema and shape
helpers); nothing above it.
"""
