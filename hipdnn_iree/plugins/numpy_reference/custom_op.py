"""numpy reference for CUSTOM_OP: the ``reference`` given to ``hd.register_custom_op``.

The op's meaning is the user's, so its reference is too: ``reference(inputs, data)`` gets the input
arrays (logical dims, their data types) and the node's bytes, and returns one array per output.
"""
from __future__ import annotations

import numpy as np

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.numpy_reference.registry import register_reference
from graph_ir import custom_ops
from graph_ir.desc import NodeDesc, OpKind


@register_reference(OpKind.CUSTOM_OP)
def ref_custom_op(node: NodeDesc, env) -> dict:
    at = node.attrs
    what = f"NUMPY_REFERENCE: custom_op '{node.name}' ({at.custom_op_id!r})"
    op = custom_ops.lookup(at.custom_op_id)
    if op is None:
        raise HipdnnError(Status.NOT_SUPPORTED, f"{what}: the custom op is not registered in this process "
                                                "(hd.register_custom_op)")
    if op.reference is None:
        raise HipdnnError(Status.NOT_SUPPORTED, f"{what}: the custom op was registered without a numpy reference "
                                                "(hd.register_custom_op(..., reference=fn))")
    got = op.reference([np.array(env[u]) for u in at.input_uids], at.data)
    if isinstance(got, np.ndarray) or not isinstance(got, (list, tuple)) or len(got) != len(at.output_uids):
        raise HipdnnError(Status.BAD_PARAM, f"{what}: its reference must return a list of {len(at.output_uids)} "
                                            f"array(s), one per output; it returned {type(got).__name__}"
                                            + (f" of {len(got)}" if isinstance(got, (list, tuple)) else ""))
    out = {}
    for i, (u, v) in enumerate(zip(at.output_uids, got)):
        v = np.asarray(v)
        want = env.dims(u)
        if v.shape != tuple(want):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: its reference returned shape {list(v.shape)} for output "
                                                f"{i} (uid {u}), which has dims {list(want)}")
        out[u] = v
    return out
