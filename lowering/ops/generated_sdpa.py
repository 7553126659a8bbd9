"""Generated attention kernels: the sdpa forward pattern and its ``hal.dispatch.extern``.

An :class:`SdpaPattern` is a graph's sdpa node (forward) that the flash-attention kernel template
(``hipdnn_iree/plugins/iree_linalg/kernels/_triton_sdpa_src.py``) implements: q, k, v bound tensors
of one type, f16 or bf16, static rank-4 dims ``[B, H, S, D]`` with any element strides the lowering
accepts for an input (dense, strided views, overlapping reads: the kernel reads each element at
``sum(index * stride)`` from the bound run's first element), head dims ``D`` and ``Dv`` multiples of
16 up to 128, ``Hq`` a multiple of ``Hk`` and of ``Hv`` (grouped-query attention), f32 compute, the
scale a number (``attn_scale``, a constant scale tensor, or ``1/sqrt(D)``), optional top-left causal
masking (the IREE lowering's: key ``j`` kept for query ``i`` iff ``j <= i``, whatever ``Sq`` and
``Skv``), o in f16, bf16 or f32, and optionally the statistics (FLOAT ``[B, Hq, Sq, 1]``, the
natural-log log-sum-exp of each query's scaled scores). Anything else (a mask or bias tensor, a
scale bound at execute, dropout, paged/ragged, alibi, sliding windows, bottom-right causal, any
other output) stays on IREE's lowering: :func:`find_sdpa_patterns` does not list it.

o is written by the kernel in o's memory order when o is a dense bound tensor (so the module's
output needs no transpose: :func:`emit_extern` returns the memory-order result and the lowering
reads it back through a transpose that cancels the output's), row-major ``[B, Hq, Sq, Dv]``
otherwise. The dispatch (:func:`lowering.ops.generated_matmul.emit_dispatch`): bindings q, k, v,
then o, the statistics when asked for, and Triton 3.6's two scratch slots. This module imports no
kernel generator: bytes in, text out.

Example:
    >>> p = SdpaPattern(node=0, b=1, hq=2, hk=1, hv=1, sq=8, skv=8, d=64, dv=64,
    ...                 q=Operand(1, "f16", (1024, 512, 64, 1)), k=Operand(2, "f16", (512, 512, 64, 1)),
    ...                 v=Operand(3, "f16", (512, 512, 64, 1)), scale=0.125, causal=True, o_uid=4,
    ...                 o_dtype="f16", o_order=(0, 1, 2, 3))
    >>> p.key()[:26]
    '{"b":1,"causal":true,"d":6'
    >>> p.o_strides
    (1024, 512, 64, 1)
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from graph_ir.desc import ABSENT, GraphDesc, OpKind
from graph_ir.layout import packed_strides, physical_layout
from lowering.ops.generated_matmul import (GeneratedKernel, Operand, _f32_compute, _ok_dtype,  # noqa: F401
                                           emit_dispatch)

HEAD_DIMS = tuple(range(16, 129, 16))   # q/k and v head dims the template takes (padded to a power of 2)
QKV_DTYPES = ("f16", "bf16")
MAX_GRID_Y = 65535   # the kernel's grid is (query tiles, B * Hq): CUDA's limit on the second


@dataclass(frozen=True)
class SdpaPattern:
    """One sdpa node as a generated kernel: ``o = softmax(q k^T * scale [causal]) v`` over q
    ``[b, hq, sq, d]``, k ``[b, hk, skv, d]``, v ``[b, hv, skv, dv]`` (``Operand.strides``: element
    strides over those axes); o ``[b, hq, sq, dv]`` of type ``o_dtype`` written in the memory order
    ``o_order`` (logical axes, outermost first); ``stats_uid`` the statistics' tensor or None."""

    node: int
    b: int
    hq: int
    hk: int
    hv: int
    sq: int
    skv: int
    d: int
    dv: int
    q: Operand
    k: Operand
    v: Operand
    scale: float
    causal: bool
    o_uid: int
    o_dtype: str
    o_order: tuple
    stats_uid: int | None = None

    @property
    def nodes(self) -> tuple:
        return (self.node,)

    @property
    def stats(self) -> bool:
        return self.stats_uid is not None

    @property
    def o_phys_shape(self) -> tuple:
        """o's shape in the order the kernel writes it."""
        dims = (self.b, self.hq, self.sq, self.dv)
        return tuple(dims[a] for a in self.o_order)

    @property
    def o_strides(self) -> tuple:
        """Element strides of the kernel's o over ``[b, hq, sq, dv]`` (dense in ``o_order``)."""
        packed = packed_strides(self.o_phys_shape)
        out = [0] * 4
        for pos, a in enumerate(self.o_order):
            out[a] = packed[pos]
        return tuple(out)

    def key(self) -> str:
        """Canonical text of everything the kernel depends on (uids and node position left out)."""
        d = asdict(self)
        for name in ("node", "o_uid", "stats_uid"):
            d.pop(name)
        for o in ("q", "k", "v"):
            d[o].pop("uid")
        d["kind"] = "sdpa"
        d["stats"] = self.stats
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def operands(self) -> tuple:
        """The tensors bound to the kernel, in parameter order: q, k, v."""
        return (self.q, self.k, self.v)


def _read_strides(t) -> tuple | None:
    """``t``'s element strides when it is a bound rank-4 tensor of static dims in a layout the lowering
    binds as one run starting at its first element (dense, a strided view, or an overlapping read)."""
    if t.is_virtual or t.is_scalar or len(t.dims) != 4 or len(t.strides) != 4:
        return None
    if any(not isinstance(d, int) or d <= 0 for d in t.dims) or any(not isinstance(s, int) or s < 0 for s in t.strides):
        return None
    try:
        physical_layout(t.dims, t.strides)
    except Exception:   # noqa: BLE001  (any layout the lowering refuses is IREE's to report)
        return None
    return tuple(0 if d == 1 else int(s) for d, s in zip(t.dims, t.strides))


def _out_order(t, bound: bool) -> tuple | None:
    """The memory order the kernel writes o in: o's own when it is a dense bound output, else row-major;
    None when o cannot be written by the kernel at all."""
    if not bound:
        return (0, 1, 2, 3)
    try:
        lay = physical_layout(t.dims, t.strides, output=True)
    except Exception:   # noqa: BLE001
        return None
    if lay.bcast_axes:
        return None
    return tuple(lay.order) if lay.is_dense and len(lay.order) == 4 else (0, 1, 2, 3)


def _scale(graph: GraphDesc, at, d: int) -> float | None:
    if at.scale_uid == ABSENT:
        return 1.0 / math.sqrt(d) if math.isnan(at.attn_scale) else float(at.attn_scale)
    if not math.isnan(at.attn_scale):
        return None
    t = graph.tensor(at.scale_uid)
    if not t.is_scalar or any(x != 1 for x in t.dims):
        return None   # NOTE: a scale bound at execute is read on the device: IREE's lowering
    v = float(t.scalar_value)
    return v if math.isfinite(v) and v > 0 else None


def find_sdpa_patterns(graph: GraphDesc) -> list[SdpaPattern]:
    """Every sdpa node of ``graph`` the attention template covers (module docstring)."""
    out: list[SdpaPattern] = []
    for i, node in enumerate(graph.nodes):
        if node.kind != OpKind.SDPA or not _f32_compute(graph, node):
            continue
        at = node.attrs
        if at.unsupported() is not None or at.mask_uid != ABSENT:
            continue
        tq, tk, tv, to = (graph.tensor(u) for u in (at.q_uid, at.k_uid, at.v_uid, at.o_uid))
        dq, dk, dv_, do = (_ok_dtype(t) for t in (tq, tk, tv, to))
        if dq not in QKV_DTYPES or not dq == dk == dv_ or do is None:
            continue
        sq_, sk_, sv_ = (_read_strides(t) for t in (tq, tk, tv))
        if None in (sq_, sk_, sv_):
            continue
        b, hq, sq, d = tq.dims
        _, hk, skv, dk_ = tk.dims
        _, hv, skv_v, dv = tv.dims
        if tk.dims[0] != b or tv.dims[0] != b or dk_ != d or skv_v != skv or hq % hk or hq % hv:
            continue
        if d not in HEAD_DIMS or dv not in HEAD_DIMS or tuple(to.dims) != (b, hq, sq, dv) or b * hq > MAX_GRID_Y:
            continue
        stats_uid = None
        if at.stats_uid != ABSENT:
            ts = graph.tensor(at.stats_uid)
            if _ok_dtype(ts) != "f32" or tuple(ts.dims) != (b, hq, sq, 1):
                continue
            stats_uid = at.stats_uid
        order = _out_order(to, not to.is_virtual)
        scale = _scale(graph, at, d)
        if order is None or scale is None:
            continue
        out.append(SdpaPattern(i, b, hq, hk, hv, sq, skv, d, dv, Operand(at.q_uid, dq, sq_),
                               Operand(at.k_uid, dk, sk_), Operand(at.v_uid, dv_, sv_), scale, bool(at.is_causal),
                               at.o_uid, do, order, stats_uid))
    return out


def emit_extern(em, pattern: SdpaPattern, kernels: tuple, args: list) -> tuple:
    """The ``hal.dispatch.extern`` of ``pattern`` (``emit_dispatch``: one variant per kernel).
    ``args``: the bound q, k, v ``Value``s as they are. Returns ``(o, stats)``: o's SSA name, a
    ``[B, Hq, Sq, Dv]`` tensor in the memory order ``pattern.o_order`` (``o_phys_shape``), and the
    statistics' ``[B, Hq, Sq, 1]`` f32 tensor's (None without)."""
    o_type = f"tensor<{'x'.join(str(x) for x in pattern.o_phys_shape)}x{pattern.o_dtype}>"
    results = [o_type] + ([f"tensor<{pattern.b}x{pattern.hq}x{pattern.sq}x1xf32>"] if pattern.stats else [])
    res = emit_dispatch(em, kernels, args, results, f"pattern {pattern.key()}")
    return f"{res}#0", (f"{res}#1" if pattern.stats else None)


def lower_pattern(ctx, em, pattern: SdpaPattern, kernels: tuple, raw_args: dict) -> None:
    """Defines o (and the statistics) of ``pattern``'s node from its extern dispatch."""
    from lowering._emit import Value
    o, stats = emit_extern(em, pattern, kernels, [raw_args[x.uid] for x in pattern.operands])
    v = Value(o, pattern.o_phys_shape, pattern.o_dtype)
    inv = [pattern.o_order.index(a) for a in range(4)]
    ctx.define(pattern.o_uid, em.transpose(v, inv))
    if stats is not None:
        ctx.define(pattern.stats_uid, Value(stats, (pattern.b, pattern.hq, pattern.sq, 1), "f32"))
