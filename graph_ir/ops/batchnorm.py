"""batchnorm (training): its OpDef, and the operand rules shared with batchnorm_backward and
batchnorm_inference_variance_ext (their OpDefs and the emitters import them)."""
from __future__ import annotations

from graph_ir.desc import ABSENT, BatchnormAttrs, GraphError, OpKind
from graph_ir.dynamic import FIXED, Facts
from graph_ir.opdef import OpDef, register
from graph_ir.ops._norm import Dims, check_epsilon, x_dims

PER_CHANNEL = "per-channel dims [1, C, 1, ...] with C = x's axis 1"


def channel_dims(at, dims: Dims) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(x dims, per-channel dims [1, C, 1, ...])``; x needs rank >= 2."""
    x = x_dims(at, dims)
    if len(x) < 2:
        raise GraphError(f"field 'x' dims {list(x)}: batchnorm needs rank >= 2 (N, C, spatial...)")
    return x, (1, x[1]) + (1,) * (len(x) - 2)


def check_per_channel(at, field: str, want: tuple, dims: Dims, hint: str = "") -> None:
    uid = getattr(at, f"{field}_uid")
    if uid == ABSENT:
        raise GraphError(f"field '{field}' is missing: pass a tensor of dims {list(want)} ({PER_CHANNEL}){hint}")
    got = tuple(dims(uid))
    if got != want:
        raise GraphError(f"field '{field}' dims {list(got)}: expected {list(want)} ({PER_CHANNEL})")


def check_scalar(at, field: str, dims: Dims, scalar=None, example: str = "1e-5") -> float | None:
    """A scalar-constant operand (epsilon, momentum): dims all 1; its value checked when ``scalar`` is given."""
    uid = getattr(at, f"{field}_uid")
    if uid == ABSENT:
        raise GraphError(f"field '{field}' is missing: pass a scalar such as {example}")
    d = tuple(dims(uid))
    if any(v != 1 for v in d):
        raise GraphError(f"field '{field}' dims {list(d)}: must be a scalar constant "
                            "(pass a Python float or g.tensor(value=...))")
    if scalar is None:
        return None
    value = scalar(uid)
    if value is None:
        raise GraphError(f"field '{field}': must be a scalar constant (pass a Python float or "
                            "g.tensor(value=...))", "unsupported")
    return value


def check_momentum(value: float) -> None:
    import math
    if not (isinstance(value, (int, float)) and math.isfinite(value)):
        raise GraphError(f"field 'momentum' value {value!r}: must be a finite number (e.g. 0.1)")


def check_batchnorm_train(at, dims: Dims, scalar=None) -> dict[int, tuple[int, ...]]:
    """Validates batchnorm (training) operands; returns the dims of every output."""
    x, c = channel_dims(at, dims)
    for f in ("scale", "bias"):
        check_per_channel(at, f, c, dims)
    eps = check_scalar(at, "epsilon", dims, scalar)
    if eps is not None:
        check_epsilon(eps)
    rm, rv = at.prev_running_mean_uid, at.prev_running_variance_uid
    if (rm == ABSENT) != (rv == ABSENT):
        have, miss = ("prev_running_mean", "prev_running_variance") if rv == ABSENT else \
            ("prev_running_variance", "prev_running_mean")
        raise GraphError(f"field '{miss}' is missing but '{have}' is set: pass both running statistics "
                            "(hd.Graph.batchnorm's in_running_mean and in_running_var) or neither")
    out = {at.y_uid: x}
    for f in ("mean", "inv_variance"):
        u = getattr(at, f"{f}_uid")
        if u != ABSENT:
            out[u] = c
    running = rm != ABSENT
    for f in ("next_running_mean", "next_running_variance"):
        u = getattr(at, f"{f}_uid")
        if running and u == ABSENT:
            raise GraphError(f"field '{f}' is missing: with running statistics given the node outputs the "
                                "updated ones")
        if not running and u != ABSENT:
            raise GraphError(f"field '{f}' is set (uid {u}) but no running statistics are given "
                                "(prev_running_mean, prev_running_variance)")
        if u != ABSENT:
            out[u] = c
    if running:
        check_per_channel(at, "prev_running_mean", c, dims)
        check_per_channel(at, "prev_running_variance", c, dims)
        m = check_scalar(at, "momentum", dims, scalar, "0.1")
        if m is not None:
            check_momentum(m)
    return out


def infer(node, dims) -> dict:
    return check_batchnorm_train(node.attrs, dims)


def dynamic_all_fixed(f: Facts, node):
    """Every dim of every operand fixed: the statistics reduce over N and the spatial axes, and
    reduced axes are fixed (graph_ir/dynamic.py)."""
    g = f.graph
    for u in (*node.attrs.inputs(), *node.attrs.outputs()):
        if not g.tensor(u).is_scalar:
            for i in range(len(f.dims(u))):
                f.mark((u, i), FIXED)


FLOAT_STATS = ("mean_uid", "inv_variance_uid", "next_running_mean_uid", "next_running_variance_uid")

OPDEF = register(OpDef(OpKind.BATCHNORM, BatchnormAttrs, infer, dynamic_all_fixed, frontend_method="batchnorm",
                       facade_methods=("batchnorm",), traits=frozenset({"normalization"}),
                       stride_order_from=(("y_uid", "x_uid"),)))
