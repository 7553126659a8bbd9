"""cuDNN frontend's Python API (``cudnn.pygraph``) on this engine.

``import hipdnn_iree.cudnn as cudnn``: code written for cuDNN FE's Python API runs unchanged for
the ops this project lowers, on the CPU, NVIDIA GPUs (IREE's CUDA device) and AMD GPUs (HIP);
plans serialize to this project's compiled-plan format. A thin layer over ``hd.Graph``
(``pygraph.hd_graph``); ``docs/cudnn_migration.md`` lists what maps one to one, what differs and
what is missing.

Example:
    >>> import hipdnn_iree.cudnn as cudnn
    >>> cudnn.data_type.HALF
    <data_type.HALF: 3>
"""
from hipdnn_iree.cudnn._enums import (build_plan_policy, cudnnGraphNotSupportedError, data_type, diagonal_alignment,
                                      heur_mode, knob_type, norm_forward_phase, pointwise_mode, reduction_mode,
                                      tensor_reordering)
from hipdnn_iree.cudnn._handle import (Handle, backend_version, backend_version_string, create_handle, create_kernel_cache,
                                       destroy_handle, get_last_error_string, get_stream, set_stream)
from hipdnn_iree.cudnn._graph import graph, jit, pygraph, tensor

__all__ = [
    "Handle", "backend_version", "backend_version_string", "build_plan_policy", "create_handle", "create_kernel_cache",
    "cudnnGraphNotSupportedError", "data_type", "destroy_handle", "diagonal_alignment", "get_last_error_string",
    "get_stream", "graph", "heur_mode", "jit", "knob_type", "norm_forward_phase", "pointwise_mode", "pygraph",
    "reduction_mode", "set_stream", "tensor", "tensor_reordering",
]
