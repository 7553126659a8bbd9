"""The frontend layer: what users build graphs with.

Owns ``hd.Graph`` (tensors, ops, the validate/build lifecycle, execute and plan (de)serialization
calls), ``hd.TensorAttributes``, the per-op frontend methods and shape inference (``ops/``, a
registry that each op module registers into) and the graph's JSON form. It hands the backend a
graph FlatBuffer and never talks to a plugin directly, with one exception: ``mlir_view`` shows the
MLIR the IREE engine compiles, through that engine's own lowering entry points
(``plugins/iree_linalg`` build and knobs, imported when asked for). May import: ``backend``,
``plugin_sdk``, ``flatbuffers_sdk`` and ``lowering`` (the graph schema and shape helpers), and
``mlir_view`` the IREE engine; nothing above it.
"""
