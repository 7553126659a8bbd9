"""custom_op: hipDNN's CUSTOM_OP, resolved to a user registration (graph_ir/custom_ops.py). The
graph says nothing about what the op computes, so its outputs keep the dims they are declared with
and, under dynamic shapes, every dim of its tensors stays fixed (the function's types are static)."""
from __future__ import annotations

from graph_ir.desc import CustomOpAttrs, GraphError, OpKind
from graph_ir.dynamic import FIXED, Facts
from graph_ir.opdef import OpDef, register


def infer(node, dims) -> dict:
    at = node.attrs
    if not at.output_uids:
        raise GraphError(f"custom op {at.custom_op_id!r}: it has no outputs (output_uids is "
                         "empty); a custom op produces at least one tensor")
    seen = set()
    for u in (*at.input_uids, *at.output_uids):
        if u in at.output_uids and u in seen:
            raise GraphError(f"custom op {at.custom_op_id!r}: tensor uid {u} is listed twice "
                             "among its tensors (an output must be a tensor of its own)")
        seen.add(u)
    for u in at.input_uids:
        dims(u)
    out = {}
    for i, u in enumerate(at.output_uids):
        try:
            out[u] = tuple(dims(u))
        except KeyError:
            raise GraphError(f"custom op {at.custom_op_id!r}: output {i} (uid {u}) has no dims: "
                             "a custom op's outputs keep the dims they are declared with, give them as "
                             "outputs=[(dims, data_type), ...]") from None
    return out


def dynamic(f: Facts, node) -> None:
    """Every dim of the op's tensors is fixed: the registered function's types are static."""
    for u in node.attrs.inputs() + node.attrs.outputs():
        for i in range(len(f.dims(u))):
            f.mark((u, i), FIXED)


OPDEF = register(OpDef(OpKind.CUSTOM_OP, CustomOpAttrs, infer, dynamic, frontend_method="custom_op"))
