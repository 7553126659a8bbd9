"""Typed, immutable view of the operation graph and its FlatBuffer codec.

The graph crosses the backend/plugin boundary as ``schemas/graph.fbs`` bytes,
as in hipDNN. The frontend builds these dataclasses and encodes them; the
plugins (lowering, reference engine) decode the same bytes back. One frozen
dataclass per op's attributes; :class:`OpKind` is the schema's union tag.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from typing import ClassVar

import flatbuffers

from lowering._fbs import graph_generated as G


class LoweringError(ValueError):
    """Raised by the lowering and the graph codec.

    ``kind`` is ``"invalid"`` for a graph that is wrong and ``"unsupported"``
    for a valid graph this engine cannot handle; plugins map it to a status.
    """

    def __init__(self, message: str, kind: str = "invalid"):
        super().__init__(message)
        self.kind = kind


class OpKind(enum.IntEnum):
    """Op kinds; the values are the ``NodeAttributes`` union tags."""

    POINTWISE = G.NodeAttributes.PointwiseAttributes
    MATMUL = G.NodeAttributes.MatmulAttributes
    CONV_FPROP = G.NodeAttributes.ConvolutionFwdAttributes
    CONV_DGRAD = G.NodeAttributes.ConvolutionBwdDataAttributes
    CONV_WGRAD = G.NodeAttributes.ConvolutionBwdFilterAttributes
    REDUCTION = G.NodeAttributes.ReductionAttributes
    BATCHNORM_INFERENCE = G.NodeAttributes.BatchnormInferenceAttributes
    LAYERNORM = G.NodeAttributes.LayernormAttributes
    RMSNORM = G.NodeAttributes.RmsnormAttributes
    SDPA = G.NodeAttributes.SdpaAttributes


ABSENT = -1  # uid of an optional input that is not connected


@dataclass(frozen=True)
class TensorDesc:
    uid: int
    name: str
    data_type: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    is_virtual: bool = False
    is_scalar: bool = False
    scalar_value: float = 0.0


# ---------------------------------------------------------------------------
# Op attributes. Field names equal the schema's; ``_IN``/``_OUT`` name the
# tensor-uid fields in operand order.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Attrs:
    KIND: ClassVar[OpKind]
    _IN: ClassVar[tuple[str, ...]]
    _OUT: ClassVar[tuple[str, ...]]

    def inputs(self) -> tuple[int, ...]:
        return tuple(u for u in (getattr(self, f) for f in self._IN) if u != ABSENT)

    def outputs(self) -> tuple[int, ...]:
        return tuple(u for u in (getattr(self, f) for f in self._OUT) if u != ABSENT)


@dataclass(frozen=True)
class PointwiseAttrs(_Attrs):
    KIND: ClassVar[OpKind] = OpKind.POINTWISE
    _IN: ClassVar = ("in_0_uid", "in_1_uid", "in_2_uid")
    _OUT: ClassVar = ("out_0_uid",)
    operation: int
    in_0_uid: int
    out_0_uid: int
    in_1_uid: int = ABSENT
    in_2_uid: int = ABSENT
    alpha: float = math.nan
    beta: float = math.nan
    threshold: float = math.nan


@dataclass(frozen=True)
class MatmulAttrs(_Attrs):
    KIND: ClassVar[OpKind] = OpKind.MATMUL
    _IN: ClassVar = ("a_uid", "b_uid")
    _OUT: ClassVar = ("c_uid",)
    a_uid: int
    b_uid: int
    c_uid: int


@dataclass(frozen=True)
class _ConvAttrs(_Attrs):
    x_uid: int
    w_uid: int
    y_uid: int
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]


@dataclass(frozen=True)
class ConvFpropAttrs(_ConvAttrs):
    KIND: ClassVar[OpKind] = OpKind.CONV_FPROP
    _IN: ClassVar = ("x_uid", "w_uid")
    _OUT: ClassVar = ("y_uid",)


@dataclass(frozen=True)
class ConvDgradAttrs(_ConvAttrs):
    """``y_uid`` is dy (input), ``x_uid`` is dx (output)."""

    KIND: ClassVar[OpKind] = OpKind.CONV_DGRAD
    _IN: ClassVar = ("y_uid", "w_uid")
    _OUT: ClassVar = ("x_uid",)


@dataclass(frozen=True)
class ConvWgradAttrs(_ConvAttrs):
    """``y_uid`` is dy and ``x_uid`` is x (inputs), ``w_uid`` is dw (output)."""

    KIND: ClassVar[OpKind] = OpKind.CONV_WGRAD
    _IN: ClassVar = ("y_uid", "x_uid")
    _OUT: ClassVar = ("w_uid",)


@dataclass(frozen=True)
class ReductionAttrs(_Attrs):
    KIND: ClassVar[OpKind] = OpKind.REDUCTION
    _IN: ClassVar = ("x_uid",)
    _OUT: ClassVar = ("y_uid",)
    mode: int
    x_uid: int
    y_uid: int


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
    KIND: ClassVar[OpKind] = OpKind.LAYERNORM
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


@dataclass(frozen=True)
class RmsnormAttrs(_Attrs):
    KIND: ClassVar[OpKind] = OpKind.RMSNORM
    _IN: ClassVar = ("x_uid", "scale_uid", "epsilon_uid")
    _OUT: ClassVar = ("y_uid",)
    x_uid: int
    scale_uid: int
    epsilon_uid: int
    y_uid: int


@dataclass(frozen=True)
class SdpaAttrs(_Attrs):
    KIND: ClassVar[OpKind] = OpKind.SDPA
    _IN: ClassVar = ("q_uid", "k_uid", "v_uid", "mask_uid")
    _OUT: ClassVar = ("o_uid",)
    q_uid: int
    k_uid: int
    v_uid: int
    o_uid: int
    mask_uid: int = ABSENT
    attn_scale: float = math.nan
    is_causal: bool = False


ATTRS_BY_KIND: dict[OpKind, type[_Attrs]] = {
    cls.KIND: cls
    for cls in (PointwiseAttrs, MatmulAttrs, ConvFpropAttrs, ConvDgradAttrs, ConvWgradAttrs,
                ReductionAttrs, BatchnormInferenceAttrs, LayernormAttrs, RmsnormAttrs, SdpaAttrs)
}

# Schema table holding each kind's attributes (conv kinds wrap ConvolutionAttributes).
_TABLE_BY_KIND = {
    OpKind.POINTWISE: "PointwiseAttributes",
    OpKind.MATMUL: "MatmulAttributes",
    OpKind.CONV_FPROP: "ConvolutionFwdAttributes",
    OpKind.CONV_DGRAD: "ConvolutionBwdDataAttributes",
    OpKind.CONV_WGRAD: "ConvolutionBwdFilterAttributes",
    OpKind.REDUCTION: "ReductionAttributes",
    OpKind.BATCHNORM_INFERENCE: "BatchnormInferenceAttributes",
    OpKind.LAYERNORM: "LayernormAttributes",
    OpKind.RMSNORM: "RmsnormAttributes",
    OpKind.SDPA: "SdpaAttributes",
}
_CONV_KINDS = (OpKind.CONV_FPROP, OpKind.CONV_DGRAD, OpKind.CONV_WGRAD)


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
    _by_uid: dict = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "_by_uid", {t.uid: t for t in self.tensors})

    def tensor(self, uid: int) -> TensorDesc:
        try:
            return self._by_uid[uid]
        except KeyError:
            raise LoweringError(f"graph '{self.name}': no tensor with uid {uid}") from None

    def bound_tensors(self) -> list[TensorDesc]:
        """Tensors bound at execute time (non-virtual, non-scalar), sorted by uid."""
        return sorted((t for t in self.tensors if not t.is_virtual and not t.is_scalar),
                      key=lambda t: t.uid)

    def output_uids(self) -> set[int]:
        return {u for n in self.nodes for u in n.attrs.outputs()}


# ---------------------------------------------------------------------------
# Codec
# ---------------------------------------------------------------------------


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def _attr_fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls)]


def _add_vector(b: flatbuffers.Builder, values) -> int:
    b.StartVector(8, len(values), 8)
    for v in reversed(values):
        b.PrependInt64(int(v))
    return b.EndVector()


def _encode_fields(b: flatbuffers.Builder, table: str, obj, names: list[str]) -> int:
    vectors = {n: _add_vector(b, getattr(obj, n)) for n in names if isinstance(getattr(obj, n), tuple)}
    getattr(G, f"{table}Start")(b)
    for n in names:
        getattr(G, f"{table}Add{_camel(n)}")(b, vectors.get(n, getattr(obj, n)))
    return getattr(G, f"{table}End")(b)


def encode_graph(graph: GraphDesc) -> bytes:
    """Serializes ``graph`` to ``schemas/graph.fbs`` bytes (deterministic)."""
    b = flatbuffers.Builder(1024)
    tensor_offsets = []
    for t in graph.tensors:
        name = b.CreateString(t.name)
        dims, strides = _add_vector(b, t.dims), _add_vector(b, t.strides)
        G.TensorAttributesStart(b)
        G.TensorAttributesAddUid(b, t.uid)
        G.TensorAttributesAddName(b, name)
        G.TensorAttributesAddDataType(b, t.data_type)
        G.TensorAttributesAddDims(b, dims)
        G.TensorAttributesAddStrides(b, strides)
        G.TensorAttributesAddIsVirtual(b, t.is_virtual)
        G.TensorAttributesAddIsScalar(b, t.is_scalar)
        G.TensorAttributesAddScalarValue(b, t.scalar_value)
        tensor_offsets.append(G.TensorAttributesEnd(b))
    node_offsets = []
    for n in graph.nodes:
        names = [f.name for f in _attr_fields(type(n.attrs))]
        table = _TABLE_BY_KIND[n.kind]
        if n.kind in _CONV_KINDS:
            inner = _encode_fields(b, "ConvolutionAttributes", n.attrs, names)
            getattr(G, f"{table}Start")(b)
            getattr(G, f"{table}AddConv")(b, inner)
            attrs = getattr(G, f"{table}End")(b)
        else:
            attrs = _encode_fields(b, table, n.attrs, names)
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
    G.GraphAddIoDataType(b, graph.io_data_type)
    G.GraphAddIntermediateDataType(b, graph.intermediate_data_type)
    G.GraphAddComputeDataType(b, graph.compute_data_type)
    G.GraphAddTensors(b, tensors)
    G.GraphAddNodes(b, nodes)
    b.Finish(G.GraphEnd(b))
    return bytes(b.Output())


def _read_vector(table, name: str) -> tuple[int, ...]:
    n = getattr(table, f"{_camel(name)}Length")()
    get = getattr(table, _camel(name))
    return tuple(int(get(j)) for j in range(n))


def _decode_fields(table, cls) -> dict:
    out = {}
    for f in _attr_fields(cls):
        if f.type in ("tuple[int, ...]",):
            out[f.name] = _read_vector(table, f.name)
        else:
            out[f.name] = getattr(table, _camel(f.name))()
    return out


def _str(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else (v or "")


def decode_graph(data: bytes) -> GraphDesc:
    """Parses ``schemas/graph.fbs`` bytes; raises :class:`LoweringError` on bad bytes."""
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) < 8:
        raise LoweringError("op graph: expected graph FlatBuffer bytes")
    try:
        g = G.Graph.GetRootAs(bytes(data), 0)
        tensors = []
        for i in range(g.TensorsLength()):
            t = g.Tensors(i)
            tensors.append(TensorDesc(
                uid=t.Uid(), name=_str(t.Name()), data_type=t.DataType(),
                dims=_read_vector(t, "dims"), strides=_read_vector(t, "strides"),
                is_virtual=bool(t.IsVirtual()), is_scalar=bool(t.IsScalar()),
                scalar_value=float(t.ScalarValue())))
        nodes = []
        for i in range(g.NodesLength()):
            n = g.Nodes(i)
            kind = OpKind(n.AttributesType())
            cls = ATTRS_BY_KIND[kind]
            tab = n.Attributes()
            holder = getattr(G, _TABLE_BY_KIND[kind])()
            holder.Init(tab.Bytes, tab.Pos)
            if kind in _CONV_KINDS:
                holder = holder.Conv()
            nodes.append(NodeDesc(name=_str(n.Name()), compute_data_type=n.ComputeDataType(),
                                  attrs=cls(**_decode_fields(holder, cls))))
        return GraphDesc(name=_str(g.Name()), io_data_type=g.IoDataType(),
                         intermediate_data_type=g.IntermediateDataType(),
                         compute_data_type=g.ComputeDataType(),
                         tensors=tuple(tensors), nodes=tuple(nodes))
    except LoweringError:
        raise
    except Exception as e:  # NOTE: the Python flatbuffers runtime has no verifier.
        raise LoweringError(f"op graph: malformed graph FlatBuffer ({type(e).__name__}: {e})") from None
