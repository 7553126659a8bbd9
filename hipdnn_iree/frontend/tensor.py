"""``hd.TensorAttributes``: a graph tensor with chainable setters."""
from __future__ import annotations

import numbers

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType, as_enum

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


class TensorAttributes:
    """A tensor of a :class:`hd.Graph`. Create with ``Graph.tensor`` or as an op's result.

    Example:
        >>> import hipdnn_iree as hd
        >>> g = hd.Graph()
        >>> x = g.tensor(name="X", uid=1, dim=[2, 3], data_type=hd.DataType.FLOAT)
        >>> x.get_stride()
        [3, 1]
    """

    def __init__(self, graph, name=None, uid=None, dim=None, stride=None, data_type=DataType.NOT_SET,
                 is_virtual=False, value=None):
        self._graph = graph
        self._name = name
        self._uid = uid
        self._dim = None if dim is None else _int_list(dim, "dim", name)
        self._stride = None if stride is None else _int_list(stride, "stride", name)
        self._data_type = as_enum(DataType, data_type, f"tensor '{name}': data_type")
        self._is_virtual = bool(is_virtual)
        self._value = value
        self._stride_inferred = False   # _stride was inferred by validate (reset on the next one)
        self._layout_hint = None        # "channels_last", "like_input": how validate lays out unset output strides
        if uid is not None:
            self.set_uid(uid)

    def _prefer_channels_last(self) -> "TensorAttributes":
        """Unset output strides are laid out packed channels-last at validate (cuDNN's default for
        conv and reduction outputs; the facade asks for it)."""
        self._layout_hint = "channels_last"
        return self

    def _like_input(self) -> "TensorAttributes":
        """Unset pointwise output strides are copied at validate from the first input of the same
        dims (cuDNN FE's rule; the facade asks for it), gaps included."""
        self._layout_hint = "like_input"
        return self

    def _set_constant(self, value: float) -> "TensorAttributes":
        """A scalar constant's new value, while its graph is mutable (the facade bakes a
        pass-by-value scalar's value at the first execute)."""
        self._mutable()
        self._value = value
        return self

    # -- setters (chainable) ----------------------------------------------------
    def _mutable(self):
        self._graph._check_mutable()
        return self

    def set_name(self, name: str):
        self._mutable()._name = str(name)
        return self

    def set_uid(self, uid: int):
        self._mutable()
        if isinstance(uid, bool) or not isinstance(uid, numbers.Integral):
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{self._name}': uid must be an int, got {uid!r}")
        # NOTE: uids are int64 in hipDNN's graph and plan FlatBuffers; negative ones are refused too
        # (-1 marks an unconnected optional input in this project's graph descriptions).
        if not 0 <= int(uid) <= INT64_MAX:
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{self._name}': uid {int(uid)} is out of range: uids "
                                                f"are int64 values from 0 to 2**63 - 1")
        self._uid = int(uid)
        return self

    def set_dim(self, dim):
        self._mutable()._dim = _int_list(dim, "dim", self._name)
        return self

    def set_stride(self, stride):
        self._mutable()._stride = _int_list(stride, "stride", self._name)
        self._stride_inferred = False
        return self

    def set_data_type(self, data_type):
        self._mutable()._data_type = as_enum(DataType, data_type, f"tensor '{self._name}': data_type")
        return self

    def set_output(self, is_output: bool = True):
        self._mutable()._is_virtual = not is_output
        return self

    def set_is_virtual(self, is_virtual: bool = True):
        self._mutable()._is_virtual = bool(is_virtual)
        return self

    # -- getters ------------------------------------------------------------------
    def get_name(self):
        return self._name

    def get_uid(self):
        return self._uid

    def get_dim(self):
        return None if self._dim is None else list(self._dim)

    def get_stride(self):
        if self._stride is None and self._dim is not None:
            from graph_ir.layout import packed_strides
            return list(packed_strides(self._dim))
        return None if self._stride is None else list(self._stride)

    def get_data_type(self):
        return self._data_type

    def get_is_virtual(self):
        return self._is_virtual

    def is_scalar(self) -> bool:
        return self._value is not None

    def get_value(self):
        return self._value

    def __repr__(self):
        return (f"TensorAttributes(name={self._name!r}, uid={self._uid}, dim={self.get_dim()}, "
                f"stride={self.get_stride()}, data_type={self._data_type.name}, virtual={self._is_virtual})")


def _int_list(values, field, name) -> list[int]:
    try:
        out = [int(v) for v in values]
        if any(isinstance(v, bool) or int(v) != v for v in values):
            raise ValueError
    except (TypeError, ValueError):
        raise HipdnnError(Status.BAD_PARAM, f"tensor '{name}': {field} must be a list of ints, got {values!r}") from None
    bad = [v for v in out if not INT64_MIN <= v <= INT64_MAX]
    if bad:   # NOTE: dims and strides are int64 in hipDNN's graph FlatBuffer
        raise HipdnnError(Status.BAD_PARAM, f"tensor '{name}': {field} {out}: {bad[0]} is out of the int64 range "
                                            f"(-2**63 .. 2**63 - 1)")
    return out
