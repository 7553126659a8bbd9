"""Scaled dot-product attention -> ``iree_linalg_ext.attention``, or a chain of ``linalg.generic`` ops.

``o = softmax(q k^T * scale + mask) v`` over logical shapes q ``[B, Hq, Sq, D]``,
k ``[B, Hk, Skv, D]``, v ``[B, Hv, Skv, Dv]``, o ``[B, Hq, Sq, Dv]``.

Fused path (:func:`lower_fused`): one ``iree_linalg_ext.attention`` op, which IREE
lowers to a flash-attention style kernel (online softmax over key tiles; the
``[.., Sq, Skv]`` scores are never written out). What that op computes in IREE 3.13:
``q * (scale * log2 e)`` in q's element type, ``q k^T`` accumulated in f32, the mask
(``i1``: true = keep; float: converted to f32, times ``log2 e``, added), a base-2 online
softmax with f32 running max / sum / accumulator, ``p`` rounded to v's element type for
the ``p v`` product (f32 accumulation), and ``acc / sum`` rounded once to the result's
element type. Its running max starts at ``-FLT_MAX``, so a query whose keys are all
masked comes out NaN (``0 * (1 / 0)``); with a user mask the fused path therefore adds a
fix-up that ORs the mask over the keys and selects 0 for such queries (our semantics and
PyTorch's). Causal masking is an ``i1 [Sq, Skv]`` mask built in-graph from
``linalg.index`` (combined with the user mask when there is one); top-left aligned
causal masking keeps key 0 for every query, so it never empties a row by itself.
Grouped-query attention splits q's head axis into ``[Hk, G]`` (``tensor.expand_shape``);
k and v are indexed by ``Hk`` only, G is one more "query" axis of the op. When v's head count
differs from k's (``Hv != Hk``, both dividing Hq), both are first repeated to ``lcm(Hk, Hv)``
heads (:func:`common_kv_heads`). Compared with the
composition, f16/bf16 results move by about an ulp of the io type (the two roundings above).

NOTE: measured with IREE 3.13: on an H200 (cuda:sm_80 plans) causal f16 [4, 16, 2048, 128]
takes 3.5 ms fused (2 dispatches) against 13.7 ms composed (4); on llvm-cpu the op's codegen
is far slower than the composition (about 0.47 s against 0.016 s for [1, 8, 512, 64] f16 causal
on a 2-core x86 host). The lowering does not know the target, so both get the fused path.

Composition (:func:`lower_composition`, the fallback):

1. ``s = q k^T`` (contraction over D),
2. ``l = s * scale`` (``attn_scale_value``, a constant ``scale_tensor_uid``, or one read from a
   scale tensor bound at execute) then the mask (boolean: keep where true; float: added) and
   the causal mask (key ``j`` kept for query ``i`` iff ``j <= i``, top-left aligned),
3. ``m = max_j l`` (numerically stable softmax), ``e = exp(l - m)``, ``z = sum_j e``,
4. ``acc = e v`` (contraction over Skv), ``o = acc / z``.

Statistics (``generate_stats``, ``stats_uid``): always the composition, which has ``m`` and ``z``
at hand: ``stats = m + log z`` (``m`` read as 0 for a fully masked row, whose stats is then
``log 0 = -inf``), ``[B, Hq, Sq, 1]`` in the compute type, rounded once to stats' type. The fused
op gives no statistics. sdpa_backward (lowering/ops/sdpa_backward.py) reuses steps 1-2
(:func:`masked_logits`) and the row layout (:class:`_Rows`).

Everything runs in the compute type (f32 unless set) and is rounded once to
o's type. Grouped-query attention (``Hk < Hq``, ``Hq % Hk == 0``) splits the
query head axis into ``[Hk, G]`` with ``tensor.expand_shape`` so every
indexing map stays a projected permutation: query head ``h`` reads kv head
``h // G``.

:func:`fused_path_blocker` says which graphs take which path.
"""
from __future__ import annotations

import math

from lowering._context import LowerContext, is_nan
from lowering._emit import FLOAT_TYPES, Emitter, Sym, Value, is_static, split_axis, tensor_type
from lowering._registry import register_lowering
from graph_ir.desc import ABSENT, GraphError, NodeDesc, OpKind
from graph_ir.ops.sdpa import check_scale_dims, check_scale_value, mask_broadcasts, sdpa_shape
from lowering.ops.matmul import needs_relayout_barrier, propagation_barrier

_INF = math.inf






def _amap(rank: int, exprs) -> str:
    dims = ", ".join(f"d{i}" for i in range(rank))
    return f"affine_map<({dims}) -> ({', '.join(exprs)})>"


def _split_heads(em: Emitter, v: Value, axis: int, hk: int, g: int) -> Value:
    """``tensor.expand_shape`` of head axis ``axis`` (size ``hk * g``) into ``[hk, g]``."""
    return split_axis(em, v, axis, hk, g)


def _repeat_heads(em: Emitter, x: Value, r: int) -> Value:
    """``x [B, H, S, E]`` with each head repeated ``r`` times: ``[B, H * r, S, E]``, head ``h`` of the
    result is head ``h // r`` of ``x`` (a broadcast to ``[B, H, r, S, E]``, then a collapse)."""
    if r == 1:
        return x
    b, h, s, e = x.shape
    wide = em.generic([(x, _amap(5, ["d0", "d1", "d3", "d4"]))], (b, h, r, s, e), x.elem, ["parallel"] * 5,
                      _ident(5), lambda a: a[0])
    return _merge_heads(em, wide, 1)


def common_kv_heads(em: Emitter, k: Value, v: Value) -> tuple[Value, Value]:
    """k and v on one head count when theirs differ (cuDNN allows ``Hk != Hv``, both dividing Hq):
    each repeated to ``lcm(Hk, Hv)`` heads, which divides Hq, so the grouped-query path applies."""
    hk, hv = k.shape[1], v.shape[1]
    if hk == hv:
        return k, v
    hc = math.lcm(hk, hv)
    return _repeat_heads(em, k, hc // hk), _repeat_heads(em, v, hc // hv)


def sum_head_groups(em: Emitter, x: Value, h: int) -> Value:
    """The inverse of :func:`_repeat_heads` for gradients: ``x [B, H', S, E]`` summed over each run
    of ``H' / h`` consecutive heads, ``[B, h, S, E]``."""
    r = x.shape[1] // h
    if r == 1:
        return x
    b, _, s, e = x.shape
    split = _split_heads(em, x, 1, h, r)
    return em.generic([(split, _ident(5))], (b, h, s, e), x.elem,
                      ["parallel", "parallel", "reduction", "parallel", "parallel"],
                      _amap(5, ["d0", "d1", "d3", "d4"]),
                      lambda a: em.op(f"arith.addf {a[1]}, {a[0]} : {x.elem}"),
                      init=em.filled((b, h, s, e), x.elem, 0.0))


def _merge_heads(em: Emitter, v: Value, axis: int) -> Value:
    """Inverse of :func:`_split_heads`: collapses axes ``axis, axis + 1``."""
    shape = v.shape[:axis] + (v.shape[axis] * v.shape[axis + 1],) + v.shape[axis + 2:]
    groups = [[i] for i in range(axis)] + [[axis, axis + 1]] + [[i] for i in range(axis + 2, len(v.shape))]
    reassoc = "[" + ", ".join("[" + ", ".join(map(str, grp)) + "]" for grp in groups) + "]"
    name = em.op(f"tensor.collapse_shape {v.ssa} {reassoc} : {v.type} into {tensor_type(shape, v.elem)}", "r")
    return Value(name, shape, v.elem)


# The largest q/k head dim the fused op is used for on CUDA targets (lower_sdpa's NOTE).
_FUSED_MAX_D_CUDA = 256

# Element types the fused op takes for q, k and v (one type for all three).
_FUSED_QKV = ("f16", "bf16", "f32")




def fused_path_blocker(q_elem: str, k_elem: str, v_elem: str, mask_elem: str | None, compute: str) -> str | None:
    """Why sdpa cannot take the fused ``iree_linalg_ext.attention`` path, or None when it can.

    The fused op computes in f32 (see the module docstring), so the compute type must be f32;
    q, k and v must share one of f16, bf16, f32. A float user mask must be f16: the op scales
    the mask by ``log2 e`` in f32, and an f32/bf16/f64 mask value below ``-FLT_MAX / log2 e``
    (``torch.finfo(torch.float32).min``, a common "masked" filler, is one) overflows to
    -inf there, so a query whose keys all carry such values would get NaN/0 instead of the
    softmax of equal logits. f16's range cannot overflow; boolean masks have no such issue.

    Example:
        >>> fused_path_blocker("f16", "f16", "f16", "i1", "f32") is None
        True
        >>> fused_path_blocker("f16", "f16", "f16", None, "f16")
        'compute type f16 (the fused op accumulates in f32)'
    """
    if compute != "f32":
        return f"compute type {compute} (the fused op accumulates in f32)"
    if not (q_elem == k_elem == v_elem) or q_elem not in _FUSED_QKV:
        return f"q/k/v element types {q_elem}/{k_elem}/{v_elem} (the fused op needs one of {'/'.join(_FUSED_QKV)})"
    if mask_elem is not None and mask_elem not in ("i1", "f16"):
        return (f"float mask of type {mask_elem} (values below -FLT_MAX / log2(e) would overflow to -inf in the "
                f"fused op's base-2 softmax; only boolean and f16 masks take the fused path)")
    return None






def sdpa_scale(ctx: LowerContext, node: NodeDesc, head_dim: int) -> float | Value:
    """The score scale: ``attn_scale_value``, a constant ``scale_tensor_uid``'s value, or, for a
    scale tensor bound at execute, its one-element value (a module argument, read on the device)."""
    at = node.attrs
    if at.scale_uid == ABSENT:
        return 1.0 / math.sqrt(head_dim) if is_nan(at.attn_scale) else float(at.attn_scale)
    try:
        if not is_nan(at.attn_scale):
            raise GraphError(f"both attn_scale_value ({at.attn_scale}) and scale_tensor_uid ({at.scale_uid}) "
                                "are set; give the scale one way")
        t = ctx.tensor(at.scale_uid)
        check_scale_dims(tuple(t.dims))
        if t.is_scalar:
            check_scale_value(float(t.scalar_value))
            return float(t.scalar_value)
        v = ctx.value(at.scale_uid)
        if v.elem not in FLOAT_TYPES:
            raise GraphError(f"field 'scale_tensor_uid': tensor '{t.name}' has element type {v.elem}; the "
                                "scale must be a float", "unsupported")
        return ctx.em.reshape(v, ())
    except GraphError as e:
        raise GraphError(f"sdpa '{node.name}': {e}", e.kind) from None


def _scale_scalar(em: Emitter, scale: float | Value, elem: str) -> str:
    """The scale as an SSA scalar of type ``elem`` (a constant, or read from a rank-0 tensor)."""
    if isinstance(scale, Value):
        return em.cast(em.op(f"tensor.extract {scale.ssa}[] : {scale.type}", "scale"), scale.elem, elem)
    return em.const(scale, elem)


def user_mask(ctx: LowerContext, node: NodeDesc, scores: tuple) -> Value | None:
    """The node's ``mask_uid`` value (None without one), checked against the scores' dims."""
    at = node.attrs
    if at.mask_uid == ABSENT:
        return None
    what = node.name
    kind = "sdpa" if node.attrs.KIND == OpKind.SDPA else "sdpa_backward"
    mask = ctx.value(at.mask_uid)
    if mask.elem not in FLOAT_TYPES and mask.elem != "i1":
        raise GraphError(f"{kind} '{what}': mask element type {mask.elem} is not supported; use a "
                         f"BOOLEAN (true = keep) or a float (additive) mask", "unsupported")
    if not mask_broadcasts(mask.shape, scores):
        raise GraphError(f"{kind} '{what}': field 'mask_uid' dims {list(mask.shape)} do not broadcast "
                         f"to the scores [{', '.join(map(str, scores))}]")
    return mask


@register_lowering(OpKind.SDPA)
def lower_sdpa(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    q, k, v = ctx.value(at.q_uid), ctx.value(at.k_uid), ctx.value(at.v_uid)
    try:
        sdpa_shape(q.shape, k.shape, v.shape)
    except GraphError as e:
        raise GraphError(f"sdpa '{node.name}': {e}") from None
    ct = ctx.compute_elem(node)
    if ct not in FLOAT_TYPES:
        ct = "f32"  # NOTE: softmax needs a float type; an integer compute type falls back to f32
    b, hq, sq, d = q.shape
    skv = k.shape[2]
    k, v = common_kv_heads(ctx.em, k, v)
    scale = sdpa_scale(ctx, node, d)
    mask = user_mask(ctx, node, (b, hq, sq, skv))
    blocker = fused_path_blocker(q.elem, k.elem, v.elem, mask and mask.elem, ct)
    if at.stats_uid != ABSENT:
        # NOTE: the fused op returns o only; the composition's row max and row sum give the stats.
        o, stats = lower_composition(ctx.em, q, k, v, mask, scale, at.is_causal, ct, with_stats=True)
        ctx.define(at.o_uid, o)
        ctx.define(at.stats_uid, stats)
        return
    if blocker is None and not ctx.policy.sdpa_fused:
        # NOTE: the policy's default (lowering/policy.py): composed on CPUs, where IREE 3.13's code for
        # the fused op walks one query and two keys at a time ([1,8,512,64] f16 causal: 16 vs 470 ms);
        # fused on GPUs (H200: 13.7 -> 3.5 ms at [4,16,2048,128]). The SDPA_FORM knob chooses.
        blocker = "lowering policy (sdpa_fused=False)"
    if blocker is None and d > _FUSED_MAX_D_CUDA and str(ctx.policy.target or "").startswith("cuda"):
        # NOTE: measured on an H200 (IREE 3.13, cuda:sm_80 PTX; benchmarks/gpu_sdpa_fused_probe.py (retired; in git history at commit 9e99c4b)): the
        # fused op gave wrong o (max error about 5 on outputs of size about 4) for q/k head dims 264 and
        # 520, and was right for 32 to 256 (and for v head dims up to 520 with D = 64); the composition
        # is right there. Not measured on ROCm.
        blocker = f"head dim D={d} > {_FUSED_MAX_D_CUDA} on CUDA"
    if blocker is None:
        if needs_relayout_barrier(ctx, at.v_uid):
            # NOTE: IREE transposes the attention op's V and moves that transpose into V's producer; a
            # CUDA f16/bf16 matmul producer then becomes a contraction IREE 3.13 miscompiles
            # (lowering/ops/matmul.py, docs/known_issues.md). The barrier keeps V as it is made.
            v = propagation_barrier(ctx.em, v)
        o = lower_fused(ctx.em, q, k, v, mask, scale, at.is_causal, _fused_out_elem(ctx.out_elem(at.o_uid)))
    else:
        o = lower_composition(ctx.em, q, k, v, mask, scale, at.is_causal, ct)
    ctx.define(at.o_uid, o)


def _fused_out_elem(o_elem: str) -> str:
    # NOTE: the fused op divides by the row sum in f32 and rounds once to its result type; any
    # other declared type of o gets f32 here and one conversion in LowerContext.define.
    return o_elem if o_elem in _FUSED_QKV else "f32"


def _ident(rank: int) -> str:
    return _amap(rank, [f"d{i}" for i in range(rank)])


def _local_map(axes: list[str], sub: list[str]) -> str:
    """Map from a generic whose loops are ``axes`` (attention domain names) to operand axes ``sub``."""
    return _amap(len(axes), [f"d{axes.index(a)}" for a in sub])


def lower_fused(em: Emitter, q: Value, k: Value, v: Value, mask: Value | None, scale: float | Value, causal: bool,
                out_elem: str) -> Value:
    """sdpa as one ``iree_linalg_ext.attention`` op (plus mask preparation and the fully-masked fix-up).

    Domain of the op: ``[b, heads..., m, k1, k2, n]`` with heads ``[Hq]`` or ``[Hk, G]``; q maps to
    ``(b, heads, m, k1)``, k to ``(b, kv head, k2, k1)``, v to ``(b, kv head, k2, n)``, o to
    ``(b, heads, m, n)`` and the mask to the axes it does not broadcast over.
    """
    b, hq, sq, d = q.shape
    hk, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    grp = hq // hk
    heads = (hq,) if grp == 1 else (hk, grp)
    if grp > 1:
        q = _split_heads(em, q, 1, hk, grp)
    nh = len(heads)
    dom = [f"d{i}" for i in range(nh + 5)]
    bd, hds, md, k1d, k2d, nd = dom[0], dom[1:1 + nh], dom[1 + nh], dom[2 + nh], dom[3 + nh], dom[4 + nh]
    size = dict(zip(dom, (b,) + heads + (sq, d, skv, dv)))
    o_axes = [bd, *hds, md, nd]

    # The mask operand: the user mask on the axes it does not broadcast over, and/or the causal mask.
    op_mask = None  # (Value, its axes as domain names)
    if mask is not None:
        op_mask = _fused_user_mask(em, mask, hk, grp, {0: [bd], 1: hds, 2: [md], 3: [k2d]})
    if causal:
        op_mask = _with_causal(em, op_mask, size, md, k2d)
    if op_mask is None and not all(is_static(x.shape) for x in (q, k, v)):
        # NOTE: measured on an H200 (cuda:sm_80, IREE 3.13): the op with dynamic dims and no mask operand
        # gives NaN at every shape; with an i1 [Sq, Skv] mask (causal, or this one that keeps every key:
        # j < Skv, read from the key length so it does not fold away) it is right.
        op_mask = _keep_all(em, size, md, k2d)

    init = em.empty(tuple(size[a] for a in o_axes), out_elem)
    ins = [(q, [bd, *hds, md, k1d]), (k, [bd, hds[0], k2d, k1d]), (v, [bd, hds[0], k2d, nd])]
    maps = [_amap(len(dom), ax) for _, ax in ins] + [_amap(len(dom), [])]
    operands = [x.ssa for x, _ in ins] + [_scale_scalar(em, scale, "f32")]
    types = [x.type for x, _ in ins] + ["f32"]
    if op_mask is not None:
        maps.append(_amap(len(dom), op_mask[1]))
        operands.append(op_mask[0].ssa)
        types.append(op_mask[0].type)
    maps.append(_amap(len(dom), o_axes))
    o = Value(em.fresh("att"), tuple(size[a] for a in o_axes), out_elem)
    score = em.fresh("s")
    em.emit(f"{o.ssa} = iree_linalg_ext.attention <indexing_maps = [{', '.join(maps)}]> "
            f"ins({', '.join(operands)} : {', '.join(types)}) outs({init} : {o.type}) {{")
    em.emit(f"^bb0({score}: f32):")
    em.emit(f"  iree_linalg_ext.yield {score} : f32")
    em.emit(f"}} -> {o.type}")

    if mask is not None:
        o = _zero_fully_masked(em, o, o_axes, op_mask, k2d)
    if grp > 1:
        o = _merge_heads(em, o, 1)
    return o


def _fused_user_mask(em: Emitter, mask: Value, hk: int, grp: int, axis_dims: dict):
    """The user mask reshaped to the score axes it does not broadcast over (heads split for GQA).

    ``axis_dims`` maps each score axis (0 batch, 1 query head, 2 query, 3 key) to its attention-domain
    dims. Returns ``(value, axes)``; ``axes`` names the attention-domain dim of each of its axes.
    """
    full = (1,) * (4 - len(mask.shape)) + tuple(mask.shape)
    kept = [a for a in range(4) if full[a] != 1]  # NOTE: every other mask dim equals the score dim
    m = em.reshape(mask, tuple(full[a] for a in kept))
    axes = []
    for a in kept:
        if a == 1 and grp > 1:
            m = _split_heads(em, m, len(axes), hk, grp)
        axes += axis_dims[a]
    return m, axes


def _with_causal(em: Emitter, op_mask, size: dict, md: str, k2d: str):
    """Combines the causal mask (key ``j`` kept for query ``i`` iff ``j <= i``) into the mask operand.

    Without a user mask this is an ``i1 [Sq, Skv]`` tensor; with one, the user mask's axes plus
    ``[Sq, Skv]``, keeping its type (boolean: AND; f16: -inf where the key is in the future).
    """
    axes = ([a for a in op_mask[1] if a not in (md, k2d)] if op_mask else []) + [md, k2d]
    elem = op_mask[0].elem if op_mask else "i1"
    inputs = [(op_mask[0], _local_map(axes, op_mask[1]))] if op_mask else []

    def body(a):
        i = em.op(f"linalg.index {axes.index(md)} : index")
        j = em.op(f"linalg.index {axes.index(k2d)} : index")
        keep = em.op(f"arith.cmpi ule, {j}, {i} : index")
        if not op_mask:
            return keep
        if elem == "i1":
            return em.op(f"arith.andi {keep}, {a[0]} : i1")
        return em.op(f"arith.select {keep}, {a[0]}, {em.const(-_INF, elem)} : {elem}")

    out = em.generic(inputs, tuple(size[a] for a in axes), elem, ["parallel"] * len(axes), _ident(len(axes)), body)
    return out, axes


def _keep_all(em: Emitter, size: dict, md: str, k2d: str):
    """An ``i1 [Sq, Skv]`` mask operand that keeps every key (``j < Skv``)."""
    skv = size[k2d]
    bound = str(skv) if isinstance(skv, Sym) else em.op(f"arith.constant {skv} : index", "c")

    def body(a):
        j = em.op("linalg.index 1 : index")
        return em.op(f"arith.cmpi ult, {j}, {bound} : index")

    shape = (size[md], skv)
    return em.generic([], shape, "i1", ["parallel"] * 2, _ident(2), body), [md, k2d]


def _zero_fully_masked(em: Emitter, o: Value, o_axes: list[str], op_mask, k2d: str) -> Value:
    """``o`` with 0 for every query whose keys the mask operand drops all of (the fused op gives NaN).

    A key is kept where an ``i1`` mask is true or a float mask is not -inf; ``keep`` ORs that over
    the keys, on the mask's other axes.
    """
    m, axes = op_mask
    row_axes = [a for a in axes if a != k2d]
    row_shape = tuple(m.shape[axes.index(a)] for a in row_axes)

    def kept(a):
        x = a[0] if m.elem == "i1" else em.op(f"arith.cmpf une, {a[0]}, {em.const(-_INF, m.elem)} : {m.elem}")
        return em.op(f"arith.ori {x}, {a[1]} : i1")

    its = ["reduction" if a == k2d else "parallel" for a in axes]
    keep = em.generic([(m, _ident(len(axes)))], row_shape, "i1", its, _local_map(axes, row_axes), kept,
                      init=em.filled(row_shape, "i1", 0))

    def select(a):
        return em.op(f"arith.select {a[1]}, {a[0]}, {em.const(0.0, o.elem)} : {o.elem}")

    full = _ident(len(o_axes))
    return em.generic([(o, full), (keep, _local_map(o_axes, row_axes))], o.shape, o.elem, ["parallel"] * len(o_axes),
                      full, select)


def lower_composition(em: Emitter, q: Value, k: Value, v: Value, mask: Value | None, scale: float | Value,
                      causal: bool, ct: str, with_stats: bool = False):
    """sdpa as a chain of ``linalg.generic`` ops in compute type ``ct`` (the fallback; steps in the module doc).

    ``scale`` is a number, or a rank-0 tensor (a scale bound at execute) read in the logits pass.
    Returns ``o``; with ``with_stats``, ``(o, stats)``: stats ``[B, Hq, Sq, 1]`` in ``ct`` is
    ``m + log z`` (the row max plus the log of the shifted row sum, i.e. the log-sum-exp of the
    logits), emitted after o's ops; a fully masked row has ``m = -inf`` (shift 0) and ``z = 0``,
    so its stats is ``log 0 = -inf``.
    """
    lay = _Rows(em, q, k, ct)
    q = lay.q
    rows, nr, dn, row_d, kv_head = lay.rows, lay.nr, lay.dn, lay.row_d, lay.kv_head
    hk, dv, grp = lay.hk, v.shape[3], lay.grp
    mm = lay.mul

    # 1. and 2.: s = q k^T, then the logits (scale, user mask, causal mask; masked -> -inf).
    lg = masked_logits(em, lay, k, mask, scale, causal)
    s_shape = lg.shape

    # 3. numerically stable softmax pieces: row max, exp(l - max), row sum.
    full, row = _amap(nr + 1, dn[:nr + 1]), _amap(nr + 1, row_d)
    red = ["parallel"] * nr + ["reduction"]
    m = em.generic([(lg, full)], rows, ct, red, row,
                   lambda a: em.op(f"arith.maximumf {a[0]}, {a[1]} : {ct}"),
                   init=em.filled(rows, ct, -_INF))

    def exp_shifted(a):
        # NOTE: a row whose keys are all masked has max -inf; shifting by 0 there makes every
        # exp(-inf) = 0 instead of exp(-inf - -inf) = NaN, so the row's output comes out 0
        # (PyTorch's behaviour) rather than NaN.
        ninf = em.op(f"arith.cmpf oeq, {a[1]}, {em.const(-_INF, ct)} : {ct}")
        shift = em.op(f"arith.select {ninf}, {em.const(0.0, ct)}, {a[1]} : {ct}")
        return em.op(f"math.exp {em.op(f'arith.subf {a[0]}, {shift} : {ct}')} : {ct}")

    e = em.generic([(lg, full), (m, row)], s_shape, ct, ["parallel"] * (nr + 1), full, exp_shifted)
    z = em.generic([(e, full)], rows, ct, red, row,
                   lambda a: em.op(f"arith.addf {a[0]}, {a[1]} : {ct}"), init=em.filled(rows, ct, 0.0))

    # 4. acc[rows, e] = sum_j e[rows, j] * v[b, hk, j, e]; o = acc / z.
    acc_shape = rows + (dv,)
    e_ax, j_ax = dn[nr], dn[nr + 1]
    acc = em.generic(
        [(e, _amap(nr + 2, row_d + [j_ax])), (v, _amap(nr + 2, kv_head + [j_ax, e_ax]))],
        acc_shape, ct, ["parallel"] * (nr + 1) + ["reduction"], _amap(nr + 2, row_d + [e_ax]),
        lambda a: em.op(f"arith.addf {a[2]}, {mm(a[0], em.cast(a[1], v.elem, ct))} : {ct}"),
        init=em.filled(acc_shape, ct, 0.0))

    def normalize(a):
        # NOTE: z >= 1 whenever a key is kept (the max term is exp(0) = 1) and z = 0 (with
        # acc = 0) when none is; clamping at 1 gives the fully masked row 0 without a branch.
        one = em.const(1.0, ct)
        return em.op(f"arith.divf {a[0]}, {em.op(f'arith.maximumf {a[1]}, {one} : {ct}')} : {ct}")

    o = em.generic([(acc, full), (z, row)], acc_shape, ct, ["parallel"] * (nr + 1), full, normalize)
    if grp > 1:
        o = _merge_heads(em, o, 1)
    if not with_stats:
        return o

    def lse(a):
        ninf = em.op(f"arith.cmpf oeq, {a[0]}, {em.const(-_INF, ct)} : {ct}")
        shift = em.op(f"arith.select {ninf}, {em.const(0.0, ct)}, {a[0]} : {ct}")
        return em.op(f"arith.addf {shift}, {em.op(f'math.log {a[1]} : {ct}')} : {ct}")

    ident = _ident(nr)
    st = em.generic([(m, ident), (z, ident)], rows, ct, ["parallel"] * nr, ident, lse)
    return o, lay.stats_out(st)


class _Rows:
    """The iteration layout of sdpa's composition and of its backward: one softmax row per
    ``(batch, heads..., query)``, heads ``[Hq]`` or ``[Hk, G]`` for grouped-query attention (q
    split with ``tensor.expand_shape``, so every indexing map stays a projected permutation and
    query head ``h`` reads kv head ``h // G``)."""

    def __init__(self, em: Emitter, q: Value, k: Value, ct: str):
        self.em, self.ct = em, ct
        b, hq, sq, d = q.shape
        self.hk, self.skv = k.shape[1], k.shape[2]
        self.grp = hq // self.hk
        self.heads = (hq,) if self.grp == 1 else (self.hk, self.grp)
        self.q = self.split(q)
        self.rows = (b,) + self.heads + (sq,)
        self.nr = len(self.rows)
        self.dn = [f"d{i}" for i in range(self.nr + 2)]   # rows..., then two more axes
        self.row_d = self.dn[:self.nr]
        self.kv_head = [self.dn[0], self.dn[1]]            # kv tensors index batch and the first head axis

    def split(self, x: Value) -> Value:
        """A ``[B, Hq, ...]`` tensor with its head axis split as the rows are."""
        return _split_heads(self.em, x, 1, self.hk, self.grp) if self.grp > 1 else x

    def merge(self, x: Value) -> Value:
        return _merge_heads(self.em, x, 1) if self.grp > 1 else x

    def mul(self, x, y, ct=None):
        ct = ct or self.ct
        return self.em.op(f"arith.mulf {x}, {y} : {ct}")

    def stats_out(self, st: Value) -> Value:
        """Row values ``rows`` -> ``[B, Hq, Sq, 1]``."""
        st = self.merge(st)
        return self.em.reshape(st, st.shape + (1,))

    def stats_in(self, st: Value) -> Value:
        """``[B, Hq, Sq, 1]`` -> row values ``rows`` (in the stats' own element type)."""
        st = self.em.reshape(st, st.shape[:3])
        return self.split(st)


def masked_logits(em: Emitter, lay: _Rows, k: Value, mask: Value | None, scale: float | Value,
                  causal: bool) -> Value:
    """Steps 1 and 2 of the composition: ``s = q k^T`` over ``lay``'s rows, then the logits
    ``[rows..., Skv]`` in ``lay.ct`` (scale, then the mask: boolean keeps where true, float is added;
    causal: key ``j`` kept for query ``i`` iff ``j <= i``; masked -> -inf)."""
    q, ct, nr, dn, row_d, kv_head = lay.q, lay.ct, lay.nr, lay.dn, lay.row_d, lay.kv_head
    hk, grp, skv = lay.hk, lay.grp, lay.skv
    mm = lay.mul

    # 1. s[rows, j] = sum_d q[rows, d] * k[b, hk, j, d]
    s_shape = lay.rows + (skv,)
    j_ax, r_ax = dn[nr], dn[nr + 1]
    s = em.generic(
        [(q, _amap(nr + 2, row_d + [r_ax])), (k, _amap(nr + 2, kv_head + [j_ax, r_ax]))],
        s_shape, ct, ["parallel"] * (nr + 1) + ["reduction"], _amap(nr + 2, row_d + [j_ax]),
        lambda a: em.op(f"arith.addf {a[2]}, {mm(em.cast(a[0], q.elem, ct), em.cast(a[1], k.elem, ct))} : {ct}"),
        init=em.filled(s_shape, ct, 0.0))

    # 2. logits: scale, then the user mask and the causal mask (masked -> -inf).
    inputs = [s]
    if mask is not None:
        if grp > 1 and len(mask.shape) >= 3:
            mask = em.reshape(mask, (1,) * (4 - len(mask.shape)) + mask.shape)
            mask = _split_heads(em, mask, 1, *((hk, grp) if mask.shape[1] == hk * grp else (1, 1)))
        inputs.append(mask)
    if isinstance(scale, Value):
        inputs.append(scale)   # NOTE: rank 0: broadcast to every score

    def logits(a):
        sc = em.cast(a[len(inputs) - 1], scale.elem, ct) if isinstance(scale, Value) else em.const(scale, ct)
        x = mm(a[0], sc)
        if mask is not None and mask.elem == "i1":
            x = em.op(f"arith.select {a[1]}, {x}, {em.const(-_INF, ct)} : {ct}")
        elif mask is not None:
            x = em.op(f"arith.addf {x}, {em.cast(a[1], mask.elem, ct)} : {ct}")
        if causal:
            i = em.op(f"linalg.index {nr - 1} : index")
            j = em.op(f"linalg.index {nr} : index")
            future = em.op(f"arith.cmpi ugt, {j}, {i} : index")
            x = em.op(f"arith.select {future}, {em.const(-_INF, ct)}, {x} : {ct}")
        return x

    return em.elementwise(inputs, s_shape, ct, logits)
