"""The engine plugins: one subpackage per engine, each an object behind the plugin interface
(``API.md``: engine ids, applicability, execution contexts, optional serialization hooks), found
through the ``hipdnn_iree.engine_plugins`` entry point group. ``iree_linalg`` compiles graphs with
IREE and serializes plans; ``numpy_reference`` is the numpy correctness oracle. May import:
``plugin_sdk``, ``flatbuffers_sdk`` and ``lowering``; never the backend or the frontend.
"""
