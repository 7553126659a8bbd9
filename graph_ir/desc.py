"""Typed, immutable view of the operation graph and its FlatBuffer codec.

The graph crosses the backend/plugin boundary as hipDNN's graph FlatBuffer
(``schemas/graph.fbs``: namespace ``hipdnn_flatbuffers_sdk.data_objects``,
root ``Graph``). The frontend builds these dataclasses and encodes them; the
plugins (lowering, reference engine) decode the same bytes back. One frozen
dataclass per node type; :class:`OpKind` is the schema's ``NodeAttributes``
union tag, so every hipDNN node type decodes (those this project does not
lower are refused later, by name: :func:`unsupported_reason`).

Decoding never trusts the bytes: every table, vector and union value is
bounds-checked (:mod:`hipdnn_iree.flatbuffers_sdk.verify`'s walker) before a
generated accessor reads it; anything wrong is a :class:`GraphError`.
"""
from __future__ import annotations

import dataclasses
import enum
import math
import struct
from dataclasses import dataclass, field
from typing import ClassVar

import flatbuffers

from graph_ir import custom_ops
from graph_ir._fbs import graph_generated as G
from graph_ir._fbs import graph_tables as T

# Graphs this project writes carry these bytes in the FlatBuffer file-identifier slot. hipDNN's
# schema declares no file_identifier, so hipDNN's readers ignore them; this project uses them to
# tell its graphs from the pre-0.3 format (plans' module reflection, backend/selfcheck.py).
FILE_IDENTIFIER = b"HDI1"
MAX_TENSORS = 1 << 16
MAX_NODES = 1 << 14
MAX_RANK = 16
MAX_STRING = 1 << 12


class GraphError(ValueError):
    """The one error of the graph IR, the shape rules and the MLIR emitters.

    ``kind``: ``"invalid"`` (the graph is wrong), ``"unsupported"`` (a valid graph this engine cannot
    handle) or ``"internal"`` (a defect of this project). ``plugin_sdk/errors.py`` maps it to a hipDNN
    status, by origin (a caller's graph or a stored plan); nothing else builds a status from it.
    """

    KINDS = ("invalid", "unsupported", "internal")

    def __init__(self, message: str, kind: str = "invalid"):
        if kind not in self.KINDS:
            raise ValueError(f"GraphError kind must be one of {self.KINDS}, got {kind!r}")
        super().__init__(message)
        self.kind = kind


_NA = G.NodeAttributes


class OpKind(enum.IntEnum):
    """hipDNN's node types; the values are the ``NodeAttributes`` union tags."""

    BATCHNORM_INFERENCE = _NA.BatchnormInferenceAttributes
    POINTWISE = _NA.PointwiseAttributes
    BATCHNORM_BACKWARD = _NA.BatchnormBackwardAttributes
    BATCHNORM = _NA.BatchnormAttributes
    CONV_FPROP = _NA.ConvolutionFwdAttributes
    CONV_DGRAD = _NA.ConvolutionBwdAttributes
    CONV_WGRAD = _NA.ConvolutionWrwAttributes
    BATCHNORM_INFERENCE_VARIANCE_EXT = _NA.BatchnormInferenceAttributesVarianceExt
    MATMUL = _NA.MatmulAttributes
    RMSNORM = _NA.RMSNormAttributes
    LAYERNORM = _NA.LayernormAttributes
    SDPA = _NA.SdpaAttributes
    BLOCK_SCALE_DEQUANTIZE = _NA.BlockScaleDequantizeAttributes
    BLOCK_SCALE_QUANTIZE = _NA.BlockScaleQuantizeAttributes
    SDPA_BACKWARD = _NA.SdpaBackwardAttributes
    CUSTOM_OP = _NA.CustomOpAttributes
    RMSNORM_BACKWARD = _NA.RMSNormBackwardAttributes
    REDUCTION = _NA.ReductionAttributes
    RESAMPLE_FWD = _NA.ResampleFwdAttributes
    LAYERNORM_BACKWARD = _NA.LayernormBackwardAttributes
    RESAMPLE_BWD = _NA.ResampleBwdAttributes
    MOE_GROUPED_MATMUL = _NA.MoeGroupedMatmulAttributes
    MOE_GROUPED_MATMUL_BWD = _NA.MoeGroupedMatmulBwdAttributes


# NodeAttributes tag -> schema table name (graph_ir/_fbs/graph_tables.py, generated from graph.fbs)
TABLE_NAMES = {i + 1: name for i, name in enumerate(T.UNIONS["NodeAttributes"])}

ABSENT = -1  # uid of an optional input that is not connected


@dataclass(frozen=True)
class TensorDesc:
    """A graph tensor. ``is_scalar``: a constant (hipDNN's ``value``) baked into the plan."""

    uid: int
    name: str
    data_type: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    is_virtual: bool = False
    is_scalar: bool = False
    scalar_value: float = 0.0
    is_runtime_pass_by_value: bool = False
    ragged_offset_tensor_uid: int | None = None
    alignment: int = 16
    ragged_offset_multiplier: int = 1


def f32(v: float) -> float:
    """``v`` rounded to float32 (hipDNN stores these attributes as ``float``); NaN stays NaN."""
    v = float(v)
    if math.isnan(v):
        return math.nan
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


# ---------------------------------------------------------------------------
# Op attributes: one class per op, the op's one definition. The schema table's fields, their
# slot order and their types come from graph.fbs (graph_ir/_fbs/graph_tables.py, generated);
# the class says only what the schema cannot: ``RENAME`` (schema field -> attribute name, where
# not the rule ``<x>_tensor_uid`` -> ``<x>_uid``), ``_IN``/``_OUT`` (tensor fields in operand
# order), ``JSON_ENUMS`` (attribute -> plugin_sdk.types enum the JSON writes by name), its
# dataclass fields (names, defaults) and ``unsupported()``. ``SPEC`` (schema field, attribute
# name, type) is derived at class creation (:func:`schema_spec`). Types: uid (required tensor),
# uid? (optional, ABSENT), i64/i32 (number), i64?/i32? (None when absent), f32? (NaN when
# absent), bool, bool? (None when absent), u8 (enum), v64/v32 (int lists), vuid (uid list),
# str, bytes.
# ---------------------------------------------------------------------------


def _attr_name(schema_field: str) -> str:
    return schema_field[:-len("_tensor_uid")] + "_uid" if schema_field.endswith("_tensor_uid") else schema_field


def _spec_type(typ: str, default, attr: str) -> str:
    opt = default == "null"
    if typ == "long":
        return ("uid?" if opt else "uid") if attr.endswith("_uid") else ("i64?" if opt else "i64")
    if typ == "int":
        return "i32?" if opt else "i32"
    if typ == "float":
        return "f32?"
    if typ == "bool":
        return "bool?" if opt else "bool"
    if typ in T.ENUMS:
        return "u8"
    if typ == "[long]":
        return "vuid" if attr.endswith("_uids") else "v64"
    try:
        return {"[int]": "v32", "string": "str", "[ubyte]": "bytes"}[typ]
    except KeyError:
        raise TypeError(f"graph.fbs field type {typ!r} has no attribute type here") from None


def schema_spec(kind: "OpKind", rename: dict) -> tuple:
    """``(schema field, attribute name, type)`` of ``kind``'s schema table, in slot order."""
    out = []
    for fname, typ, default in T.TABLES[TABLE_NAMES[int(kind)]]:
        name = rename.get(fname, _attr_name(fname))
        out.append((fname, name, _spec_type(typ, default, name)))
    return tuple(out)


@dataclass(frozen=True)
class _Attrs:
    KIND: ClassVar[OpKind]
    RENAME: ClassVar[dict] = {}
    JSON_ENUMS: ClassVar[dict] = {}
    SPEC: ClassVar[tuple]
    _IN: ClassVar[tuple[str, ...]]
    _OUT: ClassVar[tuple[str, ...]]
    # fields holding a list of tensors (CUSTOM_OP's input_uids/output_uids): operands after _IN/_OUT's
    _IN_LISTS: ClassVar[tuple[str, ...]] = ()
    _OUT_LISTS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "KIND" in cls.__dict__:
            cls.SPEC = schema_spec(cls.KIND, cls.RENAME)

    def __post_init__(self):
        for _, name, typ in self.SPEC:
            if typ == "f32?":
                object.__setattr__(self, name, f32(getattr(self, name)))

    def inputs(self) -> tuple[int, ...]:
        return (tuple(u for u in (getattr(self, f) for f in self._IN) if u != ABSENT)
                + tuple(u for f in self._IN_LISTS for u in getattr(self, f)))

    def outputs(self) -> tuple[int, ...]:
        return (tuple(u for u in (getattr(self, f) for f in self._OUT) if u != ABSENT)
                + tuple(u for f in self._OUT_LISTS for u in getattr(self, f)))

    def unsupported(self) -> str | None:
        """Why this project cannot run the node as written (a field it does not honour), or None."""
        return None

    @classmethod
    def from_schema(cls, values: dict) -> dict:
        """The decoded fields (attribute name -> value) as this class takes them; an op whose schema
        says one thing two ways maps them to one here."""
        return values

    def _set(self, *names) -> list[str]:
        """Those of ``names`` whose value is not the schema's default."""
        out = []
        for n in names:
            v = getattr(self, n)
            f = next(f for f in dataclasses.fields(self) if f.name == n)
            d = f.default
            if isinstance(v, float) and isinstance(d, float) and math.isnan(v) and math.isnan(d):
                continue
            if v != d:
                out.append(n)
        return out


@dataclass(frozen=True)
class PointwiseAttrs(_Attrs):
    """ReLU: ``y = min(x, relu_upper_clip)`` for ``x >= relu_lower_clip``, else
    ``relu_lower_clip + relu_lower_clip_slope * (x - relu_lower_clip)`` (defaults 0, +inf, 0).
    GEN_INDEX: the index along ``axis`` of each element of in_0's shape."""

    KIND: ClassVar[OpKind] = OpKind.POINTWISE
    RENAME: ClassVar = {'axis_tensor_uid': 'axis'}
    JSON_ENUMS: ClassVar = {"operation": "PointwiseMode"}
    _IN: ClassVar = ("in_0_uid", "in_1_uid", "in_2_uid")
    _OUT: ClassVar = ("out_0_uid",)
    operation: int
    in_0_uid: int
    out_0_uid: int
    in_1_uid: int = ABSENT
    in_2_uid: int = ABSENT
    relu_lower_clip: float = math.nan
    relu_upper_clip: float = math.nan
    relu_lower_clip_slope: float = math.nan
    axis: int | None = None
    swish_beta: float = math.nan
    elu_alpha: float = math.nan
    softplus_beta: float = math.nan


@dataclass(frozen=True)
class MatmulAttrs(_Attrs):
    KIND: ClassVar[OpKind] = OpKind.MATMUL
    _IN: ClassVar = ("a_uid", "b_uid")
    _OUT: ClassVar = ("c_uid",)
    a_uid: int
    b_uid: int
    c_uid: int


CONV_MODE_UNSET, CONV_MODE_CONVOLUTION, CONV_MODE_CROSS_CORRELATION = 0, 1, 2


@dataclass(frozen=True)
class _ConvAttrs(_Attrs):
    x_uid: int
    w_uid: int
    y_uid: int
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    conv_mode: int = CONV_MODE_CROSS_CORRELATION

    def unsupported(self):
        if self.conv_mode == CONV_MODE_CONVOLUTION:
            return ("conv_mode CONVOLUTION (a flipped filter) is not supported; this engine computes "
                    "CROSS_CORRELATION, what deep-learning frameworks call convolution")
        return None


@dataclass(frozen=True)
class ConvFpropAttrs(_ConvAttrs):
    KIND: ClassVar[OpKind] = OpKind.CONV_FPROP
    _IN: ClassVar = ("x_uid", "w_uid")
    _OUT: ClassVar = ("y_uid",)


@dataclass(frozen=True)
class ConvDgradAttrs(_ConvAttrs):
    """``y_uid`` is dy (input), ``x_uid`` is dx (output)."""

    KIND: ClassVar[OpKind] = OpKind.CONV_DGRAD
    RENAME: ClassVar = {'dy_tensor_uid': 'y_uid', 'dx_tensor_uid': 'x_uid'}
    _IN: ClassVar = ("y_uid", "w_uid")
    _OUT: ClassVar = ("x_uid",)


@dataclass(frozen=True)
class ConvWgradAttrs(_ConvAttrs):
    """``y_uid`` is dy and ``x_uid`` is x (inputs), ``w_uid`` is dw (output)."""

    KIND: ClassVar[OpKind] = OpKind.CONV_WGRAD
    RENAME: ClassVar = {'dy_tensor_uid': 'y_uid', 'dw_tensor_uid': 'w_uid'}
    _IN: ClassVar = ("y_uid", "x_uid")
    _OUT: ClassVar = ("w_uid",)


@dataclass(frozen=True)
class ReductionAttrs(_Attrs):
    """``is_deterministic``: honoured trivially (every reduction here is deterministic)."""

    KIND: ClassVar[OpKind] = OpKind.REDUCTION
    RENAME: ClassVar = {'in_tensor_uid': 'x_uid', 'out_tensor_uid': 'y_uid'}
    JSON_ENUMS: ClassVar = {"mode": "ReductionMode"}
    _IN: ClassVar = ("x_uid",)
    _OUT: ClassVar = ("y_uid",)
    mode: int
    x_uid: int
    y_uid: int
    is_deterministic: bool = False


@dataclass(frozen=True)
class BatchnormInferenceAttrs(_Attrs):
    KIND: ClassVar[OpKind] = OpKind.BATCHNORM_INFERENCE
    _IN: ClassVar = ("x_uid", "mean_uid", "inv_variance_uid", "scale_uid", "bias_uid")
    _OUT: ClassVar = ("y_uid",)
    x_uid: int
    mean_uid: int
    inv_variance_uid: int
    scale_uid: int
    bias_uid: int
    y_uid: int


@dataclass(frozen=True)
class LayernormAttrs(_Attrs):
    """Normalizes over the trailing axes where the scale has x's extents (hipDNN's rule,
    ``lowering.ops.norm.norm_axes``); ``normalized_dim_count``, when set (not 0), must name
    the same axes, or, for a scale of all 1s, names them."""

    KIND: ClassVar[OpKind] = OpKind.LAYERNORM
    RENAME: ClassVar = {'forward_phase': 'phase'}
    JSON_ENUMS: ClassVar = {"phase": "NormFwdPhase"}
    _IN: ClassVar = ("x_uid", "scale_uid", "bias_uid", "epsilon_uid")
    _OUT: ClassVar = ("y_uid", "mean_uid", "inv_variance_uid")
    phase: int
    x_uid: int
    scale_uid: int
    bias_uid: int
    epsilon_uid: int
    y_uid: int
    mean_uid: int = ABSENT
    inv_variance_uid: int = ABSENT
    normalized_dim_count: int = 0


@dataclass(frozen=True)
class RmsnormAttrs(_Attrs):
    """``y = x / rms(x) * scale (+ bias)``; TRAINING also outputs ``inv_rms`` (x's dims with 1 on the
    normalized axes).
    ``forward_phase`` NOT_SET (graphs written before this project wrote it) reads as INFERENCE."""

    KIND: ClassVar[OpKind] = OpKind.RMSNORM
    RENAME: ClassVar = {'forward_phase': 'phase'}
    JSON_ENUMS: ClassVar = {"phase": "NormFwdPhase"}
    _IN: ClassVar = ("x_uid", "scale_uid", "epsilon_uid", "bias_uid")
    _OUT: ClassVar = ("y_uid", "inv_rms_uid")
    x_uid: int
    scale_uid: int
    epsilon_uid: int
    y_uid: int
    bias_uid: int = ABSENT
    inv_rms_uid: int = ABSENT
    phase: int = 0


_SDPA_UNHONOURED = ("seq_len_q_uid", "seq_len_kv_uid", "seed_uid", "offset_uid", "dropout_mask_uid",
                    "dropout_scale_uid", "page_table_k_uid", "page_table_v_uid", "block_mask_uid", "sink_token_uid",
                    "descale_q_uid", "descale_k_uid", "descale_v_uid", "descale_s_uid", "scale_s_uid",
                    "scale_o_uid", "max_uid", "sum_exp_uid", "rng_dump_uid", "amax_s_uid",
                    "amax_o_uid", "alibi_mask", "padding_mask", "causal_mask_bottom_right", "dropout_probability",
                    "left_bound", "max_seq_len_kv", "mma_core_mode")


@dataclass(frozen=True)
class SdpaAttrs(_Attrs):
    """``is_causal`` is hipDNN's ``causal_mask`` (top-left aligned); a graph that says causal
    the newer way (``right_bound = 0``, TOP_LEFT alignment, no left bound) decodes to the same.
    The scale is ``attn_scale_value`` or the one-element tensor ``scale_tensor_uid`` (a
    constant, or a tensor bound at execute), not both; neither means ``1/sqrt(head_dim)``.
    ``stats_uid`` (with ``generate_stats`` true or unset) is the log-sum-exp of each query's
    scaled, masked scores, FLOAT ``[B, Hq, Sq, 1]``: the saved statistic of sdpa_backward."""

    KIND: ClassVar[OpKind] = OpKind.SDPA
    RENAME: ClassVar = {'attn_mask_tensor_uid': 'mask_uid', 'causal_mask': 'is_causal', 'attn_scale_value': 'attn_scale'}
    _IN: ClassVar = ("q_uid", "k_uid", "v_uid", "mask_uid", "scale_uid", "seq_len_q_uid", "seq_len_kv_uid",
                     "seed_uid", "offset_uid", "dropout_mask_uid", "dropout_scale_uid", "page_table_k_uid",
                     "page_table_v_uid", "block_mask_uid", "sink_token_uid", "descale_q_uid", "descale_k_uid",
                     "descale_v_uid", "descale_s_uid", "scale_s_uid", "scale_o_uid")
    _OUT: ClassVar = ("o_uid", "stats_uid", "max_uid", "sum_exp_uid", "rng_dump_uid", "amax_s_uid", "amax_o_uid")
    q_uid: int
    k_uid: int
    v_uid: int
    o_uid: int
    mask_uid: int = ABSENT
    attn_scale: float = math.nan
    is_causal: bool = False
    scale_uid: int = ABSENT
    seq_len_q_uid: int = ABSENT
    seq_len_kv_uid: int = ABSENT
    seed_uid: int = ABSENT
    offset_uid: int = ABSENT
    dropout_mask_uid: int = ABSENT
    dropout_scale_uid: int = ABSENT
    page_table_k_uid: int = ABSENT
    page_table_v_uid: int = ABSENT
    block_mask_uid: int = ABSENT
    sink_token_uid: int = ABSENT
    descale_q_uid: int = ABSENT
    descale_k_uid: int = ABSENT
    descale_v_uid: int = ABSENT
    descale_s_uid: int = ABSENT
    scale_s_uid: int = ABSENT
    scale_o_uid: int = ABSENT
    stats_uid: int = ABSENT
    max_uid: int = ABSENT
    sum_exp_uid: int = ABSENT
    rng_dump_uid: int = ABSENT
    amax_s_uid: int = ABSENT
    amax_o_uid: int = ABSENT
    generate_stats: bool | None = None
    alibi_mask: bool = False
    padding_mask: bool = False
    causal_mask_bottom_right: bool = False
    dropout_probability: float = math.nan
    left_bound: int | None = None
    right_bound: int | None = None
    max_seq_len_kv: int | None = None
    diagonal_alignment: int = 0
    mma_core_mode: int = 0
    implementation: int = 0

    @classmethod
    def from_schema(cls, values: dict) -> dict:
        if not values["is_causal"] and values["right_bound"] == 0 and values["left_bound"] is None \
                and values["diagonal_alignment"] == 0:
            values["is_causal"], values["right_bound"] = True, None   # causal said the newer way: the same graph
        return values

    def unsupported(self):
        bad = self._set(*_SDPA_UNHONOURED)
        if self.right_bound is not None and (self.right_bound != 0 or self.diagonal_alignment != 0):
            bad.append("right_bound" if self.right_bound != 0 else "diagonal_alignment")
        if self.is_causal and self.diagonal_alignment != 0:
            bad.append("diagonal_alignment")
        if not bad:
            return None
        return (f"sdpa fields {sorted(set(bad))} are not supported (this engine does q/k/v/o, an optional "
                "attn_mask, attn_scale_value or scale_tensor_uid, top-left causal masking and generate_stats "
                "with stats_uid)")


# ---------------------------------------------------------------------------
# Training ops (batchnorm training and backward, norm backward passes, sdpa backward, pooling).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchnormAttrs(_Attrs):
    """Batchnorm training: per-channel statistics over every axis but axis 1. ``momentum_uid`` and
    the running inputs are optional together (the running outputs need both)."""

    KIND: ClassVar[OpKind] = OpKind.BATCHNORM
    RENAME: ClassVar = {"peer_stats_tensor_uid": "peer_stats_uids"}
    _IN: ClassVar = ("x_uid", "scale_uid", "bias_uid", "epsilon_uid", "prev_running_mean_uid",
                     "prev_running_variance_uid", "momentum_uid")
    _OUT: ClassVar = ("y_uid", "mean_uid", "inv_variance_uid", "next_running_mean_uid", "next_running_variance_uid")
    x_uid: int
    scale_uid: int
    bias_uid: int
    epsilon_uid: int
    y_uid: int
    peer_stats_uids: tuple[int, ...] = ()
    prev_running_mean_uid: int = ABSENT
    prev_running_variance_uid: int = ABSENT
    momentum_uid: int = ABSENT
    mean_uid: int = ABSENT
    inv_variance_uid: int = ABSENT
    next_running_mean_uid: int = ABSENT
    next_running_variance_uid: int = ABSENT

    def unsupported(self):
        if self.peer_stats_uids:
            return "batchnorm field peer_stats (statistics shared across devices) is not supported"
        return None

    def __post_init__(self):
        super().__post_init__()
        # NOTE: any iterable of uids (the frontend's reads the peer tensors' uids once they have them)
        object.__setattr__(self, "peer_stats_uids", tuple(int(u) for u in self.peer_stats_uids))


@dataclass(frozen=True)
class BatchnormBackwardAttrs(_Attrs):
    """``mean_uid``/``inv_variance_uid``: the saved statistics (both or neither)."""

    KIND: ClassVar[OpKind] = OpKind.BATCHNORM_BACKWARD
    RENAME: ClassVar = {"peer_stats_tensor_uid": "peer_stats_uids"}
    _IN: ClassVar = ("dy_uid", "x_uid", "mean_uid", "inv_variance_uid", "scale_uid")
    _OUT: ClassVar = ("dx_uid", "dscale_uid", "dbias_uid")
    dy_uid: int
    x_uid: int
    scale_uid: int
    dx_uid: int
    dscale_uid: int
    dbias_uid: int
    mean_uid: int = ABSENT
    inv_variance_uid: int = ABSENT
    peer_stats_uids: tuple[int, ...] = ()

    def unsupported(self):
        if self.peer_stats_uids:
            return "batchnorm_backward field peer_stats (statistics shared across devices) is not supported"
        return None

    def __post_init__(self):
        super().__post_init__()
        # NOTE: any iterable of uids (the frontend's reads the peer tensors' uids once they have them)
        object.__setattr__(self, "peer_stats_uids", tuple(int(u) for u in self.peer_stats_uids))


@dataclass(frozen=True)
class BatchnormInferenceVarianceExtAttrs(_Attrs):
    """batchnorm_inference given the variance: ``y = (x - mean) / sqrt(variance + epsilon) * scale + bias``."""

    KIND: ClassVar[OpKind] = OpKind.BATCHNORM_INFERENCE_VARIANCE_EXT
    _IN: ClassVar = ("x_uid", "mean_uid", "variance_uid", "scale_uid", "bias_uid", "epsilon_uid")
    _OUT: ClassVar = ("y_uid",)
    x_uid: int
    mean_uid: int
    variance_uid: int
    scale_uid: int
    bias_uid: int
    y_uid: int
    epsilon_uid: int


@dataclass(frozen=True)
class LayernormBackwardAttrs(_Attrs):
    """Normalized axes as layernorm's (the scale's trailing extents, or ``normalized_dim_count``)."""

    KIND: ClassVar[OpKind] = OpKind.LAYERNORM_BACKWARD
    _IN: ClassVar = ("dy_uid", "x_uid", "scale_uid", "mean_uid", "inv_variance_uid", "epsilon_uid")
    _OUT: ClassVar = ("dx_uid", "dscale_uid", "dbias_uid")
    dy_uid: int
    x_uid: int
    scale_uid: int
    dx_uid: int
    dscale_uid: int
    dbias_uid: int
    mean_uid: int = ABSENT
    inv_variance_uid: int = ABSENT
    epsilon_uid: int = ABSENT
    normalized_dim_count: int = 0


@dataclass(frozen=True)
class RmsnormBackwardAttrs(_Attrs):
    """``dbias_uid`` set: the forward had a bias. Normalized axes as rmsnorm's (the scale's
    trailing extents; the schema has no normalized_dim_count)."""

    KIND: ClassVar[OpKind] = OpKind.RMSNORM_BACKWARD
    _IN: ClassVar = ("dy_uid", "x_uid", "scale_uid", "inv_rms_uid")
    _OUT: ClassVar = ("dx_uid", "dscale_uid", "dbias_uid")
    dy_uid: int
    x_uid: int
    scale_uid: int
    inv_rms_uid: int
    dx_uid: int
    dscale_uid: int
    dbias_uid: int = ABSENT


_SDPA_BWD_UNHONOURED = ("seq_len_q_uid", "seq_len_kv_uid", "seed_uid", "offset_uid", "dropout_mask_uid",
                        "dropout_scale_uid", "dropout_scale_inv_uid", "dbias_uid", "alibi_mask", "padding_mask",
                        "causal_mask_bottom_right", "dropout_probability", "left_bound")


@dataclass(frozen=True)
class SdpaBackwardAttrs(_Attrs):
    """Gradients of sdpa given o, do and the forward's ``stats`` (log-sum-exp, FLOAT ``[B, H, S_q, 1]``);
    scale, mask and causal flag as :class:`SdpaAttrs`."""

    KIND: ClassVar[OpKind] = OpKind.SDPA_BACKWARD
    RENAME: ClassVar = {'attn_mask_tensor_uid': 'mask_uid', 'causal_mask': 'is_causal', 'attn_scale_value': 'attn_scale'}
    _IN: ClassVar = ("q_uid", "k_uid", "v_uid", "o_uid", "do_uid", "stats_uid", "scale_uid", "mask_uid",
                     "seq_len_q_uid", "seq_len_kv_uid", "seed_uid", "offset_uid", "dropout_mask_uid",
                     "dropout_scale_uid", "dropout_scale_inv_uid")
    _OUT: ClassVar = ("dq_uid", "dk_uid", "dv_uid", "dbias_uid")
    q_uid: int
    k_uid: int
    v_uid: int
    o_uid: int
    do_uid: int
    stats_uid: int
    dq_uid: int
    dk_uid: int
    dv_uid: int
    scale_uid: int = ABSENT
    mask_uid: int = ABSENT
    seq_len_q_uid: int = ABSENT
    seq_len_kv_uid: int = ABSENT
    seed_uid: int = ABSENT
    offset_uid: int = ABSENT
    dropout_mask_uid: int = ABSENT
    dropout_scale_uid: int = ABSENT
    dropout_scale_inv_uid: int = ABSENT
    dbias_uid: int = ABSENT
    alibi_mask: bool = False
    padding_mask: bool = False
    is_causal: bool = False
    causal_mask_bottom_right: bool = False
    dropout_probability: float = math.nan
    attn_scale: float = math.nan
    left_bound: int | None = None
    right_bound: int | None = None
    diagonal_alignment: int = 0

    @classmethod
    def from_schema(cls, values: dict) -> dict:
        return SdpaAttrs.from_schema(values)

    def unsupported(self):
        bad = self._set(*_SDPA_BWD_UNHONOURED)
        if self.right_bound is not None and (self.right_bound != 0 or self.diagonal_alignment != 0):
            bad.append("right_bound" if self.right_bound != 0 else "diagonal_alignment")
        if self.is_causal and self.diagonal_alignment != 0:
            bad.append("diagonal_alignment")
        if not bad:
            return None
        return (f"sdpa_backward fields {sorted(set(bad))} are not supported (this engine does q/k/v/o/do/stats, "
                "an optional attn_mask, attn_scale_value or scale_tensor_uid, and top-left causal masking)")


PADDING_MODE_NOT_SET = 0   # hipDNN: PADDING_NOT_SET 0, NEG_INF_PAD 1, ZERO_PAD 2


@dataclass(frozen=True)
class ResampleFwdAttrs(_Attrs):
    """Pooling over the spatial axes (2..) of ``x`` ``[N, C, *spatial]``: one ``window``, ``stride``,
    ``pre_padding`` and ``post_padding`` entry per spatial axis. ``index_uid`` (with ``generate_index``):
    max pooling's argmax, the flat position inside the window (row-major), first maximum on ties."""

    KIND: ClassVar[OpKind] = OpKind.RESAMPLE_FWD
    JSON_ENUMS: ClassVar = {"resample_mode": "ResampleMode", "padding_mode": "PaddingMode"}
    _IN: ClassVar = ("x_uid",)
    _OUT: ClassVar = ("y_uid", "index_uid")
    x_uid: int
    y_uid: int
    index_uid: int = ABSENT
    pre_padding: tuple[int, ...] = ()
    post_padding: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    window: tuple[int, ...] = ()
    resample_mode: int = 0
    padding_mode: int = PADDING_MODE_NOT_SET
    generate_index: bool | None = None


@dataclass(frozen=True)
class ResampleBwdAttrs(_Attrs):
    """The gradient of :class:`ResampleFwdAttrs`'s pooling; max pooling reads the forward's ``index``."""

    KIND: ClassVar[OpKind] = OpKind.RESAMPLE_BWD
    JSON_ENUMS: ClassVar = {"resample_mode": "ResampleMode", "padding_mode": "PaddingMode"}
    _IN: ClassVar = ("dy_uid", "index_uid")
    _OUT: ClassVar = ("dx_uid",)
    dy_uid: int
    dx_uid: int
    index_uid: int = ABSENT
    pre_padding: tuple[int, ...] = ()
    post_padding: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    window: tuple[int, ...] = ()
    resample_mode: int = 0
    padding_mode: int = PADDING_MODE_NOT_SET


MOE_MODE_NONE, MOE_MODE_GATHER, MOE_MODE_SCATTER = 0, 1, 2   # hipDNN's MoeGroupedMatmulMode


@dataclass(frozen=True)
class MoeGroupedMatmulAttrs(_Attrs):
    """Grouped (per-expert) matmul of routed token rows (graph_ir/ops/_moe.py has the rules).

    ``first_token_offset`` ``[G, 1, 1]`` (G = batch * E) holds the first routed row of each group;
    group ``g`` owns rows ``[offset[g], offset[g + 1])`` (the last one up to the routed row count)
    and multiplies them by ``weight[g % E]``. ``mode`` NONE: routed row r reads token row r and
    writes output row r; GATHER: reads token row ``token_index[r]``; SCATTER: writes output row
    ``token_index[r] * top_k + token_ks[r]``. Output rows no group writes are zero."""

    KIND: ClassVar[OpKind] = OpKind.MOE_GROUPED_MATMUL
    _IN: ClassVar = ("token_uid", "weight_uid", "first_token_offset_uid", "token_index_uid", "token_ks_uid")
    _OUT: ClassVar = ("output_uid",)
    token_uid: int
    weight_uid: int
    first_token_offset_uid: int
    output_uid: int
    token_index_uid: int = ABSENT
    token_ks_uid: int = ABSENT
    mode: int = MOE_MODE_NONE
    top_k: int = 0


@dataclass(frozen=True)
class MoeGroupedMatmulBwdAttrs(_Attrs):
    """The weight gradient of :class:`MoeGroupedMatmulAttrs` (NONE routing): ``dweight[g]`` is the sum
    over group g's rows r of ``token[r]^T doutput[r]``; ``dweight`` ``[G, K, N]``."""

    KIND: ClassVar[OpKind] = OpKind.MOE_GROUPED_MATMUL_BWD
    _IN: ClassVar = ("doutput_uid", "token_uid", "first_token_offset_uid")
    _OUT: ClassVar = ("dweight_uid",)
    doutput_uid: int
    token_uid: int
    first_token_offset_uid: int
    dweight_uid: int


@dataclass(frozen=True)
class CustomOpAttrs(_Attrs):
    """hipDNN's CUSTOM_OP: the operation ``custom_op_id`` (``"<plugin>.<op>"``) names, which this
    project resolves to a registration of this process (graph_ir/custom_ops.py,
    ``hd.register_custom_op``). Its tensors are lists: ``input_uids`` are the function's arguments
    and ``output_uids`` its results, in order; ``data`` is opaque to the graph (the registration
    reads it)."""

    KIND: ClassVar[OpKind] = OpKind.CUSTOM_OP
    RENAME: ClassVar = {"input_tensor_uids": "input_uids", "output_tensor_uids": "output_uids"}
    _IN: ClassVar = ()
    _OUT: ClassVar = ()
    _IN_LISTS: ClassVar = ("input_uids",)
    _OUT_LISTS: ClassVar = ("output_uids",)
    custom_op_id: str = ""
    input_uids: tuple[int, ...] = ()
    output_uids: tuple[int, ...] = ()
    data: bytes = b""

    def __post_init__(self):
        super().__post_init__()
        # NOTE: any iterable of uids and any bytes-like data (the frontend passes lists and bytearrays)
        object.__setattr__(self, "input_uids", tuple(int(u) for u in self.input_uids))
        object.__setattr__(self, "output_uids", tuple(int(u) for u in self.output_uids))
        if not isinstance(self.data, bytes):
            object.__setattr__(self, "data", bytes(memoryview(self.data)))

    def unsupported(self):
        if custom_ops.lookup(self.custom_op_id) is None:
            return (f"hipDNN CustomOpAttributes id {self.custom_op_id!r} names no custom op registered in this "
                    "process (hd.register_custom_op)")
        return None


def _generic(kind: OpKind, outs: tuple[str, ...], rename: dict | None = None) -> type[_Attrs]:
    """An attributes class for a node type this project parses but does not lower: every field
    from graph.fbs (:func:`schema_spec`), ``outs`` its output tensors, ``rename`` as RENAME."""
    spec = schema_spec(kind, rename or {})
    defaults = {"uid": 0, "uid?": ABSENT, "i64": 0, "i32": 0, "i64?": None, "i32?": None, "f32?": math.nan,
                "bool": False, "bool?": None, "u8": 0, "v64": (), "v32": (), "vuid": (), "str": "", "bytes": b""}
    types = {"uid": int, "uid?": int, "i64": int, "i32": int, "i64?": "int | None", "i32?": "int | None",
             "f32?": float, "bool": bool, "bool?": "bool | None", "u8": int, "v64": "tuple[int, ...]",
             "v32": "tuple[int, ...]", "vuid": "tuple[int, ...]", "str": str, "bytes": bytes}
    fields = [(name, types[t]) for _, name, t in spec if t == "uid"]     # required tensors: no default
    fields += [(name, types[t], field(default=defaults[t])) for _, name, t in spec if t != "uid"]
    uids = [name for _, name, t in spec if t in ("uid", "uid?")]
    cls = dataclasses.make_dataclass(
        "".join(p.capitalize() for p in kind.name.split("_")) + "Attrs", fields, bases=(_Attrs,), frozen=True,
        namespace={"KIND": kind, "RENAME": dict(rename or {}), "_IN": tuple(u for u in uids if u not in outs),
                   "_OUT": outs, "__module__": __name__})
    cls.__annotations__.update({"KIND": ClassVar[OpKind], "SPEC": ClassVar, "_IN": ClassVar, "_OUT": ClassVar})
    return cls


# Attribute classes made from the schema alone: output tensors (and RENAME where the rule does not fit).
GENERIC_ATTRS = {
    OpKind.BLOCK_SCALE_DEQUANTIZE: (("y_uid",),),
    OpKind.BLOCK_SCALE_QUANTIZE: (("y_uid", "scale_uid"),),
}

# The node types parsed but not lowered: their OpDefs (graph_ir/ops/_parse_only.py, supported=False)
# come from this set; every other kind is lowered.
PARSE_ONLY: set = set()

# The kinds this project lowers: those not in PARSE_ONLY (graph_ir.opdef.check_registry checks that each
# has a supported OpDef).
LOWERED_KINDS = tuple(k for k in OpKind if k not in PARSE_ONLY)

ATTRS_BY_KIND: dict[OpKind, type[_Attrs]] = {
    cls.KIND: cls
    for cls in (PointwiseAttrs, MatmulAttrs, ConvFpropAttrs, ConvDgradAttrs, ConvWgradAttrs,
                ReductionAttrs, BatchnormInferenceAttrs, LayernormAttrs, RmsnormAttrs, SdpaAttrs,
                BatchnormAttrs, BatchnormBackwardAttrs, BatchnormInferenceVarianceExtAttrs, LayernormBackwardAttrs,
                RmsnormBackwardAttrs, SdpaBackwardAttrs, ResampleFwdAttrs, ResampleBwdAttrs, CustomOpAttrs,
                MoeGroupedMatmulAttrs, MoeGroupedMatmulBwdAttrs)
}
for _kind, _args in GENERIC_ATTRS.items():
    ATTRS_BY_KIND[_kind] = _generic(_kind, *_args)
    globals()[ATTRS_BY_KIND[_kind].__name__] = ATTRS_BY_KIND[_kind]
assert set(ATTRS_BY_KIND) == set(OpKind), set(OpKind) - set(ATTRS_BY_KIND)


@dataclass(frozen=True)
class NodeDesc:
    name: str
    compute_data_type: int
    attrs: _Attrs

    @property
    def kind(self) -> OpKind:
        return self.attrs.KIND


@dataclass(frozen=True)
class GraphDesc:
    name: str
    io_data_type: int
    intermediate_data_type: int
    compute_data_type: int
    tensors: tuple[TensorDesc, ...]
    nodes: tuple[NodeDesc, ...]
    preferred_engine_id: int | None = None
    is_override_shape_enabled: bool = False
    min_required_engine_api_version: tuple[int, int, int] | None = None
    id: bytes | None = None
    _by_uid: dict = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "_by_uid", {t.uid: t for t in self.tensors})

    def tensor(self, uid: int) -> TensorDesc:
        try:
            return self._by_uid[uid]
        except KeyError:
            raise GraphError(f"graph '{self.name}': no tensor with uid {uid}") from None

    def bound_tensors(self) -> list[TensorDesc]:
        """Tensors bound at execute time (non-virtual, non-scalar), sorted by uid."""
        return sorted((t for t in self.tensors if not t.is_virtual and not t.is_scalar),
                      key=lambda t: t.uid)

    def output_uids(self) -> set[int]:
        return {u for n in self.nodes for u in n.attrs.outputs()}


def unsupported_reason(graph: GraphDesc, lowered=LOWERED_KINDS) -> str | None:
    """Why this project cannot run ``graph`` (node types it does not lower, fields it does not
    honour, data types it has no element type for), naming each; None when it can try."""
    from graph_ir.dtypes import SUPPORTED_DATA_TYPES, data_type_name
    why = []
    for n in graph.nodes:
        if n.kind not in lowered:
            why.append(f"node '{n.name}': hipDNN node type {TABLE_NAMES[int(n.kind)]} ({n.kind.name}) is not "
                       "lowered by this project")
            continue
        r = n.attrs.unsupported()
        if r:
            why.append(f"node '{n.name}' ({n.kind.name}): {r}")
    for t in graph.tensors:
        if t.data_type not in SUPPORTED_DATA_TYPES:
            why.append(f"tensor '{t.name}' (uid {t.uid}): data type {data_type_name(t.data_type)} is not supported")
        if t.is_runtime_pass_by_value:
            why.append(f"tensor '{t.name}' (uid {t.uid}): is_runtime_pass_by_value is not supported (scalars are "
                       "constants baked into the plan)")
        if t.ragged_offset_tensor_uid is not None:
            why.append(f"tensor '{t.name}' (uid {t.uid}): ragged tensors (ragged_offset_tensor_uid) are not "
                       "supported")
    if graph.is_override_shape_enabled:
        why.append("is_override_shape_enabled: execute-time shape overrides are not supported")
    return "; ".join(why) if why else None


# ---------------------------------------------------------------------------
# Codec
# ---------------------------------------------------------------------------


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def _add_vector(b: flatbuffers.Builder, values, size: int = 8) -> int:
    b.StartVector(size, len(values), size)
    for v in reversed(values):
        (b.PrependInt64 if size == 8 else b.PrependInt32)(int(v))
    return b.EndVector()


# Union member index -> (struct format, alignment) of hipDNN's TensorValue structs.
_TV = G.TensorValue
_VALUE_STRUCTS = {_TV.Float32Value: ("<f", 4), _TV.Float16Value: ("<f", 4), _TV.BFloat16Value: ("<f", 4),
                  _TV.Float8Value: ("<B", 1), _TV.Int32Value: ("<i", 4), _TV.Float64Value: ("<d", 8),
                  _TV.Int64Value: ("<q", 8), _TV.BoolValue: ("<?", 1)}


def _value_member(data_type: int, value: float) -> int:
    from graph_ir.dtypes import D
    return {D.FLOAT: _TV.Float32Value, D.HALF: _TV.Float16Value, D.BFLOAT16: _TV.BFloat16Value,
            D.DOUBLE: _TV.Float64Value, D.INT64: _TV.Int64Value, D.BOOLEAN: _TV.BoolValue,
            D.INT32: _TV.Int32Value, D.INT8: _TV.Int32Value, D.UINT8: _TV.Int32Value,
            D.INT4: _TV.Int32Value}.get(data_type, _TV.Float64Value)


def _add_value(b: flatbuffers.Builder, member: int, value: float) -> int:
    """Writes one TensorValue struct (out of line, as unions hold them) and returns its offset."""
    fmt, align = _VALUE_STRUCTS[member]
    if fmt == "<?":
        v = bool(value)
    elif fmt in ("<i", "<q", "<B"):
        v = int(value) if math.isfinite(value) else 0
    else:
        v = float(value)
    b.Prep(align, 0)
    {"<f": b.PrependFloat32, "<d": b.PrependFloat64, "<i": b.PrependInt32, "<q": b.PrependInt64,
     "<B": b.PrependUint8, "<?": b.PrependBool}[fmt](v)
    return b.Offset()


def _encode_attrs(b: flatbuffers.Builder, attrs: _Attrs) -> int:
    table = TABLE_NAMES[int(attrs.KIND)]
    pre = {}
    for fname, name, typ in attrs.SPEC:
        v = getattr(attrs, name)
        if typ in ("v64", "vuid"):
            pre[name] = _add_vector(b, v, 8)
        elif typ == "v32":
            pre[name] = _add_vector(b, v, 4)
        elif typ == "str":
            pre[name] = b.CreateString(v)
        elif typ == "bytes":
            pre[name] = b.CreateByteVector(bytes(v))
    getattr(G, f"{table}Start")(b)
    for fname, name, typ in attrs.SPEC:
        v = getattr(attrs, name)
        if name in pre:
            v = pre[name]
        elif typ == "uid?" and v == ABSENT or typ.endswith("?") and (v is None or (isinstance(v, float)
                                                                                   and math.isnan(v))):
            continue
        getattr(G, f"{table}Add{_camel(fname)}")(b, v)
    return getattr(G, f"{table}End")(b)


_FLOAT_DATA_TYPES = (G.DataType.FLOAT, G.DataType.HALF, G.DataType.BFLOAT16, G.DataType.DOUBLE)
_MINIFLOAT_DATA_TYPES = (G.DataType.FP8_E4M3, G.DataType.FP8_E5M2, G.DataType.FP8_E8M0, G.DataType.FP4_E2M1)


def default_compute_type(graph: GraphDesc, node: NodeDesc) -> int:
    """The compute type a node whose own and graph's compute types are UNSET runs in here.

    FLOAT, except INT32 for a matmul of integer operands and a conv_fprop of INT8/UINT8 ones (what
    ``LowerContext.compute_elem`` falls back to: float math in f32, integer matmuls and convs
    accumulate in i32).

    NOTE: FP8/FP4/E8M0 are float types (decoded to f32 by the lowering): a matmul of them, or of
    one of them and an integer operand, accumulates in FLOAT; INT32 when ``a`` is an integer type
    and ``b`` is not a float type (as the lowering's i32 default: no operand floating point).
    """
    if node.kind == OpKind.MATMUL:
        a, b = (graph._by_uid.get(u) for u in (node.attrs.a_uid, node.attrs.b_uid))
        floats = _FLOAT_DATA_TYPES + _MINIFLOAT_DATA_TYPES
        if a is not None and a.data_type not in floats + (G.DataType.UNSET,) and \
                (b is None or b.data_type not in floats):
            return G.DataType.INT32
    if node.kind == OpKind.CONV_FPROP:
        ts = [graph._by_uid.get(u) for u in (node.attrs.x_uid, node.attrs.w_uid)]
        if all(t is not None for t in ts) and any(t.data_type in (G.DataType.INT8, G.DataType.UINT8) for t in ts) \
                and not any(t.data_type in _FLOAT_DATA_TYPES for t in ts):
            return G.DataType.INT32
    return G.DataType.FLOAT


def resolved_compute_type(graph: GraphDesc, node: NodeDesc) -> int:
    """hipDNN's frontend rule (``Attributes::fill_from_context``): the node's compute type,
    else the graph's, else :func:`default_compute_type`."""
    for dt in (node.compute_data_type, graph.compute_data_type):
        if dt != G.DataType.UNSET:
            return dt
    return default_compute_type(graph, node)


def as_hipdnn_writes(graph: GraphDesc) -> GraphDesc:
    """``graph`` with what hipDNN's frontend stamps and its readers require filled in.

    - every node's compute type resolved (:func:`resolved_compute_type`), and the graph's
      (FLOAT when the caller set none; nodes carry their own);
    - RMSNorm's ``forward_phase``: TRAINING when it has an ``inv_rms`` output, else INFERENCE;
    - scalar constants of dims ``[]`` written as dims ``[1]``, strides ``[1]`` (the decoder
      reads both back as ``[]``).

    None of this changes what the lowering computes: each filled-in value is what it used
    for the unset one.
    """
    nodes = []
    for n in graph.nodes:
        ct = resolved_compute_type(graph, n)
        at = n.attrs
        if n.kind == OpKind.RMSNORM and at.phase == G.NormFwdPhase.NOT_SET:
            at = dataclasses.replace(at, phase=G.NormFwdPhase.TRAINING if at.inv_rms_uid != ABSENT
                                     else G.NormFwdPhase.INFERENCE)
        nodes.append(n if (ct, at) == (n.compute_data_type, n.attrs) else dataclasses.replace(
            n, compute_data_type=ct, attrs=at))
    tensors = tuple(dataclasses.replace(t, dims=(1,), strides=(1,)) if t.is_scalar and not t.dims else t
                    for t in graph.tensors)
    ct = graph.compute_data_type if graph.compute_data_type != G.DataType.UNSET else G.DataType.FLOAT
    return dataclasses.replace(graph, compute_data_type=ct, tensors=tensors, nodes=tuple(nodes))


def encode_graph(graph: GraphDesc) -> bytes:
    """Serializes ``graph`` to hipDNN graph FlatBuffer bytes (deterministic), in the form
    hipDNN's frontend writes (:func:`as_hipdnn_writes`)."""
    graph = as_hipdnn_writes(graph)
    b = flatbuffers.Builder(1024)
    tensor_offsets = []
    for t in graph.tensors:
        name = b.CreateString(t.name)
        strides, dims = _add_vector(b, t.strides), _add_vector(b, t.dims)
        member = value = None
        if t.is_scalar:
            member = _value_member(t.data_type, t.scalar_value)
            value = _add_value(b, member, t.scalar_value)
        G.TensorAttributesStart(b)
        G.TensorAttributesAddUid(b, t.uid)
        G.TensorAttributesAddName(b, name)
        G.TensorAttributesAddDataType(b, t.data_type)
        G.TensorAttributesAddStrides(b, strides)
        G.TensorAttributesAddDims(b, dims)
        G.TensorAttributesAddVirtual(b, t.is_virtual)
        if member is not None:
            G.TensorAttributesAddValueType(b, member)
            G.TensorAttributesAddValue(b, value)
        G.TensorAttributesAddIsRuntimePassByValue(b, t.is_runtime_pass_by_value)
        if t.ragged_offset_tensor_uid is not None:
            G.TensorAttributesAddRaggedOffsetTensorUid(b, t.ragged_offset_tensor_uid)
        G.TensorAttributesAddAlignment(b, t.alignment)
        G.TensorAttributesAddRaggedOffsetMultiplier(b, t.ragged_offset_multiplier)
        tensor_offsets.append(G.TensorAttributesEnd(b))
    node_offsets = []
    for n in graph.nodes:
        attrs = _encode_attrs(b, n.attrs)
        name = b.CreateString(n.name)
        G.NodeStart(b)
        G.NodeAddName(b, name)
        G.NodeAddComputeDataType(b, n.compute_data_type)
        G.NodeAddAttributesType(b, int(n.kind))
        G.NodeAddAttributes(b, attrs)
        node_offsets.append(G.NodeEnd(b))

    def _table_vector(offsets):
        b.StartVector(4, len(offsets), 4)
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    tensors, nodes = _table_vector(tensor_offsets), _table_vector(node_offsets)
    name = b.CreateString(graph.name)
    G.GraphStart(b)
    G.GraphAddName(b, name)
    G.GraphAddComputeDataType(b, graph.compute_data_type)
    G.GraphAddIntermediateDataType(b, graph.intermediate_data_type)
    G.GraphAddIoDataType(b, graph.io_data_type)
    G.GraphAddTensors(b, tensors)
    G.GraphAddNodes(b, nodes)
    if graph.preferred_engine_id is not None:
        G.GraphAddPreferredEngineId(b, graph.preferred_engine_id)
    G.GraphAddIsOverrideShapeEnabled(b, graph.is_override_shape_enabled)
    if graph.min_required_engine_api_version is not None:
        G.GraphAddMinRequiredEngineApiVersion(b, G.CreateEngineApiVersion(b, *graph.min_required_engine_api_version))
    if graph.id is not None:
        G.GraphAddId(b, G.CreateUuid(b, list(graph.id)))
    b.Finish(G.GraphEnd(b), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


def is_project_graph(data) -> bool:
    """Whether ``data`` was written by this project's encoder (schema of hipdnn-iree >= 0.3)."""
    return isinstance(data, (bytes, bytearray, memoryview)) and len(data) >= 8 and bytes(data[4:8]) == FILE_IDENTIFIER


# -- decode -------------------------------------------------------------------------------
from graph_ir.fbverify import SCALAR, VECTOR, FlatBufferError, check_table, table_vector  # noqa: E402

def _slot(typ: str) -> tuple[int, int]:
    """(SCALAR or VECTOR, element size) of a graph.fbs field type, for the verifier."""
    if typ.startswith("["):
        elem = typ[1:-1]
        return VECTOR, _SCALAR_SIZES.get(elem, T.ENUMS[elem][0] if elem in T.ENUMS else 4)
    if typ == "string":
        return VECTOR, 1
    if typ in T.UNIONS or typ in T.TABLES:
        return SCALAR, 4          # an offset
    if typ in T.STRUCTS:
        return SCALAR, T.STRUCTS[typ][0]
    if typ in T.ENUMS:
        typ = T.ENUMS[typ][0]
    return SCALAR, _SCALAR_SIZES[typ]


_SCALAR_SIZES = {"bool": 1, "byte": 1, "ubyte": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "float": 4,
                 "long": 8, "ulong": 8, "double": 8}


def _fields(table: str) -> list:
    return [(fname, *_slot(typ)) for fname, typ, _ in T.TABLES[table]]


_GRAPH_FIELDS = _fields("Graph")
_TENSOR_FIELDS = _fields("TensorAttributes")
_NODE_FIELDS = _fields("Node")
_ATTR_FIELDS = {kind: _fields(TABLE_NAMES[int(kind)]) for kind in ATTRS_BY_KIND}


def _str(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else (v or "")


def _offset_target(buf, table_pos: int, slot: int) -> int | None:
    """Position an offset field (union value) points to, or None when absent; bounds-checked."""
    vt = table_pos - struct.unpack_from("<i", buf, table_pos)[0]
    if 4 + 2 * slot + 2 > struct.unpack_from("<H", buf, vt)[0]:
        return None
    voff = struct.unpack_from("<H", buf, vt + 4 + 2 * slot)[0]
    if voff == 0:
        return None
    pos = table_pos + voff
    target = pos + struct.unpack_from("<I", buf, pos)[0]
    if target >= len(buf):
        raise FlatBufferError(f"union value offset {target} is outside the {len(buf)}-byte buffer")
    return target


def _table(buf, pos: int, fields, what: str, limit: int) -> int:
    try:
        return check_table(buf, fields, max_vector_len=limit, table_pos=pos)
    except FlatBufferError as e:
        raise GraphError(f"op graph: {what}: {e}") from None


def _decode_attrs(buf, n, kind: OpKind, what: str) -> _Attrs:
    cls = ATTRS_BY_KIND[kind]
    pos = _offset_target(buf, n._tab.Pos, 3)
    if pos is None:
        raise GraphError(f"op graph: {what}: the node has attributes_type {TABLE_NAMES[int(kind)]} but no "
                            "attributes table")
    if pos % 4:
        raise GraphError(f"op graph: {what}: attributes table offset {pos} is misaligned")
    _table(buf, pos, _ATTR_FIELDS[kind], f"{what} attributes", MAX_TENSORS)
    holder = getattr(G, TABLE_NAMES[int(kind)])()
    holder.Init(buf, pos)
    out = {}
    for fname, name, typ in cls.SPEC:
        if typ in ("v64", "vuid", "v32"):
            n_el = getattr(holder, f"{_camel(fname)}Length")()
            get = getattr(holder, _camel(fname))
            out[name] = tuple(int(get(j)) for j in range(n_el))
            continue
        if typ == "bytes":
            out[name] = bytes(holder.DataAsNumpy().tobytes()) if holder.DataLength() else b""
            continue
        v = getattr(holder, _camel(fname))()
        if typ == "str":
            v = _str(v)
        elif typ == "uid?":
            v = ABSENT if v is None else int(v)
        elif typ == "f32?":
            v = math.nan if v is None else float(v)
        elif typ == "bool":
            v = bool(v)
        elif typ in ("i64?", "i32?", "bool?"):
            v = None if v is None else (bool(v) if typ == "bool?" else int(v))
        else:
            v = int(v)
        out[name] = v
    try:
        return cls(**cls.from_schema(out))
    except (TypeError, ValueError) as e:
        raise GraphError(f"op graph: {what}: bad attributes ({e})") from None


def _decode_value(buf, t, tpos: int, what: str) -> float | None:
    member = t.ValueType()
    if member == _TV.NONE:
        return None
    if member not in _VALUE_STRUCTS:
        raise GraphError(f"op graph: {what}: unknown TensorValue member {member}")
    pos = _offset_target(buf, tpos, 7)
    if pos is None:
        raise GraphError(f"op graph: {what}: value_type is set but the value is missing")
    fmt, align = _VALUE_STRUCTS[member]
    if pos % align or pos + struct.calcsize(fmt) > len(buf):
        raise GraphError(f"op graph: {what}: the scalar value lies outside the buffer or is misaligned")
    v = struct.unpack_from(fmt, buf, pos)[0]
    if fmt == "<f":   # NOTE: the shortest decimal of the float32 (1e-05, not 9.99999974737875e-06)
        import numpy as np
        return float(repr(np.float32(v)).removeprefix("np.float32(").removesuffix(")"))
    return float(v)


def decode_graph(data: bytes) -> GraphDesc:
    """Parses hipDNN graph FlatBuffer bytes; raises :class:`GraphError` on bad bytes.

    Every table is bounds-checked before a generated accessor reads it, so truncated or
    hostile bytes give a GraphError naming the problem, never an IndexError or garbage.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) < 12:
        raise GraphError("op graph: expected hipDNN graph FlatBuffer bytes (at least 12)")
    buf = bytes(data)
    try:
        root = _table(buf, struct.unpack_from("<I", buf, 0)[0], _GRAPH_FIELDS, "Graph", max(MAX_TENSORS, MAX_STRING))
        g = G.Graph()
        g.Init(buf, root)
        if g.TensorsLength() > MAX_TENSORS or g.NodesLength() > MAX_NODES:
            raise GraphError(f"op graph: {g.TensorsLength()} tensors / {g.NodesLength()} nodes is over the "
                                f"limit ({MAX_TENSORS} / {MAX_NODES})")
        tensors = []
        try:
            tpositions = table_vector(buf, root, 4)
            npositions = table_vector(buf, root, 5)
        except FlatBufferError as e:
            raise GraphError(f"op graph: {e}") from None
        for i, tpos in enumerate(tpositions):
            what = f"tensors[{i}]"
            _table(buf, tpos, _TENSOR_FIELDS, what, MAX_STRING)
            t = G.TensorAttributes()
            t.Init(buf, tpos)
            if t.DimsLength() > MAX_RANK or t.StridesLength() > MAX_RANK:
                raise GraphError(f"op graph: {what}: rank {max(t.DimsLength(), t.StridesLength())} is over "
                                    f"{MAX_RANK}")
            value = _decode_value(buf, t, tpos, what)
            rag = t.RaggedOffsetTensorUid()
            dims = tuple(int(t.Dims(j)) for j in range(t.DimsLength()))
            strides = tuple(int(t.Strides(j)) for j in range(t.StridesLength()))
            if value is not None and dims == (1,) and strides in ((1,), (0,), ()):
                dims = strides = ()   # NOTE: a scalar as hipDNN writes it ([1]/[1]) is the scalar []/[]
            tensors.append(TensorDesc(
                uid=int(t.Uid()), name=_str(t.Name()), data_type=int(t.DataType()),
                dims=dims, strides=strides,
                is_virtual=bool(t.Virtual()), is_scalar=value is not None,
                scalar_value=0.0 if value is None else value,
                is_runtime_pass_by_value=bool(t.IsRuntimePassByValue()),
                ragged_offset_tensor_uid=None if rag is None else int(rag), alignment=int(t.Alignment()),
                ragged_offset_multiplier=int(t.RaggedOffsetMultiplier())))
        nodes = []
        for i, npos in enumerate(npositions):
            _table(buf, npos, _NODE_FIELDS, f"nodes[{i}]", MAX_STRING)
            n = G.Node()
            n.Init(buf, npos)
            tag = n.AttributesType()
            name = _str(n.Name())
            what = f"nodes[{i}] '{name}'"
            try:
                kind = OpKind(tag)
            except ValueError:
                raise GraphError(f"op graph: {what}: NodeAttributes type {tag} is not a hipDNN node type this "
                                    f"schema knows (1..{len(OpKind)})", "unsupported") from None
            nodes.append(NodeDesc(name=name, compute_data_type=int(n.ComputeDataType()),
                                  attrs=_decode_attrs(buf, n, kind, what)))
        ver = g.MinRequiredEngineApiVersion()
        gid = g.Id()
        return GraphDesc(name=_str(g.Name()), io_data_type=int(g.IoDataType()),
                         intermediate_data_type=int(g.IntermediateDataType()),
                         compute_data_type=int(g.ComputeDataType()),
                         tensors=tuple(tensors), nodes=tuple(nodes),
                         preferred_engine_id=g.PreferredEngineId(),
                         is_override_shape_enabled=bool(g.IsOverrideShapeEnabled()),
                         min_required_engine_api_version=None if ver is None else (ver.Major(), ver.Minor(),
                                                                                  ver.Patch()),
                         id=None if gid is None else bytes(gid.BytesAsNumpy().tobytes()))
    except GraphError:
        raise
    except Exception as e:  # NOTE: a gap in the checks above; still a typed error, never a crash
        raise GraphError(f"op graph: malformed graph FlatBuffer ({type(e).__name__}: {e})") from None
