"""Pooling's shared shape and attribute rules (RESAMPLE_FWD and RESAMPLE_BWD; no MLIR).

x ``[N, C, *S]`` (1-3 spatial axes) pools to y ``[N, C, *O]`` with, per spatial axis,
``O = (S + pre + post - window) // stride + 1``. Empty attribute tuples mean the defaults: 0
padding, stride 1; ``window`` has no default. Padding must be smaller than the window on each
side (``0 <= pre, post < window``): then every window holds at least one element of x, so max
pooling always has an input element to pick and the in-bounds count of AVGPOOL_EXCLUDE_PADDING
is never 0. (torch asks for ``pad <= window / 2``; this rule is looser and admits asymmetric pads.)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from graph_ir.desc import ABSENT, GraphError
from graph_ir.dynamic import FIXED, VARY, Facts

MAXPOOL, AVG_EXCLUDE, AVG_INCLUDE = 1, 2, 3          # hipDNN's ResampleMode numbers
NEG_INF_PAD, ZERO_PAD = 1, 2                         # hipDNN's PaddingMode numbers
MODES = {MAXPOOL: "MAXPOOL", AVG_EXCLUDE: "AVGPOOL_EXCLUDE_PADDING", AVG_INCLUDE: "AVGPOOL_INCLUDE_PADDING"}


@dataclass(frozen=True)
class PoolParams:
    """Spatial attributes of one pooling, one value per spatial axis, and the mode."""

    mode: int
    window: tuple[int, ...]
    stride: tuple[int, ...]
    pre: tuple[int, ...]
    post: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.window)

    @property
    def size(self) -> int:
        """Elements per window."""
        return math.prod(self.window)


def check_mode(at) -> int:
    mode = int(at.resample_mode)
    if mode not in MODES:
        raise GraphError(f"field 'resample_mode' value {mode}: must be MAXPOOL (1), AVGPOOL_EXCLUDE_PADDING (2) "
                         f"or AVGPOOL_INCLUDE_PADDING (3)")
    pm = int(at.padding_mode)
    if pm not in (0, NEG_INF_PAD, ZERO_PAD):
        raise GraphError(f"field 'padding_mode' value {pm}: must be PADDING_NOT_SET (0), NEG_INF_PAD (1) "
                         f"or ZERO_PAD (2)")
    natural = NEG_INF_PAD if mode == MAXPOOL else ZERO_PAD
    if pm not in (0, natural):
        raise GraphError(f"field 'padding_mode' value {pm}: {MODES[mode]} pads with "
                         f"{'-inf (NEG_INF_PAD, 1)' if mode == MAXPOOL else 'zeros (ZERO_PAD, 2)'} here; "
                         f"other padding is not supported", "unsupported")
    return mode


def pool_params(at, rank: int) -> PoolParams:
    """Checked, normalized attributes for a pooling with ``rank`` spatial axes.

    Example:
        >>> from graph_ir.desc import ResampleFwdAttrs
        >>> pool_params(ResampleFwdAttrs(1, 2, window=(3, 3), stride=(2, 2), resample_mode=1), 2).pre
        (0, 0)
    """
    mode = check_mode(at)
    out = {}
    for field, key, default, low in (("window", "window", None, 1), ("stride", "stride", 1, 1),
                                     ("pre_padding", "pre", 0, 0), ("post_padding", "post", 0, 0)):
        v = tuple(int(e) for e in getattr(at, field))
        if not v and default is not None:
            v = (default,) * rank
        if len(v) != rank:
            raise GraphError(f"field '{field}' value {list(v)}: needs {rank} values, one per spatial dim of "
                             f"the {rank}-D pooling")
        if any(e < low for e in v):
            raise GraphError(f"field '{field}' value {list(v)}: every entry must be >= {low}")
        out[key] = v
    for field, key in (("pre_padding", "pre"), ("post_padding", "post")):
        bad = [i for i in range(rank) if out[key][i] >= out["window"][i]]
        if bad:
            i = bad[0]
            raise GraphError(f"field '{field}' value {list(out[key])}: padding {out[key][i]} on spatial axis {i} "
                             f"must be smaller than the window ({out['window'][i]}), so that every window "
                             f"holds an input element")
    return PoolParams(mode, **out)


def out_size(size: int, pre: int, post: int, window: int, stride: int) -> int:
    return (size + pre + post - window) // stride + 1


def spatial_rank(dims: Sequence[int], field: str) -> int:
    if not 3 <= len(dims) <= 5:
        raise GraphError(f"field '{field}' dims {list(dims)}: pooling needs rank 3, 4 or 5 "
                         f"([N, C, *spatial] with 1-3 spatial dims), got rank {len(dims)}")
    return len(dims) - 2


def forward_dims(x: Sequence[int], at, field: str = "x_uid") -> tuple[tuple[int, ...], PoolParams]:
    """y's dims for x's; raises GraphError naming the field when the window does not fit.

    Example:
        >>> from graph_ir.desc import ResampleFwdAttrs
        >>> forward_dims((8, 64, 56, 56), ResampleFwdAttrs(1, 2, pre_padding=(1, 1), post_padding=(1, 1),
        ...              stride=(2, 2), window=(3, 3), resample_mode=1))[0]
        (8, 64, 28, 28)
    """
    rank = spatial_rank(x, field)
    p = pool_params(at, rank)
    out = []
    for i in range(rank):
        o = out_size(x[2 + i], p.pre[i], p.post[i], p.window[i], p.stride[i])
        if o < 1:
            raise GraphError(f"field 'window' value {list(p.window)}: window {p.window[i]} exceeds the padded "
                             f"input {x[2 + i] + p.pre[i] + p.post[i]} on spatial axis {i} of {field} "
                             f"dims {list(x)}")
        out.append(o)
    return (x[0], x[1], *out), p


def check_index(at, p: PoolParams, generate: bool) -> None:
    """index_uid is max pooling's only; in the forward, it comes with generate_index."""
    has = at.index_uid != ABSENT
    if generate and bool(at.generate_index) != has:
        raise GraphError(f"field 'generate_index' value {at.generate_index}: "
                         + ("an index_uid output needs generate_index true" if has
                            else "generate_index needs an index_uid output"))
    if has and p.mode != MAXPOOL:
        raise GraphError(f"field 'index_uid' value {at.index_uid}: only MAXPOOL has an index "
                         f"(resample_mode is {MODES[p.mode]})")


def dynamic(f: Facts, node):
    """The batch axis varies (as conv_fprop's N); channels and the spatial axes are fixed."""
    at = node.attrs
    src = getattr(at, "x_uid", None)
    if src is None:
        src = at.dy_uid
    outs = [u for u in (getattr(at, "y_uid", ABSENT), getattr(at, "dx_uid", ABSENT), at.index_uid) if u != ABSENT]
    for u in outs:
        f.union((src, 0), (u, 0))
    f.mark((src, 0), VARY, "N")
    for u in (src, *outs):
        for i in range(1, len(f.dims(u))):
            f.mark((u, i), FIXED)
