"""Variant-pack checking: caller buffers -> dense views in memory order.

Every check runs before anything executes, so a rejected call leaves the
caller's buffers untouched. Outputs are written only after execution
succeeded (see the plugins).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from hipdnn_iree.plugin_sdk.errors import to_hipdnn
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from graph_ir.dtypes import CODES_PER_BYTE, ELEMENT_TYPES, MINIFLOAT_FORMATS as _MINIFLOAT, packed_shape
from graph_ir.layout import Layout, GraphError, physical_layout


@functools.lru_cache(maxsize=1)
def _ml_dtypes():
    """The ``ml_dtypes`` module (bfloat16 for numpy; a dependency of iree-base-runtime), or None.

    NOTE: imported on first use, not with the package: it takes most of a second to import
    (0.6 s of ``import hipdnn_iree``'s 0.85 s on a 2-core box) and only BFLOAT16 buffers need it.
    """
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover
        return None
    return ml_dtypes


def empty_aligned(shape, dtype=np.float32, alignment: int = 64) -> np.ndarray:
    """An uninitialized C-contiguous array whose data is ``alignment``-byte aligned.

    IREE imports 64-byte aligned host arrays without copying (zero-copy inputs, in-place
    outputs on CPU handles); other arrays are copied in and out.

    Example:
        >>> a = empty_aligned((4, 8), np.float32)
        >>> a.ctypes.data % 64
        0
    """
    try:
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if any(isinstance(d, bool) or int(d) != d or d < 0 for d in shape):
            raise ValueError
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise HipdnnError(Status.BAD_PARAM, f"empty_aligned: shape must be non-negative ints and dtype a numpy "
                                            f"dtype, got shape={shape!r}, dtype={dtype!r}") from None
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise HipdnnError(Status.BAD_PARAM, f"empty_aligned: alignment must be a power of two, got {alignment!r}")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, np.uint8)
    off = (-raw.ctypes.data) % alignment
    return raw[off:off + nbytes].view(dtype).reshape(shape)


def numpy_dtype(data_type: int) -> np.dtype:
    name = ELEMENT_TYPES[data_type][1]
    if name == "bfloat16" or name.startswith(("float8_", "float4_")):
        ml = _ml_dtypes()
        if ml is None:
            raise HipdnnError(Status.NOT_SUPPORTED, f"{name} buffers need the ml_dtypes package (pip install "
                                                    "ml_dtypes)")
        return np.dtype(getattr(ml, name))
    return np.dtype(name)


@dataclass(frozen=True)
class BoundTensor:
    """A tensor bound at execute time, as the plan knows it."""

    uid: int
    name: str
    role: str            # "input" | "output"
    data_type: int       # hd.DataType value
    dims: tuple[int, ...]
    strides: tuple[int, ...]

    # NOTE: cached per tensor: execute() consults them on every call (cached_property writes the
    # instance __dict__ directly, which a frozen dataclass allows).
    @functools.cached_property
    def layout(self) -> Layout:
        # NOTE: an input's elements may alias (a gather layout: bound as its run); an output's may not
        return physical_layout(self.dims, self.strides, f"tensor '{self.name}' (uid {self.uid})",
                               output=self.role == "output")

    @functools.cached_property
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.data_type)

    @property
    def packed(self) -> bool:
        """Stored several codes per byte (FP4: graph_ir/dtypes.py CODES_PER_BYTE)."""
        return self.data_type in CODES_PER_BYTE

    @functools.cached_property
    def byte_shape(self) -> tuple[int, ...]:
        """A packed tensor's buffer shape: memory order, innermost axis divided by the codes per byte."""
        return packed_shape(self.data_type, self.layout.phys_shape)


_BYTE_DTYPES = ("uint8", "int8")
# dtype names (numpy's, torch's) of buffers that hold a packed tensor's bytes
PACKED_BUFFER_DTYPES = (*_BYTE_DTYPES, "float4_e2m1fn_x2")


def _is_bytes(t: BoundTensor, arr) -> bool:
    """``arr`` holds a packed tensor's bytes (not one code per element)."""
    return t.packed and _dtype_name(arr) in PACKED_BUFFER_DTYPES


def pack_fp4(values) -> np.ndarray:
    """FP4 E2M1 values as the bytes an FP4_E2M1 tensor's buffer holds: two codes per byte along the
    last axis, element 2i in the low nibble of byte i (cuDNN's and torch's float4_e2m1fn_x2 order).

    ``values``: an ``ml_dtypes.float4_e2m1fn`` array, or any float array (converted by ml_dtypes:
    round to nearest even, saturating at +-6). The last axis must have an even size.

    Example:
        >>> import numpy as np, hipdnn_iree as hd
        >>> hd.pack_fp4(np.array([[0.5, -6.0, 1.0, 0.0]])).tolist()
        [[241, 2]]
    """
    ml = _ml_dtypes()
    a = np.asarray(values)
    if a.dtype.name != "float4_e2m1fn":
        try:
            a = a.astype(ml.float4_e2m1fn)
        except (TypeError, ValueError) as e:
            raise HipdnnError(Status.BAD_PARAM, f"pack_fp4: cannot read {a.dtype} values as FP4 E2M1: {e}") from None
    if a.ndim == 0 or a.shape[-1] % 2:
        raise HipdnnError(Status.BAD_PARAM, f"pack_fp4: the last axis must have an even size (two codes per byte), "
                                            f"got shape {list(a.shape)}")
    codes = a.view(np.uint8) & 0x0F
    return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4))


def unpack_fp4(packed) -> np.ndarray:
    """The inverse of :func:`pack_fp4`: bytes ``[..., n]`` -> ``ml_dtypes.float4_e2m1fn`` ``[..., 2n]``."""
    p = np.asarray(packed)
    if p.dtype.name not in _BYTE_DTYPES or p.ndim == 0:
        raise HipdnnError(Status.BAD_PARAM, f"unpack_fp4: expected a uint8 array of packed codes, got "
                                            f"{p.dtype} of shape {list(p.shape)}")
    p = p.view(np.uint8)
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), np.uint8)
    out[..., 0::2] = p & 0x0F
    out[..., 1::2] = p >> 4
    return out.view(_ml_dtypes().float4_e2m1fn)


def copy_codes(dst: np.ndarray, src: np.ndarray) -> None:
    """``np.copyto``, packing or unpacking where one side is an FP4 tensor's bytes and the other one
    code per element (host staging of ``ml_dtypes.float4_e2m1fn`` arrays)."""
    if dst.dtype == src.dtype:
        np.copyto(dst, src)
    elif src.dtype.name == "float4_e2m1fn":
        np.copyto(dst, pack_fp4(src).view(dst.dtype))
    else:
        np.copyto(dst, unpack_fp4(src))


def _as_array(uid: int, t: BoundTensor, buf) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        return buf
    if hasattr(buf, "__dlpack__"):
        dev = getattr(buf, "__dlpack_device__", None)
        if callable(dev) and int(dev()[0]) not in (1, 3):   # kDLCPU, kDLCUDAHost
            raise HipdnnError(Status.BAD_PARAM, f"variant pack uid {uid} ('{t.name}'): buffer lives on "
                                                f"{_DLPACK_NAMES.get(int(dev()[0]), dev()[0])} memory, but this plan "
                                                "reads and writes host memory (a CPU plan, or the NUMPY_REFERENCE "
                                                "engine): pass host memory")
        try:
            return _host_from_dlpack(buf)
        except Exception as e:
            raise HipdnnError(Status.BAD_PARAM, f"variant pack uid {uid} ('{t.name}'): the DLPack object "
                                                f"{type(buf).__name__} cannot be read as host memory: {e}") from None
    raise HipdnnError(Status.BAD_PARAM, f"variant pack uid {uid} ('{t.name}'): expected a numpy array or an "
                                        f"object with __dlpack__, got {type(buf).__name__}")


def _host_from_dlpack(obj) -> np.ndarray:
    """A numpy array over a host DLPack tensor's memory (no copy).

    numpy's DLPack import has no bfloat16 and no 8/4-bit floats; such torch tensors are read as
    int16 / uint8 over the same memory and viewed as the ml_dtypes type (float4_e2m1fn_x2: the
    packed bytes, uint8).
    """
    try:
        return np.from_dlpack(obj)
    except Exception:
        name = _dtype_name(obj)
        if not (name == "bfloat16" or name.startswith(("float8_", "float4_"))) or _ml_dtypes() is None:
            raise
        import sys
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(obj, torch.Tensor):
            raise
        if name == "bfloat16":
            return np.from_dlpack(obj.view(torch.int16)).view(_ml_dtypes().bfloat16)
        raw = np.from_dlpack(obj.view(torch.uint8))     # float8 codes; float4_e2m1fn_x2: packed bytes
        return raw if name == "float4_e2m1fn_x2" else raw.view(getattr(_ml_dtypes(), name))


def _shape_error(what: str, shape, t: BoundTensor, lay: Layout) -> HipdnnError:
    return HipdnnError(Status.BAD_PARAM,
                       f"{what}: buffer of shape {list(shape)} matches neither the tensor's dims {list(t.dims)} "
                       f"(with strides {list(t.strides)}) nor its memory-order shape {list(lay.phys_shape)}; pass "
                       f"an array of dims {list(t.dims)} laid out as declared, or a C-contiguous array of shape "
                       f"{list(lay.phys_shape)}")


def dense_view(t: BoundTensor, arr: np.ndarray) -> np.ndarray:
    """A C-contiguous view of ``arr`` in memory order (``layout.phys_shape``); never a copy."""
    try:
        lay = t.layout
    except GraphError as e:
        raise to_hipdnn(e, "graph") from None
    what = f"tensor '{t.name}' (uid {t.uid})"
    if _is_bytes(t, arr):
        if tuple(arr.shape) != t.byte_shape or not arr.flags.c_contiguous:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: {_packed_form(t)}; got a {'' if arr.flags.c_contiguous else 'non-contiguous '}"
                                                f"{arr.dtype} buffer of shape {list(arr.shape)}")
        return arr
    if arr.dtype != t.dtype:
        more = f" ({_packed_form(t)})" if t.packed else ""
        raise HipdnnError(Status.BAD_PARAM, f"{what}: buffer has dtype {arr.dtype}, the plan needs {t.dtype}{more}")
    # NOTE: exactly two shapes are accepted: the logical dims with the declared strides, or the
    # memory-order shape, C-contiguous. A buffer that merely has the right element count is refused
    # (it is how transposition bugs in user code show up).
    item = arr.itemsize
    bad = ([a for a in range(arr.ndim) if t.dims[a] > 1 and arr.strides[a] != t.strides[a] * item]
           if arr.shape == t.dims else None)
    if bad == [] and not lay.is_dense:
        # NOTE: a strided view binds as the run of memory from its first element to its last
        # (other tensors' elements in between are read, and written back unchanged for outputs)
        view = _as_strided(arr, (lay.span,), (item,))
    elif bad == []:
        view = arr[tuple(0 if a in lay.bcast_axes else slice(None) for a in range(arr.ndim))]
        kept = [a for a in range(arr.ndim) if a not in lay.bcast_axes]
        view = view.transpose([kept.index(a) for a in lay.order])
    elif arr.shape == lay.phys_shape and arr.flags.c_contiguous:
        view = arr
    elif bad:
        got = [s // item if s % item == 0 else s / item for s in arr.strides]
        raise HipdnnError(Status.BAD_PARAM,
                          f"{what}: buffer strides {got} (elements) do not match the declared strides "
                          f"{list(t.strides)} on axes {bad}; pass an array laid out as declared")
    else:
        raise _shape_error(what, arr.shape, t, lay)
    if not view.flags.c_contiguous:
        raise HipdnnError(Status.BAD_PARAM, f"{what}: buffer is not dense in the declared layout")
    return view


def _packed_form(t: BoundTensor, host: bool = True) -> str:
    n = CODES_PER_BYTE[t.data_type]
    form = (f"its buffer holds {n} codes per byte: a C-contiguous uint8 array of shape {list(t.byte_shape)} "
            f"(memory order, innermost axis / {n}; hd.pack_fp4 makes one)")
    return form + (f", or on the host an ml_dtypes.{t.dtype.name} array of dims {list(t.dims)}" if host else "")


def bind_variant_pack(tensors: list[BoundTensor], variant_pack) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """Checks ``variant_pack`` against ``tensors``; returns (inputs, outputs) as dense views."""
    _check_pack_keys(tensors, variant_pack)
    ins, outs = {}, {}
    for t in tensors:
        arr = _as_array(t.uid, t, variant_pack[t.uid])
        view = dense_view(t, arr)
        if t.role == "output":
            if not arr.flags.writeable:
                raise HipdnnError(Status.BAD_PARAM, f"output tensor '{t.name}' (uid {t.uid}): buffer is read-only")
            outs[t.uid] = view
        else:
            ins[t.uid] = view
    _check_aliasing(tensors, ins, outs)
    return ins, outs


def _check_aliasing(tensors, ins: dict, outs: dict) -> None:
    """An output may share no element with any other bound buffer; a strided output's whole run is
    written (its other elements with their own values), so no other output may lie in that run.

    Inputs may overlap each other (several views into one packed buffer).
    """
    by_uid = {t.uid: t for t in tensors}
    def elements(u, v):   # NOTE: packed bytes are their own elements (unpacking would copy)
        return v if _is_bytes(by_uid[u], v) else logical_from_dense(by_uid[u], v)

    for ou, o in outs.items():
        mine = elements(ou, o)
        for iu, i in list(ins.items()) + [(u, v) for u, v in outs.items() if u != ou]:
            if not np.may_share_memory(o, i):
                continue
            other = elements(iu, i)
            try:
                overlap = np.shares_memory(mine, other, max_work=10**6)
            except np.exceptions.TooHardError:
                overlap = True
            if overlap:
                raise HipdnnError(Status.BAD_PARAM, f"output uid {ou} shares memory with uid {iu}; "
                                                    "outputs must not alias other buffers")
            if iu in outs and not (by_uid[ou].layout.is_dense and by_uid[iu].layout.is_dense):
                raise HipdnnError(Status.BAD_PARAM,
                                  f"outputs uid {ou} and uid {iu} lie in one span of memory: a strided output is "
                                  "written across its whole span (first to last element), so two outputs may not "
                                  "interleave; give each output a buffer (or a span) of its own")


def _as_strided(arr: np.ndarray, shape, strides) -> np.ndarray:
    """``as_strided`` for every element type. NOTE: numpy cannot rebuild ml_dtypes' 1-byte float types
    (FP8/FP4/E8M0: "data type '<f1' not understood"), so those go through a uint8 view and back."""
    one = arr.dtype.itemsize == 1 and arr.dtype.kind not in "biu"
    base = arr.view(np.uint8) if one else arr
    v = np.lib.stride_tricks.as_strided(base, shape=tuple(shape), strides=tuple(strides), writeable=arr.flags.writeable)
    return v.view(arr.dtype) if one else v


def logical_from_dense(t: BoundTensor, view: np.ndarray) -> np.ndarray:
    """Inverse of :func:`dense_view`: the logical (dims-shaped) array, broadcast axes included
    (a packed tensor's bytes are unpacked: a copy)."""
    lay = t.layout
    if _is_bytes(t, view):
        view = unpack_fp4(view)
    if not lay.is_dense:
        return _as_strided(view, t.dims, [s * view.itemsize for s in t.strides])
    kept = [a for a in range(len(t.dims)) if a not in lay.bcast_axes]
    arr = view.transpose([lay.order.index(a) for a in kept])
    arr = np.expand_dims(arr, tuple(lay.bcast_axes)) if lay.bcast_axes else arr
    return np.broadcast_to(arr, t.dims)


def dense_from_logical(t: BoundTensor, arr: np.ndarray) -> np.ndarray:
    """A logical (dims-shaped) array -> memory order (``layout.phys_shape``); dense layouts only."""
    return np.asarray(arr).transpose(t.layout.order)


def store_logical(t: BoundTensor, view: np.ndarray, arr: np.ndarray) -> None:
    """Writes the logical (dims-shaped) ``arr`` into ``view`` (what :func:`dense_view` returned);
    a strided tensor's run keeps the elements that are not the tensor's."""
    if _is_bytes(t, view):
        np.copyto(view, pack_fp4(np.asarray(dense_from_logical(t, arr), t.dtype)).view(view.dtype))
    elif t.layout.is_dense:
        np.copyto(view, dense_from_logical(t, arr))
    else:
        np.copyto(logical_from_dense(t, view), arr)


# ---------------------------------------------------------------------------
# Device-resident tensors (DLPack): checked the same way, never copied to the host.
# ---------------------------------------------------------------------------

_DLPACK_DEVICE_TYPES = {"cuda": (2,), "hip": (10,)}   # kDLCUDA, kDLROCM
_DLPACK_NAMES = {1: "host (CPU)", 2: "CUDA", 3: "CUDA host", 10: "ROCm"}


def _obj_strides(obj, shape):
    if callable(getattr(obj, "stride", None)):      # torch
        return tuple(int(s) for s in obj.stride())
    st, item = getattr(obj, "strides", None), getattr(getattr(obj, "dtype", None), "itemsize", None)
    if st is not None and item:                       # cupy / numpy-like: bytes
        return tuple(int(s) // item for s in st)
    from graph_ir.layout import packed_strides
    return packed_strides(shape)                      # jax and friends: always dense row-major


def _dtype_name(obj) -> str:
    return str(getattr(obj, "dtype", "?")).rsplit(".", 1)[-1]


def _permute(obj, order):
    if tuple(order) == tuple(range(len(order))):
        return obj
    return obj.permute(*order) if callable(getattr(obj, "permute", None)) else obj.transpose(tuple(order))


def _run_view(obj, span: int, what: str):
    """A device tensor's run of ``span`` elements from its first element (torch, CuPy)."""
    if callable(getattr(obj, "as_strided", None)):              # torch
        return obj.as_strided((span,), (1,))
    import sys
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        return cupy.lib.stride_tricks.as_strided(obj, shape=(span,), strides=(obj.itemsize,))
    raise HipdnnError(Status.BAD_PARAM, f"{what}: a strided view of a {type(obj).__name__} cannot be bound; "
                                        "pass a torch or CuPy tensor")


def _check_pack_keys(tensors, variant_pack):
    if variant_pack is None:
        raise HipdnnError(Status.BAD_PARAM_NULL_POINTER, "variant_pack is None: pass a dict {uid: buffer}")
    if not isinstance(variant_pack, dict):
        raise HipdnnError(Status.BAD_PARAM, f"variant_pack must be a dict {{uid: buffer}}, got {type(variant_pack).__name__}")
    known = {t.uid: t for t in tensors}
    missing = sorted(u for u in known if u not in variant_pack)
    if missing:
        raise HipdnnError(Status.BAD_PARAM, "variant pack is missing uid(s) " + ", ".join(
            f"{u} ('{known[u].name}')" for u in missing) + f"; the plan binds uids {sorted(known)}")
    extra = sorted(u for u in variant_pack if u not in known)
    if extra:
        raise HipdnnError(Status.BAD_PARAM, f"variant pack has unknown uid(s) {extra}; the plan binds uids {sorted(known)}")


def bind_device_pack(tensors: list[BoundTensor], variant_pack, driver: str) -> dict:
    """Checks device tensors (``__dlpack__`` objects on the handle's GPU); returns uid -> dense view object."""
    _check_pack_keys(tensors, variant_pack)
    want_types = _DLPACK_DEVICE_TYPES.get(driver, ())
    dense = {}
    for t in tensors:
        what = f"tensor '{t.name}' (uid {t.uid})"
        obj = variant_pack[t.uid]
        if isinstance(obj, np.ndarray) or not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: got {type(obj).__name__} in host memory, but the handle's "
                                                f"device is {driver}: pass a device tensor (torch/cupy/jax on the GPU)")
        dev_type, _ = obj.__dlpack_device__()
        if int(dev_type) not in want_types:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: buffer lives on {_DLPACK_NAMES.get(int(dev_type), dev_type)} "
                                                f"memory, but the handle's device is {driver}")
        shape = tuple(int(d) for d in obj.shape)
        from graph_ir.layout import packed_strides
        strides = _obj_strides(obj, shape)
        if t.packed:
            if not _is_bytes(t, obj) or shape != t.byte_shape or tuple(strides) != tuple(packed_strides(shape)):
                raise HipdnnError(Status.BAD_PARAM, f"{what}: {_packed_form(t, host=False)} (or "
                                                    f"torch.float4_e2m1fn_x2); got {_dtype_name(obj)} of shape "
                                                    f"{list(shape)}, strides {list(strides)}")
            dense[t.uid] = _as_int8(obj)
            continue
        if _dtype_name(obj) != t.dtype.name:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: buffer has dtype {_dtype_name(obj)}, the plan needs {t.dtype.name}")
        lay = t.layout
        bad = ([a for a in range(len(shape)) if t.dims[a] > 1 and strides[a] != t.strides[a]]
               if shape == t.dims else None)
        if bad == [] and not lay.is_dense:
            view = _run_view(obj, lay.span, what)
        elif bad == []:
            view = obj[tuple(0 if a in lay.bcast_axes else slice(None) for a in range(len(shape)))]
            kept = [a for a in range(len(shape)) if a not in lay.bcast_axes]
            view = _permute(view, [kept.index(a) for a in lay.order])
        elif shape == lay.phys_shape and tuple(strides) == tuple(packed_strides(shape)):
            view = obj
        elif bad:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: buffer strides {list(strides)} do not match the declared "
                              f"strides {list(t.strides)} on axes {bad}")
        else:
            raise _shape_error(what, shape, t, lay)
        dense[t.uid] = _as_int8(view) if t.data_type in _MINIFLOAT else view
    return dense


def _as_int8(obj):
    """A torch tensor of 8- or 4-bit float codes viewed as int8 (what the module takes, and a dtype
    every DLPack importer knows); other objects as they are."""
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor) and obj.dtype != torch.int8 and obj.element_size() == 1:
        return obj.view(torch.int8)
    return obj


def synchronize_producers(objs) -> None:
    """Waits for pending work of the libraries that produced ``objs`` (their current streams)
    so IREE reads finished inputs and writes outputs nobody is still using."""
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and any(isinstance(o, torch.Tensor) for o in objs):
        torch.cuda.current_stream().synchronize()
    cupy = sys.modules.get("cupy")
    if cupy is not None and any(isinstance(o, cupy.ndarray) for o in objs):
        cupy.cuda.get_current_stream().synchronize()
