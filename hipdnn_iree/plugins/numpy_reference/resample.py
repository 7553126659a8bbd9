"""numpy reference for pooling: resample (RESAMPLE_FWD) and resample_backward (RESAMPLE_BWD).

Written from the definitions in float64, sharing nothing with the linalg lowering: x is padded
(with a mask of what lies inside x), each output's window is gathered as a trailing axis of the ``prod(window)``
offsets in row-major order (:func:`windows`), then
- MAXPOOL: the maximum over the in-bounds elements; index = the first offset holding it;
- AVGPOOL_INCLUDE_PADDING: the sum of the in-bounds elements / ``prod(window)``;
- AVGPOOL_EXCLUDE_PADDING: the same sum / the number of in-bounds elements.
The backward scatters each dy element back through the same offsets: to the index offset (max),
or ``dy / divisor`` to every in-bounds offset of the window (average).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from graph_ir.desc import ABSENT, NodeDesc, OpKind
from hipdnn_iree.plugins.numpy_reference.registry import register_reference

MAXPOOL, AVG_EXCLUDE, AVG_INCLUDE = 1, 2, 3


def _params(at, rank):
    def get(v, default):
        return tuple(int(e) for e in v) if len(v) else (default,) * rank
    return (get(at.window, 1), get(at.stride, 1), get(at.pre_padding, 0), get(at.post_padding, 0))


def _out(sp, window, stride, pre, post):
    return tuple((s + a + b - w) // st + 1 for s, w, st, a, b in zip(sp, window, stride, pre, post))


def _offsets(window):
    return list(itertools.product(*(range(w) for w in window)))


def _gather(xp, window, stride, out):
    parts = []
    for k in _offsets(window):
        sl = tuple(slice(ki, ki + (o - 1) * s + 1, s) for ki, o, s in zip(k, out, stride))
        parts.append(xp[(slice(None), slice(None)) + sl])
    return np.stack(parts, axis=-1)


def windows(x, window, stride, pre, post):
    """``(values, inside)``: ``[N, C, *O, prod(window)]`` window elements of x padded by pre/post
    (0 in the padding) and whether each lies inside x."""
    x = np.asarray(x, np.float64)
    pads = [(0, 0), (0, 0)] + list(zip(pre, post))
    out = _out(x.shape[2:], window, stride, pre, post)
    inside = np.pad(np.ones((1, 1) + x.shape[2:], bool), pads)
    return _gather(np.pad(x, pads), window, stride, out), _gather(inside, window, stride, out)


def pool_forward(x, mode, window, stride, pre, post):
    """``(y, index)``: index (int64, within the window) for MAXPOOL, else None."""
    w, inside = windows(x, window, stride, pre, post)
    if mode == MAXPOOL:
        vals = np.where(inside, w, -np.inf)
        idx = np.argmax(vals, axis=-1)                 # numpy: the first maximum (a NaN wins)
        return np.take_along_axis(vals, idx[..., None], -1)[..., 0], idx
    total = np.where(inside, w, 0.0).sum(-1)
    div = math.prod(window) if mode == AVG_INCLUDE else inside.sum(-1)
    return total / div, None


def pool_backward(dy, dx_dims, mode, window, stride, pre, post, index=None):
    """dx of the pooling of an x of dims ``dx_dims``, given dy (and the forward's index for MAXPOOL)."""
    dy = np.asarray(dy, np.float64)
    n, c, sp = dx_dims[0], dx_dims[1], tuple(dx_dims[2:])
    out = dy.shape[2:]
    padded = np.zeros((n, c, *(s + a + b for s, a, b in zip(sp, pre, post))))
    inside_x = np.pad(np.ones((1, 1, *sp)), [(0, 0), (0, 0)] + list(zip(pre, post)))
    if mode == AVG_INCLUDE:
        scaled = dy / math.prod(window)
    elif mode == AVG_EXCLUDE:
        count = np.zeros(out)
        for k in _offsets(window):
            sl = tuple(slice(ki, ki + (o - 1) * s + 1, s) for ki, o, s in zip(k, out, stride))
            count += inside_x[(0, 0) + sl]
        scaled = dy / count
    for j, k in enumerate(_offsets(window)):
        sl = (slice(None), slice(None)) + tuple(slice(ki, ki + (o - 1) * s + 1, s) for ki, o, s in zip(k, out, stride))
        if mode == MAXPOOL:
            padded[sl] += np.where(np.asarray(index) == j, dy, 0.0)
        else:
            padded[sl] += scaled * inside_x[(0, 0) + sl[2:]]
    crop = tuple(slice(a, a + s) for a, s in zip(pre, sp))
    return padded[(slice(None), slice(None)) + crop]


@register_reference(OpKind.RESAMPLE_FWD)
def ref_resample_fwd(node: NodeDesc, env) -> dict:
    at = node.attrs
    x = env[at.x_uid]
    y, idx = pool_forward(x, int(at.resample_mode), *_params(at, x.ndim - 2))
    out = {at.y_uid: y}
    if at.index_uid != ABSENT:
        out[at.index_uid] = idx
    return out


@register_reference(OpKind.RESAMPLE_BWD)
def ref_resample_bwd(node: NodeDesc, env) -> dict:
    at = node.attrs
    dy = env[at.dy_uid]
    index = env[at.index_uid] if at.index_uid != ABSENT else None
    dims = tuple(env.dims(at.dx_uid))
    return {at.dx_uid: pool_backward(dy, dims, int(at.resample_mode), *_params(at, dy.ndim - 2), index=index)}
