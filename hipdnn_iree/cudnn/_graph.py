"""``cudnn.pygraph`` over ``hd.Graph``: cuDNN FE's op methods, keyword names and semantics.

Every op call becomes one or more ``hd.Graph`` calls at once; the facade keeps only what cuDNN's
semantics need on top: which tensors are pass-by-value (their values are read at every execute),
which output strides the caller left unset (cuDNN's defaults are applied before validation),
and how variant-pack buffers bind (by address, as cuDNN binds device pointers).
"""
from __future__ import annotations

import functools
import math
import numbers
from contextlib import contextmanager

import numpy as np

from hipdnn_iree.cudnn import _composite
from hipdnn_iree.cudnn import _enums as E
from hipdnn_iree.cudnn._enums import cudnnGraphNotSupportedError
from hipdnn_iree.cudnn._handle import Handle, check, create_handle, sync_stream
from hipdnn_iree.frontend.graph import Graph
from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType, PointwiseMode

_DEFAULT = {}


def _default_handle() -> Handle:
    if "h" not in _DEFAULT:
        _DEFAULT["h"] = create_handle()
    return _DEFAULT["h"]


def _translate(fn):
    """NOT_SUPPORTED from below surfaces as cudnnGraphNotSupportedError (still an hd.HipdnnError)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except cudnnGraphNotSupportedError:
            raise
        except HipdnnError as e:
            from hipdnn_iree.cudnn._handle import _LAST_ERROR
            _LAST_ERROR[0] = e.message
            if e.status == Status.NOT_SUPPORTED:
                raise cudnnGraphNotSupportedError(e.message) from None
            if not isinstance(e, RuntimeError):
                raise E.cudnnError(e.status, e.message) from None
            raise
    return wrapper


def _unsupported(what: str):
    raise cudnnGraphNotSupportedError(what)


class tensor:
    """A graph tensor (cuDNN FE's ``cudnn.tensor``): setters chain and return the tensor."""

    def __init__(self, graph: "pygraph", hd_tensor: TensorAttributes | None, pass_by_value=False, dims=None,
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


_UNARY = {"abs": "ABS", "ceil": "CEIL", "floor": "FLOOR", "exp": "EXP", "log": "LOG", "neg": "NEG",
          "rsqrt": "RSQRT", "reciprocal": "RECIPROCAL", "sqrt": "SQRT", "sin": "SIN", "cos": "COS", "tan": "TAN",
          "erf": "ERF", "identity": "IDENTITY", "sigmoid": "SIGMOID_FWD", "tanh": "TANH_FWD", "gelu": "GELU_FWD",
          "gelu_approx_tanh": "GELU_APPROX_TANH_FWD", "logical_not": "LOGICAL_NOT"}
_BINARY_AB = {"add": "ADD", "sub": "SUB", "mul": "MUL", "div": "DIV", "add_square": "ADD_SQUARE",
              "logical_and": "LOGICAL_AND", "logical_or": "LOGICAL_OR"}
_BINARY_01 = {"max": "MAX_OP", "min": "MIN_OP", "pow": "POW", "mod": "MOD"}
_CMP = {"cmp_eq": "CMP_EQ", "cmp_neq": "CMP_NEQ", "cmp_gt": "CMP_GT", "cmp_ge": "CMP_GE", "cmp_lt": "CMP_LT",
        "cmp_le": "CMP_LE"}
# cuDNN FE's activation backward methods taking (loss, input) only (relu/leaky_relu_backward take clips)
_BACKWARD = {"tanh_backward": "TANH_BWD", "sigmoid_backward": "SIGMOID_BWD", "elu_backward": "ELU_BWD",
             "gelu_backward": "GELU_BWD", "gelu_approx_tanh_backward": "GELU_APPROX_TANH_BWD",
             "softplus_backward": "SOFTPLUS_BWD", "swish_backward": "SWISH_BWD"}


class pygraph:
    """cuDNN FE's ``cudnn.pygraph`` on this engine (an ``hd.Graph`` underneath, ``.hd_graph``)."""

    def __init__(self, name="test_graph", io_data_type=None, intermediate_data_type=None, compute_data_type=None,
                 handle=None, sm_count=None, sm_version=None, kernel_cache=None, device_property=None,
                 is_dynamic_shape_enabled=False, is_override_shape_enabled=False, **kwargs):
        self._handle = check(handle) if handle is not None else None
        self._hd = Graph(name=str(name), io_data_type=E.to_hd_type(io_data_type, "io_data_type"),
                         intermediate_data_type=E.to_hd_type(intermediate_data_type, "intermediate_data_type"),
                         compute_data_type=E.to_hd_type(compute_data_type, "compute_data_type"))
        # cuDNN's dynamic shapes, override shapes and kernel cache map to hd.Graph's (docs/dynamic_shapes.md)
        if is_dynamic_shape_enabled:
            self._hd.set_dynamic_shape_enabled(True)
        if is_override_shape_enabled:
            self._hd.set_override_shape_enabled(True)
        if kernel_cache is not None:
            self._hd.set_kernel_cache(kernel_cache)
        self._override = bool(is_override_shape_enabled)
        self._by_hd = {}                  # id(hd tensor) -> facade tensor
        self._eps = []                    # (facade pass-by-value tensor, hd scalar constant) for baked scalars
        self._pbv_bufs = {}               # uid -> buffer holding a pass-by-value input on the device
        self._heur = None
        self._deferred = []               # unsupported features, refused at the build steps (_defer)
        self._policy = None
        self._pending = False             # plans wait for the first execute (baked scalars unknown)
        self._baked = None
        self._restored = False
        self._plan_tensors = None
        self._last_pack = None
        self._copy_back = []
        self._aliases = []                # (hd tensor, facade tensor): bound to the facade tensor's buffer
        self._deselected = set()          # engine ids left out (deselect_engines)
        self._inputs = set()              # id(hd tensor) of the graph's inputs (made by tensor())
        if device_property is not None and self._handle is None:
            # deviceless ahead-of-time compilation: a compile-only handle for the device's target
            from hipdnn_iree.cudnn._handle import DeviceProperties, Handle
            from hipdnn_iree.backend.handle import create_handle as _hd_create
            if not isinstance(device_property, DeviceProperties):
                raise HipdnnError(Status.BAD_PARAM, f"device_property: expected cudnn.create_device_properties(), "
                                                    f"got {type(device_property).__name__}")
            self._handle = Handle(_hd_create(device=None, target=device_property.target))

    @property
    def hd_graph(self) -> Graph:
        return self._hd

    # -- tensors ---------------------------------------------------------------------------
    @_translate
    def tensor(self, dim=None, stride=None, data_type=None, is_virtual=False, is_pass_by_value=False,
               ragged_offset=None, reordering_type=None, name="", uid=-1, **kwargs):
        if ragged_offset is not None:
            _unsupported(f"tensor '{name}': ragged_offset (packed variable-length sequences) is not supported")
        if reordering_type not in (None, E.tensor_reordering.NONE):
            _unsupported(f"tensor '{name}': reordering_type {reordering_type} is not supported")
        if dim is None:
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{name}': dim is required")
        dims = _list(dim, f"tensor '{name}': dim")
        strides = _list(stride, f"tensor '{name}': stride")
        dtype = E.to_hd_type(data_type, f"tensor '{name}': data_type")
        name = name or None
        if is_pass_by_value:
            if math.prod(dims) != 1:
                raise HipdnnError(Status.BAD_PARAM, f"pass-by-value tensor '{name}': dims {dims} must hold one value")
            t = tensor(self, None, True, dims, strides or _packed(dims),
                       dtype if dtype != DataType.NOT_SET else DataType.FLOAT, name or f"pbv_{len(self._by_hd)}")
            if uid is not None and uid >= 0:
                t._uid = int(uid)
            self._by_hd[id(t)] = t
            return t
        hdt = self._hd.tensor(name=name, uid=uid if uid is not None and uid >= 0 else None, dim=dims,
                              stride=strides, data_type=dtype, is_virtual=is_virtual)
        self._inputs.add(id(hdt))
        return self._wrap(hdt)

    @_translate
    def tensor_like(self, input, name=""):
        """A tensor with ``input``'s dims, strides and type (a torch/numpy tensor or a graph tensor)."""
        if isinstance(input, tensor):
            return self.tensor(dim=input.get_dim(), stride=input.get_stride(), data_type=input.get_data_type(),
                               is_pass_by_value=input._pbv, name=name or input.get_name() or "")
        if hasattr(input, "stride") and callable(input.stride):     # torch
            # NOTE: as in cuDNN, a host tensor is a pass-by-value scalar (epsilon, momentum, scales):
            # its value is read at every execute; a host tensor of several elements stays a tensor
            pbv = str(getattr(input, "device", "")) == "cpu" and input.numel() == 1
            return self.tensor(dim=list(input.shape), stride=list(input.stride()), data_type=input.dtype, name=name,
                               is_pass_by_value=pbv)
        if isinstance(input, np.ndarray):
            item = input.itemsize
            return self.tensor(dim=list(input.shape), stride=[s // item for s in input.strides],
                               data_type=_np_to_cudnn(input.dtype), name=name)
        raise HipdnnError(Status.BAD_PARAM, f"tensor_like: expected a torch/numpy tensor or a graph tensor, got "
                                            f"{type(input).__name__}")

    def _defer(self, what: str) -> None:
        """An unsupported feature met while the graph is written: refused (NOT_SUPPORTED) at the
        build steps cuDNN FE code wraps (create_execution_plans, check_support, build_plans), as
        cuDNN refuses such graphs there, not at node creation."""
        self._deferred.append(what)

    def _refuse_deferred(self) -> None:
        if self._deferred:
            _unsupported("; ".join(self._deferred))

    def _channels_last(self, hdt):
        """cuDNN's default for conv and reduction outputs left unset: packed channels-last (hd.Graph
        infers them in graph order at validate, virtual tensors included)."""
        hdt._layout_hint = "channels_last"
        return self._wrap(hdt)

    def _wrap(self, hdt):
        if hdt is None:
            return None
        t = self._by_hd.get(id(hdt))
        if t is None:
            t = self._by_hd[id(hdt)] = tensor(self, hdt)
        return t

    def _in(self, x, what="input"):
        if x is None or (isinstance(x, numbers.Real) and not isinstance(x, bool)):
            return x
        if isinstance(x, tensor):
            if x._g is not self:
                raise HipdnnError(Status.BAD_PARAM, f"{what} '{x.get_name()}' belongs to another graph")
            return x._hd()
        raise HipdnnError(Status.BAD_PARAM, f"{what} must be a tensor of this graph (or a number), got "
                                            f"{type(x).__name__}")

    def _scalar(self, x, what: str):
        """A scalar whose value the plan bakes in (epsilon): a number, or a pass-by-value tensor whose
        value is read at every execute (the plan is rebuilt, through the compile cache, when it changes)."""
        if isinstance(x, tensor) and x._pbv:
            c = self._hd.tensor(name=f"{x.get_name()}_value", value=1e-5)
            self._eps.append((x, c))
            return c
        if isinstance(x, tensor):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: pass a number or a pass-by-value tensor "
                                                f"(is_pass_by_value=True), got tensor '{x.get_name()}'")
        if isinstance(x, numbers.Real) and not isinstance(x, bool):
            return float(x)
        raise HipdnnError(Status.BAD_PARAM, f"{what}: expected a number or a pass-by-value tensor, got {x!r}")

    @staticmethod
    def _cdt(compute_data_type):
        if compute_data_type is None:
            return None
        d = E.to_hd_type(compute_data_type, "compute_data_type")
        return None if d == DataType.NOT_SET else d

    # -- ops: convolution ------------------------------------------------------------------
    def _conv_kw(self, padding, pre_padding, post_padding, stride, dilation):
        if padding is not None and (pre_padding is not None or post_padding is not None):
            raise HipdnnError(Status.BAD_PARAM, "conv: give padding or pre_padding/post_padding, not both")
        return dict(padding=padding, pre_padding=pre_padding, post_padding=post_padding, stride=stride,
                    dilation=dilation)

    @staticmethod
    def _conv_mode(kwargs):
        mode = kwargs.pop("convolution_mode", None)
        if mode is not None and str(mode).rsplit(".", 1)[-1].upper() not in ("CROSS_CORRELATION",):
            _unsupported(f"conv: convolution_mode {mode} is not supported (cross-correlation only)")
        if kwargs:
            raise TypeError(f"unexpected keyword argument(s): {sorted(kwargs)}")

    @_translate
    def conv_fprop(self, image, weight, padding=None, stride=None, dilation=None, compute_data_type=None, name="",
                   pre_padding=None, post_padding=None, **kwargs):
        self._conv_mode(kwargs)
        y = self._hd.conv_fprop(self._in(image, "image"), self._in(weight, "weight"),
                                compute_data_type=self._cdt(compute_data_type), name=name or None,
                                **self._conv_kw(padding, pre_padding, post_padding, stride, dilation))
        return self._channels_last(y)

    @_translate
    def conv_dgrad(self, loss, filter, padding=None, stride=None, dilation=None, compute_data_type=None, name="",
                   pre_padding=None, post_padding=None, **kwargs):
        self._conv_mode(kwargs)
        dx = self._hd.conv_dgrad(self._in(loss, "loss"), self._in(filter, "filter"),
                                 compute_data_type=self._cdt(compute_data_type), name=name or None,
                                 **self._conv_kw(padding, pre_padding, post_padding, stride, dilation))
        return self._channels_last(dx)

    @_translate
    def conv_wgrad(self, image, loss, padding=None, stride=None, dilation=None, compute_data_type=None, name="",
                   pre_padding=None, post_padding=None, **kwargs):
        self._conv_mode(kwargs)
        dw = self._hd.conv_wgrad(self._in(loss, "loss"), self._in(image, "image"),
                                 compute_data_type=self._cdt(compute_data_type), name=name or None,
                                 **self._conv_kw(padding, pre_padding, post_padding, stride, dilation))
        return self._channels_last(dw)

    # -- ops: matmul -------------------------------------------------------------------------
    @_translate
    def matmul(self, A, B, compute_data_type=None, padding=0.0, name="", **kwargs):
        if kwargs:
            raise TypeError(f"matmul: unexpected keyword argument(s): {sorted(kwargs)}")
        if padding not in (0, 0.0, None):
            self._defer(f"matmul: padding={padding!r} (the value ragged rows are padded with) is not supported")
        return self._wrap(self._hd.matmul(self._in(A, "A"), self._in(B, "B"),
                                          compute_data_type=self._cdt(compute_data_type), name=name or None))

    # -- ops: pointwise ----------------------------------------------------------------------
    def _pw(self, mode, a, b=None, c=None, compute_data_type=None, name="", **params):
        y = self._hd.pointwise(self._in(a), self._in(b), self._in(c), mode=PointwiseMode[mode],
                               compute_data_type=self._cdt(compute_data_type), name=name or None, **params)
        return self._wrap(y)

    @_translate
    def pointwise(self, mode, input0, input1=None, input2=None, compute_data_type=None, name=""):
        return self._pw(E.to_hd(PointwiseMode, mode, "pointwise mode").name if not isinstance(mode, E.pointwise_mode)
                        else PointwiseMode(int(mode)).name, input0, input1, input2, compute_data_type, name)

    @_translate
    def bias(self, input, bias, compute_data_type=None, name=""):
        return self._pw("ADD", input, bias, None, compute_data_type, name)

    @_translate
    def scale(self, input, scale, compute_data_type=None, name=""):
        return self._pw("MUL", input, scale, None, compute_data_type, name)

    @_translate
    def relu(self, input, negative_slope=None, lower_clip=None, upper_clip=None, lower_clip_slope=None,
             compute_data_type=None, name=""):
        slope = negative_slope if negative_slope is not None else lower_clip_slope
        return self._pw("RELU_FWD", input, None, None, compute_data_type, name, relu_lower_clip=lower_clip,
                        relu_upper_clip=upper_clip, relu_lower_clip_slope=slope)

    @_translate
    def leaky_relu(self, input, negative_slope=0.01, compute_data_type=None, name=""):
        return self._pw("RELU_FWD", input, None, None, compute_data_type, name, relu_lower_clip_slope=negative_slope)

    @_translate
    def elu(self, input, alpha=1.0, compute_data_type=None, name=""):
        return self._pw("ELU_FWD", input, None, None, compute_data_type, name, alpha=alpha)

    @_translate
    def swish(self, input, swish_beta=1.0, compute_data_type=None, name=""):
        return self._pw("SWISH_FWD", input, None, None, compute_data_type, name, beta=swish_beta)

    @_translate
    def softplus(self, input, softplus_beta=1.0, compute_data_type=None, name=""):
        return self._pw("SOFTPLUS_FWD", input, None, None, compute_data_type, name, beta=softplus_beta)

    @_translate
    def gen_index(self, input, axis, compute_data_type=None, name=""):
        return self._pw("GEN_INDEX", input, None, None, compute_data_type, name, axis=axis)

    @_translate
    def binary_select(self, input0, input1, mask, compute_data_type=None, name=""):
        return self._pw("BINARY_SELECT", input0, input1, mask, compute_data_type, name)

    # -- ops: activation backward (cuDNN FE's *_backward pointwise: loss = dy, input = x) -----------
    @_translate
    def relu_backward(self, loss, input, negative_slope=None, lower_clip=None, upper_clip=None,
                      compute_data_type=None, name=""):
        return self._pw("RELU_BWD", loss, input, None, compute_data_type, name, relu_lower_clip=lower_clip,
                        relu_upper_clip=upper_clip, relu_lower_clip_slope=negative_slope)

    @_translate
    def leaky_relu_backward(self, loss, input, negative_slope, compute_data_type=None, name=""):
        return self._pw("RELU_BWD", loss, input, None, compute_data_type, name, relu_lower_clip_slope=negative_slope)

    # -- ops: reductions and normalizations -----------------------------------------------------
    @_translate
    def reduction(self, input, mode, compute_data_type=None, name=""):
        y = self._hd.reduction(self._in(input), mode=E.to_hd(E.HD_REDUCTION, mode, "reduction mode"),
                               compute_data_type=self._cdt(compute_data_type), name=name or None)
        return self._channels_last(y)

    @_translate
    def batchnorm_inference(self, input, mean, inv_variance, scale, bias, compute_data_type=None, name=""):
        y = self._hd.batchnorm_inference(self._in(input), self._in(mean, "mean"), self._in(inv_variance, "inv_variance"),
                                         self._in(scale, "scale"), self._in(bias, "bias"),
                                         compute_data_type=self._cdt(compute_data_type), name=name or None)
        return self._wrap(y)

    @_translate
    def layernorm(self, norm_forward_phase, input, scale, bias, epsilon, compute_data_type=None, name="",
                  zero_centered_gamma=False):
        if zero_centered_gamma:
            self._defer("layernorm: zero_centered_gamma is not supported")
        phase = E.to_hd(E.HD_PHASE, norm_forward_phase, "layernorm norm_forward_phase")
        if phase == E.HD_PHASE.NOT_SET:
            phase = E.HD_PHASE.INFERENCE
        y, mean, inv = self._hd.layernorm(self._in(input), self._in(scale, "scale"), self._in(bias, "bias"),
                                          epsilon=self._scalar(epsilon, "layernorm epsilon"), forward_phase=phase,
                                          compute_data_type=self._cdt(compute_data_type), name=name or None)
        return self._wrap(y), self._wrap(mean), self._wrap(inv)

    @_translate
    def rmsnorm(self, norm_forward_phase, input, scale, bias=None, epsilon=None, compute_data_type=None, name=""):
        """``(Y, inv_variance)``: ``inv_variance`` is None in INFERENCE; in TRAINING it has dims
        ``[N, 1, ...]`` (the statistic over every axis but the batch axis, as cuDNN's) and the
        graph computes it with pointwise and reduction nodes (this engine's RMSNorm node has no
        statistics output)."""
        phase = E.to_hd(E.HD_PHASE, norm_forward_phase, "rmsnorm norm_forward_phase")
        if epsilon is None:
            raise HipdnnError(Status.BAD_PARAM, "rmsnorm: epsilon is required")
        eps = self._scalar(epsilon, "rmsnorm epsilon")
        cdt = self._cdt(compute_data_type)
        x = self._in(input)
        inv = None
        if phase == E.HD_PHASE.TRAINING:
            dims = input.get_dim()
            if not dims or len(dims) < 2:
                raise HipdnnError(Status.BAD_PARAM, f"rmsnorm: input dims {dims}: TRAINING needs a batch axis and "
                                                    "at least one normalized axis")
            hd = self._hd
            sq = hd.pointwise(x, x, mode=PointwiseMode.MUL, compute_data_type=cdt)
            ms = hd.reduction(sq, mode=E.HD_REDUCTION.AVG, compute_data_type=cdt).set_dim([dims[0]] + [1] * (len(dims) - 1))
            inv = hd.pointwise(hd.pointwise(ms, eps, mode=PointwiseMode.ADD, compute_data_type=cdt),
                               mode=PointwiseMode.RSQRT, compute_data_type=cdt, name=name or None)
            y = hd.pointwise(hd.pointwise(x, inv, mode=PointwiseMode.MUL, compute_data_type=cdt), self._in(scale, "scale"),
                             mode=PointwiseMode.MUL, compute_data_type=cdt)
        else:
            y = self._hd.rmsnorm(x, self._in(scale, "scale"), epsilon=eps, compute_data_type=cdt, name=name or None)
        if bias is not None:   # cuDNN's rmsnorm adds its bias after the scale: an ADD node here
            y = self._hd.pointwise(y, self._in(bias, "bias"), mode=PointwiseMode.ADD, compute_data_type=cdt)
        return self._wrap(y), self._wrap(inv)

    # -- ops: training norms and genstats (hipdnn_iree/cudnn/_composite.py composes them) -----------------
    def _composer(self, compute_data_type):
        return _composite.Composer(self._hd, self._cdt(compute_data_type))

    def _dims_of(self, t, what: str):
        """``t``'s dims; an op output's are inferred now (hd.Graph infers them at validate) when unset."""
        if not isinstance(t, tensor):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: expected a tensor of this graph, got {type(t).__name__}")
        dims = t.get_dim()
        if dims:
            return list(dims)
        try:
            return self._hd._dims_now(t._hd())
        except HipdnnError as e:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: its dims are not set and cannot be inferred yet: "
                                                f"{e.message}") from None

    def _named(self, t, name, suffix):
        """A composed op's output named as cuDNN names it; Y and DX take the graph's default type (the
        io type once they are outputs), as cuDNN's do; statistics stay FLOAT unless set."""
        if t is None:
            return None
        if name:
            t.set_name(f"{name}::{suffix}")
        if suffix in ("Y", "DX"):
            t.set_data_type(DataType.NOT_SET)
        return self._wrap(t)

    @_translate
    def batchnorm(self, input, scale, bias, in_running_mean=None, in_running_var=None, epsilon=None, momentum=None,
                  peer_stats=None, compute_data_type=None, name=""):
        """Batchnorm training: ``[Y, mean, inv_variance, next_running_mean, next_running_var]``, the
        statistics over every axis but the channel axis (``[1, C, 1, ...]``, FLOAT); the saved
        inv_variance is ``1/sqrt(biased var + epsilon)``; the running statistics are
        ``(1 - momentum) * old + momentum * batch`` (unbiased variance), None without running inputs."""
        if peer_stats:
            self._defer("batchnorm: peer_stats (statistics shared across GPUs) are not supported")
        dims = self._dims_of(input, "batchnorm input")
        if len(dims) < 2:
            raise HipdnnError(Status.BAD_PARAM, f"batchnorm: input dims {dims} need a channel axis")
        if epsilon is None:
            raise HipdnnError(Status.BAD_PARAM, "batchnorm: epsilon is required")
        if (in_running_mean is None) != (in_running_var is None):
            raise HipdnnError(Status.BAD_PARAM, "batchnorm: give in_running_mean and in_running_var together")
        stats = [1, dims[1]] + [1] * (len(dims) - 2)
        c = self._composer(compute_data_type)
        y, mean, inv, var = _composite.norm_forward(c, self._in(input), dims, stats, self._in(scale, "scale"),
                                                    self._in(bias, "bias"), self._scalar(epsilon, "batchnorm epsilon"))
        next_mean = next_var = None
        if in_running_mean is not None:
            if momentum is None:
                raise HipdnnError(Status.BAD_PARAM, "batchnorm: momentum is required with running statistics")
            m = self._scalar(momentum, "batchnorm momentum")
            count = _composite.reduced_count(dims, stats)
            unbiased = c.pw("MUL", var, count / max(count - 1, 1))
            # (1 - m) * old + m * new, as old + m * (new - old): m may be a baked pass-by-value scalar
            old_mean, old_var = self._in(in_running_mean, "in_running_mean"), self._in(in_running_var, "in_running_var")
            next_mean = c.pw("ADD", old_mean, c.pw("MUL", c.pw("SUB", mean, old_mean), m))
            next_var = c.pw("ADD", old_var, c.pw("MUL", c.pw("SUB", unbiased, old_var), m))
            next_mean.set_dim(stats), next_var.set_dim(stats)
        return (self._named(y, name, "Y"), self._named(mean, name, "MEAN"), self._named(inv, name, "INV_VARIANCE"),
                self._named(next_mean, name, "NEXT_RUNNING_MEAN"), self._named(next_var, name, "NEXT_RUNNING_VAR"))

    def _norm_backward(self, what, grad, input, scale, mean, inv_variance, stats_of, centered=True, want_dbias=True,
                       epsilon=None, compute_data_type=None, name=""):
        dims = self._dims_of(input, f"{what} input")
        sdims = self._dims_of(scale, f"{what} scale")
        _composite.check_stats_dims(what, dims, sdims, "scale")
        c = self._composer(compute_data_type)
        x = self._in(input)
        if inv_variance is None:
            if epsilon is None:
                raise HipdnnError(Status.BAD_PARAM, f"{what}: give mean and inv_variance, or epsilon to compute them")
            _, m, inv, _ = _composite.norm_forward(c, x, dims, stats_of, None, None, self._scalar(epsilon, f"{what} epsilon"),
                                                   centered)
        else:
            stats = self._dims_of(inv_variance, f"{what} inv_variance")
            _composite.check_stats_dims(what, dims, stats, "inv_variance")
            stats_of = stats
            inv = self._in(inv_variance, "inv_variance")
            m = self._in(mean, "mean") if centered else None
            if centered and m is None:
                raise HipdnnError(Status.BAD_PARAM, f"{what}: mean is required with inv_variance")
        dx, dscale, dbias = _composite.norm_backward(c, self._in(grad, "grad"), x, dims, stats_of,
                                                     self._in(scale, "scale"), sdims, m, inv, centered, want_dbias)
        return self._named(dx, name, "DX"), self._named(dscale, name, "DSCALE"), self._named(dbias, name, "DBIAS")

    @_translate
    def batchnorm_backward(self, grad, input, scale, mean=None, inv_variance=None, epsilon=None, peer_stats=None,
                           compute_data_type=None, name=""):
        """``[DX, dscale, dbias]`` of batchnorm training (saved mean and inv_variance, or epsilon to
        recompute them from the input)."""
        if peer_stats:
            self._defer("batchnorm_backward: peer_stats (statistics shared across GPUs) are not supported")
        dims = self._dims_of(input, "batchnorm_backward input")
        stats = [1, dims[1]] + [1] * (len(dims) - 2) if len(dims) >= 2 else None
        return self._norm_backward("batchnorm_backward", grad, input, scale, mean, inv_variance, stats,
                                   epsilon=epsilon, compute_data_type=compute_data_type, name=name)

    @_translate
    def layernorm_backward(self, grad, input, scale, mean, inv_variance, compute_data_type=None, name=""):
        """``[DX, dscale, dbias]`` of layernorm (statistics over the axes where ``mean`` has 1)."""
        return self._norm_backward("layernorm_backward", grad, input, scale, mean, inv_variance, None,
                                   compute_data_type=compute_data_type, name=name)

    @_translate
    def rmsnorm_backward(self, grad, input, scale, inv_variance, has_dbias=False, compute_data_type=None, name=""):
        """``[DX, dscale, dbias or None]`` of rmsnorm (statistics over the axes where ``inv_variance`` has 1)."""
        return self._norm_backward("rmsnorm_backward", grad, input, scale, None, inv_variance, None, centered=False,
                                   want_dbias=bool(has_dbias), compute_data_type=compute_data_type, name=name)

    @_translate
    def instancenorm(self, norm_forward_phase, input, scale, bias, epsilon, compute_data_type=None, name=""):
        """``[Y, mean, inv_variance]``: statistics per sample and channel over the spatial axes
        (``[N, C, 1, ...]``, FLOAT); mean and inv_variance are None in INFERENCE."""
        phase = E.to_hd(E.HD_PHASE, norm_forward_phase, "instancenorm norm_forward_phase")
        dims = self._dims_of(input, "instancenorm input")
        if len(dims) < 3:
            raise HipdnnError(Status.BAD_PARAM, f"instancenorm: input dims {dims} need spatial axes")
        if epsilon is None:
            raise HipdnnError(Status.BAD_PARAM, "instancenorm: epsilon is required")
        stats = dims[:2] + [1] * (len(dims) - 2)
        y, mean, inv, _ = _composite.norm_forward(self._composer(compute_data_type), self._in(input), dims, stats,
                                                  self._in(scale, "scale"), self._in(bias, "bias"),
                                                  self._scalar(epsilon, "instancenorm epsilon"))
        if phase != E.HD_PHASE.TRAINING:
            return self._named(y, name, "Y"), None, None
        return self._named(y, name, "Y"), self._named(mean, name, "MEAN"), self._named(inv, name, "INV_VARIANCE")

    @_translate
    def instancenorm_backward(self, grad, input, scale, mean=None, inv_variance=None, epsilon=None,
                              compute_data_type=None, name=""):
        """``[DX, dscale, dbias]`` of instancenorm (saved mean and inv_variance, or epsilon to recompute them)."""
        dims = self._dims_of(input, "instancenorm_backward input")
        stats = dims[:2] + [1] * (len(dims) - 2)
        return self._norm_backward("instancenorm_backward", grad, input, scale, mean, inv_variance, stats,
                                   epsilon=epsilon, compute_data_type=compute_data_type, name=name)

    @_translate
    def genstats(self, input, compute_data_type=None, name=""):
        """``[sum, sq_sum]``: per-channel sum and sum of squares over every other axis (``[1, C, 1, ...]``)."""
        dims = self._dims_of(input, "genstats input")
        if len(dims) < 2:
            raise HipdnnError(Status.BAD_PARAM, f"genstats: input dims {dims} need a channel axis")
        stats = [1, dims[1]] + [1] * (len(dims) - 2)
        c = self._composer(compute_data_type)
        x = self._in(input)
        return self._named(c.sum(x, stats), name, "SUM"), self._named(c.sum(c.pw("MUL", x, x), stats), name, "SQ_SUM")

    # -- ops: attention ---------------------------------------------------------------------------
    @_translate
    def sdpa(self, q, k, v, attn_scale=None, bias=None, is_inference=None, generate_stats=None,
             use_alibi_mask=False, use_padding_mask=False, seq_len_q=None, seq_len_kv=None, use_causal_mask=False,
             use_causal_mask_bottom_right=False, sliding_window_length=None, dropout=None, rng_dump=None,
             paged_attention_k_table=None, paged_attention_v_table=None, paged_attention_max_seq_len_kv=None,
             compute_data_type=None, name="", **kwargs):
        if kwargs:
            raise TypeError(f"sdpa: unexpected keyword argument(s): {sorted(kwargs)}")
        stats = generate_stats if generate_stats is not None else (is_inference is False)
        for flag, what in ((use_alibi_mask, "use_alibi_mask"), (use_padding_mask, "use_padding_mask"),
                           (sliding_window_length is not None, "sliding_window_length"),
                           (dropout is not None, "dropout"), (rng_dump is not None, "rng_dump"),
                           (paged_attention_k_table is not None or paged_attention_v_table is not None,
                            "paged attention"), (seq_len_q is not None or seq_len_kv is not None, "seq_len_q/kv")):
            if flag:
                self._defer(f"sdpa: {what} is not supported by this engine")
        causal = bool(use_causal_mask)
        if use_causal_mask_bottom_right:
            qd, kd = q.get_dim(), k.get_dim()
            if qd is None or kd is None or qd[2] != kd[2]:
                self._defer("sdpa: use_causal_mask_bottom_right with Sq != Skv is not supported (this engine "
                            "aligns the causal mask top-left; the two agree only when Sq == Skv)")
            causal = True
        scale = attn_scale
        if isinstance(scale, tensor):
            scale = self._in(scale, "attn_scale")
        elif scale is not None and not (isinstance(scale, numbers.Real) and not isinstance(scale, bool)):
            raise HipdnnError(Status.BAD_PARAM, f"sdpa: attn_scale must be a number or a tensor, got {scale!r}")
        o = self._hd.sdpa(self._in(q, "q"), self._in(k, "k"), self._in(v, "v"), attn_scale=scale, is_causal=causal,
                          mask=self._in(bias, "bias"), compute_data_type=self._cdt(compute_data_type),
                          name=name or None)
        st = self._sdpa_stats(q, k, scale, bias, causal) if stats else None
        return self._wrap(o), st

    def _sdpa_stats(self, q, k, scale, bias, causal):
        """cuDNN's Stats, ``max + log(sum(exp(s - max)))`` of the scaled (masked) scores per query row
        ([B, H, Sq, 1], FLOAT), composed from matmul, pointwise and reduction nodes: this engine's
        SDPA node has no statistics output. K^T is K's buffer seen with its last two axes swapped
        (an extra graph input bound to K's buffer at execute)."""
        qd, kd, ks = q.get_dim(), k.get_dim(), k.get_stride()
        if qd is None or kd is None or len(qd) != 4 or qd[1] != kd[1]:
            _unsupported(f"sdpa: Stats with grouped-query heads (q dims {qd}, k dims {kd}) are not supported; "
                         "generate_stats=False works")
        hd = self._hd
        F = DataType.FLOAT
        kt = hd.tensor(name=f"{k.get_name()}::T", dim=[kd[0], kd[1], kd[3], kd[2]], stride=[ks[0], ks[1], ks[3], ks[2]],
                       data_type=k._hd().get_data_type())
        self._aliases.append((kt, k))
        sc = hd.matmul(self._in(q), kt, compute_data_type=F)
        factor = scale if scale is not None else 1.0 / math.sqrt(qd[3])
        sc = hd.pointwise(sc, factor, mode=PointwiseMode.MUL, compute_data_type=F)
        if bias is not None:
            sc = hd.pointwise(sc, self._in(bias, "bias"), mode=PointwiseMode.ADD, compute_data_type=F)
        if causal:   # NOTE: masked scores get -1e30: exp() of them is exactly 0, and no row is all masked
            row = hd.pointwise(sc, mode=PointwiseMode.GEN_INDEX, axis=2, compute_data_type=F)
            col = hd.pointwise(sc, mode=PointwiseMode.GEN_INDEX, axis=3, compute_data_type=F)
            keep = hd.pointwise(row, col, mode=PointwiseMode.CMP_GE, compute_data_type=F)
            sc = hd.pointwise(sc, -1e30, keep, mode=PointwiseMode.BINARY_SELECT, compute_data_type=F)
        rows = [qd[0], qd[1], qd[2], 1]
        mx = hd.reduction(sc, mode=E.HD_REDUCTION.MAX, compute_data_type=F).set_dim(rows)
        e = hd.pointwise(hd.pointwise(sc, mx, mode=PointwiseMode.SUB, compute_data_type=F), mode=PointwiseMode.EXP,
                         compute_data_type=F)
        sm = hd.reduction(e, mode=E.HD_REDUCTION.ADD, compute_data_type=F).set_dim(rows)
        st = hd.pointwise(mx, hd.pointwise(sm, mode=PointwiseMode.LOG, compute_data_type=F), mode=PointwiseMode.ADD,
                          compute_data_type=F)
        return self._wrap(st).set_data_type(E.data_type.FLOAT)

    # -- lifecycle ---------------------------------------------------------------------------------
    @_translate
    def validate(self):
        self._hd.validate()
        return self

    @_translate
    def build_operation_graph(self, handle=None):
        if not self._hd._validated:
            self.validate()
        self._hd.build_operation_graph(self._hd_handle(handle))
        return self

    def _hd_handle(self, handle=None):
        h = check(handle) if handle is not None else (self._handle or _default_handle())
        if self._handle is None:
            self._handle = h
        return h.hd

    @_translate
    def create_execution_plans(self, heur_modes=None):
        self._refuse_deferred()
        modes = heur_modes if isinstance(heur_modes, (list, tuple)) else [heur_modes or E.heur_mode.A]
        hd_modes = []
        for m in modes:
            if m == E.heur_mode.INSTANT:
                m = E.heur_mode.A
            hm = E.to_hd(E.HD_HEUR, m, "heur_mode")
            if hm not in hd_modes:
                hd_modes.append(hm)
        self._heur = hd_modes
        if self._hd._op_graph is None:
            self.build_operation_graph()
        self._hd.create_execution_plans(hd_modes)
        if self._deselected:
            self._hd._plans = [p for p in self._hd._plans if p.config.engine_id not in self._deselected]
        self._cudnn_numerics()
        return self

    def _cudnn_numerics(self) -> None:
        """cuDNN's numerics on NVIDIA GPUs: FLOAT convolutions on TF32 tensor cores, as cuDNN (and
        PyTorch) run them: configs that leave ``F32_CONV_MATH`` AUTO get TF32 on a CUDA target."""
        target = str(getattr(self._hd._handle, "target", "") or "")
        if not target.startswith("cuda"):
            return
        rm = self._hd._handle.resource_manager
        has = {}                               # engine id -> whether it has the knob
        for slot in self._hd._plans or []:
            eid, knobs = slot.config.engine_id, slot.config.knobs
            if eid not in has:
                has[eid] = any(k.name == "F32_CONV_MATH" for k in rm.knobs(eid))
            if slot.plan is None and has[eid] and knobs.get("F32_CONV_MATH", "AUTO") == "AUTO":
                knobs["F32_CONV_MATH"] = "TF32"

    @_translate
    def check_support(self):
        self._refuse_deferred()
        self._hd.check_support()
        return self

    @_translate
    def build_plans(self, policy=E.build_plan_policy.HEURISTICS_CHOICE):
        self._refuse_deferred()
        self._policy = E.to_hd(E.HD_POLICY, policy, "build_plan_policy")
        if self._eps:
            self._pending = True     # the baked scalars' values come with the first execute
            return self
        self._hd.build_plans(self._policy)
        return self

    @_translate
    def build_plan_at_index(self, index):
        if self._eps:
            self._pending = True
            return self
        self._hd.build_plan_at_index(index)
        return self

    @_translate
    def build(self, heur_modes=None):
        """No argument: validate and build the operation graph (cuDNN's ``build()``); with heuristic
        modes: the whole pipeline up to built plans."""
        self.validate().build_operation_graph()
        if heur_modes is not None:
            self.create_execution_plans(heur_modes).check_support().build_plans()
        return self

    def get_execution_plan_count(self):
        return self._hd.get_execution_plan_count()

    @_translate
    def get_workspace_size(self):
        if self._pending:
            return 0
        return self._hd.get_workspace_size()

    def get_workspace_size_plan_at_index(self, index):
        return 0

    # -- engines, knobs and plans as cuDNN FE numbers them --------------------------------------
    def _engines(self, what: str) -> list:
        """The engines that take this graph, in rank order: cuDNN's engine index i is the i-th."""
        if self._hd._op_graph is None:
            self.build_operation_graph()
        rm = self._hd._handle.resource_manager
        found = rm.applicable_engines(self._hd._op_graph, self._hd._preferred)
        return [e for e in found if e not in self._deselected]

    def _engine(self, engine, what: str) -> int:
        """An engine index (cuDNN's numbering: 0 .. get_engine_count() - 1), an engine id or a name."""
        if isinstance(engine, str):
            return self._hd._handle.resource_manager.engine_id_of(engine)
        if isinstance(engine, bool) or not isinstance(engine, int):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: expected an engine index, id or name, got {engine!r}")
        engines = self._engines(what)
        if 0 <= engine < len(engines):
            return engines[engine]
        if engine in engines:
            return engine
        raise HipdnnError(Status.BAD_PARAM, f"{what}: engine {engine} is out of range: graph '{self._hd.name}' has "
                                            f"{len(engines)} engine(s) (get_engine_count())")

    def _kernel_configs(self, eid: int) -> list:
        """The engine's configurations, KERNEL_CFG's values: its HeurMode.A choice, then HeurMode.B's."""
        rm = self._hd._handle.resource_manager
        out = []
        for mode in (E.HD_HEUR.A, E.HD_HEUR.B):
            for cfg in rm.engine_configs(eid, self._hd._op_graph, mode):
                if all(cfg.knobs != c.knobs for c in out):
                    out.append(cfg)
        return out

    @_translate
    def get_engine_count(self) -> int:
        """How many engines take this graph (engine indices for get_knobs_for_engine / create_execution_plan)."""
        return len(self._engines("get_engine_count"))

    @_translate
    def get_knobs_for_engine(self, engine):
        """The engine's knobs as cuDNN FE lists them (``.type``, ``.min_value``, ``.max_value``,
        ``.stride``): ``KERNEL_CFG`` indexes the engine's configurations; each engine knob's values
        index its ``choices``."""
        eid = self._engine(engine, "get_knobs_for_engine")
        rm = self._hd._handle.resource_manager
        n = len(self._kernel_configs(eid))
        out = [knob(E.knob_type.KERNEL_CFG, tuple(range(n)), 0)] if n > 1 else []
        for k in rm.knobs(eid):
            if k.name in E.knob_type.__members__:
                out.append(knob(E.knob_type[k.name], tuple(k.choices), k.default))
        return out

    @_translate
    def create_execution_plan(self, engine_id, knobs=None):
        """Appends one plan: ``engine_id`` (an engine index, id or name; None: IREE_LINALG) with ``knobs``
        (``{knob_type: value}``: a KERNEL_CFG index, or an engine knob's choice or choice index)."""
        eid = self._engine(engine_id if engine_id is not None else "IREE_LINALG", "create_execution_plan")
        values = {}
        for k, v in (knobs or {}).items():
            name = k.name if isinstance(k, E.knob_type) else str(k)
            if name == "KERNEL_CFG":
                cfgs = self._kernel_configs(eid)
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(cfgs):
                    raise HipdnnError(Status.BAD_PARAM, f"create_execution_plan: KERNEL_CFG {v!r} is out of range: "
                                                        f"the engine has {len(cfgs)} configuration(s)")
                values.update(cfgs[v].knobs)
                continue
            if name not in E.ENGINE_KNOBS:
                _unsupported(f"knob {k}: cuDNN kernel knobs have no meaning for IREE-compiled code; this engine's "
                             f"knobs are {', '.join(E.ENGINE_KNOBS)} and KERNEL_CFG")
            values[name] = v
        rm = self._hd._handle.resource_manager
        choices = {k.name: k.choices for k in rm.knobs(eid)}
        for name, v in list(values.items()):
            if isinstance(v, int) and not isinstance(v, bool) and v not in choices.get(name, ()) \
                    and 0 <= v < len(choices.get(name, ())):
                values[name] = choices[name][v]      # a choice index, as cuDNN's knob values are numbers
        self._hd.create_execution_plan(eid, values)
        self._cudnn_numerics()
        return self

    @_translate
    def deselect_engines(self, engines):
        """Engines (names, or ids) left out of the plans ``create_execution_plans`` makes; cuDNN
        names engines ``"eng<N>"``, which name none here and are ignored."""
        rm = None
        for e in engines or []:
            if isinstance(e, str) and e.startswith("eng") and e[3:].isdigit():
                continue
            if rm is None:
                rm = self._hd_handle().resource_manager
            self._deselected.add(rm.engine_id_of(e))
        return self

    def _notes(self, eid: int) -> list:
        rm = self._hd._handle.resource_manager
        plugin = rm.plugin_for(eid)
        # NOTE: an engine that compiles source at build time (IREE's, which has source_text) is
        # cuDNN's RUNTIME_COMPILATION; the numpy reference compiles nothing
        return [E.behavior_note.RUNTIME_COMPILATION] if callable(getattr(plugin, "source_text", None)) else []

    @_translate
    def get_behavior_notes_for_plan_at_index(self, index):
        return self._notes(self._hd.get_engine_config_at_index(index).engine_id)

    @_translate
    def get_behavior_notes(self):
        """The behavior notes of the selected plan."""
        return self._notes(self._hd.get_engine_config_at_index(self._hd.get_selected_plan_index()).engine_id)

    @_translate
    def get_plan_name_at_index(self, index) -> str:
        cfg = self._hd.get_engine_config_at_index(index)
        knobs = [f"{k}={v}" for k, v in cfg.knobs.items() if v != "AUTO"]
        return "_".join([cfg.engine_name] + knobs)

    @_translate
    def get_engine_and_knobs_at_index(self, index):
        cfg = self._hd.get_engine_config_at_index(index)
        return cfg.engine_id, {E.knob_type[k]: v for k, v in cfg.knobs.items() if k in E.knob_type.__members__}

    @_translate
    def query_tensor_attributes_of_uid(self, uid):
        """The graph tensor with ``uid``."""
        for t in self._by_hd.values():
            if t.get_uid() == uid:
                return t
        raise HipdnnError(Status.BAD_PARAM, f"query_tensor_attributes_of_uid: graph '{self._hd.name}' has no tensor "
                                            f"with uid {uid}")

    @_translate
    def key(self) -> int:
        """A 64-bit key of the graph's content (ops, tensors, types, shapes, layouts), as cuDNN's
        graph key: two graphs with the same key build the same plans."""
        import hashlib
        if not self._hd._validated:
            self.validate()
        data = self._hd.to_hipdnn_graph()
        return int.from_bytes(hashlib.sha256(data).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF

    def deselect_numeric_notes(self, notes):
        return self

    def deselect_behavior_notes(self, notes):
        return self

    def deselect_workspace_greater_than(self, size):
        return self

    def select_numeric_notes(self, notes):
        return self

    def select_behavior_notes(self, notes):
        return self

    # -- execution ------------------------------------------------------------------------------------
    def _ensure_plans(self, values: dict):
        """Bakes the pass-by-value scalars' values; (re)builds the plans when they changed."""
        if not self._eps:
            return
        baked = []
        for t, c in self._eps:
            if t not in values:
                raise HipdnnError(Status.BAD_PARAM, f"variant pack has no value for pass-by-value tensor "
                                                    f"'{t.get_name()}' (uid {t.get_uid()})")
            baked.append(values[t])
        if baked == self._baked and not self._pending:
            return
        for (t, c), v in zip(self._eps, baked):
            if not math.isfinite(v):
                raise HipdnnError(Status.BAD_PARAM, f"pass-by-value tensor '{t.get_name()}': value {v} is not finite")
            self._hd._check_mutable()
            c._value = float(v)
        heur, policy = self._heur, self._policy or E.HD_POLICY.HEURISTICS_CHOICE
        self.validate()
        self._hd.build_operation_graph(self._hd_handle())
        self._hd.create_execution_plans(heur or [E.HD_HEUR.A])
        self._cudnn_numerics()
        self._hd.check_support()
        self._hd.build_plans(policy)
        self._baked, self._pending = baked, False

    def _restored_override(self) -> bool:
        return self._restored and bool(getattr(self._hd, "is_override_shape_enabled", lambda: False)())

    def _pack(self, variant_pack, hd_handle, by_address=True):
        if not isinstance(variant_pack, dict):
            raise HipdnnError(Status.BAD_PARAM, f"variant_pack must be a dict, got {type(variant_pack).__name__}")
        by_uid = None
        values, pack, raw = {}, {}, {}
        for key, buf in variant_pack.items():
            if key is None or buf is None:
                continue        # NOTE: cuDNN code passes optional outputs that are None (Stats): skipped
            if isinstance(key, tensor):
                t = key
            elif isinstance(key, numbers.Integral) and not isinstance(key, bool):
                if by_uid is None:
                    by_uid = {t.get_uid(): t for t in self._by_hd.values() if t.get_uid() is not None}
                t = by_uid.get(int(key))
                if t is None:                 # a restored plan's uid (or an unknown one: refused below)
                    pack[int(key)] = self._restored_buffer(int(key), buf, hd_handle)
                    continue
            else:
                raise HipdnnError(Status.BAD_PARAM, f"variant pack key must be a graph tensor or a uid, got "
                                                    f"{type(key).__name__}")
            if t._pbv:
                v = _scalar_value(buf, t)
                values[t] = v
                if t._t is not None:
                    pack[t._t.get_uid()] = self._pbv_buffer(t, v, hd_handle)
                continue
            if t._t is None:
                raise HipdnnError(Status.BAD_PARAM, f"tensor '{t.get_name()}' is not part of the graph")
            buf = _as_buffer(t._t, buf, hd_handle)
            pack[t._t.get_uid()] = _by_address(t._t, buf) if by_address else buf
            raw[t] = buf
        for alias, src in self._aliases:
            if src in raw:
                pack[alias.get_uid()] = _by_address(alias, raw[src])
        self._copy_back = self._in_place_outputs(pack, raw)
        return values, pack

    def _in_place_outputs(self, pack: dict, raw: dict) -> list:
        """cuDNN updates buffers in place (batchnorm's running statistics: the output bound to the
        input's buffer): an output whose buffer shares memory with an input's is written to a buffer
        of its own, copied into the caller's after the run. Returns ``[(own, caller's), ...]``."""
        ins = [pack[t._t.get_uid()] for t in raw if id(t._t) in self._inputs]
        if not ins:
            return []
        out = []
        for t in raw:
            if id(t._t) in self._inputs:
                continue
            uid = t._t.get_uid()
            buf = pack[uid]
            if any(_shares_memory(buf, i) for i in ins):
                own = buf.clone() if hasattr(buf, "clone") else np.array(buf, copy=True)
                pack[uid] = own
                out.append((own, buf))
        return out

    def _restored_buffer(self, uid, buf, hd_handle):
        """A restored plan knows no pass-by-value tensors: a one-element host tensor (or a number)
        for a GPU handle is such a value, copied into a device buffer of the plan tensor's dims."""
        if hd_handle.device in (None, "local-task", "local-sync"):
            return buf
        on_host = isinstance(buf, (numbers.Real, np.ndarray)) or str(getattr(buf, "device", "")) == "cpu"
        if not on_host:
            return buf
        if self._plan_tensors is None:
            self._plan_tensors = {p.uid: p for p in self._hd.get_compiled_plan_tensors()}
        p = self._plan_tensors.get(uid)
        if p is None or math.prod(p.dims) != 1:
            return buf
        value = _scalar_value(buf, type("T", (), {"get_name": lambda self: f"uid {uid}"})())
        import torch
        dev = self._pbv_bufs.get(uid)
        if dev is None:
            from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
            dev = self._pbv_bufs[uid] = torch.empty(list(p.dims), dtype=getattr(torch, numpy_dtype(int(p.data_type)).name),
                                                    device="cuda")
        dev.fill_(value)
        return dev

    def _pbv_buffer(self, t, value, hd_handle):
        """The pass-by-value tensor's one value in a buffer on the handle's device (made once)."""
        uid = t._t.get_uid()
        buf = self._pbv_bufs.get(uid)
        dims = t._t.get_dim()
        from hipdnn_iree.plugin_sdk.buffers import empty_aligned, numpy_dtype
        dtype = numpy_dtype(int(t._t.get_data_type()))
        if hd_handle.device in (None, "local-task", "local-sync"):
            if buf is None:
                buf = self._pbv_bufs[uid] = empty_aligned(dims, dtype)
            buf.fill(value)
            return buf
        import torch
        if buf is None:
            tdt = getattr(torch, dtype.name if dtype.name != "bfloat16" else "bfloat16")
            buf = self._pbv_bufs[uid] = torch.empty(dims, dtype=tdt, device="cuda")
        buf.fill_(value)
        return buf

    @_translate
    def execute(self, variant_pack, workspace=None, handle=None, override_uids=None, override_shapes=None,
                override_strides=None):
        """Runs the plan. An override-shape graph (``is_override_shape_enabled=True``) takes
        ``override_uids`` / ``override_shapes`` / ``override_strides`` as cuDNN's does; its buffers
        are then bound as given (the engine binds override shapes by address)."""
        overrides = None
        if override_uids is not None or override_shapes is not None or override_strides is not None:
            uids = [u.get_uid() if isinstance(u, tensor) else u for u in (override_uids or [])]
            overrides = (uids, override_shapes, override_strides)
        self._run(variant_pack, handle, None, overrides)

    @_translate
    def execute_plan_at_index(self, variant_pack, workspace=None, index=0, handle=None):
        self._run(variant_pack, handle, index)

    def _run(self, variant_pack, handle, index, overrides=None):
        h = check(handle) if handle is not None else (self._handle or _default_handle())
        # NOTE: a loop that passes the same tensors again reuses the last translation when it bound
        # the caller's own objects (no by-address view, no pass-by-value copy): hd's checks still run.
        key = (id(h), *map(id, variant_pack), *map(id, variant_pack.values())) if type(variant_pack) is dict \
            else None
        last = self._last_pack
        if key is not None and last is not None and last[0] == key:
            values, pack = {}, last[1]
            self._copy_back = []
        else:
            values, pack = self._pack(variant_pack, h.hd, by_address=not (self._override or self._restored_override()))
            own = {id(v) for v in variant_pack.values()}
            self._last_pack = (key, pack, variant_pack.copy()) if key is not None and not values and \
                not self._copy_back and all(id(v) in own for v in pack.values()) else None
        if not self._restored:
            self._ensure_plans(values)
        if h.stream is not None:
            sync_stream(h.stream)
        if index is None and overrides is not None:
            self._hd.execute(h.hd, pack, None, *overrides)
        elif index is None:
            self._hd.execute(h.hd, pack)
        else:
            self._hd.execute_plan_at_index(h.hd, pack, None, index)
        for own, theirs in self._copy_back:
            if hasattr(theirs, "copy_"):
                theirs.copy_(own)
            else:
                np.copyto(theirs, own)

    # -- serialization -----------------------------------------------------------------------------------
    @_translate
    def serialize(self) -> bytes:
        """The selected compiled plan (bytes; cuDNN returns a list of ints, ``bytes(...)`` of either works)."""
        if self._pending:
            raise HipdnnError(Status.NOT_INITIALIZED, "serialize: the plan bakes the pass-by-value epsilon's "
                                                      "value, known at the first execute: execute once first, or "
                                                      "pass epsilon as a Python float")
        return self._hd.serialize_compiled_plan()

    @_translate
    def deserialize(self, handle_or_data, data=None):
        """``deserialize(handle, data)`` or ``deserialize(data)`` (the graph's or the default handle)."""
        if data is None:
            handle, data = None, handle_or_data
        else:
            handle = handle_or_data
        if isinstance(data, list):
            data = bytes(data)
        hd_handle = self._hd_handle(handle)
        self._hd.deserialize_compiled_plan(hd_handle, data)
        self._restored = True
        return self

    def get_compiled_plan_tensors(self):
        return self._hd.get_compiled_plan_tensors()


def _np_to_cudnn(dtype):
    name = np.dtype(dtype).name
    return E._TORCH_NAMES.get({"float32": "float32"}.get(name, name), None) or E.to_cudnn_type(None)


def _scalar_value(buf, t) -> float:
    try:
        if isinstance(buf, numbers.Real) and not isinstance(buf, bool):
            return float(buf)
        n = buf.numel() if callable(getattr(buf, "numel", None)) else getattr(buf, "size", None)
        if n == 1 and hasattr(buf, "item"):
            return float(buf.item())
    except (ValueError, TypeError, RuntimeError):
        pass
    raise HipdnnError(Status.BAD_PARAM, f"pass-by-value tensor '{t.get_name()}': expected a one-element tensor or "
                                        f"a number, got {type(buf).__name__}")


def _same_order(hdt: TensorAttributes, dims, strides, have):
    """A buffer of the tensor's own dims is read and written through its own strides: when they
    disagree with the tensor's (size-1 axes aside), binding it by address would read or write the
    elements in another order, so it is refused, naming both."""
    if any(d > 1 and s != h for d, s, h in zip(dims, strides, have)):
        raise HipdnnError(Status.BAD_PARAM, f"tensor '{hdt.get_name()}' (uid {hdt.get_uid()}): the buffer has dims "
                                            f"{dims} with strides {have}, but the graph tensor's strides are "
                                            f"{strides}: its elements would be read or written in another order. "
                                            f"Bind a buffer laid out with strides {strides} (or set the tensor's "
                                            f"strides to the buffer's before building)")


class _DevicePointer:
    """A raw CUDA device pointer seen with a tensor's dims, strides and type (CUDA array interface)."""

    def __init__(self, ptr: int, dims, strides, typestr: str, itemsize: int):
        self.__cuda_array_interface__ = {"shape": tuple(dims), "strides": tuple(s * itemsize for s in strides),
                                         "typestr": typestr, "data": (int(ptr), False), "version": 3}


def _span(dims, strides) -> int:
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))


def _as_buffer(hdt: TensorAttributes, buf, hd_handle):
    """What cuDNN binds, as a buffer: a raw pointer (an int: device memory on a GPU handle, host
    memory on the CPU) becomes a view with the tensor's dims, strides and type; a torch/numpy
    buffer of another type of the same size is read as the tensor's type (cuDNN binds addresses,
    not types), with a warning."""
    from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
    dims, strides = hdt._dim, hdt._stride
    want = numpy_dtype(int(hdt.get_data_type()))
    if isinstance(buf, numbers.Integral) and not isinstance(buf, bool):
        if not buf or dims is None or strides is None:
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{hdt.get_name()}' (uid {hdt.get_uid()}): pointer {buf!r} "
                                                "cannot be bound (null, or the tensor's dims/strides are unset)")
        if hd_handle.device in (None, "local-task", "local-sync"):
            import ctypes
            n = _span(dims, strides)
            mem = (ctypes.c_char * (n * want.itemsize)).from_address(int(buf))
            flat = np.frombuffer(mem, dtype=want, count=n)
            return np.lib.stride_tricks.as_strided(flat, shape=dims, strides=[s * want.itemsize for s in strides])
        import torch
        raw_type = "<u2" if want.name == "bfloat16" else want.str
        t = torch.as_tensor(_DevicePointer(buf, dims, strides, raw_type, want.itemsize), device="cuda")
        return t.view(torch.bfloat16) if want.name == "bfloat16" else t
    have = getattr(buf, "dtype", None)
    if have is None:
        return buf
    if hasattr(buf, "element_size") and callable(buf.element_size):      # torch
        name = str(have).rsplit(".", 1)[-1]
        if name != want.name and buf.element_size() == want.itemsize:
            import torch
            target = getattr(torch, want.name, None)
            if target is not None:
                _warn_reinterpret(hdt, name, want.name)
                return buf.view(target)
        return buf
    if isinstance(buf, np.ndarray) and buf.dtype != want and buf.dtype.itemsize == want.itemsize:
        _warn_reinterpret(hdt, buf.dtype.name, want.name)
        return buf.view(want)
    return buf


def _warn_reinterpret(hdt, have: str, want: str) -> None:
    import warnings
    warnings.warn(f"tensor '{hdt.get_name()}' (uid {hdt.get_uid()}) is {want.upper()}, its buffer {have}: the "
                  f"buffer's bytes are read as {want} (cuDNN binds addresses, not types)", RuntimeWarning, stacklevel=5)


def _shares_memory(a, b) -> bool:
    if hasattr(a, "data_ptr") and hasattr(b, "data_ptr"):
        if a.device != b.device:
            return False
        lo_a, lo_b = a.data_ptr(), b.data_ptr()
        hi_a = lo_a + _span(a.shape, a.stride()) * a.element_size() if a.numel() else lo_a
        hi_b = lo_b + _span(b.shape, b.stride()) * b.element_size() if b.numel() else lo_b
        return lo_a < hi_b and lo_b < hi_a
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.may_share_memory(a, b))
    return False


def _by_address(hdt: TensorAttributes, buf):
    """``buf`` seen with the tensor's declared dims and strides from its first element, as cuDNN
    binds a device pointer: any torch/numpy buffer whose memory covers the declared span."""
    dims, strides = hdt._dim, hdt._stride
    if dims is None or strides is None:
        return buf
    shape = getattr(buf, "shape", None)
    if shape is None:
        return buf
    if hasattr(buf, "stride") and callable(buf.stride):            # torch
        if list(buf.shape) == dims:
            _same_order(hdt, dims, strides, list(buf.stride()))
            return buf
        span = _span(dims, strides)
        have = buf.untyped_storage().nbytes() // buf.element_size() - buf.storage_offset()
        if span > have:
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{hdt.get_name()}' (uid {hdt.get_uid()}): the buffer holds "
                                                f"{have} elements from its first one, the declared dims {dims} with "
                                                f"strides {strides} span {span}")
        return buf.as_strided(dims, strides)
    if isinstance(buf, np.ndarray):
        item = buf.itemsize
        if list(buf.shape) == dims:
            _same_order(hdt, dims, strides, [s // item for s in buf.strides])
            return buf
        span = _span(dims, strides)
        if not buf.flags.c_contiguous or buf.size < span:
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{hdt.get_name()}' (uid {hdt.get_uid()}): the buffer "
                                                f"(shape {list(buf.shape)}) does not cover the declared dims {dims} "
                                                f"with strides {strides} ({span} elements from its first one)")
        return np.lib.stride_tricks.as_strided(buf, shape=dims, strides=[s * item for s in strides],
                                               writeable=buf.flags.writeable)
    return buf


@contextmanager
def graph(handle, name="cudnn_graph", io_data_type=E.data_type.HALF, intermediate_data_type=E.data_type.FLOAT,
          compute_data_type=E.data_type.FLOAT, **graph_kwargs):
    """``with cudnn.graph(handle) as (g, _):`` a pygraph with cuDNN's defaults (HALF io, FLOAT
    intermediate and compute)."""
    g = pygraph(handle=handle, name=name, io_data_type=io_data_type, intermediate_data_type=intermediate_data_type,
                compute_data_type=compute_data_type, **graph_kwargs)
    yield g, []


def jit(heur_modes=E.heur_mode.A, **kwargs):
    """Decorator: the function returns ``(graph, tensors)``; the graph is built with ``heur_modes``
    (once) and the tensors come back as their UIDs."""
    modes = heur_modes if isinstance(heur_modes, list) else [heur_modes]

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kw):
            g, tensors = func(*args, **kw)
            if g.get_execution_plan_count() <= 0:
                g.build(modes)
            return g, [t.get_uid() for t in tensors]
        return wrapper
    return decorator


def graph_cache(key_fn=None, maxsize=None):
    """Decorator: a function that makes a graph (``(graph, tensors)``) runs once per key; later calls
    with the same key return what the first made. ``key_fn(*args, **kwargs)`` gives the key; without
    it the key is the arguments, tensors by dims, strides and type. ``maxsize`` bounds the entries
    kept (least recently used dropped); ``wrapper.cache_clear()`` empties it."""
    from collections import OrderedDict

    def default_key(*args, **kwargs):
        def one(a):
            if hasattr(a, "shape") and hasattr(a, "dtype"):
                strides = tuple(a.stride()) if callable(getattr(a, "stride", None)) else tuple(getattr(a, "strides", ()))
                return ("tensor", tuple(a.shape), strides, str(a.dtype), str(getattr(a, "device", "")))
            if isinstance(a, Handle):
                return ("handle", id(a))
            try:
                hash(a)
                return a
            except TypeError:
                return repr(a)
        return tuple(one(a) for a in args) + tuple((k, one(v)) for k, v in sorted(kwargs.items()))

    def decorator(func):
        entries = OrderedDict()

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            key = (key_fn or default_key)(*args, **kwargs)
            if key in entries:
                entries.move_to_end(key)
                return entries[key]
            out = entries[key] = func(*args, **kwargs)
            if maxsize is not None and len(entries) > maxsize:
                entries.popitem(last=False)
            return out
        wrapper.cache_clear = entries.clear
        wrapper.cache_size = lambda: len(entries)
        return wrapper
    return decorator


def _add_simple_ops():
    def unary(mode):
        def op(self, input, compute_data_type=None, name=""):
            return self._pw(mode, input, None, None, compute_data_type, name)
        return op

    def binary_ab(mode):
        def op(self, a, b, compute_data_type=None, name=""):
            return self._pw(mode, a, b, None, compute_data_type, name)
        return op

    def binary_01(mode):
        def op(self, input0, input1, compute_data_type=None, name=""):
            return self._pw(mode, input0, input1, None, compute_data_type, name)
        return op

    def cmp(mode):
        def op(self, input, comparison, compute_data_type=None, name=""):
            return self._pw(mode, input, comparison, None, compute_data_type, name)
        return op

    for table, make in ((_UNARY, unary), (_BINARY_AB, binary_ab), (_BINARY_01, binary_01), (_CMP, cmp)):
        for meth, mode in table.items():
            fn = make(mode)
            fn.__name__ = meth
            fn.__doc__ = f"Pointwise {mode} (cuDNN FE's ``{meth}``)."
            setattr(pygraph, meth, _translate(fn))

    def backward(mode):
        def op(self, loss, input, compute_data_type=None, name=""):
            return self._pw(mode, loss, input, None, compute_data_type, name)
        return op

    for meth, mode in _BACKWARD.items():
        fn = backward(mode)
        fn.__name__ = meth
        fn.__doc__ = f"Pointwise {mode} (cuDNN FE's ``{meth}``): ``loss * f'(input)``."
        setattr(pygraph, meth, _translate(fn))


# NOTE: cuDNN FE's pygraph methods (python/pygraph/{pygraph,norm,sdpa}.cpp, cuDNN FE 1.x) that this
# engine does not lower: each is a method that raises cudnnGraphNotSupportedError naming it, so
# cuDNN code gets the error it already catches for graphs no engine supports. They are listed one
# by one (no __getattr__): a misspelt method name stays an AttributeError.
NOT_SUPPORTED_METHODS = {   # method -> (what it does, what works instead or None): the message's two parts
    "adalayernorm": ("adaptive layernorm", None),
    "adalayernorm_backward": ("the adaptive layernorm backward pass", None),
    "sdpa_backward": ("the SDPA backward pass", None),
    "scaled_dot_product_flash_attention_backward": ("the SDPA backward pass", None),
    "sdpa_fp8": ("FP8 SDPA (FP8 data types)", None),
    "sdpa_fp8_backward": ("the FP8 SDPA backward pass", None),
    "slice": ("the slice op", None),
    "reshape": ("the reshape op", None),
    "transpose": ("transpose as an op", "describe a transposed input with strides instead"),
    "concatenate": ("the concatenate op", None),
    "block_scale_quantize": ("block-scale quantization (FP8/FP4 block scaling)", None),
    "block_scale_dequantize": ("block-scale dequantization (FP8/FP4 block scaling)", None),
    "rope": ("rotary position embedding (rope)", None),
    "rope_backward": ("the rope backward pass", None),
    "moe_grouped_matmul": ("the MoE grouped matmul", None),
    "moe_grouped_matmul_bwd": ("the MoE grouped matmul backward pass", None),
    "tensor_scalar": ("tensor_scalar", "pass a Python number as the operand, or graph.tensor(is_pass_by_value=True)"),
    "populate_cuda_graph": ("CUDA graph population", "IREE runs the plan, and there is no cuDNN CUDA graph to "
                                                     "populate"),
    "update_cuda_graph": ("CUDA graph update", "IREE runs the plan, and there is no cuDNN CUDA graph to update"),
}


def _add_not_supported():
    def refuse(meth, what, instead):
        def op(self, *args, **kwargs):
            from hipdnn_iree.cudnn._handle import _LAST_ERROR
            msg = (f"cudnn.pygraph.{meth}: {what} is not supported by hipdnn-iree (docs/cudnn_migration.md, "
                   f"\"What is missing\")" + (f"; {instead}" if instead else ""))
            _LAST_ERROR[0] = msg
            raise cudnnGraphNotSupportedError(msg)
        op.__name__ = meth
        op.__doc__ = f"Not supported here: {what}; raises ``cudnnGraphNotSupportedError``."
        return op

    for meth, (what, instead) in NOT_SUPPORTED_METHODS.items():
        if meth in vars(pygraph):   # NOTE: a method implemented later must leave this table
            raise RuntimeError(f"pygraph.{meth} is implemented and listed in NOT_SUPPORTED_METHODS")
        setattr(pygraph, meth, refuse(meth, what, instead))


_add_simple_ops()
_add_not_supported()
pygraph.scaled_dot_product_flash_attention = pygraph.sdpa      # cuDNN FE 1.0's name for sdpa
