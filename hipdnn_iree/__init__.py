"""hipdnn-iree: hipDNN's graph API on IREE, with compiled plans that restore without recompiling.

This module is the public surface: it only re-exports. The layers below it, each a subpackage
whose imports point only downward: ``frontend`` (graphs, ops) -> ``backend`` (handles, plans,
envelope) -> ``plugins`` (the IREE and numpy engines) -> ``plugin_sdk`` (errors, enums, buffers)
-> ``flatbuffers_sdk`` (generated schema code) -> ``lowering`` (graph -> linalg MLIR, a package of
its own). ``cli`` sits beside this module, on top. ``docs/architecture.md`` draws the map.

Example:
    >>> import hipdnn_iree as hd
    >>> hd.Status.BAD_PARAM
    <Status.BAD_PARAM: 2>
"""
from hipdnn_iree.plugin_sdk.version import __version__
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import (DataType, MoeGroupedMatmulMode, NormFwdPhase, PointwiseMode, ReductionMode,
                                          ResampleMode)
from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
from hipdnn_iree.plugin_sdk.engine_config import BuildPlanPolicy, HeurMode, Knob
from hipdnn_iree.backend.handle import Handle, create_handle
from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.frontend.graph import Graph
from hipdnn_iree.frontend.kernel_cache import KernelCache
from hipdnn_iree.frontend.custom_ops import register_custom_op, registered_custom_ops, unregister_custom_op
from hipdnn_iree.backend.planfile import load_plan, save_plan
from hipdnn_iree.plugin_sdk.buffers import empty_aligned, pack_fp4, unpack_fp4
from hipdnn_iree.plugin_sdk.scale_layout import from_f8_128x4, to_f8_128x4
from hipdnn_iree import backend
from hipdnn_iree.backend.plan import PlanTensor
from hipdnn_iree.plugin_sdk.store import PlanStore
from hipdnn_iree.frontend.build_many import build_many

__all__ = [
    "BuildPlanPolicy", "DataType", "Graph", "HeurMode", "Knob", "Handle", "PlanStore", "HipdnnError", "KernelCache", "MoeGroupedMatmulMode", "NormFwdPhase", "PlanTensor", "PointwiseMode", "ReductionMode", "ResampleMode", "Status",
    "TensorAttributes", "__version__", "backend", "build_many", "create_handle", "empty_aligned", "engine_id_from_name", "from_f8_128x4", "load_plan", "pack_fp4", "register_custom_op",
    "registered_custom_ops", "save_plan", "to_f8_128x4", "unpack_fp4", "unregister_custom_op",
]
