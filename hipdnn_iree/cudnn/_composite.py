"""cuDNN FE's training-norm methods composed from ``hd.Graph`` pointwise and reduction nodes.

This engine has no batchnorm-training, instancenorm, genstats or norm-backward node yet (the
training-graph issue adds them to ``hd.Graph``); the facade builds each from the nodes it has, in
the compute type, with FLOAT statistics whatever the io type. One forward and one backward
composition serve every norm; they differ only in which axes the statistics cover:

- batchnorm: every axis but the channel axis (statistics ``[1, C, 1, ...]``);
- instancenorm: the spatial axes (``[N, C, 1, ...]``);
- layernorm / rmsnorm: the axes where the statistics tensor has 1 (``[N, 1, ...]`` or ``[B, S, 1]``).

Forward, with ``m`` the mean over those axes: ``xhat = (x - m) * inv``, ``inv = 1/sqrt(var + eps)``
(biased variance), ``y = xhat * scale + bias``; rmsnorm has no ``m`` (``var`` is the mean square).
Backward, with ``g = dy * scale``: ``dx = inv * (g - mean(g) - xhat * mean(g * xhat))`` (rmsnorm
without the ``mean(g)`` term); ``dscale = sum(dy * xhat)`` and ``dbias = sum(dy)`` over the axes
where ``scale`` has 1.
"""
from __future__ import annotations

import math

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType, PointwiseMode, ReductionMode

F = DataType.FLOAT


class Composer:
    """Pointwise and reduction nodes in ``cdt`` (FLOAT when unset), FLOAT virtual intermediates."""

    def __init__(self, hd_graph, compute_data_type=None):
        self.hd = hd_graph
        self.cdt = compute_data_type if compute_data_type not in (None, DataType.NOT_SET) else F

    def pw(self, mode: str, a, b=None, c=None, name=None, **params):
        y = self.hd.pointwise(a, b, c, mode=PointwiseMode[mode], compute_data_type=self.cdt, name=name, **params)
        return y.set_data_type(F)

    def reduce(self, x, mode: str, dims, name=None):
        y = self.hd.reduction(x, mode=ReductionMode[mode], compute_data_type=self.cdt, name=name)
        return y.set_dim(list(dims)).set_data_type(F)

    def mean(self, x, dims, name=None):
        return self.reduce(x, "AVG", dims, name)

    def sum(self, x, dims, name=None):
        return self.reduce(x, "ADD", dims, name)


def reduced_count(dims, stats_dims) -> int:
    """Elements each statistic covers: the product of ``dims`` over the axes ``stats_dims`` reduces."""
    return math.prod(d for d, s in zip(dims, stats_dims) if s == 1)


def check_stats_dims(what: str, dims, stats_dims, name: str) -> None:
    if stats_dims is None or len(stats_dims) != len(dims) or any(s not in (1, d) for d, s in zip(dims, stats_dims)):
        raise HipdnnError(Status.BAD_PARAM, f"{what}: {name} dims {stats_dims} do not fit input dims {dims} "
                                            "(each axis must be the input's or 1)")


def norm_forward(c: Composer, x, dims, stats_dims, scale, bias, eps, centered=True, name=None):
    """``(y, mean or None, inv, var)``: the normalization of ``x`` over the axes ``stats_dims`` reduces."""
    if centered:
        mean = c.mean(x, stats_dims, name=f"{name}_mean" if name else None)
        d = c.pw("SUB", x, mean)
    else:
        mean, d = None, x
    var = c.mean(c.pw("MUL", d, d), stats_dims)
    inv = c.pw("RSQRT", c.pw("ADD", var, eps), name=f"{name}_inv_variance" if name else None)
    y = c.pw("MUL", d, inv)
    if scale is not None:
        y = c.pw("MUL", y, scale)
    if bias is not None:
        y = c.pw("ADD", y, bias)
    return y.set_dim(list(dims)), mean, inv.set_dim(list(stats_dims)), var


def norm_backward(c: Composer, dy, x, dims, stats_dims, scale, scale_dims, mean, inv, centered=True,
                  want_dbias=True):
    """``(dx, dscale, dbias or None)`` of :func:`norm_forward` (``scale`` given, ``bias`` added)."""
    xhat = c.pw("MUL", c.pw("SUB", x, mean), inv) if centered else c.pw("MUL", x, inv)
    g = c.pw("MUL", dy, scale)
    # NOTE: each pointwise output takes its first input's stride order, and every step from here
    # on starts from xhat: dx comes out in x's order (channels-last x, channels-last dx) whatever dy's
    # dx = inv * (g - mean(g) - xhat * mean(g * xhat)) = (xhat * mean(g * xhat) - g + mean(g)) * -inv
    rest = c.pw("SUB", c.pw("MUL", xhat, c.mean(c.pw("MUL", g, xhat), stats_dims)), g)
    if centered:
        rest = c.pw("ADD", rest, c.mean(g, stats_dims))
    dx = c.pw("MUL", rest, c.pw("NEG", inv)).set_dim(list(dims))
    dscale = c.sum(c.pw("MUL", dy, xhat), scale_dims)
    dbias = c.sum(dy, scale_dims) if want_dbias else None
    return dx, dscale, dbias
