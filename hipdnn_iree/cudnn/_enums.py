"""cuDNN frontend's Python enums, and their translation to this project's (``hd.*``) ones.

Members this engine cannot run (fp8/fp4/int4 and the vectorized int8 types, cuDNN-only knob
types) exist so cuDNN code imports and names them; using one raises
``cudnnGraphNotSupportedError`` saying why, never an approximation.
"""
from __future__ import annotations

import enum

from hipdnn_iree.plugin_sdk.engine_config import BuildPlanPolicy, HeurMode
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType, NormFwdPhase, PointwiseMode, ReductionMode


class cudnnGraphNotSupportedError(HipdnnError):
    """A graph (or a feature of one) that no engine here supports; also an ``hd.HipdnnError``
    whose status is ``NOT_SUPPORTED``."""

    def __init__(self, message: str):
        super().__init__(Status.NOT_SUPPORTED, message)


class cudnnError(HipdnnError, RuntimeError):
    """Any other failure inside ``cudnn.pygraph``: an ``hd.HipdnnError`` (status and message kept)
    that is also the ``RuntimeError`` cuDNN FE raises, so ``except RuntimeError`` code works."""


class _Enum(enum.IntEnum):
    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class data_type(_Enum):
    """cuDNN's tensor element types (cuDNN FE's names)."""

    NOT_SET = 0
    FLOAT = 1
    DOUBLE = 2
    HALF = 3
    INT8 = 4
    INT32 = 5
    INT8x4 = 6
    UINT8 = 7
    UINT8x4 = 8
    INT8x32 = 9
    BFLOAT16 = 10
    INT64 = 11
    BOOLEAN = 12
    FP8_E4M3 = 13
    FP8_E5M2 = 14
    FAST_FLOAT_FOR_FP8 = 15
    FP8_E8M0 = 16
    FP4_E2M1 = 17
    INT4 = 18


_HD_TYPE = {
    data_type.NOT_SET: DataType.NOT_SET, data_type.FLOAT: DataType.FLOAT, data_type.DOUBLE: DataType.DOUBLE,
    data_type.HALF: DataType.HALF, data_type.INT8: DataType.INT8, data_type.INT32: DataType.INT32,
    data_type.UINT8: DataType.UINT8, data_type.BFLOAT16: DataType.BFLOAT16, data_type.INT64: DataType.INT64,
    data_type.BOOLEAN: DataType.BOOLEAN, data_type.FP8_E4M3: DataType.FP8_E4M3, data_type.FP8_E5M2: DataType.FP8_E5M2,
    data_type.FP8_E8M0: DataType.FP8_E8M0, data_type.FP4_E2M1: DataType.FP4_E2M1,
}
_CUDNN_TYPE = {v: k for k, v in _HD_TYPE.items()}
_TORCH_NAMES = {"float32": data_type.FLOAT, "float64": data_type.DOUBLE, "float16": data_type.HALF,
                "bfloat16": data_type.BFLOAT16, "int8": data_type.INT8, "int32": data_type.INT32,
                "uint8": data_type.UINT8, "int64": data_type.INT64, "bool": data_type.BOOLEAN,
                "float8_e4m3fn": data_type.FP8_E4M3, "float8_e5m2": data_type.FP8_E5M2,
                "float8_e8m0fnu": data_type.FP8_E8M0, "float4_e2m1fn": data_type.FP4_E2M1,
                "float4_e2m1fn_x2": data_type.FP4_E2M1}


def to_cudnn_type(value, what: str = "data_type") -> data_type:
    """A ``cudnn.data_type`` from one, from a torch/numpy dtype, or from an ``hd.DataType``."""
    if value is None:
        return data_type.NOT_SET
    if isinstance(value, data_type):
        return value
    if isinstance(value, DataType):
        if value not in _CUDNN_TYPE:
            raise cudnnGraphNotSupportedError(f"{what}: hd.{value} has no cuDNN counterpart here")
        return _CUDNN_TYPE[value]
    name = str(value).rsplit(".", 1)[-1]
    if name in _TORCH_NAMES and not isinstance(value, (int, str)):
        return _TORCH_NAMES[name]
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return data_type(value)
        except ValueError:
            pass
    raise HipdnnError(Status.BAD_PARAM, f"{what} must be a cudnn.data_type or a torch dtype, got {value!r}")


def to_hd_type(value, what: str = "data_type") -> DataType:
    """The ``hd.DataType`` a cuDNN data type (or torch dtype) runs as; NOT_SUPPORTED for the
    types this engine does not compute in (int4, vectorized int8, FAST_FLOAT_FOR_FP8)."""
    cd = to_cudnn_type(value, what)
    if cd not in _HD_TYPE:
        raise cudnnGraphNotSupportedError(
            f"{what}: cudnn.data_type.{cd.name} is not supported by this engine (it computes in FLOAT, HALF, "
            "BFLOAT16, DOUBLE, FP8 E4M3/E5M2/E8M0, FP4 E2M1 and integer/boolean types; int4 and vectorized "
            "int8 are not lowered)")
    return _HD_TYPE[cd]


class heur_mode(_Enum):
    A = 0
    B = 1
    FALLBACK = 2
    INSTANT = 3


class build_plan_policy(_Enum):
    HEURISTICS_CHOICE = 0
    ALL = 1


class norm_forward_phase(_Enum):
    NOT_SET = 0
    INFERENCE = 1
    TRAINING = 2


class reduction_mode(_Enum):
    NOT_SET = 0
    ADD = 1
    MUL = 2
    MIN = 3
    MAX = 4
    AMAX = 5
    AVG = 6
    NORM1 = 7
    NORM2 = 8
    MUL_NO_ZEROS = 9


class knob_type(_Enum):
    """Knob types. Values below 100 are this engine's knobs (``hd.Knob`` names, docs/api.md 3.9); the
    others are cuDNN kernel knobs with no meaning for IREE-compiled code: using one is NOT_SUPPORTED."""

    SDPA_FORM = 0
    CONV_LAYOUT = 1
    DATA_TILING = 2
    IM2COL = 3
    OPT_LEVEL = 4
    GPU_MATMUL_TILE = 5
    GPU_CONV_TILE = 6
    GPU_PAD_FUSION = 7
    SHAPE_SPECIALIZE = 8
    F32_CONV_MATH = 9
    DEQUANT_MATMUL = 10
    GPU_KERNELS = 11
    SPLIT_K = 100
    SWIZZLE = 101
    TILE_SIZE = 102
    EDGE = 103
    KBLOCK = 104
    LDGA = 105
    LDGB = 106
    SPLIT_K_BUF = 107
    WORKSPACE = 108
    STAGES = 109
    # this engine's meaning: the index of one of the engine's configurations (its HeurMode.A choice
    # first, then the alternatives autotuning times), so cuDNN's "build every kernel config" loops work
    KERNEL_CFG = 110


class behavior_note(_Enum):
    RUNTIME_COMPILATION = 0
    REQUIRES_FILTER_INT8x32_REORDER = 1
    REQUIRES_BIAS_INT8x32_REORDER = 2
    SUPPORTS_CUDA_GRAPH_NATIVE_API = 3
    CUBLASLT_DEPENDENCY = 4


class numerical_note(_Enum):
    TENSOR_CORE = 0
    DOWN_CONVERT_INPUTS = 1
    REDUCED_PRECISION_REDUCTION = 2
    FFT = 3
    NONDETERMINISTIC = 4
    WINOGRAD = 5
    WINOGRAD_TILE_4x4 = 6
    WINOGRAD_TILE_6x6 = 7
    WINOGRAD_TILE_13x13 = 8
    STRICT_NAN_PROP = 9


ENGINE_KNOBS = tuple(k.name for k in knob_type if k.value < 100)


class tensor_reordering(_Enum):
    NONE = 0
    INT8x32 = 1
    F16x16 = 2
    F8_128x4 = 3     # block-scale factors in 128 x 4 tiles (hipdnn_iree/plugin_sdk/scale_layout.py)


class diagonal_alignment(_Enum):
    TOP_LEFT = 0
    BOTTOM_RIGHT = 1


class attention_implementation(_Enum):
    """cuDNN's choice of SDPA kernel family (``sdpa(implementation=)``, cuDNN FE 1.15+). This engine
    has one SDPA implementation (hd.Graph's node, lowered by IREE); every value runs it."""

    AUTO = 0
    COMPOSITE = 1
    UNIFIED = 2


class moe_grouped_matmul_mode(_Enum):
    """Routing of ``pygraph.moe_grouped_matmul`` (cuDNN's names)."""

    NONE = 0
    GATHER = 1
    SCATTER = 2


class pointwise_mode(_Enum):
    """cuDNN's pointwise modes (those this engine lowers), for ``pygraph.pointwise``."""

    ADD = int(PointwiseMode.ADD)
    ADD_SQUARE = int(PointwiseMode.ADD_SQUARE)
    DIV = int(PointwiseMode.DIV)
    MAX = int(PointwiseMode.MAX_OP)
    MIN = int(PointwiseMode.MIN_OP)
    MOD = int(PointwiseMode.MOD)
    MUL = int(PointwiseMode.MUL)
    POW = int(PointwiseMode.POW)
    SUB = int(PointwiseMode.SUB)
    ABS = int(PointwiseMode.ABS)
    CEIL = int(PointwiseMode.CEIL)
    COS = int(PointwiseMode.COS)
    EXP = int(PointwiseMode.EXP)
    FLOOR = int(PointwiseMode.FLOOR)
    LOG = int(PointwiseMode.LOG)
    NEG = int(PointwiseMode.NEG)
    RSQRT = int(PointwiseMode.RSQRT)
    SIN = int(PointwiseMode.SIN)
    SQRT = int(PointwiseMode.SQRT)
    TAN = int(PointwiseMode.TAN)
    ERF = int(PointwiseMode.ERF)
    IDENTITY = int(PointwiseMode.IDENTITY)
    RECIPROCAL = int(PointwiseMode.RECIPROCAL)
    RELU_FWD = int(PointwiseMode.RELU_FWD)
    TANH_FWD = int(PointwiseMode.TANH_FWD)
    SIGMOID_FWD = int(PointwiseMode.SIGMOID_FWD)
    ELU_FWD = int(PointwiseMode.ELU_FWD)
    GELU_FWD = int(PointwiseMode.GELU_FWD)
    GELU_APPROX_TANH_FWD = int(PointwiseMode.GELU_APPROX_TANH_FWD)
    SOFTPLUS_FWD = int(PointwiseMode.SOFTPLUS_FWD)
    SWISH_FWD = int(PointwiseMode.SWISH_FWD)
    CMP_EQ = int(PointwiseMode.CMP_EQ)
    CMP_NEQ = int(PointwiseMode.CMP_NEQ)
    CMP_GT = int(PointwiseMode.CMP_GT)
    CMP_GE = int(PointwiseMode.CMP_GE)
    CMP_LT = int(PointwiseMode.CMP_LT)
    CMP_LE = int(PointwiseMode.CMP_LE)
    LOGICAL_AND = int(PointwiseMode.LOGICAL_AND)
    LOGICAL_OR = int(PointwiseMode.LOGICAL_OR)
    LOGICAL_NOT = int(PointwiseMode.LOGICAL_NOT)
    GEN_INDEX = int(PointwiseMode.GEN_INDEX)
    BINARY_SELECT = int(PointwiseMode.BINARY_SELECT)


def to_hd(cls_hd, value, what: str):
    """A cuDNN enum member (or its hd twin) as the hd enum member of the same name."""
    if isinstance(value, cls_hd):
        return value
    if isinstance(value, _Enum):
        name = value.name
        if cls_hd is ReductionMode and name in ("MIN", "MAX"):
            return ReductionMode[name]
        try:
            return cls_hd[name]
        except KeyError:
            raise cudnnGraphNotSupportedError(f"{what}: {value} is not supported by this engine") from None
    raise HipdnnError(Status.BAD_PARAM, f"{what}: expected a cudnn enum member, got {value!r}")


HD_HEUR = HeurMode
HD_POLICY = BuildPlanPolicy
HD_PHASE = NormFwdPhase
HD_REDUCTION = ReductionMode
