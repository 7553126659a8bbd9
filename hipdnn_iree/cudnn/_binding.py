"""Variant packs to ``hd`` packs: cuDNN's binding by address, pass-by-value scalars, in-place
outputs, raw device pointers, dtype reinterpretation."""
from __future__ import annotations

import math
import numbers

import numpy as np

from hipdnn_iree.cudnn import _enums as E
from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.cudnn._pointers import check_pointer
from hipdnn_iree.cudnn._tensor import tensor
from hipdnn_iree.plugin_sdk.buffers import PACKED_BUFFER_DTYPES
from graph_ir.dtypes import CODES_PER_BYTE

class BindingMethods:
    """How ``pygraph.execute`` binds the caller's buffers."""

    def _pack(self, variant_pack, hd_handle, by_address=True):
        if not isinstance(variant_pack, dict):
            raise HipdnnError(Status.BAD_PARAM, f"variant_pack must be a dict, got {type(variant_pack).__name__}")
        by_uid = None
        values, pack, raw = {}, {}, {}
        self._scatter_back = []
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
            if t._reorder is not None:
                pack[t._t.get_uid()] = self._unblocked(t, buf)
                continue
            buf = _as_buffer(t._t, buf, hd_handle)
            pack[t._t.get_uid()] = _by_address(t._t, buf) if by_address else buf
            raw[t] = buf
        for alias, src, *offset in self._aliases:
            if src in raw:
                pack[alias.get_uid()] = _by_address(alias, _from_element(raw[src], offset[0] if offset else 0))
        self._copy_back = self._in_place_outputs(pack, raw)
        return values, pack

    def _unblocked(self, t, buf):
        """A tensor declared ``reordering_type=F8_128x4``: the caller's buffer holds its bytes in
        cuDNN's 128x4 tiles (hipdnn_iree/plugin_sdk/scale_layout.py). The graph keeps the plain
        layout (hipDNN's schema has no reordering), so an input is gathered into a plain buffer of
        its memory order before the run and an output written to one and scattered after it (a
        copy each way, on the buffer's device)."""
        from graph_ir.layout import physical_layout
        from hipdnn_iree.plugin_sdk.scale_layout import f8_128x4_bytes, f8_128x4_index
        hdt = t._t
        what = f"tensor '{hdt.get_name()}' (uid {hdt.get_uid()}, reordering F8_128x4)"
        lay = physical_layout(tuple(hdt.get_dim()), tuple(hdt.get_stride()), what)
        phys = lay.phys_shape
        if not lay.is_dense or len(phys) < 2:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: needs dense strides with at least two axes in memory")
        rows, cols = phys[-2], phys[-1]
        batch = math.prod(phys[:-2])
        need = batch * f8_128x4_bytes(rows, cols)
        pos = f8_128x4_index(batch, rows, cols)
        from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
        want = numpy_dtype(int(hdt.get_data_type()))
        is_out = id(hdt) not in self._inputs
        if hasattr(buf, "element_size") and callable(buf.element_size):        # torch
            import torch
            if not buf.is_contiguous() or buf.element_size() != 1:
                raise HipdnnError(Status.BAD_PARAM, f"{what}: pass a contiguous 1-byte tensor")
            flat = buf.view(torch.uint8).reshape(-1)
            if flat.numel() < need:
                raise HipdnnError(Status.BAD_PARAM, f"{what}: buffer has {flat.numel()} bytes, the 128x4 tiles of "
                                                    f"[{rows}, {cols}] x {batch} take {need}")
            # NOTE: the index moves to the buffer's device once per shape, not per execute
            key = (batch, rows, cols, str(flat.device))
            idx = self._tile_index.get(key)
            if idx is None:
                idx = self._tile_index[key] = torch.tensor(pos, device=flat.device)
            dt = getattr(torch, want.name)
            if is_out:
                plain = torch.empty(phys, dtype=torch.uint8, device=flat.device)
                self._scatter_back.append((plain, flat, idx))
                return plain.view(dt)
            return flat[idx].reshape(phys).view(dt)
        arr = np.asarray(buf)
        if not arr.flags.c_contiguous or arr.dtype.itemsize != 1 or arr.size < need:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: pass a contiguous 1-byte buffer of at least {need} bytes, "
                                                f"got {arr.dtype} of shape {list(arr.shape)}")
        flat = arr.reshape(-1).view(np.uint8)
        if is_out:
            plain = np.empty(phys, np.uint8)
            self._scatter_back.append((plain, flat, pos))
            return plain.view(want)
        return flat[pos].reshape(phys).view(want)

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
                own = _own_like(buf)
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
    """What cuDNN binds, as a buffer: a raw pointer (an int: device memory of a GPU handle's
    device, checked with the driver; refused on a CPU handle) becomes a view with the tensor's
    dims, strides and type; a torch/numpy buffer of another type of the same size is read as the
    tensor's type (cuDNN binds addresses, not types), with a warning."""
    from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
    dims, strides = hdt._dim, hdt._stride
    want = numpy_dtype(int(hdt.get_data_type()))
    if isinstance(buf, numbers.Integral) and not isinstance(buf, bool):
        what = f"tensor '{hdt.get_name()}' (uid {hdt.get_uid()})"
        if not buf or dims is None or strides is None:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: pointer {buf!r} cannot be bound (null, or the tensor's "
                                                "dims/strides are unset)")
        # NOTE: an integer is used as an address only once the driver vouches for it (a CPU handle
        # refuses every integer): binding 1 or 4096 used to kill the process (_pointers.py)
        codes = CODES_PER_BYTE.get(int(hdt.get_data_type()), 1)
        check_pointer(int(buf), -(-_span(dims, strides) // codes) * want.itemsize, hd_handle.device, what)
        import torch
        raw_type = "<u2" if want.name == "bfloat16" else want.str
        t = torch.as_tensor(_DevicePointer(buf, dims, strides, raw_type, want.itemsize), device="cuda")
        return t.view(torch.bfloat16) if want.name == "bfloat16" else t
    have = getattr(buf, "dtype", None)
    if have is None:
        return buf
    if int(hdt.get_data_type()) in CODES_PER_BYTE and str(have).rsplit(".", 1)[-1] in PACKED_BUFFER_DTYPES:
        return buf   # NOTE: FP4's packed bytes (two codes each), bound as they are
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


def _from_element(buf, offset: int):
    """``buf``'s memory from its element ``offset`` (in its own strides' units) on, as a one-element
    view that _by_address widens to the declared dims and strides (a slice's first element)."""
    if not offset:
        return buf
    if hasattr(buf, "as_strided") and callable(buf.as_strided):       # torch
        return buf.as_strided((1,), (1,), buf.storage_offset() + offset)
    if isinstance(buf, np.ndarray):
        base = buf
        while isinstance(base.base, np.ndarray):
            base = base.base
        flat = base.reshape(-1) if base.flags.c_contiguous else None
        lo = (buf.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // buf.itemsize \
            if flat is not None else None
        if flat is None or flat.dtype != buf.dtype:
            raise HipdnnError(Status.BAD_PARAM, "slice: bind the sliced input as a C-contiguous numpy array "
                                                "(or a view of one)")
        return flat[lo + offset:]
    raise HipdnnError(Status.BAD_PARAM, f"slice: cannot address a {type(buf).__name__} buffer from an offset")


def _own_like(buf):
    """A copy of ``buf`` with its strides (gaps included: clone and np.array would pack a gapped
    view, and the plan checks an output's strides)."""
    if hasattr(buf, "clone"):
        import torch
        own = torch.empty_strided(tuple(buf.shape), tuple(buf.stride()), dtype=buf.dtype, device=buf.device)
        return own.copy_(buf)
    item = buf.itemsize
    span = _span(buf.shape, [s // item for s in buf.strides]) if buf.size else 0
    if any(s < 0 or s % item for s in buf.strides):
        return np.array(buf, copy=True)
    own = np.lib.stride_tricks.as_strided(np.empty(max(span, 1), buf.dtype), shape=buf.shape, strides=buf.strides)
    own[...] = buf
    return own


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
    if dims is None or strides is None or int(hdt.get_data_type()) in CODES_PER_BYTE:
        return buf      # NOTE: FP4's packed bytes: the engine checks their (memory-order) shape itself
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
