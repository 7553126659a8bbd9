"""numpy implementations of every op kind: the correctness oracle.

Written from the ops' mathematical definitions, independently of the
lowering; computes in float64 and rounds once to the output type.
"""
from __future__ import annotations

import math
import numpy as np

from hipdnn_iree.plugin_sdk.types import PointwiseMode as M
from hipdnn_iree.plugins.numpy_reference.registry import register_reference
from graph_ir.desc import NodeDesc, OpKind



_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _phi(x):
    return 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))


def _p(v, default):
    return default if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _tanh_gelu_inner(x):
    return math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)


SOFTPLUS_THRESHOLD = 20.0   # as PyTorch's default: above it softplus(x) is x (hipDNN has no such field)


def _relu(x, lower, upper, slope):
    """hipDNN/cuDNN ReLU with clips: x clamped to ``upper`` above ``lower``, a line of ``slope``
    through (lower, lower) below it. Defaults 0, +inf, 0 give max(x, 0)."""
    lo, hi, s = _p(lower, 0.0), _p(upper, math.inf), _p(slope, 0.0)
    return np.where(x < lo, lo + s * (x - lo), np.minimum(x, hi))


def _relu_grad(x, lower, upper, slope):
    lo, hi, s = _p(lower, 0.0), _p(upper, math.inf), _p(slope, 0.0)
    return np.where(x <= lo, s, np.where(x < hi, 1.0, 0.0))


def pointwise(mode: int, xs: list[np.ndarray], attrs=None, out_dims=None) -> np.ndarray:
    """``mode`` on float64 operands ``xs``; ``attrs`` (a PointwiseAttrs) gives the modes' parameters."""
    a = xs[0]
    b = xs[1] if len(xs) > 1 else None
    get = (lambda n: getattr(attrs, n)) if attrs is not None else (lambda n: None)
    alpha = get("elu_alpha")
    beta = get("swish_beta") if mode in (M.SWISH_FWD, M.SWISH_BWD) else get("softplus_beta")
    threshold = SOFTPLUS_THRESHOLD
    clip = (get("relu_lower_clip"), get("relu_upper_clip"), get("relu_lower_clip_slope"))
    if mode == M.GEN_INDEX:
        shape = tuple(out_dims if out_dims is not None else a.shape)
        axis = get("axis")
        return np.broadcast_to(np.arange(shape[axis]).reshape([-1 if i == axis else 1 for i in range(len(shape))]),
                               shape)
    with np.errstate(all="ignore"):
        table = {
            M.ADD: lambda: a + b, M.SUB: lambda: a - b, M.MUL: lambda: a * b, M.DIV: lambda: a / b,
            M.MAX_OP: lambda: np.maximum(a, b), M.MIN_OP: lambda: np.minimum(a, b),
            M.POW: lambda: np.power(a, b), M.MOD: lambda: np.fmod(a, b),
            M.ADD_SQUARE: lambda: a + b * b,
            M.RELU_FWD: lambda: _relu(a, *clip), M.SIGMOID_FWD: lambda: _sigmoid(a),
            M.TANH_FWD: lambda: np.tanh(a), M.GELU_FWD: lambda: a * _phi(a),
            M.GELU_APPROX_TANH_FWD: lambda: 0.5 * a * (1.0 + np.tanh(_tanh_gelu_inner(a))),
            M.SWISH_FWD: lambda: a * _sigmoid(_p(beta, 1.0) * a),
            M.ELU_FWD: lambda: np.where(a > 0, a, _p(alpha, 1.0) * (np.exp(a) - 1.0)),
            M.SOFTPLUS_FWD: lambda: np.where(_p(beta, 1.0) * a > threshold, a,
                                             np.log1p(np.exp(_p(beta, 1.0) * a)) / _p(beta, 1.0)),
            M.EXP: lambda: np.exp(a), M.LOG: lambda: np.log(a), M.SQRT: lambda: np.sqrt(a),
            M.RSQRT: lambda: 1.0 / np.sqrt(a), M.ABS: lambda: np.abs(a), M.NEG: lambda: -a,
            M.RECIPROCAL: lambda: 1.0 / a, M.ERF: lambda: _erf(a), M.SIN: lambda: np.sin(a),
            M.COS: lambda: np.cos(a), M.TAN: lambda: np.tan(a), M.CEIL: lambda: np.ceil(a),
            M.FLOOR: lambda: np.floor(a), M.IDENTITY: lambda: a,
            M.CMP_EQ: lambda: a == b, M.CMP_NEQ: lambda: a != b, M.CMP_GT: lambda: a > b,
            M.CMP_GE: lambda: a >= b, M.CMP_LT: lambda: a < b, M.CMP_LE: lambda: a <= b,
            M.LOGICAL_AND: lambda: np.logical_and(a != 0, b != 0),
            M.LOGICAL_OR: lambda: np.logical_or(a != 0, b != 0),
            M.LOGICAL_NOT: lambda: a == 0,
            M.BINARY_SELECT: lambda: np.where(xs[2] != 0, a, b),
            # backward: xs = (dy, x)
            M.RELU_BWD: lambda: a * _relu_grad(b, *clip),
            M.SIGMOID_BWD: lambda: a * _sigmoid(b) * (1.0 - _sigmoid(b)),
            M.TANH_BWD: lambda: a * (1.0 - np.tanh(b) ** 2),
            M.GELU_BWD: lambda: a * (_phi(b) + b * np.exp(-0.5 * b * b) / math.sqrt(2.0 * math.pi)),
            M.GELU_APPROX_TANH_BWD: lambda: a * (
                0.5 * (1.0 + np.tanh(_tanh_gelu_inner(b)))
                + 0.5 * b * (1.0 - np.tanh(_tanh_gelu_inner(b)) ** 2)
                * math.sqrt(2.0 / math.pi) * (1.0 + 3 * 0.044715 * b * b)),
            M.SWISH_BWD: lambda: a * (_sigmoid(_p(beta, 1.0) * b) + _p(beta, 1.0) * b
                                      * _sigmoid(_p(beta, 1.0) * b) * (1.0 - _sigmoid(_p(beta, 1.0) * b))),
            M.ELU_BWD: lambda: a * np.where(b > 0, 1.0, _p(alpha, 1.0) * np.exp(b)),
            M.SOFTPLUS_BWD: lambda: a * np.where(_p(beta, 1.0) * b > threshold, 1.0,
                                                 _sigmoid(_p(beta, 1.0) * b)),
        }
        return np.asarray(table[mode]())


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) if x.dtype != np.bool_ else x


@register_reference(OpKind.POINTWISE)
def ref_pointwise(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    xs = [_f64(env[u]) for u in at.inputs()]
    return {at.out_0_uid: pointwise(at.operation, xs, at, env.dims(at.out_0_uid))}


def _exact(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both as int64 when both are integer (an exact integer matmul: int8 x int8 with INT32
    compute; the INT32 output wraps as i32 arithmetic does), else as float64."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return a.astype(np.int64), b.astype(np.int64)
    return _f64(a), _f64(b)


@register_reference(OpKind.MATMUL)
def ref_matmul(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    return {at.c_uid: np.matmul(*_exact(env[at.a_uid], env[at.b_uid]))}

