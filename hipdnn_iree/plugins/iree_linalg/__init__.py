"""The ``IREE_LINALG`` engine: graph bytes -> ``lowering`` -> linalg MLIR -> IREE compile
(``compile``, flags per target in ``targets``) -> ``.vmfb``, kept in a persistent compile cache
(``cache``), loaded and run on the handle's device through the IREE runtime (``runtime``), and
serialized as the FUSPLAN payload (``fusplan``). Restoring a plan loads the module without the
compiler. May import: ``plugin_sdk``, ``flatbuffers_sdk``, ``lowering``.
"""
from hipdnn_iree.plugins.iree_linalg.plugin import (ENGINE_ID, ENGINE_NAME, IreeExecutionContext,  # noqa: F401
                                                    IreeLinalgPlugin)
