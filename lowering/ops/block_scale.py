"""Block-scale quantization -> linalg: block_scale_quantize and block_scale_dequantize.

quantize (cuDNN's rule): per block of ``block_size`` consecutive elements along ``axis``,
``amax = max |x|`` (NaN propagates); ``scale = round_up(amax / vmax)`` in the scale's type, vmax
the largest value of y's type (E4M3 448, E5M2 57344, E2M1 6); ``y = round_to_nearest_even(x /
scale)``, saturating (lowering/_minifloat.py encodes). Scale types:

- FP8_E8M0 (MXFP8/MXFP4): the smallest power of two ``2^e >= amax / vmax``, found exactly from
  amax's exponent and mantissa (no division), ``e`` clamped to [-127, 127]; an all-zero block gets
  2^-127, an infinity 2^127 (its y saturates), a NaN in the block a NaN scale and a +NaN block
  (E2M1, which has no NaN, saturates it to +6).
- FP8_E4M3 (NVFP4): the smallest E4M3 value ``s`` with ``s * vmax >= amax``: ``amax / vmax``
  rounded to nearest, then one code up when that falls short (``s * vmax`` is exact in f32).
- FLOAT: ``amax / vmax``.

``x / scale`` is exact for power-of-two scales. For the others the f32 quotient is rounded once
more by y's format; the one place that double rounding can differ from rounding the exact
quotient is a quotient landing exactly on a midpoint of y's grid, so such quotients move one f32
ulp towards the exact value first (``midpoint * scale`` is exact in f32 and is compared with
``|x|``). A zero scale (an all-zero block with a FLOAT or E4M3 scale) gives y = 0.

dequantize: ``y = x * scale`` with each scale element broadcast over its block (affine maps with
``floordiv``), in f32, rounded once to y's type. The 8- and 4-bit types reach these emitters as
f32 values (lowering/_context.py decodes inputs and encodes outputs).

E8M0 scales are applied by :func:`_ldexp`, integer arithmetic on the f32 bits, never by a float
multiply or divide. NOTE: IREE's CPU runtime runs every dispatch with the x86 MXCSR flags FTZ and
DAZ set (iree/task/worker.c, iree/hal/local/inline_command_buffer.c; docs/known_issues.md), so a
subnormal f32 operand reads as 0 and a subnormal result is written as 0. E8M0 code 0 is 2^-127, a
subnormal: divided by (quantize) or multiplied with (dequantize) in floating point it made every
value of its block 0. ``_ldexp`` gives the exact ``x * 2^k`` (a subnormal x normalized first, a
subnormal result written as its bits, rounded to nearest even) in any FP mode, on every target.
"""
from __future__ import annotations

import struct

from graph_ir.desc import GraphError, NodeDesc, OpKind
from graph_ir.dtypes import MINIFLOAT_FORMATS, data_type_name
from graph_ir._fbs.graph_generated import DataType as D
from graph_ir.ops._block_scale import check_quantize, dequantize_blocks, quantize_axis
from lowering import _minifloat as mf
from lowering._context import LowerContext
from lowering._emit import Emitter, Value, split_axis
from lowering._registry import register_lowering
from lowering.ops.resample import _checked


def _bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _i32(em: Emitter, v: int) -> str:
    return em.const(v, "i32")


def _scale_kind(ctx: LowerContext, node: NodeDesc, uid: int) -> str:
    dt = ctx.tensor(uid).data_type
    kind = {D.FP8_E8M0: "e8m0", D.FP8_E4M3: "e4m3", D.FLOAT: "f32"}.get(dt)
    if kind is None:
        raise GraphError(f"block_scale_quantize '{node.name}': field 'scale_uid' has data type {data_type_name(dt)}; "
                         "the scale must be FP8_E8M0, FP8_E4M3 or FLOAT", "unsupported")
    return kind


def _y_format(ctx: LowerContext, node: NodeDesc, uid: int) -> mf.Format:
    dt = ctx.tensor(uid).data_type
    fmt = mf.FORMATS.get(MINIFLOAT_FORMATS.get(dt, ""))
    if fmt is None:
        raise GraphError(f"block_scale_quantize '{node.name}': field 'y_uid' has data type {data_type_name(dt)}; "
                         "y must be FP8_E4M3, FP8_E5M2 or FP4_E2M1", "unsupported")
    return fmt


def _amap(n: int, exprs) -> str:
    return f"affine_map<({', '.join(f'd{i}' for i in range(n))}) -> ({', '.join(exprs)})>"


def _pow2_scale(em: Emitter, amax: str, fmt: mf.Format) -> str:
    """The E8M0 code of the smallest power of two ``2^e >= amax / vmax`` (255 for NaN)."""
    vb = _bits(fmt.max)
    ev, mv = ((vb >> 23) & 255) - 127, vb & 0x7FFFFF
    bits = em.op(f"arith.bitcast {amax} : f32 to i32")
    e = em.op(f"arith.subi {em.op(f'arith.shrui {bits}, {_i32(em, 23)} : i32')}, {_i32(em, 127 + ev)} : i32")
    m = em.op(f"arith.andi {bits}, {_i32(em, 0x7FFFFF)} : i32")
    up = em.op(f"arith.extui {em.op(f'arith.cmpi sgt, {m}, {_i32(em, mv)} : i32')} : i1 to i32")
    e = em.op(f"arith.addi {e}, {up} : i32")
    e = em.op(f"arith.maxsi {em.op(f'arith.minsi {e}, {_i32(em, 127)} : i32')}, {_i32(em, -127)} : i32")
    code = em.op(f"arith.addi {e}, {_i32(em, 127)} : i32")
    inf = em.op(f"arith.cmpf oeq, {amax}, {em.const(float('inf'), 'f32')} : f32")
    code = em.op(f"arith.select {inf}, {_i32(em, 254)}, {code} : i32")     # no power of two reaches inf: 2^127
    nan = em.op(f"arith.cmpf uno, {amax}, {amax} : f32")
    code = em.op(f"arith.select {nan}, {_i32(em, 255)}, {code} : i32")
    return em.op(f"arith.trunci {code} : i32 to i8")


def _e4m3_scale(em: Emitter, amax: str, fmt: mf.Format) -> str:
    """The E4M3 code of the smallest E4M3 value ``s`` with ``s * vmax >= amax``."""
    vmax = em.const(fmt.max, "f32")
    c = mf.encode(em, em.op(f"arith.divf {amax}, {vmax} : f32"), mf.E4M3)
    v = mf.decode(em, c, mf.E4M3)
    short = em.op(f"arith.cmpf olt, {em.op(f'arith.mulf {v}, {vmax} : f32')}, {amax} : f32")
    room = em.op(f"arith.cmpi slt, {c}, {em.const(0x7E, 'i8')} : i8")
    bump = em.op(f"arith.andi {short}, {room} : i1")
    one = em.const(1, "i8")
    return em.op(f"arith.select {bump}, {em.op(f'arith.addi {c}, {one} : i8')}, {c} : i8")


def _ldexp(em: Emitter, x: str, k: str) -> str:
    """``x * 2^k`` (``x`` f32, ``k`` i32) from the bits, exact whatever the FP mode: subnormal
    operands and results included, rounded to nearest even, +-inf past the range; zero, inf and
    NaN ``x`` unchanged."""
    c = lambda v: _i32(em, v)   # noqa: E731
    op = em.op
    bits = op(f"arith.bitcast {x} : f32 to i32")
    sign = op(f"arith.andi {bits}, {c(-0x80000000)} : i32")
    mag = op(f"arith.andi {bits}, {c(0x7FFFFFFF)} : i32")
    ex = op(f"arith.shrui {mag}, {c(23)} : i32")
    man = op(f"arith.andi {mag}, {c(0x7FFFFF)} : i32")
    # a subnormal x is man * 2^-149: man as an f32 (exact, normal) gives its exponent and mantissa
    mb = op(f"arith.bitcast {op(f'arith.sitofp {man} : i32 to f32')} : f32 to i32")
    sub = op(f"arith.cmpi eq, {ex}, {c(0)} : i32")
    mex = op(f"arith.shrui {mb}, {c(23)} : i32")
    ex = op(f"arith.select {sub}, {op(f'arith.subi {mex}, {c(149)} : i32')}, {ex} : i32")
    man = op(f"arith.select {sub}, {op(f'arith.andi {mb}, {c(0x7FFFFF)} : i32')}, {man} : i32")
    ne = op(f"arith.addi {ex}, {k} : i32")
    normal = op(f"arith.ori {op(f'arith.shli {ne}, {c(23)} : i32')}, {man} : i32")
    # below the normal range: the significand shifted right by 1 - ne, rounded half to even (a
    # carry into bit 23 gives the smallest normal, as it should)
    sig = op(f"arith.ori {man}, {c(0x800000)} : i32")
    sh = op(f"arith.minsi {op(f'arith.subi {c(1)}, {ne} : i32')}, {c(31)} : i32")
    sh = op(f"arith.maxsi {sh}, {c(1)} : i32")
    q = op(f"arith.shrui {sig}, {sh} : i32")
    low = op(f"arith.shli {c(1)}, {sh} : i32")
    rem = op(f"arith.andi {sig}, {op(f'arith.subi {low}, {c(1)} : i32')} : i32")
    half = op(f"arith.shli {c(1)}, {op(f'arith.subi {sh}, {c(1)} : i32')} : i32")
    odd = op(f"arith.cmpi ne, {op(f'arith.andi {q}, {c(1)} : i32')}, {c(0)} : i32")
    tie = op(f"arith.cmpi eq, {rem}, {half} : i32")
    up = op(f"arith.ori {op(f'arith.cmpi ugt, {rem}, {half} : i32')}, {op(f'arith.andi {odd}, {tie} : i1')} : i1")
    tiny = op(f"arith.addi {q}, {op(f'arith.extui {up} : i1 to i32')} : i32")
    out = op(f"arith.select {op(f'arith.cmpi sge, {ne}, {c(1)} : i32')}, {normal}, {tiny} : i32")
    out = op(f"arith.select {op(f'arith.cmpi sge, {ne}, {c(255)} : i32')}, {c(0x7F800000)}, {out} : i32")
    special = op(f"arith.ori {op(f'arith.cmpi eq, {mag}, {c(0)} : i32')}, "
                 f"{op(f'arith.cmpi uge, {mag}, {c(0x7F800000)} : i32')} : i1")
    out = op(f"arith.select {special}, {mag}, {out} : i32")
    return op(f"arith.bitcast {op(f'arith.ori {out}, {sign} : i32')} : i32 to f32")


def _e8m0_exponent(em: Emitter, s: str) -> str:
    """The E8M0 code of a decoded E8M0 scale (``_minifloat.decode``: code 0 is 2^-127's bits
    0x400000, whose exponent field is 0; NaN, code 255, has 255), from its bits (i32)."""
    b = em.op(f"arith.bitcast {s} : f32 to i32")
    return em.op(f"arith.andi {em.op(f'arith.shrui {b}, {_i32(em, 23)} : i32')}, {_i32(em, 255)} : i32")


def _nudged(em: Emitter, q: str, ax: str, s: str, fmt: mf.Format) -> str:
    """``q = x / s`` moved one ulp towards the exact quotient when it lies exactly on a midpoint of
    ``fmt``'s grid (``ax = |x|``); otherwise ``q``."""
    a = em.op(f"math.absf {q} : f32")
    abits = em.op(f"arith.bitcast {a} : f32 to i32")
    e = em.op(f"arith.subi {em.op(f'arith.shrui {abits}, {_i32(em, 23)} : i32')}, {_i32(em, 127)} : i32")
    e = em.op(f"arith.maxsi {e}, {_i32(em, fmt.emin)} : i32")
    # t = a * 2^(mbits + 1 - e): an odd integer exactly at a midpoint
    pw = em.op(f"arith.shli {em.op(f'arith.subi {_i32(em, fmt.mbits + 1 + 127)}, {e} : i32')}, {_i32(em, 23)} : i32")
    t = em.op(f"arith.mulf {a}, {em.op(f'arith.bitcast {pw} : i32 to f32')} : f32")
    whole = em.op(f"arith.cmpf oeq, {em.op(f'math.roundeven {t} : f32')}, {t} : f32")
    small = em.op(f"arith.cmpf olt, {t}, {em.const(2.0 ** 24, 'f32')} : f32")
    fzero = em.const(0.0, "f32")
    ti = em.op(f"arith.fptosi {em.op(f'arith.select {small}, {t}, {fzero} : f32')} : f32 to i32")
    odd = em.op(f"arith.cmpi eq, {em.op(f'arith.andi {ti}, {_i32(em, 1)} : i32')}, {_i32(em, 1)} : i32")
    mid = em.op(f"arith.andi {em.op(f'arith.andi {whole}, {small} : i1')}, {odd} : i1")
    prod = em.op(f"arith.mulf {a}, {s} : f32")
    above = em.op(f"arith.cmpf ogt, {ax}, {prod} : f32")
    below = em.op(f"arith.cmpf olt, {ax}, {prod} : f32")
    step = em.op(f"arith.select {above}, {_i32(em, 1)}, "
                 f"{em.op(f'arith.select {below}, {_i32(em, -1)}, {_i32(em, 0)} : i32')} : i32")
    step = em.op(f"arith.select {mid}, {step}, {_i32(em, 0)} : i32")
    a2 = em.op(f"arith.bitcast {em.op(f'arith.addi {abits}, {step} : i32')} : i32 to f32")
    return em.op(f"math.copysign {a2}, {q} : f32")


@register_lowering(OpKind.BLOCK_SCALE_QUANTIZE)
def lower_quantize(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(node, lambda: check_quantize(at, lambda u: ctx.tensor(u).dims))
    fmt = _y_format(ctx, node, at.y_uid)
    skind = _scale_kind(ctx, node, at.scale_uid)
    em = ctx.em
    x = ctx.value(at.x_uid)
    rank = len(x.shape)
    axis, b = quantize_axis(at, rank), at.block_size
    sshape = x.shape[:axis] + (x.shape[axis] // b,) + x.shape[axis + 1:]
    # x with its axis split into [blocks, block] (tensor.expand_shape), reduced over the block axis
    xs = split_axis(em, x, axis, x.shape[axis] // b, b)
    d = [f"d{i}" for i in range(rank + 1)]
    xmap = _amap(rank + 1, d)
    smap = _amap(rank + 1, [d[i] for i in range(rank + 1) if i != axis + 1])

    def amax_body(a):
        v = em.op(f"math.absf {em.cast(a[0], x.elem, 'f32')} : f32")
        return em.op(f"arith.maximumf {a[1]}, {v} : f32")

    its = ["reduction" if i == axis + 1 else "parallel" for i in range(rank + 1)]
    amax = em.generic([(xs, xmap)], sshape, "f32", its, smap, amax_body,
                      init=em.filled(sshape, "f32", 0.0))

    def scale_body(a):
        if skind == "e8m0":
            return mf.decode(em, _pow2_scale(em, a[0], fmt), mf.E8M0)
        if skind == "e4m3":
            return mf.decode(em, _e4m3_scale(em, a[0], fmt), mf.E4M3)
        return em.op(f"arith.divf {a[0]}, {em.const(fmt.max, 'f32')} : f32")

    scale = em.elementwise([amax], sshape, "f32", scale_body)
    e = [f"d{i}" for i in range(rank)]
    blk = _amap(rank, [f"d{axis} floordiv {b}" if i == axis else e[i] for i in range(rank)])

    def y_body(a):
        xv = em.cast(a[0], x.elem, "f32")
        if skind == "e8m0":   # x * 2^(127 - code), exact at code 0 (2^-127) too; the scale is never 0
            q = _ldexp(em, xv, em.op(f"arith.subi {_i32(em, 127)}, {_e8m0_exponent(em, a[1])} : i32"))
        else:
            q = em.op(f"arith.divf {xv}, {a[1]} : f32")
            q = _nudged(em, q, em.op(f"math.absf {xv} : f32"), a[1], fmt)
            zero = em.op(f"arith.cmpf oeq, {a[1]}, {em.const(0.0, 'f32')} : f32")
            q = em.op(f"arith.select {zero}, {em.const(0.0, 'f32')}, {q} : f32")
        nan = em.op(f"arith.cmpf uno, {a[1]}, {a[1]} : f32")   # a NaN block: +NaN (the sign of x / NaN varies)
        return em.op(f"arith.select {nan}, {em.const(float('nan'), 'f32')}, {q} : f32")

    y = em.generic([(x, _amap(rank, e)), (scale, blk)], x.shape, "f32", ["parallel"] * rank, _amap(rank, e), y_body)
    ctx.define(at.y_uid, y)
    ctx.define(at.scale_uid, scale)


@register_lowering(OpKind.BLOCK_SCALE_DEQUANTIZE)
def lower_dequantize(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    em = ctx.em
    start = len(em.lines)
    if ctx.policy.dequant_matmul_region:
        # the codes of graph inputs read (FP4 bytes unpacked, relaid out) and decoded again here, inside the
        # region (lowering/ops/matmul.py); the entry's copies, then unused, are dropped by IREE
        x, s = (ctx.decode_input(u, ctx.codes[u]()) if u in ctx.codes else ctx.value(u) for u in (at.x_uid, at.scale_uid))
    else:
        x, s = ctx.value(at.x_uid), ctx.value(at.scale_uid)
    blocks = _checked(node, lambda: dequantize_blocks(at, x.shape, s.shape))
    rank = len(x.shape)
    e = [f"d{i}" for i in range(rank)]
    smap = _amap(rank, [f"d{i} floordiv {b}" if b != 1 else e[i] for i, b in enumerate(blocks)])

    e8m0 = ctx.tensor(at.scale_uid).data_type == D.FP8_E8M0

    def body(a):
        xv, sv = em.cast(a[0], x.elem, "f32"), em.cast(a[1], s.elem, "f32")
        if not e8m0:
            return em.op(f"arith.mulf {xv}, {sv} : f32")
        # x * 2^(code - 127), exact at code 0 (2^-127) too; code 255 (NaN) gives NaN
        code = _e8m0_exponent(em, sv)
        y = _ldexp(em, xv, em.op(f"arith.subi {code}, {_i32(em, 127)} : i32"))
        nan = em.op(f"arith.cmpi eq, {code}, {_i32(em, 255)} : i32")
        return em.op(f"arith.select {nan}, {em.const(float('nan'), 'f32')}, {y} : f32")

    y = em.generic([(x, _amap(rank, e)), (s, smap)], x.shape, "f32", ["parallel"] * rank, _amap(rank, e), body)
    ctx.define(at.y_uid, y)
    if ctx.policy.dequant_matmul_region:
        ctx.region_marks[at.y_uid] = (start, ctx.node_index)
