"""Running a plan: binding the caller's buffers to the module's arguments, then invoking it."""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import numpy as np

from hipdnn_iree.plugin_sdk.buffers import (bind_device_pack, bind_variant_pack, copy_codes, empty_aligned,
                                            synchronize_producers)
from hipdnn_iree.plugin_sdk.shapes import carve_pack, resolve_tensors
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.iree_linalg.context import IreeExecutionContext


# Imported buffer views are reused when a call passes the very same buffers again (same address,
# shape, strides, dtype): repeated execution skips the checks and the imports. The cache keeps
# those buffers alive (at most _VIEW_CACHE_SIZE per plan) until the plan is released.
# HIPDNN_IREE_VIEW_CACHE=0 turns it off: read once per handle, when its session is made
# (session.py ``view_cache``), and kept on each context the session loads (``ctx.reuse_views``).
_VIEW_CACHE_SIZE = 64


def _buffer_key(obj):
    """(address, shape, strides, dtype, writable) of a buffer, or None when it cannot be told cheaply."""
    if isinstance(obj, np.ndarray):
        ai = obj.__array_interface__
        return ("np", ai["data"][0], obj.shape, obj.strides, obj.dtype.str, obj.flags.writeable)
    ptr = getattr(obj, "data_ptr", None)
    if callable(ptr):  # torch
        return ("torch", ptr(), tuple(obj.shape), tuple(obj.stride()), str(obj.dtype), str(obj.device))
    cai = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        return ("cai", cai["data"][0], tuple(cai["shape"]), tuple(cai.get("strides") or ()), cai["typestr"])
    return None


def _importable(arr) -> bool:
    """Whether IREE can use this host array in place (see _iree_rt.HOST_ALIGNMENT)."""
    from hipdnn_iree.plugins.iree_linalg.runtime import HOST_ALIGNMENT
    return arr.flags.writeable and arr.__array_interface__["data"][0] % HOST_ALIGNMENT == 0


def _unpacked(t, arr) -> bool:
    """A packed (FP4) tensor given as one code per element: staged into packed bytes."""
    return t.packed and arr.dtype != np.uint8 and arr.dtype != np.int8


def _invoke_list(mod, args, n_out: int, entry: str | None = None) -> None:
    try:
        mod.invoke_list(args, n_out, entry)
    except Exception as e:
        raise HipdnnError(Status.EXECUTION_FAILED, f"IREE execution failed: {e}") from None


@dataclass(frozen=True)
class _Bound:
    """What one set of buffers decided: the argument list, the staging copies, whether device
    producers need a sync; ``keep`` holds the caller's objects (their ids are in the cache key)."""

    args: object
    n_out: int
    copy_in: tuple
    copy_back: tuple
    device: bool
    keep: tuple
    entry: str | None = None   # the module function to run (entry_for); None: the module's entry


def entry_for(ctx: IreeExecutionContext, tensors) -> str | None:
    """A specialized plan's static function when every bound tensor of the call has exactly the
    dims and strides it was built for (``ctx.specialization``), else None: the dynamic entry."""
    sp = ctx.specialization
    if sp is None:
        return None
    name, want = sp
    for t in tensors:
        if want.get(t.uid) != (tuple(t.dims), tuple(t.strides)):
            return None
    return name


def _torch_tensor_type():
    """``torch.Tensor`` when torch is imported (a pack can hold torch tensors only then), else None."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)


def _pack_key(variant_pack):
    """The pack by object identity plus what a caller can change on the same object (shape,
    strides, dtype, writability; a torch tensor's address and device too: ``set_``, ``resize_``
    and ``.data =`` move it); the cache entry keeps the objects alive, so no id is reused."""
    if type(variant_pack) is not dict:
        return None
    key = []
    tensor = _torch_tensor_type()
    for uid, obj in variant_pack.items():
        if type(obj) is np.ndarray:
            key.append((uid, id(obj), obj.shape, obj.strides, obj.dtype, obj.flags.writeable))
        elif type(obj) is tensor:
            # NOTE: per-call cost: the fields as torch gives them (no str()); torch.Size, dtype and
            # device compare by value
            key.append((uid, id(obj), obj.data_ptr(), obj.shape, obj.stride(), obj.dtype, obj.device))
        else:
            k = _buffer_key(obj)
            if k is None:
                return None
            key.append((uid, id(obj), k))
    return ("id", tuple(key))


def _address_key(tensors, variant_pack):
    """The pack by buffer address, shape, strides and dtype (a fresh view of the same memory hits)."""
    if not isinstance(variant_pack, dict) or len(variant_pack) != len(tensors):
        return None
    keys = []
    for t in tensors:
        obj = variant_pack.get(t.uid)
        k = _buffer_key(obj) if obj is not None else None
        if k is None:
            return None
        keys.append((t.uid, t.role, k))
    return ("addr", tuple(keys))


def _remember(cache, key, bound) -> None:
    cache[key] = bound
    while len(cache) > _VIEW_CACHE_SIZE:
        cache.popitem(last=False)


def execute(ctx: IreeExecutionContext, variant_pack: dict, overrides=None) -> None:
    """Runs the module on the caller's buffers.

    Every check (uids, dims, strides, dtypes, devices, aliasing) runs before IREE is invoked, so a
    rejected call leaves the buffers untouched. Inputs are imported without copies where IREE
    allows; outputs are written in place (``iree.abi.output``), as cuDNN writes into its pointers.

    NOTE: what a call decides from its buffers (checks, imports, staging, the argument list) is
    kept per plan under the identity of the pack (``_pack_key``; then the buffers' addresses,
    ``_address_key``), so a repeated call with the same buffers only copies what must be staged
    and invokes a prebuilt argument list.
    """
    mod = ctx.module
    if mod is None:
        raise HipdnnError(Status.NOT_INITIALIZED,
                          f"this handle has no device (compile-only, target '{ctx.target}'); create the "
                          "handle with a device to execute")
    if ctx.override:
        return _execute_override(ctx, mod, variant_pack, overrides)
    if not ctx.reuse_views:
        return _run(ctx, mod, _bind(ctx, mod, variant_pack), variant_pack)
    cache = ctx.view_cache
    key = _pack_key(variant_pack)
    bound = cache.get(key) if key is not None else None
    if bound is None:
        addr = _address_key(ctx.tensors, variant_pack)
        bound = cache.get(addr) if addr is not None else None
        if bound is None:
            bound = _bind(ctx, mod, variant_pack)
            if addr is not None:
                _remember(cache, addr, bound)
        if key is not None:   # NOTE: this entry keeps this pack's objects alive (their ids are its key)
            bound = replace(bound, keep=tuple(variant_pack.values()))
            _remember(cache, key, bound)
    _run(ctx, mod, bound, variant_pack)

def _execute_override(ctx: IreeExecutionContext, mod, variant_pack: dict, overrides) -> None:
    """An override-shape plan: the call's dims (override shapes, else each buffer's own) checked
    by the plan's ShapeSpec before anything runs; the module's symbolic dims take them from the
    imported views. Bindings are remembered per pack and overrides, as for static plans."""
    # NOTE: per call (a bound pack is remembered): no import here, no sort without overrides
    okey = tuple(sorted((u, tuple(d), None if s is None else tuple(s)) for u, (d, s) in overrides.items())) \
        if overrides else ()
    key = _pack_key(variant_pack) if ctx.reuse_views else None
    key = None if key is None else (key, okey)
    bound = ctx.view_cache.get(key) if key is not None else None
    if bound is None:
        tensors = resolve_tensors(ctx.shape_spec, ctx.tensors, variant_pack, overrides)
        bound = _bind(ctx, mod, carve_pack(tensors, variant_pack, overrides), tensors)
        if key is not None:
            bound = replace(bound, keep=tuple(variant_pack.values()))
            _remember(ctx.view_cache, key, bound)
    _run(ctx, mod, bound, variant_pack)


def _run(ctx: IreeExecutionContext, mod, bound: "_Bound", variant_pack: dict) -> None:
    if bound.device:
        synchronize_producers(list(variant_pack.values()))
    if not bound.copy_in and not bound.copy_back:
        return _invoke_list(mod, bound.args, bound.n_out, bound.entry)
    # NOTE: staging arrays are per plan: one call at a time may use them.
    with ctx.staging_lock:
        for dst, src in bound.copy_in:
            copy_codes(dst, src)
        _invoke_list(mod, bound.args, bound.n_out, bound.entry)
        for dst, src in bound.copy_back:
            copy_codes(dst, src)

def _bind(ctx: IreeExecutionContext, mod, variant_pack: dict, tensors=None) -> "_Bound":
    """Checks the pack and imports its buffers (staging where IREE cannot use one in place).
    ``tensors``: the call's tensors (an override-shape call's dims), else the plan's."""
    tensors = ctx.tensors if tensors is None else tensors
    n_out = sum(1 for t in tensors if t.role == "output")
    if mod.is_host:
        ins, outs = bind_variant_pack(tensors, variant_pack)
        copy_in, copy_back = [], []
        if all(_importable(a) and not _unpacked(t, a) for t in tensors
               for a in [ins[t.uid] if t.role == "input" else outs[t.uid]]):
            views = [mod.host_view(ins[t.uid] if t.role == "input" else outs[t.uid]) for t in tensors]
        else:
            views, copy_in, copy_back = _stage(ctx, ins, outs, tensors)
        return _Bound(mod.arg_list(views), n_out, tuple(copy_in), tuple(copy_back), False,
                      (tuple(variant_pack.values()), views), entry_for(ctx, tensors))
    dense = bind_device_pack(tensors, variant_pack, mod.device_uri.split("://", 1)[0])
    synchronize_producers(list(variant_pack.values()))
    try:
        views = [mod.dlpack_view(dense[t.uid]) for t in tensors]
    except Exception as e:
        raise HipdnnError(Status.BAD_PARAM, f"IREE cannot import a device tensor of the variant pack: {e}") from None
    return _Bound(mod.arg_list(views), n_out, (), (), True, (tuple(variant_pack.values()), views),
                  entry_for(ctx, tensors))

def _stage(ctx: IreeExecutionContext, ins: dict, outs: dict, tensors=None):
    """Views for a CPU call with some buffers IREE cannot use in place (not 64-byte aligned,
    or read-only): those go through per-plan aligned staging arrays whose imported views
    are made once. Returns (views, [(staging, caller input)], [(caller output, staging)]): the
    copies every call makes before and after the invocation."""
    mod = ctx.module
    views, copy_in, copy_back = [], [], []
    for t in (ctx.tensors if tensors is None else tensors):
        arr = ins[t.uid] if t.role == "input" else outs[t.uid]
        if _importable(arr) and not _unpacked(t, arr):
            views.append(mod.host_view(arr))
            continue
        # NOTE: override-shape plans stage each shape apart (a static plan has one shape per uid)
        skey = (t.uid, arr.shape) if ctx.override else t.uid
        staged = ctx.staging.get(skey)
        if staged is None:
            # NOTE: an FP4 array of one code per element stages into the packed bytes the module takes
            buf = empty_aligned(t.byte_shape, np.uint8) if _unpacked(t, arr) else empty_aligned(arr.shape, arr.dtype)
            staged = ctx.staging[skey] = (buf, mod.host_view(buf))
        buf, view = staged
        # NOTE: a strided output's run is read too (its other elements are written back as they were)
        if t.role == "input" or not t.layout.is_dense:
            copy_in.append((buf, arr))
        if t.role == "output":
            copy_back.append((arr, buf))
        views.append(view)
    return views, copy_in, copy_back
