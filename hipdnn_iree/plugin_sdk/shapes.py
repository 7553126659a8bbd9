"""Override shapes at execute time: the tensors a dynamic plan binds for one call.

An engine whose plan takes other shapes (``ShapeSpec``, graph_ir/dynamic.py) asks
:func:`resolve_tensors` for the call's tensors: the dims of every bound tensor, from the
override shapes given for some uids and the buffers' own shapes for the others, checked by the
spec (fixed dims, shared symbols, derived dims), with strides packed in the plan's memory order.
"""
from __future__ import annotations

from dataclasses import replace

from hipdnn_iree.plugin_sdk.buffers import BoundTensor
from hipdnn_iree.plugin_sdk.errors import to_hipdnn
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status


def buffer_shape(obj):
    """A buffer's logical shape (numpy, torch, DLPack tensors), or None when it has none."""
    shape = getattr(obj, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        return None


def resolve_tensors(spec, tensors: list[BoundTensor], variant_pack, overrides: dict | None) -> list[BoundTensor]:
    """``tensors`` at this call's dims.

    ``overrides``: {uid: (dims, strides or None)} (``execute(override_uids=...)``); every other
    bound tensor takes its buffer's own shape. Strides are the plan's memory order packed at the
    new dims (``spec.strides_for``); override strides that differ are BAD_PARAM (naming the uid),
    as are shapes the spec refuses (naming the uid, the dim and what the plan allows).
    """
    from graph_ir.desc import GraphError
    overrides = overrides or {}
    shapes, alt = {}, {}
    for t in tensors:
        if t.uid in overrides:
            dims = tuple(overrides[t.uid][0])
        else:
            obj = variant_pack.get(t.uid) if isinstance(variant_pack, dict) else None
            dims = buffer_shape(obj) if obj is not None else None
            if dims is None:
                continue        # NOTE: missing buffers are reported by the binding, with the plan's uids
        if len(dims) != len(t.dims):
            src = "override shape" if t.uid in overrides else "buffer shape"
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{t.name}' (uid {t.uid}): {src} {list(dims)} has rank "
                                                f"{len(dims)}; the plan's tensor has rank {len(t.dims)} "
                                                f"(built dims {list(t.dims)})")
        shapes[t.uid] = dims
        order = _order(t)
        if t.uid not in overrides and order is not None and order != tuple(range(len(dims))):
            # NOTE: a C-contiguous buffer in memory order (section 9's second form) read back as dims
            logical = [0] * len(dims)
            for i, a in enumerate(order):
                logical[a] = dims[i]
            alt[t.uid] = tuple(logical)
    try:
        resolved = spec.resolve(shapes)
    except GraphError as e:
        resolved = None
        if alt:
            try:
                resolved = spec.resolve({**shapes, **alt})
            except GraphError:
                pass
        if resolved is None:
            raise to_hipdnn(e, "graph", "execute: a shape this plan cannot take: ") from None
    out = []
    for t in tensors:
        dims = tuple(int(d) for d in resolved.get(t.uid, t.dims))
        if dims == tuple(t.dims):
            strides = tuple(t.strides)
        else:
            strides = tuple(int(s) for s in spec.strides_for(t.uid, dims))
        given = overrides.get(t.uid, (None, None))[1]
        if given is not None and tuple(given) != strides:
            want = strides
            raise HipdnnError(Status.BAD_PARAM, f"tensor '{t.name}' (uid {t.uid}): override strides {list(given)} "
                                                f"for dims {list(dims)}: this plan binds the tensor packed in its "
                                                f"built memory order, strides {list(want)}")
        out.append(t if dims == tuple(t.dims) and strides == tuple(t.strides) else
                   replace(t, dims=dims, strides=strides))
    return out


def _order(t: BoundTensor):
    try:
        lay = t.layout
    except Exception:      # NOTE: layouts the binding refuses are reported there
        return None
    return tuple(lay.order) if lay.is_dense and not lay.bcast_axes else None


def carve_pack(tensors: list[BoundTensor], variant_pack, overrides: dict | None):
    """cuDNN's by-address binding for override shapes: a buffer given for an overridden uid whose
    shape is not the override shape, but which is contiguous and holds at least the elements the
    override needs (a buffer allocated once at the largest shape), is bound as its first elements
    in the tensor's memory-order shape. Other entries are returned as they are."""
    if not overrides or not isinstance(variant_pack, dict):
        return variant_pack
    out = dict(variant_pack)
    for t in tensors:
        obj = variant_pack.get(t.uid)
        if t.uid not in overrides or obj is None or buffer_shape(obj) in (None, tuple(t.dims)):
            continue
        lay = t.layout
        if not lay.is_dense:
            continue
        n = 1
        for d in lay.phys_shape:
            n *= int(d)
        contiguous = getattr(obj, "is_contiguous", None)
        flags = getattr(obj, "flags", None)
        if callable(contiguous):                       # torch
            ok = contiguous()
        elif flags is not None:                        # numpy
            ok = bool(flags.c_contiguous)
        else:
            ok = False
        size = getattr(obj, "size", None)
        total = size if isinstance(size, int) else (obj.numel() if callable(getattr(obj, "numel", None)) else 0)
        if not ok or total < n:
            if ok:
                raise HipdnnError(Status.BAD_PARAM, f"tensor '{t.name}' (uid {t.uid}): buffer of {total} elements is "
                                                    f"smaller than override shape {list(t.dims)} needs ({n})")
            continue
        out[t.uid] = obj.reshape(-1)[:n].reshape(tuple(lay.phys_shape))
    return out
