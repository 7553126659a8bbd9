"""batchnorm_inference_variance_ext: its OpDef (batchnorm_inference given the variance and epsilon)."""
from __future__ import annotations

from graph_ir.desc import ABSENT, BatchnormInferenceVarianceExtAttrs, OpKind
from graph_ir.dynamic import FIXED, VARY, Facts, right_aligned
from graph_ir.opdef import OpDef, register
from graph_ir.ops._norm import Dims, check_epsilon
from graph_ir.ops.batchnorm import channel_dims, check_per_channel, check_scalar


def check_batchnorm_variance_ext(at, dims: Dims, scalar=None) -> dict[int, tuple[int, ...]]:
    """Validates the operands; returns ``{y_uid: dims}``."""
    x, c = channel_dims(at, dims)
    for f in ("mean", "variance", "scale", "bias"):
        check_per_channel(at, f, c, dims)
    eps = check_scalar(at, "epsilon", dims, scalar)
    if eps is not None:
        check_epsilon(eps)
    return {at.y_uid: x}


def infer(node, dims) -> dict:
    return check_batchnorm_variance_ext(node.attrs, dims)


def dynamic(f: Facts, node):
    """batchnorm_inference's rule: N and the spatial axes vary, the channels and statistics are fixed."""
    at = node.attrs
    x = f.dims(at.x_uid)
    for i in range(len(x)):
        f.union((at.x_uid, i), (at.y_uid, i))
        f.mark((at.x_uid, i), FIXED if i == 1 else VARY, "N" if i == 0 else "H")
    for u in (at.mean_uid, at.variance_uid, at.scale_uid, at.bias_uid):
        if u != ABSENT and not f.graph.tensor(u).is_scalar:
            right_aligned(f, u, at.x_uid)
            for i in range(len(f.dims(u))):
                f.mark((u, i), FIXED)


OPDEF = register(OpDef(OpKind.BATCHNORM_INFERENCE_VARIANCE_EXT, BatchnormInferenceVarianceExtAttrs, infer, dynamic,
                       frontend_method="batchnorm_inference", traits=frozenset({"normalization"}),
                       stride_order_from=(("y_uid", "x_uid"),)))
