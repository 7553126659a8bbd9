"""hipdnn-iree: hipDNN's graph API on IREE, with compiled plans that restore without recompiling.

Example:
    >>> import hipdnn_iree as hd
    >>> hd.Status.BAD_PARAM
    <Status.BAD_PARAM: 2>
"""
from hipdnn_iree._version import __version__
from hipdnn_iree._status import HipdnnError, Status
from hipdnn_iree._types import DataType, NormFwdPhase, PointwiseMode, ReductionMode
from hipdnn_iree._engine_ids import engine_id_from_name
from hipdnn_iree._handle import Handle, create_handle
from hipdnn_iree._tensor import TensorAttributes
from hipdnn_iree._graph import Graph
from hipdnn_iree._planfile import load_plan, save_plan
from hipdnn_iree._buffers import empty_aligned
from hipdnn_iree import backend
from hipdnn_iree.backend import PlanTensor

__all__ = [
    "DataType", "Graph", "Handle", "HipdnnError", "NormFwdPhase", "PlanTensor", "PointwiseMode", "ReductionMode", "Status",
    "TensorAttributes", "__version__", "backend", "create_handle", "empty_aligned", "engine_id_from_name", "load_plan", "save_plan",
]
