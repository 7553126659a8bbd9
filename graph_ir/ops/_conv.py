"""The convolutions' shared shape and attribute rules: spatial parameters, output dims, checks, the
dynamic-shape rule (no MLIR). Each op's OpDef is in conv_fprop.py, conv_dgrad.py, conv_wgrad.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from graph_ir.desc import GraphError, OpKind
from graph_ir.dynamic import FIXED, VARY, Facts, Step


@dataclass(frozen=True)
class ConvParams:
    """Spatial attributes of one convolution, one value per spatial axis."""

    pre: tuple[int, ...]
    post: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.stride)


_PARAM_FIELDS = (("pre_padding", "pre", 0, 0), ("post_padding", "post", 0, 0),
                 ("stride", "stride", 1, 1), ("dilation", "dilation", 1, 1))


def conv_params(attrs, rank: int) -> ConvParams:
    """Normalized spatial attributes; an empty tuple means the default (0 pads, 1 stride/dilation).

    Raises:
        GraphError: naming the field and its value when a length or value is wrong.

    Example:
        >>> from graph_ir.desc import ConvFpropAttrs
        >>> conv_params(ConvFpropAttrs(1, 2, 3, (1, 0), (1, 0), (), ()), 2).stride
        (1, 1)
    """
    out = {}
    for field, key, default, low in _PARAM_FIELDS:
        v = tuple(int(e) for e in getattr(attrs, field))
        if not v:
            v = (default,) * rank
        if len(v) != rank:
            raise GraphError(f"field '{field}' value {list(v)}: needs {rank} values, one per spatial dim "
                                f"of the {rank}-D convolution")
        if any(e < low for e in v):
            raise GraphError(f"field '{field}' value {list(v)}: every entry must be >= {low}")
        out[key] = v
    return ConvParams(**out)


def conv_out_size(size: int, pre: int, post: int, kernel: int, stride: int, dilation: int) -> int:
    """Output length of one spatial axis (may be <= 0 when the kernel does not fit)."""
    return (size + pre + post - dilation * (kernel - 1) - 1) // stride + 1


def spatial_rank(dims: Sequence[int], field: str) -> int:
    """Spatial rank of a ``[N, C, *spatial]`` tensor (1 to 3); raises GraphError otherwise."""
    if not 3 <= len(dims) <= 5:
        raise GraphError(f"field '{field}' dims {list(dims)}: a convolution operand needs rank 3, 4 or 5 "
                            f"([N, C, *spatial] with 1-3 spatial dims), got rank {len(dims)}")
    return len(dims) - 2


def forward_shape(x: Sequence[int], w: Sequence[int], attrs) -> tuple[tuple[int, ...], ConvParams, int]:
    """Checks x/w/attributes of the forward convolution; returns ``(y dims, params, groups)``.

    Example:
        >>> from graph_ir.desc import ConvFpropAttrs
        >>> forward_shape((2, 8, 10, 10), (6, 4, 3, 3), ConvFpropAttrs(1, 2, 3, (1, 1), (1, 1), (2, 2), ()))[0]
        (2, 6, 5, 5)
    """
    rank = spatial_rank(x, "x_uid")
    if len(w) != len(x):
        raise GraphError(f"field 'w_uid' dims {list(w)} (rank {len(w)}) must have the rank of "
                            f"x dims {list(x)} (rank {len(x)})")
    p = conv_params(attrs, rank)
    n, c, k, cg = x[0], x[1], w[0], w[1]
    if c % cg:
        raise GraphError(f"field 'w_uid' dims {list(w)}: x has {c} channels, not divisible "
                            f"into groups of w.dims[1] = {cg} channels")
    groups = c // cg
    if k % groups:
        raise GraphError(f"field 'w_uid' dims {list(w)}: {k} output channels (w.dims[0]) are not "
                            f"divisible by the {groups} groups (= {c} channels / {cg})")
    out = []
    for i in range(rank):
        o = conv_out_size(x[2 + i], p.pre[i], p.post[i], w[2 + i], p.stride[i], p.dilation[i])
        if o < 1:
            raise GraphError(f"field 'w_uid' dims {list(w)}: kernel extent "
                                f"{p.dilation[i] * (w[2 + i] - 1) + 1} (dilation {p.dilation[i]}) exceeds the "
                                f"padded input {x[2 + i] + p.pre[i] + p.post[i]} on spatial axis {i}")
        out.append(o)
    return (n, k, *out), p, groups


def check_forward(x: Sequence[int], w: Sequence[int], y: Sequence[int], attrs, given: str) -> tuple[ConvParams, int]:
    """Checks that x, w and y form one convolution; ``given`` names the field whose dims the caller
    set (dx or dw) for the error message. Returns ``(params, groups)``."""
    mine = x if given == "x_uid" else w
    conv_params(attrs, spatial_rank(y, "y_uid"))
    try:
        want, p, groups = forward_shape(x, w, attrs)
    except GraphError as e:
        raise GraphError(f"field '{given}' dims {list(mine)} do not fit the operands: {e}") from None
    if tuple(y) != want:
        raise GraphError(f"field '{given}' dims {list(mine)} do not fit: the forward convolution of "
                            f"x {list(x)} with w {list(w)} gives y {list(want)}, but dy is {list(y)}")
    return p, groups


def given(dims, uid: int):
    """User-set dims of an output, when the lookup offers them (None otherwise)."""
    try:
        return tuple(dims(uid))
    except KeyError:
        return None


def same_rank(a, a_field: str, b, b_field: str) -> None:
    if len(a) != len(b):
        raise GraphError(f"field '{b_field}' dims {list(b)} (rank {len(b)}) must have the rank of "
                         f"{a_field} dims {list(a)} (rank {len(a)})")


def dynamic(f: Facts, node):
    """The dynamic-shape rule of the three convolutions (graph_ir/dynamic.py's module docstring)."""
    at = node.attrs
    x, w, y = at.x_uid, at.w_uid, at.y_uid
    dx, dw = f.dims(x), f.dims(w)
    f.union((x, 0), (y, 0))
    # NOTE: conv_wgrad contracts over N. With N dynamic, IREE 3.13's convert-conv-to-channels-last pass
    # (which GPU builds of graphs with a conv_fprop need: knobs.resolve) fails on it ("'tensor.collapse_shape'
    # op expected dimension 1 of collapsed type to be dynamic"); without the pass it compiles for rocm,
    # cuda and the CPU. So N varies for wgrad unless the graph also has a conv_fprop (f.wgrad_n False).
    f.mark((x, 0), FIXED if node.kind == OpKind.CONV_WGRAD and not f.wgrad_n else VARY, "N")
    for u in (x, y, w):
        f.mark((u, 1), FIXED)
    f.mark((w, 0), FIXED)
    rank = len(dx) - 2
    p = conv_params(at, rank)
    for i in range(rank):
        f.mark((w, 2 + i), FIXED)
        groups = dx[1] // max(dw[1], 1)
        if f.conv_spatial and node.kind == OpKind.CONV_FPROP and rank == 2 and groups == 1:
            step = Step(p.pre[i] + p.post[i], p.dilation[i] * (dw[2 + i] - 1) + 1, p.stride[i])
            if step.pad == step.extent - 1 and step.stride == 1:
                f.union((x, 2 + i), (y, 2 + i))          # 'same' padding: the size is kept
            else:
                f.derived.append(((y, 2 + i), (x, 2 + i), step))
            f.mark((x, 2 + i), VARY, "HWD"[i] if rank > 1 else "W")
        else:
            f.mark((x, 2 + i), FIXED)
            f.mark((y, 2 + i), FIXED)
