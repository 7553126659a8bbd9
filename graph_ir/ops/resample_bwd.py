"""resample_bwd: pooling's gradient OpDef (rules in _resample.py). hipDNN's node has no x or y:
dx's dims are the caller's (the frontend sets them from x when it has x), max pooling reads index."""
from __future__ import annotations

from graph_ir.desc import ABSENT, GraphError, OpKind, ResampleBwdAttrs
from graph_ir.opdef import OpDef, register
from graph_ir.ops._resample import MAXPOOL, check_index, dynamic, forward_dims, pool_params, spatial_rank


def infer(node, dims) -> dict:
    """Checks dy, index and the attributes, and dx's dims when the caller set them (they are
    never inferred: with stride > 1 several input sizes pool to one output size)."""
    at = node.attrs
    dy = tuple(dims(at.dy_uid))
    p = pool_params(at, spatial_rank(dy, "dy_uid"))
    check_index(at, p, generate=False)
    if p.mode == MAXPOOL and at.index_uid == ABSENT:
        raise GraphError("field 'index_uid': MAXPOOL's backward needs the forward's index (hipDNN's "
                         "RESAMPLE_BWD has no x field)")
    if at.index_uid != ABSENT and tuple(dims(at.index_uid)) != dy:
        raise GraphError(f"field 'index_uid' dims {list(dims(at.index_uid))} must be dy's dims {list(dy)}")
    try:
        dx = tuple(dims(at.dx_uid))
    except KeyError:
        return {}
    if len(dx) != len(dy):
        raise GraphError(f"field 'dx_uid' dims {list(dx)} (rank {len(dx)}) must have the rank of "
                         f"dy dims {list(dy)} (rank {len(dy)})")
    try:
        want, _ = forward_dims(dx, at, "dx_uid")
    except GraphError as e:
        raise GraphError(f"field 'dx_uid' dims {list(dx)} do not fit: {e}") from None
    if want != dy:
        raise GraphError(f"field 'dx_uid' dims {list(dx)} do not fit: pooling them gives {list(want)}, "
                         f"but dy is {list(dy)}")
    return {at.dx_uid: dx}


OPDEF = register(OpDef(OpKind.RESAMPLE_BWD, ResampleBwdAttrs, infer, dynamic, frontend_method="resample_backward",
                       facade_methods=(), traits=frozenset(), stride_order_from=(("dx_uid", "dy_uid"),)))
