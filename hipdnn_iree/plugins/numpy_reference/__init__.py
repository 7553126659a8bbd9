"""The ``NUMPY_REFERENCE`` engine: the correctness oracle. Each op kind's numpy implementation,
written from the op's definition and independent of the lowering, registers into ``registry``
(one module per op family; every module of the package is imported); ``plugin`` evaluates a graph in float64 and rounds
once. Not serializable. May import: ``plugin_sdk``, ``lowering`` (the graph schema only).
"""
from hipdnn_iree.plugins.numpy_reference.plugin import ENGINE_ID, ENGINE_NAME, NumpyReferencePlugin, evaluate  # noqa: F401
from hipdnn_iree.plugins.numpy_reference.registry import check_references, import_op_modules  # noqa: E402

import_op_modules()
check_references()
