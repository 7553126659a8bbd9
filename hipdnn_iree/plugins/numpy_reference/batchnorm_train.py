"""numpy reference for batchnorm (training), batchnorm_backward and batchnorm_inference_variance_ext.

Written from the definitions in float64; it shares no code with the lowering. The statistics are
per channel (axis 1), over every other axis.
"""
from __future__ import annotations

import numpy as np

from hipdnn_iree.plugins.numpy_reference.registry import register_reference
from graph_ir.desc import ABSENT, NodeDesc, OpKind


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _scalar(v) -> float:
    return float(np.asarray(v, dtype=np.float64).reshape(-1)[0])


def _axes(x: np.ndarray) -> tuple[int, ...]:
    return tuple(i for i in range(x.ndim) if i != 1)


def batchnorm_train(x, scale, bias, eps: float):
    """``(y, mean, inv_variance, unbiased variance)``; the statistics keep x's rank ([1, C, 1, ...])."""
    x = _f64(x)
    ax = _axes(x)
    n = x.size // x.shape[1]
    mean = x.mean(axis=ax, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=ax, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        unbiased = var * n / (n - 1) if n > 1 else np.full_like(var, np.nan)
    return (x - mean) * inv * _f64(scale) + _f64(bias), mean, inv, unbiased


def batchnorm_backward(dy, x, scale, mean, inv):
    """``(dx, dscale, dbias)`` of ``y = (x - mean) * inv * scale + bias`` where mean and inv are the
    batch statistics of x (their gradients flow into dx)."""
    dy, x, scale, mean, inv = (_f64(a) for a in (dy, x, scale, mean, inv))
    ax = _axes(x)
    n = x.size // x.shape[1]
    xhat = (x - mean) * inv
    dbias = dy.sum(axis=ax, keepdims=True)
    dscale = (dy * xhat).sum(axis=ax, keepdims=True)
    dx = scale * inv / n * (n * dy - dbias - xhat * dscale)
    return dx, dscale, dbias


@register_reference(OpKind.BATCHNORM)
def ref_batchnorm(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    y, mean, inv, unbiased = batchnorm_train(env[at.x_uid], env[at.scale_uid], env[at.bias_uid],
                                             _scalar(env[at.epsilon_uid]))
    out = {at.y_uid: y, at.mean_uid: mean, at.inv_variance_uid: inv}
    if at.prev_running_mean_uid != ABSENT:
        m = _scalar(env[at.momentum_uid])
        out[at.next_running_mean_uid] = (1 - m) * _f64(env[at.prev_running_mean_uid]) + m * mean
        out[at.next_running_variance_uid] = (1 - m) * _f64(env[at.prev_running_variance_uid]) + m * unbiased
    return {u: v for u, v in out.items() if u != ABSENT}


@register_reference(OpKind.BATCHNORM_BACKWARD)
def ref_batchnorm_backward(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    dx, dscale, dbias = batchnorm_backward(env[at.dy_uid], env[at.x_uid], env[at.scale_uid], env[at.mean_uid],
                                           env[at.inv_variance_uid])
    return {at.dx_uid: dx, at.dscale_uid: dscale, at.dbias_uid: dbias}


@register_reference(OpKind.BATCHNORM_INFERENCE_VARIANCE_EXT)
def ref_batchnorm_inference_variance_ext(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    x, mean, var, scale, bias = (_f64(env[u]) for u in (at.x_uid, at.mean_uid, at.variance_uid, at.scale_uid,
                                                        at.bias_uid))
    return {at.y_uid: (x - mean) / np.sqrt(var + _scalar(env[at.epsilon_uid])) * scale + bias}
