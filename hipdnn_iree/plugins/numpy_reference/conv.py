"""numpy reference for Convolution ops: conv_fprop, conv_dgrad, conv_wgrad.

Written from the definition of the grouped cross-correlation, in float64:
``y[n, g*Kg + k, o] = sum_{c, r} x_pad[n, g*Cg + c, o*stride + r*dilation] * w[g*Kg + k, c, r]``.
The forward op loops over kernel offsets ``r`` (a strided slice of the padded
input per offset, contracted with ``einsum``); dgrad and wgrad are the exact
adjoints of the same sum (scatter-add into the padded dx, and the contraction
over ``n, o`` for dw). None of this shares code with the linalg lowering.

Integer operands (INT8/UINT8, and INT32/INT64) with no floating-point operand are computed exactly
in int64 instead (the engine accumulates them in i32; the result's rounding to an INT32 output
wraps as i32 arithmetic does).
"""
from __future__ import annotations

import itertools

import numpy as np

from hipdnn_iree.plugins.numpy_reference.registry import register_reference
from graph_ir.desc import NodeDesc, OpKind


def _geometry(at, rank: int):
    """(pre, post, stride, dilation); empty attribute tuples mean the defaults."""
    def get(v, default):
        return tuple(v) if len(v) else (default,) * rank
    return get(at.pre_padding, 0), get(at.post_padding, 0), get(at.stride, 1), get(at.dilation, 1)


def _exact(*arrays) -> list[np.ndarray]:
    """The operands as int64 when all are integer arrays (exact sums), else as float64."""
    arrays = [np.asarray(a) for a in arrays]
    ints = all(a.dtype.kind in "iu" for a in arrays)
    return [a.astype(np.int64 if ints else np.float64) for a in arrays]


def _windows(kernel, out, stride, dilation):
    """Per kernel offset ``r``: the spatial slices of the padded input it reads for every output."""
    for r in itertools.product(*(range(k) for k in kernel)):
        yield r, tuple(slice(ri * d, ri * d + (o - 1) * s + 1, s) for ri, o, s, d in zip(r, out, stride, dilation))


def conv_forward(x, w, pre, post, stride, dilation) -> np.ndarray:
    """``y = conv(x, w)``; x ``[N, C, *S]``, w ``[K, C/G, *R]``."""
    x, w = _exact(x, w)
    n, c, k, cg = x.shape[0], x.shape[1], w.shape[0], w.shape[1]
    g = c // cg
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pre, post)))
    out = [(sp - d * (kk - 1) - 1) // s + 1 for sp, kk, s, d in zip(xp.shape[2:], w.shape[2:], stride, dilation)]
    xg = xp.reshape(n, g, cg, *xp.shape[2:])
    wg = w.reshape(g, k // g, cg, *w.shape[2:])
    y = np.zeros((n, g, k // g, *out), x.dtype)
    for r, win in _windows(w.shape[2:], out, stride, dilation):
        y += np.einsum("ngc...,gkc->ngk...", xg[(slice(None),) * 3 + win], wg[(Ellipsis,) + r])
    return y.reshape(n, k, *out)


def conv_data_grad(dy, w, x_dims, pre, post, stride, dilation) -> np.ndarray:
    """``dx`` of ``y = conv(x, w)`` for x of dims ``x_dims``, given ``dy``."""
    dy, w = np.asarray(dy, np.float64), np.asarray(w, np.float64)
    n, c, k, cg = x_dims[0], x_dims[1], w.shape[0], w.shape[1]
    g = c // cg
    out = dy.shape[2:]
    padded = [sp + a + b for sp, a, b in zip(x_dims[2:], pre, post)]
    dxg = np.zeros((n, g, cg, *padded))
    dyg = dy.reshape(n, g, k // g, *out)
    wg = w.reshape(g, k // g, cg, *w.shape[2:])
    for r, win in _windows(w.shape[2:], out, stride, dilation):
        dxg[(slice(None),) * 3 + win] += np.einsum("ngk...,gkc->ngc...", dyg, wg[(Ellipsis,) + r])
    crop = tuple(slice(a, a + sp) for a, sp in zip(pre, x_dims[2:]))
    return dxg.reshape(n, c, *padded)[(slice(None), slice(None)) + crop]


def conv_filter_grad(dy, x, w_dims, pre, post, stride, dilation) -> np.ndarray:
    """``dw`` of ``y = conv(x, w)`` for w of dims ``w_dims``, given ``dy``."""
    dy, x = np.asarray(dy, np.float64), np.asarray(x, np.float64)
    n, c, k, cg = x.shape[0], x.shape[1], w_dims[0], w_dims[1]
    g = c // cg
    out = dy.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pre, post)))
    xg = xp.reshape(n, g, cg, *xp.shape[2:])
    dyg = dy.reshape(n, g, k // g, *out)
    dw = np.zeros((g, k // g, cg, *w_dims[2:]))
    for r, win in _windows(w_dims[2:], out, stride, dilation):
        sp = "xyz"[:len(out)]
        dw[(Ellipsis,) + r] = np.einsum(f"ngk{sp},ngc{sp}->gkc", dyg, xg[(slice(None),) * 3 + win])
    return dw.reshape(tuple(w_dims))


def _out_dims(env, uid: int) -> tuple[int, ...]:
    # NOTE: dgrad/wgrad output dims are set by the caller and cannot be derived from the
    # inputs (groups and, with stride > 1, the spatial size are ambiguous): the engine's
    # environment must expose the graph's declared dims.
    dims = getattr(env, "dims", None)
    if dims is None:
        raise NotImplementedError("the reference environment does not expose output dims (env.dims(uid))")
    return tuple(dims(uid))


@register_reference(OpKind.CONV_FPROP)
def ref_conv_fprop(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    x = env[at.x_uid]
    return {at.y_uid: conv_forward(x, env[at.w_uid], *_geometry(at, x.ndim - 2))}


@register_reference(OpKind.CONV_DGRAD)
def ref_conv_dgrad(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    dy = env[at.y_uid]
    return {at.x_uid: conv_data_grad(dy, env[at.w_uid], _out_dims(env, at.x_uid), *_geometry(at, dy.ndim - 2))}


@register_reference(OpKind.CONV_WGRAD)
def ref_conv_wgrad(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    dy = env[at.y_uid]
    return {at.w_uid: conv_filter_grad(dy, env[at.x_uid], _out_dims(env, at.w_uid), *_geometry(at, dy.ndim - 2))}
