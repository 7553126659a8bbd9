"""Shape rules of block-scale quantization (BLOCK_SCALE_QUANTIZE, BLOCK_SCALE_DEQUANTIZE), shared by
their OpDefs and the emitters (lowering/ops/block_scale.py).

quantize: x ``D`` -> y ``D`` and scale ``D`` with ``D[axis] / block_size`` (``axis`` None: the
last); one scale per run of ``block_size`` consecutive elements along the axis.
dequantize: the quantized x ``D``, scale ``S`` (same rank) -> y ``D``; ``block_size`` gives the
block per axis: one value (the axis where S differs from D, else the last), or one per trailing
axis (right-aligned, 1 for the axes before), with ``D[i] == S[i] * block[i]``.
"""
from __future__ import annotations

from graph_ir.desc import GraphError
from graph_ir.dynamic import FIXED


def quantize_axis(at, rank: int) -> int:
    axis = rank - 1 if at.axis is None else at.axis
    if not -rank <= axis < rank:
        raise GraphError(f"field 'axis' value {at.axis} is out of range for x of rank {rank}")
    return axis % rank


def check_quantize(at, dims) -> dict:
    x = tuple(dims(at.x_uid))
    if not x:
        raise GraphError("field 'x_uid': x must have at least one dim")
    axis = quantize_axis(at, len(x))
    b = at.block_size
    if b <= 0:
        raise GraphError(f"field 'block_size' value {b} must be positive")
    if x[axis] % b:
        raise GraphError(f"field 'block_size' value {b} does not divide x's axis {axis} of size {x[axis]}")
    scale = x[:axis] + (x[axis] // b,) + x[axis + 1:]
    return {at.y_uid: x, at.scale_uid: scale}


def dequantize_blocks(at, d, s) -> tuple[int, ...]:
    """The block size per axis (``D[i] == S[i] * block[i]``)."""
    d, s = tuple(d), tuple(s)
    if len(d) != len(s):
        raise GraphError(f"field 'scale_uid' dims {list(s)} must have x's rank {len(d)} (x dims {list(d)})")
    bs = tuple(at.block_size)
    if not bs or any(b <= 0 for b in bs):
        raise GraphError(f"field 'block_size' value {list(bs)} must be one or more positive sizes")
    if len(bs) == 1:
        diff = [i for i in range(len(d)) if d[i] != s[i]]
        if len(diff) > 1:
            raise GraphError(f"field 'block_size' value {list(bs)}: x dims {list(d)} and scale dims {list(s)} differ "
                             f"on axes {diff}; give a block size per axis")
        axis = diff[0] if diff else len(d) - 1
        blocks = tuple(bs[0] if i == axis else 1 for i in range(len(d)))
    elif len(bs) <= len(d):
        blocks = (1,) * (len(d) - len(bs)) + bs
    else:
        raise GraphError(f"field 'block_size' value {list(bs)} has more sizes than x has axes ({len(d)})")
    for i, (a, c, b) in enumerate(zip(d, s, blocks)):
        if a != c * b:
            raise GraphError(f"field 'block_size' value {list(bs)}: x's axis {i} ({a}) is not scale's ({c}) "
                             f"times the block ({b})")
    if at.is_negative_scale:
        raise GraphError("field 'is_negative_scale' value True is not supported by this engine", "unsupported")
    return blocks


def check_dequantize(at, dims) -> dict:
    d = tuple(dims(at.x_uid))
    dequantize_blocks(at, d, dims(at.scale_uid))
    return {at.y_uid: d}


def fixed(*fields):
    """A dynamic-shape rule keeping every axis of the named tensors fixed (block boundaries are
    compile-time sizes)."""
    def rule(f, node):
        at = node.attrs
        for name in fields:
            u = getattr(at, name)
            for i in range(len(f.dims(u))):
                f.mark((u, i), FIXED)
    return rule
