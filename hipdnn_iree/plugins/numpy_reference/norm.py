"""numpy reference for reduction and normalization ops: reduction, batchnorm_inference,
layernorm, rmsnorm.

Written from the definitions in float64 (the engine rounds once to each
output's type); it shares no code with the lowering.
"""
from __future__ import annotations

import numpy as np

from hipdnn_iree.plugin_sdk.types import NormFwdPhase, ReductionMode as R
from hipdnn_iree.plugins.numpy_reference.registry import register_reference
from graph_ir.desc import ABSENT, NodeDesc, OpKind


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def reduce(mode: int, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``mode`` over ``axes`` of ``x`` (float64), keeping the reduced axes as size 1.

    MUL_NO_ZEROS multiplies the non-zero elements; an all-zero slice gives 1.
    """
    x = _f64(x)
    k = dict(axis=axes, keepdims=True)
    table = {
        R.ADD: lambda: np.sum(x, **k),
        R.MUL: lambda: np.prod(x, **k),
        R.MIN: lambda: np.min(x, **k),
        R.MAX: lambda: np.max(x, **k),
        R.AMAX: lambda: np.max(np.abs(x), **k),
        R.AVG: lambda: np.mean(x, **k),
        R.NORM1: lambda: np.sum(np.abs(x), **k),
        R.NORM2: lambda: np.sqrt(np.sum(x * x, **k)),
        R.MUL_NO_ZEROS: lambda: np.prod(np.where(x == 0, 1.0, x), **k),
    }
    return table[R(mode)]()


@register_reference(OpKind.REDUCTION)
def ref_reduction(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    x = env[at.x_uid]
    # NOTE: only the output's dims say which axes are reduced; the engine's env
    # exposes declared dims (``env.dims(uid)``) for ops whose outputs cannot be inferred.
    dims = getattr(env, "dims", None)
    if dims is None:
        raise NotImplementedError(f"reduction '{node.name}': the reference needs the output's dims, but "
                                  "the env does not expose them (env.dims(uid))")
    y_dims = tuple(dims(at.y_uid))
    axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, y_dims)) if b == 1 and a != 1)
    return {at.y_uid: reduce(at.mode, x, axes)}


@register_reference(OpKind.BATCHNORM_INFERENCE)
def ref_batchnorm_inference(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    x, mean, inv, scale, bias = (_f64(env[u]) for u in
                                 (at.x_uid, at.mean_uid, at.inv_variance_uid, at.scale_uid, at.bias_uid))
    return {at.y_uid: (x - mean) * inv * scale + bias}


def normalized_axes(x_shape, scale_shape, count: int = 0) -> tuple[int, ...]:
    """hipDNN's rule, written from its description: the scale, right-aligned to x, has x's
    extents on a trailing run of axes; those are normalized (never axis 0). A scale of all
    1s names none: then the last ``count`` axes (``normalized_dim_count``)."""
    rank = len(x_shape)
    s = (1,) * (rank - len(scale_shape)) + tuple(scale_shape)
    k = 0
    while k < rank and s[-1 - k] == x_shape[-1 - k]:
        k += 1
    axes = tuple(range(max(1, rank - k), rank))
    return axes if axes or not count else tuple(range(rank - count, rank))


def layernorm(x: np.ndarray, scale, bias, eps: float, count: int = 0):
    """``(y, mean, inv_variance)`` normalizing over :func:`normalized_axes` with the biased
    variance; the statistics keep x's rank (1 on the normalized axes)."""
    x = _f64(x)
    axes = normalized_axes(x.shape, np.shape(scale), count)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    return (x - mean) * inv * _f64(scale) + _f64(bias), mean, inv


def rmsnorm(x: np.ndarray, scale, eps: float, bias=None, with_stats: bool = False):
    """``y = x / sqrt(mean(x^2) + eps) * scale (+ bias)`` over :func:`normalized_axes`; with
    ``with_stats``, ``(y, inv_rms)`` (inv_rms keeps x's rank, 1 on the normalized axes)."""
    x = _f64(x)
    ms = (x * x).mean(axis=normalized_axes(x.shape, np.shape(scale)), keepdims=True)
    y = x / np.sqrt(ms + eps) * _f64(scale)
    if bias is not None:
        y = y + _f64(bias)
    return (y, 1.0 / np.sqrt(ms + eps)) if with_stats else y


@register_reference(OpKind.LAYERNORM)
def ref_layernorm(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    y, mean, inv = layernorm(env[at.x_uid], env[at.scale_uid], env[at.bias_uid], _scalar(env[at.epsilon_uid]),
                             at.normalized_dim_count)
    out = {at.y_uid: y}
    if at.phase == NormFwdPhase.TRAINING:
        out[at.mean_uid], out[at.inv_variance_uid] = mean, inv
    return {u: v for u, v in out.items() if u != ABSENT}


@register_reference(OpKind.RMSNORM)
def ref_rmsnorm(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    bias = env[at.bias_uid] if at.bias_uid != ABSENT else None
    y, inv = rmsnorm(env[at.x_uid], env[at.scale_uid], _scalar(env[at.epsilon_uid]), bias, with_stats=True)
    out = {at.y_uid: y}
    if at.phase == NormFwdPhase.TRAINING and at.inv_rms_uid != ABSENT:
        out[at.inv_rms_uid] = inv
    return out


def _scalar(v) -> float:
    """A scalar operand's value, whether it comes as a number or a one-element array."""
    return float(np.asarray(v, dtype=np.float64).reshape(-1)[0])
