"""resample_fwd: pooling's OpDef (rules in _resample.py)."""
from __future__ import annotations

from graph_ir.desc import ABSENT, OpKind, ResampleFwdAttrs
from graph_ir.opdef import OpDef, register
from graph_ir.ops._resample import check_index, dynamic, forward_dims


def infer(node, dims) -> dict:
    """Checks x and the attributes; returns y's dims (and index's: y's)."""
    at = node.attrs
    y, p = forward_dims(dims(at.x_uid), at)
    check_index(at, p, generate=True)
    out = {at.y_uid: y}
    if at.index_uid != ABSENT:
        out[at.index_uid] = y
    return out


OPDEF = register(OpDef(OpKind.RESAMPLE_FWD, ResampleFwdAttrs, infer, dynamic, frontend_method="resample",
                       facade_methods=(), traits=frozenset(),
                       stride_order_from=(("y_uid", "x_uid"), ("index_uid", "x_uid"))))
