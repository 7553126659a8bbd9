"""batchnorm_inference: its OpDef (rules in _norm.py)."""
from __future__ import annotations

from graph_ir.desc import ABSENT, BatchnormInferenceAttrs, OpKind
from graph_ir.dynamic import FIXED, VARY, Facts, right_aligned
from graph_ir.opdef import OpDef, register
from graph_ir.ops._norm import check_batchnorm


def infer(node, dims) -> dict:
    return check_batchnorm(node.attrs, dims)


def dynamic(f: Facts, node):
    at = node.attrs
    x = f.dims(at.x_uid)
    for i in range(len(x)):
        f.union((at.x_uid, i), (at.y_uid, i))
        f.mark((at.x_uid, i), FIXED if i == 1 else VARY, "N" if i == 0 else "H")
    for u in (at.mean_uid, at.inv_variance_uid, at.scale_uid, at.bias_uid):
        if u != ABSENT and not f.graph.tensor(u).is_scalar:
            right_aligned(f, u, at.x_uid)
            for i in range(len(f.dims(u))):
                f.mark((u, i), FIXED)


OPDEF = register(OpDef(OpKind.BATCHNORM_INFERENCE, BatchnormInferenceAttrs, infer, dynamic,
                       frontend_method="batchnorm_inference", facade_methods=("batchnorm_inference",),
                       traits=frozenset({"normalization"}),
                       stride_order_from=(("y_uid", "x_uid"),)))
