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
from hipdnn_iree.cudnn._enums import (attention_implementation, behavior_note, build_plan_policy, cudnnError, cudnnGraphNotSupportedError,
                                      data_type, diagonal_alignment, heur_mode, knob_type, moe_grouped_matmul_mode,
                                      norm_forward_phase, numerical_note, pointwise_mode, reduction_mode,
                                      tensor_reordering)
from hipdnn_iree.cudnn._handle import (FRONTEND_API, DeviceProperties, Handle, backend_version, backend_version_string,
                                       create_device_properties, create_handle, create_kernel_cache, destroy_handle,
                                       engine_version_string, get_last_error_string, get_stream, set_stream)
from hipdnn_iree.cudnn._graph import graph, graph_cache, jit, pygraph
from hipdnn_iree.cudnn._tensor import knob, tensor

# NOTE: the cuDNN frontend release whose Python API this facade follows (cuDNN FE's own
# cudnn.__version__ names its release); engine_version_string() names this project.
__version__ = FRONTEND_API

__all__ = [
    "DeviceProperties", "Handle", "attention_implementation", "backend_version", "backend_version_string", "behavior_note", "build_plan_policy",
    "create_device_properties", "create_handle", "create_kernel_cache", "cudnnError", "cudnnGraphNotSupportedError",
    "data_type", "destroy_handle", "diagonal_alignment", "engine_version_string", "get_last_error_string",
    "get_stream", "graph", "graph_cache", "heur_mode", "jit", "knob", "knob_type", "moe_grouped_matmul_mode",
    "norm_forward_phase", "numerical_note", "pointwise_mode", "pygraph", "reduction_mode", "set_stream", "tensor",
    "tensor_reordering",
]
