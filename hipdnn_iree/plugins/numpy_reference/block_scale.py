"""numpy reference for block-scale quantization (BLOCK_SCALE_QUANTIZE / _DEQUANTIZE), in float64
with ml_dtypes for the 8- and 4-bit types, written from cuDNN's definition and sharing nothing
with the lowering: per block ``scale = round_up(amax / vmax)`` in the scale's type (E8M0: the
smallest power of two, from ``np.frexp``; E4M3: the smallest E4M3 value, by search over all of
them; FLOAT: the quotient rounded to float32), ``y = x / scale`` clipped to y's range and cast
(round to nearest even); dequantize ``y = x * scale`` repeated over each block.
"""
from __future__ import annotations

import numpy as np

from graph_ir.desc import NodeDesc, OpKind
from graph_ir._fbs.graph_generated import DataType as D
from graph_ir.ops._block_scale import dequantize_blocks, quantize_axis
from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
from hipdnn_iree.plugins.numpy_reference.registry import register_reference


def _vmax(data_type) -> float:
    import ml_dtypes
    return float(ml_dtypes.finfo(numpy_dtype(data_type)).max)


def _e4m3_values() -> np.ndarray:
    codes = np.arange(0x7F, dtype=np.uint8)      # +0 .. 448 (0x7F is NaN)
    return codes.view(numpy_dtype(D.FP8_E4M3)).astype(np.float64)


def block_scales(amax: np.ndarray, vmax: float, scale_type) -> np.ndarray:
    """The scale of each block (float64) from its amax."""
    amax = np.asarray(amax, np.float64)
    with np.errstate(all="ignore"):
        if scale_type == D.FP8_E8M0:
            _, ea = np.frexp(amax)                  # amax = m * 2^ea, m in [0.5, 1)
            _, ev = np.frexp(vmax)
            e = (ea - ev).astype(np.float64)
            e = np.where(vmax * np.exp2(e) >= amax, e, e + 1)
            e = np.where(amax == 0, -127.0, np.where(np.isinf(amax), 127.0, np.clip(e, -127, 127)))
            return np.where(np.isnan(amax), np.nan, np.exp2(e))
        if scale_type == D.FP8_E4M3:
            vals = _e4m3_values()
            i = np.searchsorted(vals * vmax, np.nan_to_num(amax, nan=0.0), side="left")
            s = vals[np.minimum(i, vals.size - 1)]
            return np.where(np.isnan(amax), np.nan, s)
        return (amax / vmax).astype(np.float32).astype(np.float64)


def quantize(x, block: int, axis: int, y_type, scale_type) -> tuple[np.ndarray, np.ndarray]:
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    lead, n = x.shape[:-1], x.shape[-1] // block
    xb = x.reshape(lead + (n, block))
    amax = np.abs(xb).max(axis=-1)                 # NaN propagates
    vmax = _vmax(y_type)
    scale = block_scales(amax, vmax, scale_type)
    with np.errstate(all="ignore"):
        q = np.where(scale[..., None] == 0, 0.0, xb / scale[..., None])
        q = np.where(np.isnan(scale[..., None]), np.nan, q)     # a NaN block is +NaN
    q = np.clip(q, -vmax, vmax).reshape(x.shape)
    return np.moveaxis(q, -1, axis), np.moveaxis(scale, -1, axis)


def dequantize(x, scale, blocks) -> np.ndarray:
    s = np.asarray(scale, np.float64)
    for a, b in enumerate(blocks):
        if b != 1:
            s = np.repeat(s, b, axis=a)
    return np.asarray(x, np.float64) * s


@register_reference(OpKind.BLOCK_SCALE_QUANTIZE)
def ref_quantize(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    x = env[at.x_uid]
    g = env.graph
    y, s = quantize(x, at.block_size, quantize_axis(at, np.ndim(x)), g.tensor(at.y_uid).data_type,
                    g.tensor(at.scale_uid).data_type)
    return {at.y_uid: y, at.scale_uid: s}


@register_reference(OpKind.BLOCK_SCALE_DEQUANTIZE)
def ref_dequantize(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    x, s = env[at.x_uid], env[at.scale_uid]
    return {at.y_uid: dequantize(x, s, dequantize_blocks(at, np.shape(x), np.shape(s)))}
