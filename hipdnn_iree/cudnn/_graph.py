"""``cudnn.pygraph`` over ``hd.Graph``: cuDNN FE's op methods, keyword names and semantics.

Every op call becomes one or more ``hd.Graph`` calls at once; the facade keeps only what cuDNN's
semantics need on top: which tensors are pass-by-value (their values are read at every execute),
which output strides the caller left unset (cuDNN's defaults are applied before validation),
and how variant-pack buffers bind (by address, as cuDNN binds device pointers).
"""
from __future__ import annotations

import functools
import math
from contextlib import contextmanager

import numpy as np

from hipdnn_iree.cudnn import _enums as E
from hipdnn_iree.cudnn._enums import cudnnGraphNotSupportedError
from hipdnn_iree.cudnn._handle import Handle, check, sync_stream
from hipdnn_iree.frontend.graph import Graph
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType
from hipdnn_iree.cudnn._binding import BindingMethods, _np_to_cudnn
from hipdnn_iree.cudnn._common import _default_handle, _translate, _unsupported
from hipdnn_iree.cudnn._moe import MoeMethods
from hipdnn_iree.cudnn._ops import _BACKWARD, _BINARY_01, _BINARY_AB, _CMP, _UNARY, OpMethods
from hipdnn_iree.cudnn._plans import PlanMethods
from hipdnn_iree.cudnn._tensor import _list, _packed, tensor


class pygraph(OpMethods, MoeMethods, PlanMethods, BindingMethods):
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
        self._deferred_validate = []      # those of them refused at validate too (SDPA's)
        self._policy = None
        self._pending = False             # plans wait for the first execute (baked scalars unknown)
        self._baked = None
        self._restored = False
        self._plan_tensors = None
        self._last_pack = None
        self._copy_back = []
        self._scatter_back = []
        self._tile_index = {}             # F8_128x4 gather/scatter indices on a device (_binding.py)
        self._aliases = []                # (hd tensor, facade tensor[, offset]): bound to the facade tensor's
        #                                   buffer (from its element ``offset``: slice)
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
        reorder = reordering_type not in (None, E.tensor_reordering.NONE)
        if reorder and reordering_type != E.tensor_reordering.F8_128x4:
            _unsupported(f"tensor '{name}': reordering_type {reordering_type} is not supported")
        if dim is None:
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{name}': dim is required")
        dims = _list(dim, f"tensor '{name}': dim")
        if reorder and (len(dims) < 2 or is_pass_by_value or is_virtual):
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{name}': reordering_type F8_128x4 needs a graph input or "
                                                f"output of rank >= 2 (block-scale factors), got dims {dims}")
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
        t = self._wrap(hdt)
        if reorder:
            t._reorder = "F8_128x4"
        if ragged_offset is not None:
            t.set_ragged_offset(ragged_offset)
        return t

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

    def _defer(self, what: str, at_validate: bool = False) -> None:
        """An unsupported feature met while the graph is written: refused (NOT_SUPPORTED) at the
        build steps cuDNN FE code wraps (create_execution_plans, check_support, build_plans), as
        cuDNN refuses such graphs there, not at node creation. ``at_validate``: ``validate`` refuses
        it too, as cuDNN's SDPA node refuses the attention features an engine lacks at validate
        (cuDNN FE's test_mhas.py catches cudnnGraphNotSupportedError there)."""
        if what not in self._deferred:
            self._deferred.append(what)
        if at_validate and what not in self._deferred_validate:
            self._deferred_validate.append(what)

    def _refuse_deferred(self, validate: bool = False) -> None:
        found = self._deferred_validate if validate else self._deferred
        if found:
            _unsupported("; ".join(found))

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
        self._require_built("execute" if index is None else "execute_plan_at_index", index)
        h = check(handle) if handle is not None else (check(self._handle) if self._handle is not None
                                                      else _default_handle())
        # NOTE: a loop that passes the same tensors again reuses the last translation when it bound
        # the caller's own objects (no by-address view, no pass-by-value copy): hd's checks still run.
        key = (id(h), *map(id, variant_pack), *map(id, variant_pack.values())) if type(variant_pack) is dict \
            else None
        last = self._last_pack
        if key is not None and last is not None and last[0] == key:
            values, pack = {}, last[1]
            self._copy_back = []
            self._scatter_back = []
        else:
            values, pack = self._pack(variant_pack, h.hd, by_address=not (self._override or self._restored_override()))
            own = {id(v) for v in variant_pack.values()}
            self._last_pack = (key, pack, variant_pack.copy()) if key is not None and not values and \
                not self._copy_back and not self._scatter_back and all(id(v) in own for v in pack.values()) else None
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
        for plain, blocked, pos in self._scatter_back:     # F8_128x4 outputs (_binding.py)
            blocked[pos] = plain.reshape(-1)

    # -- serialization -----------------------------------------------------------------------------------
    @_translate
    def serialize(self) -> bytes:
        """The selected compiled plan (bytes; cuDNN returns a list of ints, ``bytes(...)`` of either works)."""
        if self._pending:
            raise HipdnnError(Status.NOT_INITIALIZED, "serialize: the plan bakes the pass-by-value epsilon's "
                                                      "value, known at the first execute: execute once first, or "
                                                      "pass epsilon as a Python float")
        self._require_built("serialize")
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

    @_translate
    def get_compiled_plan_tensors(self):
        self._require_built("get_compiled_plan_tensors")
        return self._hd.get_compiled_plan_tensors()


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
    "sdpa_fp8": ("FP8 SDPA (FP8 data types)", None),
    "sdpa_fp8_backward": ("the FP8 SDPA backward pass", None),
    "reshape": ("the reshape op", None),
    "transpose": ("transpose as an op", "describe a transposed input with strides instead"),
    "concatenate": ("the concatenate op", None),
    "rope": ("rotary position embedding (rope)", None),
    "rope_backward": ("the rope backward pass", None),
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
        if any(meth in vars(c) for c in pygraph.__mro__):   # NOTE: a method implemented later must leave this table
            raise RuntimeError(f"pygraph.{meth} is implemented and listed in NOT_SUPPORTED_METHODS")
        setattr(pygraph, meth, refuse(meth, what, instead))


_add_simple_ops()
_add_not_supported()
pygraph.scaled_dot_product_flash_attention = pygraph.sdpa      # cuDNN FE 1.0's name for sdpa
pygraph.scaled_dot_product_flash_attention_backward = pygraph.sdpa_backward
