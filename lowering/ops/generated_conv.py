"""Generated convolution kernels: the conv_fprop (+ pointwise epilogue) pattern and its ``hal.dispatch.extern``.

A :class:`ConvPattern` is a graph's 2-D conv_fprop that the implicit-GEMM kernel template
(``hipdnn_iree/plugins/iree_linalg/kernels/_triton_conv_src.py``) implements, followed by the chain of
pointwise ops that only it feeds (the matmul pattern's epilogue: tensor add/sub/mul broadcast to the
output, e.g. a bias ``[1, K, 1, 1]``, scalar add/sub/mul, relu, gelu, gelu-tanh, tanh, sigmoid; up
to 4 steps). :func:`find_conv_patterns` lists those whose

- x ``[N, C, H, W]`` and w ``[K, C/G, R, S]`` are bound tensors of one type, f16 or bf16, static dims,
  dense; x stored channels-last (the channel axis innermost: NHWC), w in any dense order (KRSC, KCRS,
  ...: the kernel reads it through its strides);
- compute type is f32 (unset or FLOAT), the mode cross-correlation; any padding, stride, dilation;
- groups G is 1, or each group has at least :data:`MIN_GROUP_CHANNELS` input and output channels;
- chain's last tensor is virtual, or a bound output stored dense channels-last (NHWC): the kernel
  writes ``[N, P, Q, K]`` (its natural order), which is that output's memory order, so the
  lowering's read-back transpose and the output's cancel (one dispatch);
- every tensor holds fewer than 2**31 elements (the kernel's offsets are 32-bit).

Anything else (NCHW x, f32 operands, 1-D/3-D, depthwise or narrow groups, dynamic shapes, a bound
output in another layout, an epilogue operand that is virtual or not dense) stays on IREE's lowering.
This module imports no kernel generator: bytes in, text out.

Example:
    >>> p = ConvPattern(nodes=(0,), n=1, c=16, k=32, in_hw=(8, 8), kern=(3, 3), out_hw=(8, 8), pre=(1, 1),
    ...                 stride=(1, 1), dilation=(1, 1), groups=1, x=Operand(1, "f16", (1024, 1, 128, 16)),
    ...                 w=Operand(2, "f16", (144, 1, 48, 16)), acc_round="f16", steps=(), out_uid=3,
    ...                 out_dtype="f16")
    >>> p.out_phys_shape, p.key()[:15]
    ((1, 8, 8, 32), '{"acc_round":"f')
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from graph_ir.desc import GraphDesc, OpKind
from graph_ir.layout import physical_layout
from lowering.ops.generated_matmul import (EpilogueStep, GeneratedKernel, Operand, _f32_compute, _ok_dtype,  # noqa: F401
                                           emit_dispatch, epilogue_chain)

XW_DTYPES = ("f16", "bf16")
MIN_GROUP_CHANNELS = 16      # grouped convs: input and output channels per group at least this (tl.dot's 16)
MAX_ELEMENTS = 2 ** 31 - 1   # the kernel's element offsets are int32
MAX_GRID_Y = 65535           # the grid's second axis is the group


@dataclass(frozen=True)
class ConvPattern:
    """A 2-D conv_fprop and its fused epilogue: ``y[n, k, p, q] = epilogue(sum_{c, r, s}
    x[n, g*Cg + c, p*sh - ph + r*dh, q*sw - pw + s*dw] * w[k, c, r, s])`` (``g = k // Kg``, zero outside
    x), accumulated in f32 and rounded to ``acc_round`` (the conv's output type) before the epilogue.
    ``x.strides`` over ``[N, C, H, W]``, ``w.strides`` over ``[K, Cg, R, S]``, each step operand's
    over ``[N, K, P, Q]`` (0 on broadcast axes). ``nodes``: the graph positions it replaces;
    ``out_uid``: the chain's last tensor, written ``[N, P, Q, K]`` (dense, channels-last)."""

    nodes: tuple
    n: int
    c: int
    k: int
    in_hw: tuple
    kern: tuple
    out_hw: tuple
    pre: tuple
    stride: tuple
    dilation: tuple
    groups: int
    x: Operand
    w: Operand
    acc_round: str
    steps: tuple
    out_uid: int
    out_dtype: str

    @property
    def out_phys_shape(self) -> tuple:
        """The kernel's output shape, in the order it writes it: ``[N, P, Q, K]``."""
        return (self.n, *self.out_hw, self.k)

    @property
    def operands(self) -> tuple:
        """The tensors bound to the kernel, in parameter order: x, w, then each step's operand."""
        return (self.x, self.w) + tuple(s.operand for s in self.steps if s.operand is not None)

    def key(self) -> str:
        """Canonical text of everything the kernel depends on (uids and node positions left out)."""
        d = asdict(self)
        for name in ("nodes", "out_uid"):
            d.pop(name)
        for o in ("x", "w"):
            d[o].pop("uid")
        for s in d["steps"]:
            if s["operand"] is not None:
                s["operand"].pop("uid")
        d["kind"] = "conv"
        return json.dumps(d, sort_keys=True, separators=(",", ":"))


def _static(t) -> bool:
    return (not t.is_virtual and not t.is_scalar and len(t.dims) == 4 and len(t.strides) == 4
            and all(isinstance(d, int) and d > 0 for d in t.dims)
            and all(isinstance(s, int) and s >= 0 for s in t.strides))


def _dense(t):
    """``t``'s layout when it is a bound rank-4 tensor of static dims stored dense (no stride-0 axis)."""
    if not _static(t):
        return None
    try:
        lay = physical_layout(t.dims, t.strides)
    except Exception:   # noqa: BLE001  (any layout the lowering refuses is IREE's to report)
        return None
    return lay if lay.is_dense and not lay.bcast_axes else None


def _strides(t) -> tuple:
    """Element strides, 0 on size-1 axes (their stride never matters)."""
    return tuple(0 if d == 1 else int(s) for d, s in zip(t.dims, t.strides))


def _nhwc(dims: tuple) -> tuple:
    """Dense channels-last element strides of a ``[N, C, H, W]`` tensor."""
    n, c, h, w = dims
    return (h * w * c, 1, w * c, c)


def _channels_last(t) -> bool:
    """``t`` (rank 4, static) is stored dense NHWC: its strides are those of ``_nhwc`` on every axis
    of size > 1 (a size-1 axis's stride is arbitrary)."""
    return all(d == 1 or s == e for d, s, e in zip(t.dims, t.strides, _nhwc(tuple(t.dims))))


def _operand_strides(t, out_dims: tuple) -> tuple | None:
    """Element strides of bound epilogue operand ``t`` over ``[N, K, P, Q]`` when it broadcasts to
    ``out_dims`` (each axis 1 or equal; rank 4, or lower right-aligned) and is stored dense (stride-0
    broadcast axes allowed); None otherwise."""
    if t.is_virtual or t.is_scalar or not t.dims or len(t.dims) > 4 or len(t.strides) != len(t.dims):
        return None
    if any(not isinstance(d, int) or d <= 0 for d in t.dims) or any(not isinstance(s, int) or s < 0
                                                                    for s in t.strides):
        return None
    try:
        lay = physical_layout(t.dims, t.strides)
    except Exception:   # noqa: BLE001
        return None
    if not lay.is_dense:
        return None
    full = (1,) * (4 - len(t.dims)) + tuple(t.dims)
    strides = (0,) * (4 - len(t.dims)) + tuple(t.strides)
    res = []
    for d, s, o in zip(full, strides, out_dims):
        if d == o:
            res.append(0 if d == 1 else int(s))
        elif d == 1:
            res.append(0)
        else:
            return None
    span = 1 + sum((d - 1) * s for d, s in zip(full, res))
    return tuple(res) if span <= MAX_ELEMENTS else None


def _numel(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def _writable(t) -> bool:
    """Whether the kernel's ``[N, P, Q, K]`` result can be ``t``: virtual, or a bound output stored
    dense channels-last (the kernel's order is then its memory order)."""
    return t.is_virtual or (_dense(t) is not None and _channels_last(t))


def find_conv_patterns(graph: GraphDesc) -> list[ConvPattern]:
    """Every conv_fprop of ``graph`` the kernel template covers (module docstring), with the longest
    epilogue chain it can fuse; the chain stops early rather than end at an output the kernel cannot
    write in its memory order."""
    from graph_ir.ops._conv import forward_shape
    produced = graph.output_uids()
    consumers: dict = {}
    for i, nd in enumerate(graph.nodes):
        for u in nd.attrs.inputs():
            consumers.setdefault(u, []).append(i)
    out: list[ConvPattern] = []
    for i, node in enumerate(graph.nodes):
        if node.kind != OpKind.CONV_FPROP or not _f32_compute(graph, node):
            continue
        at = node.attrs
        if at.unsupported() is not None:
            continue
        tx, tw, ty = graph.tensor(at.x_uid), graph.tensor(at.w_uid), graph.tensor(at.y_uid)
        dx, dw, dy = _ok_dtype(tx), _ok_dtype(tw), _ok_dtype(ty)
        if dx not in XW_DTYPES or dx != dw or dy is None or {at.x_uid, at.w_uid} & produced:
            continue
        lx, lw = _dense(tx), _dense(tw)
        if lx is None or lw is None or tx.dims[1] == 1 or tx.strides[1] != 1:
            continue   # NOTE: x must be channels-last (C innermost); C == 1 is NCHW's memory too
        if len(ty.dims) != 4 or any(not isinstance(d, int) or d <= 0 for d in ty.dims):
            continue
        try:
            y_want, prm, groups = forward_shape(tuple(tx.dims), tuple(tw.dims), at)
        except Exception:   # noqa: BLE001  (a bad geometry is the IREE lowering's to report)
            continue
        y_dims = tuple(ty.dims)
        if y_want != y_dims:
            continue
        n, c, h, wd = tx.dims
        k, cg, r, s = tw.dims
        kg = k // groups
        if groups > 1 and (cg < MIN_GROUP_CHANNELS or kg < MIN_GROUP_CHANNELS or groups > MAX_GRID_Y):
            continue
        if max(_numel(tx.dims), _numel(tw.dims), _numel(y_dims)) > MAX_ELEMENTS:
            continue
        steps, chain_nodes, last, last_t = epilogue_chain(graph, consumers, at.y_uid, y_dims, _operand_strides,
                                                          produced)
        if not _writable(last_t) and steps:
            # NOTE: the chain's tensors before its end are virtual: end it one step early
            steps, chain_nodes = steps[:-1], chain_nodes[:-1]
            last = graph.nodes[chain_nodes[-1]].attrs.out_0_uid if chain_nodes else at.y_uid
            last_t = graph.tensor(last)
        if not _writable(last_t):
            continue
        out.append(ConvPattern((i,) + chain_nodes, n, c, k, (h, wd), (r, s), y_dims[2:], tuple(prm.pre),
                               tuple(prm.stride), tuple(prm.dilation), groups,
                               Operand(at.x_uid, dx, _strides(tx)), Operand(at.w_uid, dw, _strides(tw)),
                               dy, steps, last, _ok_dtype(last_t)))
    return out


def emit_extern(em, pattern: ConvPattern, kernels: tuple, args: list) -> str:
    """The ``hal.dispatch.extern`` of ``pattern`` (``emit_dispatch``: one variant per kernel). ``args``:
    the bound operands' ``Value``s as they are, in :attr:`ConvPattern.operands` order. Returns the SSA
    name of the ``[N, P, Q, K]`` result (channels-last memory order)."""
    out_type = f"tensor<{'x'.join(str(d) for d in pattern.out_phys_shape)}x{pattern.out_dtype}>"
    return f"{emit_dispatch(em, kernels, args, [out_type], f'pattern {pattern.key()}')}#0"


def lower_pattern(ctx, em, pattern: ConvPattern, kernels: tuple, raw_args: dict) -> None:
    """Defines the chain's last tensor of ``pattern`` (logical ``[N, K, P, Q]``) from its extern dispatch:
    the kernel's ``[N, P, Q, K]`` read back through a transpose (which a channels-last output's cancels)."""
    from lowering._emit import Value
    res = emit_extern(em, pattern, kernels, [raw_args[o.uid] for o in pattern.operands])
    v = Value(res, pattern.out_phys_shape, pattern.out_dtype)
    ctx.define(pattern.out_uid, em.transpose(v, [0, 3, 1, 2]))
