"""8- and 4-bit float formats (FP8 E4M3 / E5M2, E8M0 scales, FP4 E2M1) as bytes, coded by hand.

Tensors of these types cross the module boundary as ``i8`` (one code per byte; FP4 packing is
:mod:`lowering.ops.block_scale`'s). Inside, a lowering sees them decoded to ``f32`` (exact: every
code of these formats is an f32 value) and an output of such a type is encoded from f32 here, with
integer and f32 arithmetic only, so every target computes the same bits.
NOTE: IREE 3.13's own ``arith.extf`` / ``arith.truncf`` for ``f8E4M3FN`` on llvm-cpu flushed
the format's subnormals (values near 2^-6 came out 0) and got codes wrong in decoding, measured
against ml_dtypes; the native types are therefore not used.

Encoding (E4M3, E5M2, E2M1) rounds to nearest, ties to even, and saturates: magnitudes above
the format's largest finite value (infinities too) give that value, with the sign kept; NaN
gives the format's NaN with the sign kept (E4M3 0x7F, E5M2 0x7E; E2M1 has none: NaN gives +-6,
its largest value, as a saturating conversion must give something). This is ml_dtypes' rounding
of the value clipped to the format's range. E8M0 (scales, 2^(code - 127), code 255 NaN): NaN,
zero, negatives, infinities and values from 1.5 * 2^127 up give 255, else the value rounded to
a power of two on its first mantissa bit (1.5 * 2^e goes to 2^(e+1); f32 subnormals to 2^-127 or
2^-126), as ml_dtypes does.
"""
from __future__ import annotations

from dataclasses import dataclass

from lowering._emit import Emitter, Value, tensor_type


@dataclass(frozen=True)
class Format:
    name: str
    ebits: int
    mbits: int
    bias: int
    max: float          # the largest finite value
    nan: int | None     # the NaN code without its sign bit (None: no NaN)
    inf: bool           # codes with an all-ones exponent: infinities and NaNs (IEEE-like E5M2)

    @property
    def width(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def emin(self) -> int:
        return 1 - self.bias


E4M3 = Format("e4m3", 4, 3, 7, 448.0, 0x7F, False)
E5M2 = Format("e5m2", 5, 2, 15, 57344.0, 0x7E, True)
E2M1 = Format("e2m1", 2, 1, 1, 6.0, None, False)
E8M0 = "e8m0"
FORMATS = {"e4m3": E4M3, "e5m2": E5M2, "e2m1": E2M1}


def _i32(em: Emitter, v: int) -> str:
    return em.const(v, "i32")


def _pow2(em: Emitter, exp_i32: str) -> str:
    """2^exp as f32 for a normal-range i32 exponent (``(exp + 127) << 23``)."""
    b = em.op(f"arith.shli {em.op(f'arith.addi {exp_i32}, {_i32(em, 127)} : i32')}, {_i32(em, 23)} : i32")
    return em.op(f"arith.bitcast {b} : i32 to f32")


def decode(em: Emitter, code_i8: str, fmt) -> str:
    """The f32 value of a code (an ``i8`` SSA value, inside a region)."""
    u = em.op(f"arith.extui {code_i8} : i8 to i32")
    if fmt == E8M0:
        nan = em.op(f"arith.cmpi eq, {u}, {_i32(em, 255)} : i32")
        zero = em.op(f"arith.cmpi eq, {u}, {_i32(em, 0)} : i32")
        bits = em.op(f"arith.select {zero}, {_i32(em, 0x400000)}, "
                     f"{em.op(f'arith.shli {u}, {_i32(em, 23)} : i32')} : i32")
        val = em.op(f"arith.bitcast {bits} : i32 to f32")
        return em.op(f"arith.select {nan}, {em.const(float('nan'), 'f32')}, {val} : f32")
    f = fmt
    mag_mask = (1 << (f.ebits + f.mbits)) - 1
    mag = em.op(f"arith.andi {u}, {_i32(em, mag_mask)} : i32")
    ef = em.op(f"arith.shrui {mag}, {_i32(em, f.mbits)} : i32")
    m = em.op(f"arith.andi {mag}, {_i32(em, (1 << f.mbits) - 1)} : i32")
    sub = em.op(f"arith.cmpi eq, {ef}, {_i32(em, 0)} : i32")
    sig = em.op(f"arith.select {sub}, {m}, {em.op(f'arith.ori {m}, {_i32(em, 1 << f.mbits)} : i32')} : i32")
    e_eff = em.op(f"arith.maxsi {ef}, {_i32(em, 1)} : i32")
    p = _pow2(em, em.op(f"arith.subi {e_eff}, {_i32(em, f.bias + f.mbits)} : i32"))
    val = em.op(f"arith.mulf {em.op(f'arith.sitofp {sig} : i32 to f32')}, {p} : f32")
    if f.inf:
        top = em.op(f"arith.cmpi eq, {ef}, {_i32(em, (1 << f.ebits) - 1)} : i32")
        is_inf = em.op(f"arith.andi {top}, {em.op(f'arith.cmpi eq, {m}, {_i32(em, 0)} : i32')} : i1")
        val = em.op(f"arith.select {is_inf}, {em.const(float('inf'), 'f32')}, {val} : f32")
        nan = em.op(f"arith.andi {top}, {em.op(f'arith.cmpi ne, {m}, {_i32(em, 0)} : i32')} : i1")
        val = em.op(f"arith.select {nan}, {em.const(float('nan'), 'f32')}, {val} : f32")
    elif f.nan is not None:
        nan = em.op(f"arith.cmpi eq, {mag}, {_i32(em, f.nan)} : i32")
        val = em.op(f"arith.select {nan}, {em.const(float('nan'), 'f32')}, {val} : f32")
    neg = em.op(f"arith.cmpi ne, {em.op(f'arith.andi {u}, {_i32(em, 1 << (f.ebits + f.mbits))} : i32')}, "
                f"{_i32(em, 0)} : i32")
    return em.op(f"arith.select {neg}, {em.op(f'arith.negf {val} : f32')}, {val} : f32")


def encode(em: Emitter, x_f32: str, fmt) -> str:
    """The code (``i8``) of an f32 value, rounded and saturated as the module docstring says."""
    bits = em.op(f"arith.bitcast {x_f32} : f32 to i32")
    isnan = em.op(f"arith.cmpf uno, {x_f32}, {x_f32} : f32")
    if fmt == E8M0:
        zero, inf = em.const(0.0, "f32"), em.const(float("inf"), "f32")
        bad = em.op(f"arith.ori {isnan}, {em.op(f'arith.cmpf ole, {x_f32}, {zero} : f32')} : i1")
        bad = em.op(f"arith.ori {bad}, {em.op(f'arith.cmpf oeq, {x_f32}, {inf} : f32')} : i1")
        e = em.op(f"arith.shrui {em.op(f'arith.addi {bits}, {_i32(em, 0x400000)} : i32')}, {_i32(em, 23)} : i32")
        bad = em.op(f"arith.ori {bad}, {em.op(f'arith.cmpi sgt, {e}, {_i32(em, 254)} : i32')} : i1")
        # f32 subnormals: code 1 (2^-126) from 1.5 * 2^-127 up, else 0 (2^-127)
        tiny = em.op(f"arith.cmpi slt, {bits}, {_i32(em, 0x800000)} : i32")
        sub = em.op(f"arith.extui {em.op(f'arith.cmpi sge, {bits}, {_i32(em, 0x600000)} : i32')} : i1 to i32")
        e = em.op(f"arith.select {tiny}, {sub}, {e} : i32")
        code = em.op(f"arith.select {bad}, {_i32(em, 255)}, {e} : i32")
        return em.op(f"arith.trunci {code} : i32 to i8")
    f = fmt
    sign = em.op(f"arith.andi {em.op(f'arith.shrui {bits}, {_i32(em, 31 - (f.ebits + f.mbits))} : i32')}, "
                 f"{_i32(em, 1 << (f.ebits + f.mbits))} : i32")
    a = em.op(f"math.absf {x_f32} : f32")
    a = em.op(f"arith.minimumf {a}, {em.const(f.max, 'f32')} : f32")
    abits = em.op(f"arith.bitcast {a} : f32 to i32")
    e = em.op(f"arith.subi {em.op(f'arith.shrui {abits}, {_i32(em, 23)} : i32')}, {_i32(em, 127)} : i32")
    e = em.op(f"arith.maxsi {e}, {_i32(em, f.emin)} : i32")
    # a * 2^-(e - mbits): exact; its integer part, rounded half to even, is the significand
    scale = _pow2(em, em.op(f"arith.subi {_i32(em, f.mbits)}, {e} : i32"))
    r = em.op(f"math.roundeven {em.op(f'arith.mulf {a}, {scale} : f32')} : f32")
    ri = em.op(f"arith.fptosi {r} : f32 to i32")
    efield = em.op(f"arith.subi {e}, {_i32(em, f.emin)} : i32")
    efield = em.op(f"arith.shli {efield}, {_i32(em, f.mbits)} : i32")
    code = em.op(f"arith.addi {efield}, {ri} : i32")
    nan_code = f.nan if f.nan is not None else (1 << (f.ebits + f.mbits)) - 1
    code = em.op(f"arith.select {isnan}, {_i32(em, nan_code)}, {code} : i32")
    code = em.op(f"arith.ori {code}, {sign} : i32")
    return em.op(f"arith.trunci {code} : i32 to i8")


def decode_value(em: Emitter, v: Value, fmt) -> Value:
    """An ``i8`` tensor of codes as the f32 tensor of their values."""
    return em.elementwise([v], v.shape, "f32", lambda a: decode(em, a[0], fmt))


def encode_value(em: Emitter, v: Value, fmt) -> Value:
    """A float tensor as the ``i8`` tensor of its codes (f16/bf16/f64 converted to f32 first:
    exact for f16/bf16; f64 rounds once to f32 before the format's rounding)."""
    return em.elementwise([v], v.shape, "i8", lambda a: encode(em, em.cast(a[0], v.elem, "f32"), fmt))


def unpack_codes(em: Emitter, v: Value) -> Value:
    """Bytes holding two 4-bit codes each (``[..., n]``, element 2i in byte i's low nibble) as one
    code per byte (``[..., 2n]``): element j reads byte ``j floordiv 2`` and keeps nibble ``j mod 2``.

    NOTE: one elementwise op over the codes (no reshape after it), so that it tiles with its consumers:
    unpacked over a new axis of 2 and collapsed, IREE 3.13 could not tile through the collapse inside a
    dispatch region and staged the whole unpacked tensor in shared memory (cuda:sm_80: 16 MB asked, a
    compile failure; the DEQUANT_MATMUL=ONE_DISPATCH region of an FP4 weight)."""
    r = len(v.shape)
    dims = [f"d{i}" for i in range(r)]
    domain = f"({', '.join(dims)})"
    in_map = f"affine_map<{domain} -> ({', '.join(dims[:-1] + [f'd{r - 1} floordiv 2'])})>"
    out_map = f"affine_map<{domain} -> ({', '.join(dims)})>"

    def body(a):
        j = em.op(f"linalg.index {r - 1} : index")
        odd = em.op(f"arith.remui {j}, {em.const(2, 'index')} : index")
        shift = em.op(f"arith.muli {em.op(f'arith.index_cast {odd} : index to i8')}, {em.const(4, 'i8')} : i8")
        return em.op(f"arith.andi {em.op(f'arith.shrui {a[0]}, {shift} : i8')}, {em.const(15, 'i8')} : i8")

    return em.generic([(v, in_map)], v.shape[:-1] + (2 * v.shape[-1],), "i8", ["parallel"] * r, out_map, body)


def pack_codes(em: Emitter, v: Value) -> Value:
    """One 4-bit code per byte (``[..., 2n]``) as two per byte (``[..., n]``, element 2i in the low
    nibble): the even and odd elements as two strided slices, or-ed."""
    r = len(v.shape)
    out = v.shape[:-1] + (v.shape[-1] // 2,)
    sizes = ", ".join(map(str, out))
    strides = ", ".join(["1"] * (r - 1) + ["2"])
    halves = []
    for first in (0, 1):
        offs = ", ".join(["0"] * (r - 1) + [str(first)])
        name = em.op(f"tensor.extract_slice {v.ssa}[{offs}] [{sizes}] [{strides}] : {v.type} to "
                     f"{tensor_type(out, 'i8')}", "s")
        halves.append(Value(name, out, "i8"))

    def body(a):
        mask = em.const(15, "i8")
        hi = em.op(f"arith.shli {em.op(f'arith.andi {a[1]}, {mask} : i8')}, {em.const(4, 'i8')} : i8")
        return em.op(f"arith.ori {em.op(f'arith.andi {a[0]}, {mask} : i8')}, {hi} : i8")

    return em.elementwise(halves, out, "i8", body)
