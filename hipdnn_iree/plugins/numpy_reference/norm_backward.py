"""numpy reference for layernorm_backward and rmsnorm_backward.

Written from the gradients of the forward definitions in float64; it shares no code with the
lowering. With ``xhat`` the normalized input, ``g = dy * scale`` and means over a row's
normalized axes: layernorm ``dx = inv * (g - mean(g) - xhat * mean(g * xhat))``, rmsnorm
``dx = inv * (g - xhat * mean(g * xhat))``; ``dscale = sum(dy * xhat)`` and ``dbias = sum(dy)``
over the axes the scale broadcasts on.
"""
from __future__ import annotations

import numpy as np

from hipdnn_iree.plugins.numpy_reference.norm import _f64, _scalar, normalized_axes
from hipdnn_iree.plugins.numpy_reference.registry import register_reference
from graph_ir.desc import ABSENT, NodeDesc, OpKind


def _param_grad(v: np.ndarray, scale_shape) -> np.ndarray:
    """``v`` summed down to the scale's shape (over the axes where the right-aligned scale is 1)."""
    rank = v.ndim
    s = (1,) * (rank - len(scale_shape)) + tuple(scale_shape)
    axes = tuple(i for i in range(rank) if s[i] == 1 and v.shape[i] != 1)
    return v.sum(axis=axes, keepdims=True).reshape(tuple(scale_shape))


def layernorm_backward(dy, x, scale, mean=None, inv=None, eps=None, count: int = 0):
    """``(dx, dscale, dbias)``; without ``mean``/``inv`` they are recomputed from x with ``eps``."""
    dy, x, scale = _f64(dy), _f64(x), _f64(scale)
    axes = normalized_axes(x.shape, scale.shape, count)
    if mean is None:
        mean = x.mean(axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    mean, inv = _f64(mean), _f64(inv)
    xhat = (x - mean) * inv
    g = dy * scale
    dx = inv * (g - g.mean(axis=axes, keepdims=True) - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    return dx, _param_grad(dy * xhat, scale.shape), _param_grad(dy, scale.shape)


def rmsnorm_backward(dy, x, scale, inv):
    """``(dx, dscale, dbias)`` of ``y = x * inv * scale (+ bias)``."""
    dy, x, scale, inv = _f64(dy), _f64(x), _f64(scale), _f64(inv)
    axes = normalized_axes(x.shape, scale.shape)
    xhat = x * inv
    g = dy * scale
    dx = inv * (g - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    return dx, _param_grad(dy * xhat, scale.shape), _param_grad(dy, scale.shape)


@register_reference(OpKind.LAYERNORM_BACKWARD)
def ref_layernorm_backward(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    saved = at.mean_uid != ABSENT
    dx, ds, db = layernorm_backward(env[at.dy_uid], env[at.x_uid], env[at.scale_uid],
                                    env[at.mean_uid] if saved else None,
                                    env[at.inv_variance_uid] if saved else None,
                                    None if saved else _scalar(env[at.epsilon_uid]), at.normalized_dim_count)
    return {at.dx_uid: dx, at.dscale_uid: ds, at.dbias_uid: db}


@register_reference(OpKind.RMSNORM_BACKWARD)
def ref_rmsnorm_backward(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    dx, ds, db = rmsnorm_backward(env[at.dy_uid], env[at.x_uid], env[at.scale_uid], env[at.inv_rms_uid])
    out = {at.dx_uid: dx, at.dscale_uid: ds}
    if at.dbias_uid != ABSENT:
        out[at.dbias_uid] = db
    return out
