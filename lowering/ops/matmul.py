"""Matmul -> ``linalg.matmul`` / ``linalg.batch_matmul``, or a ``linalg.generic``
contraction when batch dims broadcast. Accumulates in the compute type.

NOTE: IREE 3.13 miscompiles an f16/bf16 contraction for CUDA when the contraction's N dimension
(from the second operand) comes before its M dimension (from the first) in the loop order
(measured on an H200, sm_80 PTX: the mma.sync m16n8k16 accumulator elements c1 and c2 land in
each other's places, half of the output is wrong, silently). IREE makes such contractions itself
when it moves a transpose into a matmul (a matmul whose output is stored transposed, or sdpa's
V operand, which IREE transposes for its attention kernel). On CUDA targets the lowering puts a
``iree_tensor_ext.compute_barrier.start`` between a matmul's result and such transposes (here and in
``lowering/ops/sdpa.py``), so the contraction keeps its M-before-N form: docs/known_issues.md.

Integer operands: with an integer compute type (i32 when unset and no operand is floating point)
products and sums are integer ops in it; INT8 operands are sign-extended (the named ops' own cast),
UINT8 ones zero-extended by a conversion before the contraction. A floating-point compute type
converts integer operands exactly (``arith.sitofp``/``uitofp``): int8 x bf16 with FLOAT compute.

FP8/FP4 operands on GPU targets contract as f16 (exact) with f32 accumulation: ``_f16_operands``."""
from __future__ import annotations

from lowering._context import LowerContext
from lowering._emit import FLOAT_TYPES, Value, dyn_operands, is_static
from graph_ir._fbs.graph_generated import PointwiseMode
from graph_ir._fbs.graph_generated import DataType
from lowering._registry import register_lowering
from graph_ir.desc import GraphError, NodeDesc, OpKind
from graph_ir.ops.matmul import matmul_shape
from graph_ir.dtypes import MINIFLOAT_FORMATS

_MMA_ELEMS = ("f16", "bf16")   # element types IREE's CUDA codegen sends to mma.sync


def cuda_mma_guard(policy, *elems: str) -> bool:
    """Whether a contraction over ``elems`` needs the transposed-output barrier under ``policy``.

    Example:
        >>> from lowering.policy import LoweringPolicy as P
        >>> cuda_mma_guard(P.for_target("cuda:sm_80"), "f16", "f16"), cuda_mma_guard(P.for_target("rocm:gfx942"), "f16")
        (True, False)
    """
    return policy.cuda_mma_barriers and any(e in _MMA_ELEMS for e in elems)


def needs_relayout_barrier(ctx: LowerContext, uid: int) -> bool:
    """Whether tensor ``uid`` derives, through pointwise ops only, from a guarded matmul result
    (IREE moves a transpose of such a value into the contraction; module docstring)."""
    if not ctx.mma_results:
        return False
    producer = {o: n for n in ctx.graph.nodes for o in n.attrs.outputs()}
    todo, seen = [uid], set()
    while todo:
        u = todo.pop()
        if u in ctx.mma_results:
            return True
        n = producer.get(u)
        if u in seen or n is None or n.kind != OpKind.POINTWISE:
            seen.add(u)
            continue
        seen.add(u)
        todo.extend(n.attrs.inputs())
    return False


def propagation_barrier(em, v: Value) -> Value:
    """``iree_tensor_ext.compute_barrier.start``: IREE's global optimizations move no transpose up
    across it, and dispatch creation removes it (no runtime cost of its own).

    NOTE: measured with IREE 3.13 on the BERT attention graph: ``util.optimization_barrier`` in the
    same place also keeps the contraction right, but it survives into the stream schedule (two
    submissions and a device->host sync per call: 0.27 -> 0.44 ms on an H200).
    """
    dims = dyn_operands(v.shape)
    name = em.op(f"iree_tensor_ext.compute_barrier.start {v.ssa} : {v.type}{'{' + dims + '}' if dims else ''} "
                 f"-> {v.type}", "bar")
    return Value(name, v.shape, v.elem)




def _widened_from(ctx: LowerContext, uid: int) -> str | None:
    """The float type tensor ``uid`` was widened from by the pointwise op that makes it (a cast:
    an IDENTITY from a narrower float type), else None."""
    for n in ctx.graph.nodes:
        if n.kind == OpKind.POINTWISE and uid in n.attrs.outputs():
            if n.attrs.operation != PointwiseMode.IDENTITY:
                return None
            src = ctx.value(n.attrs.in_0_uid).elem
            out = ctx.value(uid).elem
            return src if src in FLOAT_TYPES and src != out else None
    return None


def _narrow_source(ctx: LowerContext, uid: int) -> Value:
    """The value the IDENTITY cast that makes tensor ``uid`` reads (see :func:`_widened_from`)."""
    for n in ctx.graph.nodes:
        if n.kind == OpKind.POINTWISE and uid in n.attrs.outputs():
            return ctx.value(n.attrs.in_0_uid)
    raise AssertionError(f"tensor {uid} is not made by a pointwise op")


def keep_cast_apart(ctx: LowerContext, v: Value) -> Value:
    """``v`` (a widened operand) behind an elementwise ``+ 0.0`` (exact, -0 becomes +0), so IREE's
    dispatch creation does not fuse the widening cast into the contraction.

    NOTE: IREE 3.13 (CUDA, sm_80) fuses f16->f32 and bf16->f32 casts of a matmul's two operands
    into its dispatch and then fails to verify the ``vector.contract`` it makes ("lhs and rhs have
    same element type": bf16 x f16). An op other than a pure cast is not fused that way; the f32
    operand is then stored once, as the cast's output would be. Only when the sources differ."""
    em = ctx.em
    zero = em.op(f"arith.constant 0.0 : {v.elem}", "cst")
    return em.elementwise([v], v.shape, v.elem, lambda a: em.op(f"arith.addf {a[0]}, {zero} : {v.elem}"))


# FP8 and FP4 values (decoded to f32 by lowering/_context.py) that f16 holds exactly: E4M3 (to 448,
# down to 2^-9), E5M2 (to 57344, down to 2^-16), E2M1; not E8M0 (2^-127..2^127)
_F16_EXACT = (DataType.FP8_E4M3, DataType.FP8_E5M2, DataType.FP4_E2M1)


def _f16_operands(ctx: LowerContext, *pairs) -> list[Value]:
    """GPU targets, f32 accumulation: a contraction whose operands are FP8/FP4 tensors (or one of them
    f16) takes them as f16, exactly, so it runs on the f16 tensor-core path with f32 sums; the
    products and sums are those of the f32 form. Other operands as they are."""
    kinds = [ctx.tensor(u).data_type for u, _ in pairs]
    if not any(k in _F16_EXACT for k in kinds) or \
            not all(k in _F16_EXACT or v.elem == "f16" for (_, v), k in zip(pairs, kinds)):
        return [v for _, v in pairs]
    return [decoded_apart(ctx, ctx.em.convert(v, "f16")) for _, v in pairs]


def decoded_apart(ctx: LowerContext, v: Value) -> Value:
    """A decoded FP8/FP4 operand behind a compute barrier: the decode becomes a dispatch of its own
    (f16 codes' values written once) and the contraction one of plain f16 operands.

    NOTE: without it IREE 3.13 fuses the decode into the contraction's dispatch (one dispatch),
    which the CUDA codegen then does not run on its f16 mma path: benchmarks/gpu_quant.py (retired; in git history at commit 9e99c4b) measures
    both forms (docs/cudnn_side_by_side.md, fp8 matmul)."""
    return propagation_barrier(ctx.em, v)


def _is_transpose(em, v: Value) -> bool:
    """Whether ``v`` is made by a ``linalg.transpose`` (a column-major or otherwise relaid-out operand).

    NOTE: measured on an H100 (IREE 3.13, sm_80 PTX; issue 49, docs/known_issues.md 11): IREE folds the
    transpose of a column-major A into the contraction (``batch_matmul`` with A's map ``(b, k, m)``), and
    that f16/bf16 contraction is wrong on CUDA (30-76% of the outputs off) when B is row-major; with A's
    transpose a dispatch of its own (what IREE does itself when B is column-major too) it is right. A
    ``compute_barrier.start`` on the transposed A keeps IREE from folding it.
    """
    head = f"{v.ssa} = linalg.transpose "
    return any(line.lstrip().startswith(head) for line in reversed(em.lines))


MMA_K = 16   # the K of the f16/bf16 mma.sync intrinsic IREE 3.13 uses on CUDA (NV_MMA_SYNC_F32_16x8x16_*)


def pad_reduction(em, a: Value, b: Value) -> tuple[Value, Value]:
    """``a [.., M, K]`` and ``b [.., K, N]`` zero-padded along K to a multiple of :data:`MMA_K`.

    NOTE: measured on an H200 (IREE 3.13, sm_80 PTX; issue 49, docs/known_issues.md 12): when K is not a
    multiple of 16, IREE's TileAndFuse pipeline pads the reduction to a multiple of its K tile and fills
    B's padding from the memory after B's rows (multiplied by A's zero padding). That is right while
    that memory holds finite numbers and NaN otherwise: a row-major B followed by NaN made every output
    of the last batch NaN, and the few NaNs seen at random came from whatever followed the caller's B.
    With K a multiple of 16, IREE's K tile (a divisor of K / 16 intrinsics) leaves nothing to pad. The
    padded copies are dispatches of their own (IREE does not fuse a pad into its consumer by default).
    Static shapes only. ROCm too (``LoweringPolicy.mma_pad_reduction``): the same pipeline pads K there
    (to 8 or 16 for the MFMA intrinsics, checked in its lowering configs for gfx942); not measured on an
    AMD GPU."""
    k = a.shape[-1]
    if not (is_static(a.shape) and is_static(b.shape)) or k % MMA_K == 0:
        return a, b
    kp = -(-k // MMA_K) * MMA_K
    ra, rb = len(a.shape), len(b.shape)
    a = em.zero_pad(a, [0] * ra, [0] * (ra - 1) + [kp - k], (*a.shape[:-1], kp))
    b = em.zero_pad(b, [0] * rb, [0] * (rb - 2) + [kp - k, 0], (*b.shape[:-2], kp, b.shape[-1]))
    return a, b


@register_lowering(OpKind.MATMUL)
def lower_matmul(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    region_start = _region_start(ctx, node)
    a, b = ctx.value(at.a_uid), ctx.value(at.b_uid)
    out_shape = matmul_shape(a.shape, b.shape, node.name)
    floats = a.elem in FLOAT_TYPES or b.elem in FLOAT_TYPES
    acc = ctx.compute_elem(node, default="f32" if floats else "i32")
    if acc not in FLOAT_TYPES and floats:
        raise GraphError(f"matmul '{node.name}': an integer compute type ({acc}) needs integer operands, "
                            f"got {a.elem} and {b.elem}", "unsupported")
    em = ctx.em
    # NOTE: the named ops sign-extend integer operands: UINT8 ones are zero-extended here first
    a, b = (em.convert(v, acc, unsigned=True) if ctx.tensor(u).data_type == DataType.UINT8 else v
            for u, v in ((at.a_uid, a), (at.b_uid, b)))
    if not ctx.policy.is_cpu and acc == "f32":
        a, b = _f16_operands(ctx, (at.a_uid, a), (at.b_uid, b))
    pol = ctx.policy
    if (pol.mma_pad_reduction or pol.cuda_mma_barriers) and acc == a.elem == b.elem == "f32":
        sa, sb = _widened_from(ctx, at.a_uid), _widened_from(ctx, at.b_uid)
        if sa == sb and sa in _MMA_ELEMS:
            # NOTE: issue 49, cuDNN FE v1.23's test_matmul_fuzzer on an H100: f16/bf16 operands widened to
            # f32 by IDENTITY casts (its f32-output cases). IREE 3.13 fuses both casts into the contraction
            # and runs it on its f16/bf16 mma path, where the guards below (K padding, the transposed-A
            # barrier) were skipped because the operands read as f32: wrong outputs when K % 16 != 0 and
            # an illegal address. The product of the narrow sources with f32 sums is the same contraction
            # (f16 x f16 and bf16 x bf16 products are exact in f32), and takes the guards.
            na, nb = _narrow_source(ctx, at.a_uid), _narrow_source(ctx, at.b_uid)
            if (na.shape, nb.shape) == (a.shape, b.shape):   # NOTE: not a cast that also broadcasts
                a, b = na, nb
    if not ctx.policy.is_cpu and a.elem == b.elem:
        sa, sb = _widened_from(ctx, at.a_uid), _widened_from(ctx, at.b_uid)
        if sa is not None and sb is not None and sa != sb:
            b = keep_cast_apart(ctx, b)
    if cuda_mma_guard(ctx.policy, a.elem, b.elem):
        ctx.mma_results.add(at.c_uid)   # see the module docstring; used in lowering/_lower.py
        if _is_transpose(em, a):
            a = propagation_barrier(em, a)   # issue 49: see _is_transpose
    if ctx.policy.mma_pad_reduction and any(e in _MMA_ELEMS for e in (a.elem, b.elem)):
        a, b = pad_reduction(em, a, b)
    rank = len(out_shape)
    init = em.filled(out_shape, acc, 0.0)
    if rank == 2 or (rank == 3 and a.shape[:-2] == b.shape[:-2] == out_shape[:-2]):
        opname = "linalg.matmul" if rank == 2 else "linalg.batch_matmul"
        name = em.op(f"{opname} ins({a.ssa}, {b.ssa} : {a.type}, {b.type}) "
                     f"outs({init} : {Value('', out_shape, acc).type}) -> {Value('', out_shape, acc).type}", "mm")
        res = Value(name, out_shape, acc)
    else:
        nb = rank - 2
        dims = [f"d{i}" for i in range(rank + 1)]  # batch..., m, n, k
        dom = f"({', '.join(dims)})"
        m, n, k = dims[nb], dims[nb + 1], dims[nb + 2]

        def batch_exprs(shape):
            off = nb - (len(shape) - 2)
            return [dims[off + i] if shape[i] == out_shape[off + i] else "0" for i in range(len(shape) - 2)]

        amap = f"affine_map<{dom} -> ({', '.join(batch_exprs(a.shape) + [m, k])})>"
        bmap = f"affine_map<{dom} -> ({', '.join(batch_exprs(b.shape) + [k, n])})>"
        omap = f"affine_map<{dom} -> ({', '.join(dims[:nb] + [m, n])})>"

        def body(args):
            x = em.cast(args[0], a.elem, acc)
            y = em.cast(args[1], b.elem, acc)
            if acc in FLOAT_TYPES:
                return em.op(f"arith.addf {args[2]}, {em.op(f'arith.mulf {x}, {y} : {acc}')} : {acc}")
            return em.op(f"arith.addi {args[2]}, {em.op(f'arith.muli {x}, {y} : {acc}')} : {acc}")

        res = em.generic([(a, amap), (b, bmap)], out_shape, acc,
                         ["parallel"] * (nb + 2) + ["reduction"], omap, body, init=init)
    ctx.define(at.c_uid, res)
    if region_start is not None:
        ctx.values[at.c_uid] = em.wrap_region(region_start, ctx.values[at.c_uid])


def _region_start(ctx: LowerContext, node: NodeDesc) -> int | None:
    """Where the dispatch region of a dequantize-matmul starts (``LoweringPolicy.dequant_matmul_region``):
    the block_scale_dequantize nodes lowered just before this node (one, or both operands' two in a
    row), each making an operand read by nothing else and not a graph output; else None (IREE's own
    dispatches)."""
    at = node.attrs
    if ctx.graph.tensor(at.c_uid).data_type in MINIFLOAT_FORMATS:
        return None
    marks = {}
    for uid in (at.a_uid, at.b_uid):
        mark = ctx.region_marks.get(uid)
        if mark is None or not ctx.tensor(uid).is_virtual:
            continue
        if len([n for n in ctx.graph.nodes if uid in n.attrs.inputs()]) == 1:
            marks[mark[1]] = mark[0]
    # the region takes the lines from the first of them on: only dequantizes lowered right before
    for index in sorted(marks):
        if set(range(index, ctx.node_index)) <= set(marks):
            return marks[index]
    return None
