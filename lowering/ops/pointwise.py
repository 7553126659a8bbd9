"""Pointwise ops -> one broadcasting ``linalg.generic`` each (IREE fuses chains)."""
from __future__ import annotations

import math

from lowering._context import LowerContext, is_nan
from lowering._emit import FLOAT_TYPES, Emitter
from graph_ir._fbs.graph_generated import DataType
from graph_ir._fbs.graph_generated import PointwiseMode as M
from lowering._registry import register_lowering
from graph_ir.desc import GraphError, NodeDesc, OpKind
from graph_ir.ops.pointwise import ARITY, broadcast_shape

SOFTPLUS_THRESHOLD = 20.0   # beta * x above it: softplus(x) == x to float precision (hipDNN has no field)
COMPARE = {M.CMP_EQ: "oeq", M.CMP_NEQ: "une", M.CMP_GT: "ogt", M.CMP_GE: "oge", M.CMP_LT: "olt", M.CMP_LE: "ole"}
COMPARE_INT = {M.CMP_EQ: "eq", M.CMP_NEQ: "ne", M.CMP_GT: "sgt", M.CMP_GE: "sge", M.CMP_LT: "slt", M.CMP_LE: "sle"}
LOGICAL = (M.LOGICAL_AND, M.LOGICAL_OR, M.LOGICAL_NOT)
_GELU_K = math.sqrt(2.0 / math.pi)


class _Math:
    """Scalar math in one float element type, emitted into a region."""

    def __init__(self, em: Emitter, t: str):
        self.em, self.t = em, t

    def c(self, v: float) -> str:
        return self.em.const(v, self.t)

    def bin(self, op: str, a: str, b: str) -> str:
        return self.em.op(f"arith.{op} {a}, {b} : {self.t}")

    def un(self, op: str, a: str) -> str:
        return self.em.op(f"{op} {a} : {self.t}")

    def add(self, a, b): return self.bin("addf", a, b)
    def sub(self, a, b): return self.bin("subf", a, b)
    def mul(self, a, b): return self.bin("mulf", a, b)
    def div(self, a, b): return self.bin("divf", a, b)
    def exp(self, a): return self.un("math.exp", a)

    def cmp(self, pred: str, a: str, b: str) -> str:
        return self.em.op(f"arith.cmpf {pred}, {a}, {b} : {self.t}")

    def select(self, cond: str, a: str, b: str) -> str:
        return self.em.op(f"arith.select {cond}, {a}, {b} : {self.t}")

    def sigmoid(self, a):
        one = self.c(1.0)
        return self.div(one, self.add(one, self.exp(self.un("arith.negf", a))))

    def phi_cdf(self, a):  # 0.5 * (1 + erf(a / sqrt 2))
        e = self.un("math.erf", self.mul(a, self.c(1.0 / math.sqrt(2.0))))
        return self.mul(self.c(0.5), self.add(self.c(1.0), e))

    def tanh_inner(self, a):  # k * (a + 0.044715 a^3)
        a3 = self.mul(self.mul(a, a), a)
        return self.mul(self.c(_GELU_K), self.add(a, self.mul(self.c(0.044715), a3)))


def _param(v: float, default: float) -> float:
    return default if is_nan(v) else v


def _has_clip(attrs) -> bool:
    return not all(is_nan(v) for v in (attrs.relu_lower_clip, attrs.relu_upper_clip, attrs.relu_lower_clip_slope))


def _relu_params(attrs) -> tuple[float, float, float]:
    """(lower clip, upper clip, lower-clip slope) with hipDNN's defaults (0, +inf, 0)."""
    return (_param(attrs.relu_lower_clip, 0.0), _param(attrs.relu_upper_clip, math.inf),
            _param(attrs.relu_lower_clip_slope, 0.0))


def _fwd(mm: _Math, mode: int, x: list[str], attrs) -> str:
    """Value of ``mode`` on scalar operands ``x`` (already in the compute type)."""
    a = x[0]
    b = x[1] if len(x) > 1 else None
    simple_bin = {M.ADD: "addf", M.SUB: "subf", M.MUL: "mulf", M.DIV: "divf", M.MAX_OP: "maximumf",
                  M.MIN_OP: "minimumf", M.MOD: "remf"}
    simple_un = {M.EXP: "math.exp", M.LOG: "math.log", M.SQRT: "math.sqrt", M.RSQRT: "math.rsqrt",
                 M.ABS: "math.absf", M.NEG: "arith.negf", M.ERF: "math.erf", M.SIN: "math.sin",
                 M.COS: "math.cos", M.TAN: "math.tan", M.CEIL: "math.ceil", M.FLOOR: "math.floor",
                 M.TANH_FWD: "math.tanh"}
    if mode in simple_bin:
        return mm.bin(simple_bin[mode], a, b)
    if mode in simple_un:
        return mm.un(simple_un[mode], a)
    if mode == M.POW:
        return mm.em.op(f"math.powf {a}, {b} : {mm.t}")
    if mode == M.IDENTITY:
        return a
    if mode == M.RECIPROCAL:
        return mm.div(mm.c(1.0), a)
    if mode == M.ADD_SQUARE:
        return mm.add(a, mm.mul(b, b))
    if mode == M.RELU_FWD:
        if not _has_clip(attrs):
            return mm.bin("maximumf", a, mm.c(0.0))
        lo, hi, slope = _relu_params(attrs)
        top = mm.bin("minimumf", a, mm.c(hi)) if math.isfinite(hi) else a
        below = mm.add(mm.c(lo), mm.mul(mm.c(slope), mm.sub(a, mm.c(lo))))
        return mm.select(mm.cmp("oge", a, mm.c(lo)), top, below)
    if mode == M.SIGMOID_FWD:
        return mm.sigmoid(a)
    if mode == M.GELU_FWD:
        return mm.mul(a, mm.phi_cdf(a))
    if mode == M.GELU_APPROX_TANH_FWD:
        t = mm.un("math.tanh", mm.tanh_inner(a))
        return mm.mul(mm.mul(mm.c(0.5), a), mm.add(mm.c(1.0), t))
    if mode == M.SWISH_FWD:
        beta = _param(attrs.swish_beta, 1.0)
        return mm.mul(a, mm.sigmoid(mm.mul(mm.c(beta), a)))
    if mode == M.ELU_FWD:
        alpha = _param(attrs.elu_alpha, 1.0)
        neg = mm.mul(mm.c(alpha), mm.sub(mm.exp(a), mm.c(1.0)))
        return mm.select(mm.cmp("ogt", a, mm.c(0.0)), a, neg)
    if mode == M.SOFTPLUS_FWD:
        beta, thr = _param(attrs.softplus_beta, 1.0), SOFTPLUS_THRESHOLD
        bx = mm.mul(mm.c(beta), a)
        soft = mm.div(mm.un("math.log1p", mm.exp(bx)), mm.c(beta))
        return mm.select(mm.cmp("ogt", bx, mm.c(thr)), a, soft)
    # Backward modes: x[0] = dy, x[1] = x; result = dy * f'(x).
    dy, xx = a, b
    if mode == M.RELU_BWD:
        if not _has_clip(attrs):
            return mm.select(mm.cmp("ogt", xx, mm.c(0.0)), dy, mm.c(0.0))
        lo, hi, slope = _relu_params(attrs)
        inside = mm.select(mm.cmp("olt", xx, mm.c(hi)), mm.c(1.0), mm.c(0.0))
        d = mm.select(mm.cmp("ogt", xx, mm.c(lo)), inside, mm.c(slope))
        return mm.mul(dy, d)
    if mode == M.SIGMOID_BWD:
        s = mm.sigmoid(xx)
        d = mm.mul(s, mm.sub(mm.c(1.0), s))
    elif mode == M.TANH_BWD:
        t = mm.un("math.tanh", xx)
        d = mm.sub(mm.c(1.0), mm.mul(t, t))
    elif mode == M.GELU_BWD:
        pdf = mm.mul(mm.c(1.0 / math.sqrt(2.0 * math.pi)),
                     mm.exp(mm.mul(mm.c(-0.5), mm.mul(xx, xx))))
        d = mm.add(mm.phi_cdf(xx), mm.mul(xx, pdf))
    elif mode == M.GELU_APPROX_TANH_BWD:
        t = mm.un("math.tanh", mm.tanh_inner(xx))
        inner_d = mm.mul(mm.c(_GELU_K), mm.add(mm.c(1.0), mm.mul(mm.c(3 * 0.044715), mm.mul(xx, xx))))
        d = mm.add(mm.mul(mm.c(0.5), mm.add(mm.c(1.0), t)),
                   mm.mul(mm.mul(mm.c(0.5), xx), mm.mul(mm.sub(mm.c(1.0), mm.mul(t, t)), inner_d)))
    elif mode == M.SWISH_BWD:
        beta = _param(attrs.swish_beta, 1.0)
        bx = mm.mul(mm.c(beta), xx)
        s = mm.sigmoid(bx)
        d = mm.add(s, mm.mul(bx, mm.mul(s, mm.sub(mm.c(1.0), s))))
    elif mode == M.ELU_BWD:
        alpha = _param(attrs.elu_alpha, 1.0)
        d = mm.select(mm.cmp("ogt", xx, mm.c(0.0)), mm.c(1.0), mm.mul(mm.c(alpha), mm.exp(xx)))
    elif mode == M.SOFTPLUS_BWD:
        beta, thr = _param(attrs.softplus_beta, 1.0), SOFTPLUS_THRESHOLD
        bx = mm.mul(mm.c(beta), xx)
        d = mm.select(mm.cmp("ogt", bx, mm.c(thr)), mm.c(1.0), mm.sigmoid(bx))
    else:
        raise GraphError(f"pointwise mode {mode} is not supported", "unsupported")
    return mm.mul(dy, d)




@register_lowering(OpKind.POINTWISE)
def lower_pointwise(ctx: LowerContext, node: NodeDesc) -> None:
    attrs = node.attrs
    mode = attrs.operation
    if mode not in ARITY:
        raise GraphError(f"pointwise '{node.name}': mode {mode} is not supported", "unsupported")
    ins = [ctx.value(u) for u in attrs.inputs()]
    if len(ins) != ARITY[mode]:
        raise GraphError(f"pointwise '{node.name}': mode {M.__dict__.get(mode, mode)} takes "
                            f"{ARITY[mode]} inputs, got {len(ins)}")
    out_uid = attrs.out_0_uid
    shape = ctx.dims(out_uid)
    out_elem = ctx.out_elem(out_uid)
    em = ctx.em
    # UINT8 inputs convert zero-extended (uitofp / extui), the other integers sign-extended
    uns = [ctx.tensor(u).data_type == DataType.UINT8 for u in attrs.inputs()]
    if mode == M.GEN_INDEX:
        axis = attrs.axis
        if axis is None or not 0 <= axis < len(shape):
            raise GraphError(f"pointwise '{node.name}': GEN_INDEX needs axis_tensor_uid (the axis) in "
                                f"[0, {len(shape)}), got {axis}")
        def body(args):
            idx = em.op(f"linalg.index {axis} : index")
            i64 = em.op(f"arith.index_cast {idx} : index to i64")
            return em.cast(i64, "i64", out_elem)
    elif mode in COMPARE or mode in LOGICAL or mode == M.BINARY_SELECT:
        ct = ctx.compute_elem(node)
        def body(args):
            xs = args[:-1]
            if mode in COMPARE and ct not in FLOAT_TYPES and all(v.elem not in FLOAT_TYPES for v in ins):
                # NOTE: a non-float compute type (cuDNN code asks for INT32 or BOOLEAN on index
                # compares: flexible-SDPA masks): integer operands compare exactly, as i64
                r = em.op(f"arith.cmpi {COMPARE_INT[mode]}, "
                          + ", ".join(em.cast(x, v.elem, "i64", u) for x, v, u in zip(xs, ins, uns)) + " : i64")
            elif mode in COMPARE:
                cf = ct if ct in FLOAT_TYPES else "f32"   # float operands under a non-float compute type
                mm = _Math(em, cf)
                r = mm.cmp(COMPARE[mode], *[em.cast(x, v.elem, cf, u) for x, v, u in zip(xs, ins, uns)])
            elif mode == M.BINARY_SELECT:
                cond = em.cast(xs[2], ins[2].elem, "i1")
                r = em.op(f"arith.select {cond}, {em.cast(xs[0], ins[0].elem, out_elem)}, "
                          f"{em.cast(xs[1], ins[1].elem, out_elem)} : {out_elem}")
                return r
            else:
                bs = [em.cast(x, v.elem, "i1") for x, v in zip(xs, ins)]
                if mode == M.LOGICAL_NOT:
                    r = em.op(f"arith.xori {bs[0]}, {em.const(1, 'i1')} : i1")
                else:
                    r = em.op(f"arith.{'andi' if mode == M.LOGICAL_AND else 'ori'} {bs[0]}, {bs[1]} : i1")
            return em.cast(r, "i1", out_elem)
    elif mode == M.IDENTITY and ctx.compute_elem(node) not in FLOAT_TYPES:
        # NOTE: an identity with an integer compute type (an int32 conv result, cuDNN's int8 conv
        # graphs) is one exact conversion, not a round trip through f32 (exact only below 2^24)
        def body(args):
            return em.cast(args[0], ins[0].elem, out_elem, uns[0])
    else:
        ct = ctx.compute_elem(node)
        if ct not in ("f16", "bf16", "f32", "f64"):
            ct = "f32"
        def body(args):
            mm = _Math(em, ct)
            xs = [em.cast(x, v.elem, ct, u) for x, v, u in zip(args[:-1], ins, uns)]
            return em.cast(_fwd(mm, mode, xs, attrs), ct, out_elem)
    if broadcast_shape([v.shape for v in ins] + [shape]) != shape:
        raise GraphError(f"pointwise '{node.name}': inputs of shapes {[list(v.shape) for v in ins]} "
                            f"do not broadcast to the output dims {list(shape)}")
    ctx.define(out_uid, em.elementwise(ins, shape, out_elem, body))
