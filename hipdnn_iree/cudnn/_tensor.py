"""``cudnn.tensor`` and ``cudnn.knob``: the facade's tensor handle over an ``hd.TensorAttributes``."""
from __future__ import annotations

from hipdnn_iree.cudnn import _enums as E
from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType

class tensor:
    """A graph tensor (cuDNN FE's ``cudnn.tensor``): setters chain and return the tensor."""

    def __init__(self, graph, hd_tensor: TensorAttributes | None, pass_by_value=False, dims=None,
                 strides=None, dtype=DataType.FLOAT, name=None):
        self._g = graph
        self._t = hd_tensor
        self._pbv = pass_by_value
        self._pbv_spec = (dims, strides, dtype, name)   # a pass-by-value tensor becomes an hd input on first use

    def _hd(self) -> TensorAttributes:
        if self._t is None:
            dims, strides, dtype, name = self._pbv_spec
            self._t = self._g._hd.tensor(name=name, dim=dims, stride=strides, data_type=dtype)
            if self._uid is not None:
                self._t.set_uid(self._uid)
            self._g._by_hd[id(self._t)] = self
            self._g._inputs.add(id(self._t))
        return self._t

    _uid = None
    _reorder = None     # "F8_128x4": the caller's buffer holds the tensor in cuDNN's 128x4 tiles

    # -- setters ---------------------------------------------------------------------------
    def set_output(self, is_output=True):
        self._hd().set_output(is_output)
        return self

    def set_is_virtual(self, is_virtual=True):
        self._hd().set_is_virtual(is_virtual)
        return self

    def set_dim(self, dim):
        self._hd().set_dim([int(d) for d in dim])
        return self

    def set_stride(self, stride):
        self._hd().set_stride([int(s) for s in stride])
        return self

    def set_data_type(self, data_type):
        self._hd().set_data_type(E.to_hd_type(data_type, f"tensor '{self.get_name()}': data_type"))
        return self

    def set_name(self, name):
        if self._t is None:
            self._pbv_spec = self._pbv_spec[:3] + (str(name),)
        else:
            self._t.set_name(name)
        return self

    def set_uid(self, uid):
        if self._t is None:
            self._uid = int(uid)
        else:
            self._t.set_uid(uid)
        return self

    def set_is_pass_by_value(self, value=True):
        if bool(value) != self._pbv:
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{self.get_name()}': declare pass-by-value at "
                                                "graph.tensor(is_pass_by_value=...)")
        return self

    def set_ragged_offset(self, ragged_offset):
        """cuDNN's packed variable-length (THD) layout: recorded, and refused (NOT_SUPPORTED) at
        validate and the build steps, as an unsupported SDPA feature is."""
        self._g._defer(f"tensor '{self.get_name()}': ragged_offset (packed variable-length sequences) is not "
                       "supported by this engine", at_validate=True)
        return self

    def set_reordering_type(self, reordering_type):
        """``tensor_reordering.F8_128x4``: the buffer bound to this tensor holds it in cuDNN's 128x4
        tiles of block-scale factors (hipdnn_iree/plugin_sdk/scale_layout.py); NONE: plain."""
        if reordering_type in (None, E.tensor_reordering.NONE):
            self._reorder = None
        elif reordering_type == E.tensor_reordering.F8_128x4:
            if self._pbv or len(self.get_dim() or []) < 2:
                raise HipdnnError(Status.BAD_PARAM, f"tensor '{self.get_name()}': reordering_type F8_128x4 needs "
                                                    "a tensor of rank >= 2 that is not pass-by-value")
            self._reorder = "F8_128x4"
        else:
            raise HipdnnError(Status.NOT_SUPPORTED, f"tensor '{self.get_name()}': reordering_type {reordering_type} "
                                                    "is not supported")
        return self

    def get_reordering_type(self):
        return E.tensor_reordering.F8_128x4 if self._reorder else E.tensor_reordering.NONE

    def get_ragged_offset(self):
        return None

    # -- getters ---------------------------------------------------------------------------
    def get_name(self):
        return self._pbv_spec[3] if self._t is None else self._t.get_name()

    def get_uid(self):
        return self._uid if self._t is None else self._t.get_uid()

    def get_dim(self):
        return list(self._pbv_spec[0]) if self._t is None else self._t.get_dim()

    def get_stride(self):
        return list(self._pbv_spec[1]) if self._t is None else self._t.get_stride()

    def get_data_type(self):
        dt = self._pbv_spec[2] if self._t is None else self._t.get_data_type()
        return E._CUDNN_TYPE.get(dt, E.data_type.NOT_SET)

    def get_is_virtual(self):
        return False if self._t is None else self._t.get_is_virtual()

    def get_is_pass_by_value(self):
        return self._pbv

    def __repr__(self):
        return f"cudnn.tensor(name={self.get_name()!r}, dim={self.get_dim()}, stride={self.get_stride()}, " \
               f"data_type={self.get_data_type()}, pass_by_value={self._pbv})"


class knob:
    """One knob of an engine as cuDNN FE describes it: ``type`` (a ``cudnn.knob_type``), the value
    range ``min_value`` .. ``max_value`` by ``stride``; here the values index ``choices``."""

    def __init__(self, type, choices, default):
        self.type = type
        self.choices = tuple(choices)
        self.default = default
        self.min_value, self.max_value, self.stride = 0, max(len(self.choices) - 1, 0), 1

    def __repr__(self):
        return f"cudnn.knob({self.type.name}, choices={self.choices})"


def _list(v, what):
    if v is None:
        return None
    try:
        return [int(x) for x in v]
    except TypeError:
        raise HipdnnError(Status.BAD_PARAM, f"{what} must be a list of ints, got {v!r}") from None


def _packed(dims):
    out, acc = [0] * len(dims), 1
    for a in reversed(range(len(dims))):
        out[a], acc = acc, acc * max(int(dims[a]), 1)
    return out
