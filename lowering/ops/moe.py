"""Lowering of moe_grouped_matmul and moe_grouped_matmul_bwd to linalg, with the groups' row ranges
read from the offsets tensor inside the module (one compiled plan serves every routing).

The row -> group map is computed in the graph: ``group[r] = #{g : offset[g] <= r} - 1`` (-1: the
row is before the first group), which is the group whose range ``[offset[g], offset[g + 1])``
holds r when the offsets do not decrease: an elementwise ``linalg.generic`` over the rows, each a
binary search of the offsets (:func:`row_groups`).

Forward, one contraction over ``(row, n, k)`` accumulating in the compute type (FLOAT unless a
float type is set): its body reads the row's group, and with ``tensor.extract`` the weight of
that group's expert ``weight[group % E, k, n]`` (and, GATHER, the token row ``token_index[r]``);
an elementwise epilogue zeroes rows that no group holds and rounds once to the output type.
SCATTER writes row r to output row ``dst[r] = token_index[r] * top_k + token_ks[r]``. On the CPU the
destinations are inverted first (``src[p] = max{r : dst[r] = p}``, by ``iree_linalg_ext.scatter``;
-1: no row writes p) and the contraction runs over output rows, reading token row ``src[p]`` and its
group; on GPUs the contraction runs over the rows in their own order (as NONE) and an
``iree_linalg_ext.scatter`` writes its rows to ``dst`` in the zeroed output.

Backward: ``dweight[g, k, n] = sum over rows r of [offsets[g] <= r < next offset] * token[r, k] *
doutput[r, n]`` (the rows of group g when the offsets do not decrease), one contraction over
``(g, k, n, r)``: every group's sum reads every row and keeps its own (the compute is G times a dense
``token^T doutput``; no group sizes are known when compiling).

One dispatch per graph on every target: the ops (the row -> group map, the contraction and its
epilogue; SCATTER's inverse or scatter) sit in one ``flow.dispatch.region``
(``Emitter.dispatch_region``), which IREE compiles as one dispatch, tiling and fusing the map into the
contraction's tiles, or on GPUs, SCATTER, everything into the scatter's tiles (llvm-cpu, cuda:sm_80,
rocm:gfx942: tests/test_moe.py); left to its heuristics IREE 3.13 makes 2 (it fuses no producer into
a contraction's dispatch).
Measured (benchmarks/gpu_one_dispatch.py (retired; in git history at commit 9e99c4b), H100, HALF, 2048 tokens, K=N=1024, 8 experts): NONE 0.91x
and GATHER 0.89x the time of the 2-dispatch form, the backward equal; on a 2-core CPU all equal, SCATTER
included. NOTE: the binary search inside the contraction's body (another one-dispatch form) runs for
every multiply-add: 1.3-2.6x slower on the CPU, measured; not used.
On GPUs the forward needs IREE's reduction vector-distribution pipeline off (the ``gather`` trait,
plugins/iree_linalg/knobs.py).

Execute-time data the routing contract excludes (decreasing offsets, indices out of range,
two rows scattering to one slot) does not fault: indices are clamped for the loads and stores and
such rows give zeros (on GPUs, SCATTER, a row whose slot is out of range writes the clamped slot); a
slot two rows scatter to gets the later row on the CPU, one of them on GPUs. The numpy reference
refuses such data.
"""
from __future__ import annotations

import math

from graph_ir.desc import MOE_MODE_GATHER, MOE_MODE_NONE, MOE_MODE_SCATTER, GraphError, NodeDesc, OpKind
from graph_ir.dtypes import data_type_name
from graph_ir.ops._moe import check_moe, check_moe_backward
from lowering._context import LowerContext
from lowering._emit import FLOAT_TYPES, Emitter, Value
from lowering._registry import register_lowering
from lowering.ops.norm import _checked

_INDEX_TYPES = ("i32", "i64")


def _map(rank: int, exprs: str) -> str:
    d = ", ".join(f"d{i}" for i in range(rank))
    return f"affine_map<({d}) -> ({exprs})>"


def _index_vector(ctx: LowerContext, node: NodeDesc, field: str) -> Value:
    """Routing tensor ``field`` (``[G, 1, 1]`` or ``[1, R, 1]``) as a vector; INT32 or INT64 only."""
    uid = getattr(node.attrs, f"{field}_uid")
    v = ctx.value(uid)
    if v.elem not in _INDEX_TYPES:
        t = ctx.tensor(uid)
        raise GraphError(f"{node.kind.name.lower()} '{node.name}': field '{field}' (tensor '{t.name}', uid {uid}) "
                         f"has data type {data_type_name(t.data_type)}: it must be INT32 or INT64")
    return ctx.em.reshape(v, (math.prod(v.shape),))


def _float_operand(ctx: LowerContext, node: NodeDesc, field: str) -> Value:
    """Operand ``field``; a floating-point type only (NOT_SUPPORTED otherwise)."""
    uid = getattr(node.attrs, f"{field}_uid")
    v = ctx.value(uid)
    if v.elem not in FLOAT_TYPES:
        t = ctx.tensor(uid)
        raise GraphError(f"{node.kind.name.lower()} '{node.name}': field '{field}' (tensor '{t.name}', uid {uid}) "
                         f"has data type {data_type_name(t.data_type)}: MoE operands must be floating point "
                         "(FLOAT, HALF, BFLOAT16 or DOUBLE)", "unsupported")
    return v


def _rows(ctx: LowerContext, node: NodeDesc, field: str) -> Value:
    """A ``[1, M, X]`` float operand as ``[M, X]``."""
    v = _float_operand(ctx, node, field)
    return ctx.em.reshape(v, v.shape[1:])


def _acc(ctx: LowerContext, node: NodeDesc) -> str:
    acc = ctx.compute_elem(node, "f32")
    if acc not in FLOAT_TYPES:
        raise GraphError(f"{node.kind.name.lower()} '{node.name}': compute type {acc} is not supported: the "
                         "grouped matmul accumulates in a float type (FLOAT by default)", "unsupported")
    return acc


def _i64(em: Emitter, ssa: str, elem: str) -> str:
    return ssa if elem == "i64" else em.op(f"arith.extsi {ssa} : {elem} to i64")


def _clamped(em: Emitter, ssa: str, elem: str, hi: int) -> str:
    """``ssa`` (an integer of type ``elem``) clamped to ``[0, hi]``."""
    lo_c, hi_c = em.const(0, elem), em.const(hi, elem)
    return em.op(f"arith.minsi {em.op(f'arith.maxsi {ssa}, {lo_c} : {elem}')}, {hi_c} : {elem}")


def _clamp_index(em: Emitter, ssa: str, elem: str, hi: int) -> str:
    """``ssa`` (an integer) clamped to ``[0, hi]``, as an ``index``."""
    return em.op(f"arith.index_cast {_clamped(em, ssa, elem, hi)} : {elem} to index")


def row_groups(em: Emitter, offsets: Value, rows: int) -> Value:
    """``group[r] = #{g : offsets[g] <= r} - 1`` for ``r < rows``: i32 ``[rows]``.

    NOTE: an elementwise op (each row a branchless binary search over the G offsets, log2(G) reads
    with sizes known when compiling), not a reduction over G: IREE fuses an elementwise producer
    into the contraction's dispatch, where a reduction would be a dispatch of its own."""
    g = offsets.shape[0]

    def body(a):
        r = em.op(f"arith.index_cast {em.op('linalg.index 0 : index')} : index to i64")

        def at_most_r(i: str) -> str:        # offsets[i] <= r, i an index value
            v = em.op(f"tensor.extract {offsets.ssa}[{i}] : {offsets.type}")
            return em.op(f"arith.cmpi sle, {_i64(em, v, offsets.elem)}, {r} : i64")

        # the last position whose offset is <= r (0 when none is): halve a window of static sizes
        base, n = em.const(0, "index"), g
        while n > 1:
            half = n // 2
            mid = em.op(f"arith.addi {base}, {em.const(half, 'index')} : index")
            base = em.op(f"arith.select {at_most_r(mid)}, {mid}, {base} : index")
            n -= half
        count = em.op(f"arith.index_cast {base} : index to i32")
        hit = em.op(f"arith.extui {at_most_r(base)} : i1 to i32")
        return em.op(f"arith.subi {em.op(f'arith.addi {count}, {hit} : i32')}, {em.const(1, 'i32')} : i32")

    return em.generic([], (rows,), "i32", ["parallel"], _map(1, "d0"), body)


def _slot(em: Emitter, i: str, k: str, index: Value, ks: Value, top_k: int) -> str:
    """Output row ``index[r] * top_k + ks[r]`` of a routed row (i64; ``i``, ``k`` its index and k)."""
    scaled = em.op(f"arith.muli {_i64(em, i, index.elem)}, {em.const(top_k, 'i64')} : i64")
    return em.op(f"arith.addi {scaled}, {_i64(em, k, ks.elem)} : i64")


def _slots(em: Emitter, index: Value, ks: Value, top_k: int, rows: int) -> str:
    """Each row's output row clamped to ``[0, rows)``, as the ``[rows, 1]`` i32 indices of an
    ``iree_linalg_ext.scatter``."""
    def body(a):
        d = _clamped(em, _slot(em, a[0], a[1], index, ks, top_k), "i64", rows - 1)
        return em.op(f"arith.trunci {d} : i64 to i32")

    ident = _map(1, "d0")
    dst = em.generic([(index, ident), (ks, ident)], (rows,), "i32", ["parallel"], ident, body)
    return em.op(f"tensor.expand_shape {dst.ssa} [[0, 1]] output_shape [{rows}, 1] : {dst.type} "
                 f"into tensor<{rows}x1xi32>", "r")


def _scattered_sources(em: Emitter, group: Value, index: Value, ks: Value, top_k: int) -> Value:
    """``src[p] = max{r : group[r] >= 0 and index[r] * top_k + ks[r] = p}`` (-1: no row writes p), i32
    ``[M]``, by ``iree_linalg_ext.scatter`` (O(M)): each routed row r stores r at its output row,
    combined by max (the later row wins a slot); rows in no group, or whose output row is outside
    the output, store -1 (at a clamped slot, changing nothing)."""
    m = group.shape[0]

    def upd_body(a):
        e, i, k = a[0], a[1], a[2]
        d = _slot(em, i, k, index, ks, top_k)
        r = em.op(f"arith.index_cast {em.op('linalg.index 0 : index')} : index to i32")
        z64, m64, z32, none = em.const(0, "i64"), em.const(m, "i64"), em.const(0, "i32"), em.const(-1, "i32")
        inside = em.op(f"arith.andi {em.op(f'arith.cmpi sge, {d}, {z64} : i64')}, "
                       f"{em.op(f'arith.cmpi slt, {d}, {m64} : i64')} : i1")
        ok = em.op(f"arith.andi {inside}, {em.op(f'arith.cmpi sge, {e}, {z32} : i32')} : i1")
        return em.op(f"arith.select {ok}, {r}, {none} : i32")

    ident = _map(1, "d0")
    upd = em.generic([(group, ident), (index, ident), (ks, ident)], (m,), "i32", ["parallel"], ident, upd_body)
    return em.scatter(upd, _slots(em, index, ks, top_k, m), em.filled((m,), "i32", -1), False,
                    lambda new, old: em.op(f"arith.maxsi {new}, {old} : i32"))


@register_lowering(OpKind.MOE_GROUPED_MATMUL)
def lower_moe_grouped_matmul(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_moe(at, d))
    em = ctx.em
    token, weight = _rows(ctx, node, "token"), _float_operand(ctx, node, "weight")
    offsets = _index_vector(ctx, node, "first_token_offset")
    acc, out_elem = _acc(ctx, node), ctx.out_elem(at.output_uid)
    m, k = token.shape
    e, _, n = weight.shape
    rows = m
    index = ks = None
    if at.mode in (MOE_MODE_GATHER, MOE_MODE_SCATTER):
        index = _index_vector(ctx, node, "token_index")
        if at.mode == MOE_MODE_GATHER:
            rows = index.shape[0]
    if at.mode == MOE_MODE_SCATTER:
        ks = _index_vector(ctx, node, "token_ks")
    w_t, t_t = weight.type, token.type
    # SCATTER: on the CPU each output row p reads its source row src[p] (the rows' slots inverted by an
    # iree_linalg_ext.scatter of row numbers) in the contraction; on GPUs the rows are multiplied in
    # their own order and the result rows scattered to their slots by an iree_linalg_ext.scatter, the
    # region's root, into the zeroed output.
    # NOTE: IREE 3.13's CUDA codegen failed on the CPU form ("failed to apply fusion + hoisting
    # patterns": the scatter producing src is not fusable into the contraction's tiles), and on the GPU
    # form too with unique_indices(false) (the contraction is then the root and the scatter, a consumer,
    # is not fused); with unique_indices(true) the scatter is the root and the rest is fused into its
    # tiles (one TileAndFuse dispatch). On the CPU the GPU form measured 41.7-47.6 ms against 35.4-39.8
    # (HALF, 1024 rows, K=N=256, 8 experts; benchmarks/moe_scatter_forms_cpu.py (retired; in git history at commit 9e99c4b), 2 runs of 2 passes):
    # kept apart.
    rows_scattered = at.mode == MOE_MODE_SCATTER and not ctx.policy.is_cpu
    in_order = at.mode == MOE_MODE_NONE or rows_scattered
    # NOTE: the zeroed output is made outside the region (IREE fills it without a dispatch); made inside,
    # every tile of the scatter wrote a whole zeroed output of its own (the result: zeros but for one tile)
    zeroed = em.filled((rows, n), out_elem, 0.0) if rows_scattered else None

    def region() -> Value:
        group = row_groups(em, offsets, rows)
        # per output row: what its group (and, GATHER/SCATTER on the CPU, its token row) is read from
        # NOTE: GATHER and SCATTER read the token through tensor.extract; a filled [K] operand gives the
        # contraction its k range (linalg derives each loop's size from an operand indexed by it)
        k_range = (Value(em.filled((k,), "i8", 0), (k,), "i8"), _map(3, "d2"))
        src = None
        if in_order:
            ins = [(group, _map(3, "d0")), (token, _map(3, "d0, d2"))]
        elif at.mode == MOE_MODE_SCATTER:
            src = _scattered_sources(em, group, index, ks, at.top_k)
            ins = [(src, _map(3, "d0")), k_range]
        else:
            ins = [(group, _map(3, "d0")), (index, _map(3, "d0")), k_range]

        def body(a):
            nn, kk = em.op("linalg.index 1 : index"), em.op("linalg.index 2 : index")
            if in_order:
                grp, t = a[0], a[1]
            elif at.mode == MOE_MODE_SCATTER:
                s = _clamp_index(em, a[0], "i32", m - 1)
                grp = em.op(f"tensor.extract {group.ssa}[{s}] : {group.type}")
                t = em.op(f"tensor.extract {token.ssa}[{s}, {kk}] : {t_t}")
            else:
                grp = a[0]
                s = _clamp_index(em, a[1], index.elem, m - 1)
                t = em.op(f"tensor.extract {token.ssa}[{s}, {kk}] : {t_t}")
            zero, experts = em.const(0, "i32"), em.const(e, "i32")
            ex = em.op(f"arith.remsi {em.op(f'arith.maxsi {grp}, {zero} : i32')}, {experts} : i32")
            ei = em.op(f"arith.index_cast {ex} : i32 to index")
            w = em.op(f"tensor.extract {weight.ssa}[{ei}, {kk}, {nn}] : {w_t}")
            prod = em.op(f"arith.mulf {em.cast(t, token.elem, acc)}, {em.cast(w, weight.elem, acc)} : {acc}")
            return em.op(f"arith.addf {a[-1]}, {prod} : {acc}")

        # NOTE: -0.0 (the same sums) keeps the accumulator's fill apart from the zeroed output when both are
        # f32: with 0.0 the two were merged and the module failed to compile ("write affecting operations
        # on global resources are restricted to workgroup distributed contexts", llvm-cpu)
        summed = em.generic(ins, (rows, n), acc, ["parallel", "parallel", "reduction"], _map(3, "d0, d1"), body,
                            init=em.filled((rows, n), acc, -0.0 if rows_scattered else 0.0))

        # rows no group holds (and GATHER rows reading no token row, SCATTER slots no row writes): zero
        fin = [(summed, _map(2, "d0, d1")), ((group if src is None else src), _map(2, "d0"))]
        if at.mode == MOE_MODE_GATHER:
            fin.append((index, _map(2, "d0")))

        def finish(a):
            ok = em.op(f"arith.cmpi sge, {a[1]}, {em.const(0, 'i32')} : i32")
            if at.mode == MOE_MODE_GATHER:
                i, t = a[2], index.elem
                lo, hi = em.const(0, t), em.const(m, t)
                inside = em.op(f"arith.andi {em.op(f'arith.cmpi sge, {i}, {lo} : {t}')}, "
                               f"{em.op(f'arith.cmpi slt, {i}, {hi} : {t}')} : i1")
                ok = em.op(f"arith.andi {ok}, {inside} : i1")
            v = em.op(f"arith.select {ok}, {a[0]}, {em.const(0.0, acc)} : {acc}")
            return em.cast(v, acc, out_elem)

        out = em.generic(fin, (rows, n), out_elem, ["parallel", "parallel"], _map(2, "d0, d1"), finish)
        if rows_scattered:
            # NOTE: unique_indices(true) is the routing contract (every row its own slot); rows breaking it
            # write one of their values (no fault)
            out = em.scatter(out, _slots(em, index, ks, at.top_k, rows), zeroed, True, lambda new, old: new)
        return out

    res = em.dispatch_region(region)
    ctx.define(at.output_uid, em.reshape(res, (1, rows, n)))


@register_lowering(OpKind.MOE_GROUPED_MATMUL_BWD)
def lower_moe_grouped_matmul_bwd(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    _checked(ctx, node, lambda d, s: check_moe_backward(at, d))
    em = ctx.em
    dout, token = _rows(ctx, node, "doutput"), _rows(ctx, node, "token")
    offsets = _index_vector(ctx, node, "first_token_offset")
    acc = _acc(ctx, node)
    m, k = token.shape
    n = dout.shape[1]
    g = offsets.shape[0]

    def region() -> Value:
        # group g's rows are [offsets[g], offsets[g + 1]) (the last: to the end): with non-decreasing
        # offsets, the rows whose group (row_groups) is g; compared in the body, no row -> group map
        def upper(a):
            i = em.op("linalg.index 0 : index")
            one, top = em.const(1, "index"), em.const(g - 1, "index")
            nxt = em.op(f"arith.minui {em.op(f'arith.addi {i}, {one} : index')}, {top} : index")
            v = _i64(em, em.op(f"tensor.extract {offsets.ssa}[{nxt}] : {offsets.type}"), offsets.elem)
            last = em.op(f"arith.cmpi eq, {i}, {em.const(g - 1, 'index')} : index")
            return em.op(f"arith.select {last}, {em.const(m, 'i64')}, {v} : i64")

        hi = em.generic([], (g,), "i64", ["parallel"], _map(1, "d0"), upper)
        dw = em.generic([(offsets, _map(4, "d0")), (hi, _map(4, "d0")), (token, _map(4, "d3, d1")),
                         (dout, _map(4, "d3, d2"))], (g, k, n),
                        acc, ["parallel", "parallel", "parallel", "reduction"], _map(4, "d0, d1, d2"), body,
                        init=em.filled((g, k, n), acc, 0.0))
        return em.convert(dw, out_elem)      # rounded once to the output type inside the region

    def body(a):
        lo, up, t, d, s = a
        r = em.op(f"arith.index_cast {em.op('linalg.index 3 : index')} : index to i64")
        hit = em.op(f"arith.andi {em.op(f'arith.cmpi sle, {_i64(em, lo, offsets.elem)}, {r} : i64')}, "
                    f"{em.op(f'arith.cmpi slt, {r}, {up} : i64')} : i1")
        prod = em.op(f"arith.mulf {em.cast(t, token.elem, acc)}, {em.cast(d, dout.elem, acc)} : {acc}")
        zero = em.const(0.0, acc)
        return em.op(f"arith.addf {s}, {em.op(f'arith.select {hit}, {prod}, {zero} : {acc}')} : {acc}")

    out_elem = ctx.out_elem(at.dweight_uid)
    ctx.define(at.dweight_uid, em.dispatch_region(region))
