"""Reduction and normalization shape and attribute rules, shared by their OpDefs (reduction.py,
batchnorm_inference.py, layernorm.py, rmsnorm.py, layernorm_backward.py, rmsnorm_backward.py) and
the emitters (no MLIR)."""
from __future__ import annotations

import math
from typing import Callable, Sequence

from graph_ir._fbs.graph_generated import NormFwdPhase, ReductionMode
from graph_ir.desc import ABSENT, GraphError
from graph_ir.dynamic import FIXED, VARY, Facts, right_aligned

# The reduction modes this project runs, in the order its messages list them.
REDUCTION_MODES = (ReductionMode.ADD, ReductionMode.MUL, ReductionMode.MIN_OP, ReductionMode.MAX_OP,
                   ReductionMode.AMAX, ReductionMode.AVG, ReductionMode.NORM1, ReductionMode.NORM2,
                   ReductionMode.MUL_NO_ZEROS)

Dims = Callable[[int], Sequence[int]]


_MODE_NAMES = {v: k for k, v in vars(ReductionMode).items() if not k.startswith("_") and isinstance(v, int)}


_PHASE_NAMES = {v: k for k, v in vars(NormFwdPhase).items() if not k.startswith("_") and isinstance(v, int)}


def check_reduction_mode(mode: int) -> None:
    if mode not in REDUCTION_MODES:
        valid = ", ".join(_MODE_NAMES[m] for m in REDUCTION_MODES)
        raise GraphError(f"field 'mode' value {_MODE_NAMES.get(mode, mode)}: not a reduction mode; "
                            f"use one of hd.ReductionMode.{{{valid}}}")


def reduced_axes(x: Sequence[int], y: Sequence[int]) -> tuple[int, ...]:
    """Axes a reduction from dims ``x`` to dims ``y`` reduces (``y`` is 1 there, ``x`` is not).

    Raises:
        GraphError: ``y`` has another rank, or an axis that is neither 1 nor ``x``'s size.
    """
    x, y = tuple(x), tuple(y)
    if len(x) == 0:
        raise GraphError(f"field 'x' dims {list(x)}: a reduction needs an input of rank >= 1")
    if len(y) != len(x):
        raise GraphError(f"field 'y' dims {list(y)}: rank {len(y)} differs from x's rank {len(x)} "
                            f"(x dims {list(x)}); set y's dims to x's with 1 on every reduced axis")
    for i, (a, b) in enumerate(zip(x, y)):
        if b not in (1, a):
            raise GraphError(f"field 'y' dims {list(y)}: axis {i} has size {b}, neither 1 (reduced) "
                                f"nor x's size {a} (x dims {list(x)})")
    return tuple(i for i, (a, b) in enumerate(zip(x, y)) if b == 1 and a != 1)


def x_dims(at, dims: Dims) -> tuple[int, ...]:
    """Dims of the op's required input ``x``."""
    if at.x_uid == ABSENT:
        raise GraphError("field 'x' is missing: pass the input tensor")
    return tuple(dims(at.x_uid))


def check_batchnorm(at, dims: Dims) -> dict[int, tuple[int, ...]]:
    """Validates batchnorm_inference operands; returns ``{y_uid: dims}``."""
    x = x_dims(at, dims)
    if len(x) < 2:
        raise GraphError(f"field 'x' dims {list(x)}: batchnorm needs rank >= 2 (N, C, spatial...)")
    want = (1, x[1]) + (1,) * (len(x) - 2)
    for f in ("mean", "inv_variance", "scale", "bias"):
        _check_operand(at, f, want, dims, "per-channel dims [1, C, 1, ...] with C = x's axis 1")
    return {at.y_uid: x}


def check_layernorm(at, dims: Dims, scalar=None) -> dict[int, tuple[int, ...]]:
    """Validates layernorm attributes; returns the dims of every output.

    ``scalar(uid)`` gives a scalar tensor's value (``None`` if not a scalar);
    without it the epsilon value is not checked. The TRAINING statistics have x's
    dims with 1 on the normalized axes (:func:`norm_axes`).
    """
    if at.phase not in (NormFwdPhase.INFERENCE, NormFwdPhase.TRAINING):
        raise GraphError(f"field 'phase' value {_PHASE_NAMES.get(at.phase, at.phase)}: use "
                            "hd.NormFwdPhase.INFERENCE or hd.NormFwdPhase.TRAINING")
    out = _check_row_norm(at, ("scale", "bias"), dims, scalar, at.normalized_dim_count)
    x = tuple(dims(at.x_uid))
    stats = stats_dims(x, norm_axes(x, tuple(dims(at.scale_uid)), at.normalized_dim_count))
    training = at.phase == NormFwdPhase.TRAINING
    for f in ("mean", "inv_variance"):
        uid = getattr(at, f"{f}_uid")
        if training and uid == ABSENT:
            raise GraphError(f"field '{f}' is missing: the TRAINING phase outputs mean and inv_variance")
        if not training and uid != ABSENT:
            raise GraphError(f"field '{f}' is set (uid {uid}) but the phase is INFERENCE, which outputs "
                                "only y; use hd.NormFwdPhase.TRAINING to get the statistics")
        if uid != ABSENT:
            out[uid] = stats
    return out


def check_rmsnorm(at, dims: Dims, scalar=None) -> dict[int, tuple[int, ...]]:
    """Validates rmsnorm attributes; returns the dims of every output (see :func:`check_layernorm`).

    The bias is optional (the scale's dims); phase NOT_SET reads as INFERENCE. TRAINING also
    outputs ``inv_rms``, of x's dims with 1 on the normalized axes.
    """
    if at.phase not in (NormFwdPhase.NOT_SET, NormFwdPhase.INFERENCE, NormFwdPhase.TRAINING):
        raise GraphError(f"field 'phase' value {_PHASE_NAMES.get(at.phase, at.phase)}: use "
                            "hd.NormFwdPhase.INFERENCE or hd.NormFwdPhase.TRAINING")
    operands = ("scale",) if getattr(at, "bias_uid", ABSENT) == ABSENT else ("scale", "bias")
    out = _check_row_norm(at, operands, dims, scalar)
    training = at.phase == NormFwdPhase.TRAINING
    uid = at.inv_rms_uid
    if training and uid == ABSENT:
        raise GraphError("field 'inv_rms' is missing: the TRAINING phase outputs inv_rms")
    if not training and uid != ABSENT:
        raise GraphError(f"field 'inv_rms' is set (uid {uid}) but the phase is INFERENCE, which outputs only y; "
                            "use hd.NormFwdPhase.TRAINING to get inv_rms")
    if uid != ABSENT:
        x = tuple(dims(at.x_uid))
        out[uid] = stats_dims(x, norm_axes(x, tuple(dims(at.scale_uid))))
    return out


def _backward_dims(at, dims: Dims, normalized_dim_count: int = 0):
    """The shared operand checks of layernorm_backward and rmsnorm_backward: x (rank >= 2), dy of
    x's dims, the scale; returns ``(x, scale, normalized axes, statistics dims)``."""
    for f, what in (("dy", "the gradient of y (x's dims)"), ("x", "the forward's input"),
                    ("scale", "the forward's scale")):
        if getattr(at, f"{f}_uid") == ABSENT:
            raise GraphError(f"field '{f}' is missing: pass {what}")
    x = tuple(dims(at.x_uid))
    if len(x) < 2:
        raise GraphError(f"field 'x' dims {list(x)}: needs rank >= 2 (batch axis 0, then the normalized axes)")
    dy = tuple(dims(at.dy_uid))
    if dy != x:
        raise GraphError(f"field 'dy' dims {list(dy)}: must equal x's dims {list(x)}")
    scale = tuple(dims(at.scale_uid))
    axes = norm_axes(x, scale, normalized_dim_count)
    return x, scale, axes, stats_dims(x, axes)


def _stat_operand(at, field: str, want: tuple, dims: Dims, what: str) -> None:
    got = tuple(dims(getattr(at, f"{field}_uid")))
    if got != want:
        raise GraphError(f"field '{field}' dims {list(got)}: expected {list(want)} ({what}: x's dims with 1 on "
                            "the normalized axes)")


def _check_preset(at, field: str, want: tuple, dims: Dims) -> None:
    """An output whose dims the caller set must have the dims the op gives."""
    uid = getattr(at, f"{field}_uid")
    try:
        got = tuple(dims(uid))
    except KeyError:
        return
    if got != want:
        raise GraphError(f"field '{field}' dims {list(got)}: expected {list(want)} (the scale's dims)")


def check_layernorm_backward(at, dims: Dims, scalar=None) -> dict[int, tuple[int, ...]]:
    """Validates layernorm_backward; returns ``{dx: x's dims, dscale and dbias: the scale's dims}``.

    The statistics are the forward's saved ``mean`` and ``inv_variance`` (x's dims with 1 on the
    normalized axes), or, with neither, recomputed from x with ``epsilon``.
    """
    x, scale, axes, stats = _backward_dims(at, dims, at.normalized_dim_count)
    have = [f for f in ("mean", "inv_variance") if getattr(at, f"{f}_uid") != ABSENT]
    if len(have) == 1:
        miss = "inv_variance" if have == ["mean"] else "mean"
        raise GraphError(f"field '{miss}' is missing: pass both saved statistics (mean and inv_variance) or "
                            "neither (then epsilon, to recompute them)")
    for f in have:
        _stat_operand(at, f, stats, dims, f"the forward's saved {f}")
    if not have:
        if at.epsilon_uid == ABSENT:
            raise GraphError("field 'mean' is missing: pass the forward's saved mean and inv_variance, or "
                                "epsilon to recompute them")
    if at.epsilon_uid != ABSENT:
        eps_dims = tuple(dims(at.epsilon_uid))
        if any(d != 1 for d in eps_dims):
            raise GraphError(f"field 'epsilon' dims {list(eps_dims)}: must be a scalar constant")
        if scalar is not None and not have:
            value = scalar(at.epsilon_uid)
            if value is None:
                raise GraphError("field 'epsilon': must be a scalar constant (pass a Python float or "
                                    "g.tensor(value=...))", "unsupported")
            check_epsilon(value)
    for f in ("dx", "dscale", "dbias"):
        if getattr(at, f"{f}_uid") == ABSENT:
            raise GraphError(f"field '{f}' is missing: layernorm_backward outputs dx, dscale and dbias")
    _check_preset(at, "dscale", scale, dims)
    _check_preset(at, "dbias", scale, dims)
    return {at.dx_uid: x, at.dscale_uid: scale, at.dbias_uid: scale}


def check_rmsnorm_backward(at, dims: Dims, scalar=None) -> dict[int, tuple[int, ...]]:
    """Validates rmsnorm_backward; returns ``{dx: x's dims, dscale (and dbias if set): the scale's dims}``."""
    x, scale, axes, stats = _backward_dims(at, dims)
    if at.inv_rms_uid == ABSENT:
        raise GraphError(f"field 'inv_rms' is missing: pass the forward's saved inv_rms (dims {list(stats)})")
    _stat_operand(at, "inv_rms", stats, dims, "the forward's saved inv_rms")
    for f in ("dx", "dscale"):
        if getattr(at, f"{f}_uid") == ABSENT:
            raise GraphError(f"field '{f}' is missing: rmsnorm_backward outputs dx and dscale")
    out = {at.dx_uid: x, at.dscale_uid: scale}
    _check_preset(at, "dscale", scale, dims)
    if at.dbias_uid != ABSENT:
        _check_preset(at, "dbias", scale, dims)
        out[at.dbias_uid] = scale
    return out


def norm_axes(x: Sequence[int], scale: Sequence[int], normalized_dim_count: int = 0) -> tuple[int, ...]:
    """The axes of ``x`` a layernorm/rmsnorm with this ``scale`` normalizes over, as hipDNN reads them.

    ``scale`` is right-aligned to ``x`` (a lower rank gets leading 1s, as numpy broadcasts);
    each of its extents is 1 or x's. The normalized axes are the trailing run where the
    scale's extents equal x's (hipDNN's reference: ``normalizeDim`` = rank minus that run,
    at least 1, so axis 0 is never normalized); the scale is 1 on every axis before it.
    ``[1, *x.dims[1:]]`` normalizes axes 1.., ``[1, 1, E]`` on ``[B, S, E]`` the last one.
    A scale of all 1s where x's last extent is not 1 names no axis: with
    ``normalized_dim_count`` set the last that many axes are normalized (the scale
    broadcasts over them), without it the graph is refused. A set
    ``normalized_dim_count`` must otherwise name the same axes (size-1 axes aside).

    Example:
        >>> norm_axes((2, 5, 8), (1, 1, 8)), norm_axes((6, 32), (32,)), norm_axes((2, 5, 8), (1, 5, 8))
        ((2,), (1,), (1, 2))
    """
    x, s = tuple(x), tuple(scale)
    rank = len(x)
    if not 1 <= len(s) <= rank:
        raise GraphError(f"field 'scale' dims {list(s)}: rank {len(s)} must be 1..{rank} (x's rank; a "
                            f"lower rank is right-aligned, as numpy broadcasts; x dims {list(x)})")
    s = (1,) * (rank - len(s)) + s
    for i, (a, b) in enumerate(zip(x, s)):
        if b not in (1, a):
            raise GraphError(f"field 'scale' dims {list(scale)}: axis {i} has extent {b}, neither 1 nor x's "
                                f"{a} (x dims {list(x)})")
    run = 0
    while run < rank and s[rank - 1 - run] == x[rank - 1 - run]:
        run += 1
    first = 1 if run == rank else rank - run
    if any(d != 1 for d in s[:first]):
        raise GraphError(f"field 'scale' dims {list(scale)}: the normalized axes (where the scale has x's "
                            f"extents) must be the trailing ones, with the scale 1 on every axis before "
                            f"them (x dims {list(x)}); e.g. [1, 1, E] normalizes the last axis of [B, S, E]")
    axes = tuple(range(first, rank))
    if normalized_dim_count:
        if not 1 <= normalized_dim_count < rank:
            raise GraphError(f"field 'normalized_dim_count' value {normalized_dim_count}: must be 1..{rank - 1} "
                                f"for x of rank {rank}")
        named = tuple(range(rank - normalized_dim_count, rank))
        if not axes:
            return named
        if [i for i in named if x[i] != 1] != [i for i in axes if x[i] != 1]:
            raise GraphError(f"field 'normalized_dim_count' value {normalized_dim_count} normalizes axes "
                                f"{list(named)} but the scale dims {list(scale)} normalize axes {list(axes)} "
                                f"(x dims {list(x)}); give the scale x's extents on exactly the normalized axes")
    if not axes:
        raise GraphError(f"field 'scale' dims {list(scale)}: extent 1 on every axis names no axis to normalize "
                            f"(x dims {list(x)}); give the scale x's extents on the normalized (trailing) axes, "
                            "e.g. [1, *x.dims[1:]] for every axis after the batch axis")
    return axes


def stats_dims(x: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    """Dims of per-row statistics (mean, inv_variance): x's, with 1 on the normalized ``axes``."""
    return tuple(1 if i in axes else d for i, d in enumerate(x))


def check_epsilon(value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise GraphError(f"field 'epsilon' value {value!r}: must be a finite number >= 0 (e.g. 1e-5)")


def _check_operand(at, field: str, want: tuple, dims: Dims, what: str) -> None:
    uid = getattr(at, f"{field}_uid")
    if uid == ABSENT:
        raise GraphError(f"field '{field}' is missing: pass a tensor of dims {list(want)} ({what})")
    got = tuple(dims(uid))
    if got != want:
        raise GraphError(f"field '{field}' dims {list(got)}: expected {list(want)} ({what})")


def _check_row_norm(at, operands: Sequence[str], dims: Dims, scalar,
                    normalized_dim_count: int = 0) -> dict[int, tuple[int, ...]]:
    x = x_dims(at, dims)
    if len(x) < 2:
        raise GraphError(f"field 'x' dims {list(x)}: needs rank >= 2 (batch axis 0, then the "
                            "normalized axes)")
    scale = None
    for f in operands:
        uid = getattr(at, f"{f}_uid")
        if uid == ABSENT:
            raise GraphError(f"field '{f}' is missing: pass a tensor of dims {[1, *x[1:]]} (one value per "
                                "normalized element; hipDNN's forms such as [1, 1, E] or [E] normalize fewer axes)")
        got = tuple(dims(uid))
        if scale is None:
            scale = got
            norm_axes(x, got, normalized_dim_count)
        elif (1,) * (len(x) - len(got)) + got != (1,) * (len(x) - len(scale)) + scale:
            raise GraphError(f"field '{f}' dims {list(got)}: must match the scale's dims {list(scale)}")
    if at.epsilon_uid == ABSENT:
        raise GraphError("field 'epsilon' is missing: pass a scalar such as 1e-5")
    eps_dims = tuple(dims(at.epsilon_uid))
    if any(d != 1 for d in eps_dims):
        raise GraphError(f"field 'epsilon' dims {list(eps_dims)}: must be a scalar constant "
                            "(pass a Python float or g.tensor(value=...))")
    if scalar is not None:
        value = scalar(at.epsilon_uid)
        if value is None:
            raise GraphError("field 'epsilon': must be a scalar constant (pass a Python float or "
                                "g.tensor(value=...))", "unsupported")
        check_epsilon(value)
    return {at.y_uid: x}


def dynamic_rownorm(f: Facts, node):
    """The dynamic-shape rule of layernorm and rmsnorm: the normalized axes are fixed, the others vary."""
    at = node.attrs
    x = f.dims(at.x_uid)
    scale = f.dims(at.scale_uid)
    axes = norm_axes(x, scale, getattr(at, "normalized_dim_count", 0))
    for i in range(len(x)):
        f.union((at.x_uid, i), (at.y_uid, i))
        f.mark((at.x_uid, i), FIXED if i in axes else VARY, "N" if i == 0 else "S")
    for name in ("scale_uid", "bias_uid"):
        u = getattr(at, name, ABSENT)
        if u != ABSENT and not f.graph.tensor(u).is_scalar:
            right_aligned(f, u, at.x_uid)
            for i in range(len(f.dims(u))):
                f.mark((u, i), FIXED)
    for name in ("mean_uid", "inv_variance_uid", "inv_rms_uid"):
        u = getattr(at, name, ABSENT)
        if u != ABSENT:
            for i, d in enumerate(f.dims(u)):
                if i in axes or d != x[i]:
                    f.mark((u, i), FIXED)
                else:
                    f.union((u, i), (at.x_uid, i))


def dynamic_rownorm_backward(f: Facts, node):
    """The dynamic-shape rule of layernorm_backward and rmsnorm_backward, as :func:`dynamic_rownorm`:
    the normalized axes are fixed, the others vary (dy and dx follow x); the scale, dscale and
    dbias are fixed; the statistics follow x on the axes they share with it."""
    at = node.attrs
    x = f.dims(at.x_uid)
    axes = norm_axes(x, f.dims(at.scale_uid), getattr(at, "normalized_dim_count", 0))
    for i in range(len(x)):
        for u in (at.dy_uid, at.dx_uid):
            f.union((at.x_uid, i), (u, i))
        f.mark((at.x_uid, i), FIXED if i in axes else VARY, "N" if i == 0 else "S")
    for name in ("scale_uid", "dscale_uid", "dbias_uid"):
        u = getattr(at, name, ABSENT)
        if u != ABSENT:
            for i in range(len(f.dims(u))):
                f.mark((u, i), FIXED)
    for name in ("mean_uid", "inv_variance_uid", "inv_rms_uid"):
        u = getattr(at, name, ABSENT)
        if u != ABSENT:
            for i, d in enumerate(f.dims(u)):
                if i in axes or d != x[i]:
                    f.mark((u, i), FIXED)
                else:
                    f.union((u, i), (at.x_uid, i))
