"""Convolutions -> linalg: conv_fprop, conv_dgrad, conv_wgrad.

Semantics are cuDNN's/PyTorch's cross-correlation over logical channels-first
values: x ``[N, C, *S]``, w ``[K, C/G, *R]``, y ``[N, K, *O]`` with ``G`` groups
(``G = C / w.dims[1]``) and, per spatial axis,
``O = (S + pre + post - dilation * (R - 1) - 1) // stride + 1``.

- fprop: x is zero-padded (``tensor.pad``) and cropped (``tensor.extract_slice``)
  to exactly the window extent ``(O - 1) * stride + (R - 1) * dilation + 1``, then
  one named op: ``linalg.conv_{1,2,3}d_nc*_fc*``, ``linalg.conv_2d_ngchw_gfchw``
  for grouped 2-D; grouped 1-D/3-D use an equivalent ``linalg.generic``.
- dgrad: the transposed convolution, written as an ordinary stride-1 one:
  dy is scattered with stride ``stride`` into a zero tensor
  (``tensor.insert_slice`` with strides), placed so that a correlation with the
  spatially flipped, in/out-channel swapped filter (dilation kept) yields dx.
- wgrad: ``dw[k, c, r] = sum dy[n, k, o] * x_pad[n, g*Cg + c, o*stride + r*dilation]`` is a
  forward convolution with batch and channels swapped: x_pad (cropped as for fprop) as
  ``[Cg, (G,) N, *S]`` correlated with dy as the filter ``[(G,) Kg, N, *O]``, stride and dilation
  exchanged, giving ``[Cg, K, *R]``, transposed to ``[K, Cg, *R]``; through ``_conv``, so the same
  named (grouped) ops as fprop. NOTE: a single generic reducing over N and the output positions
  fails GPU codegen at realistic sizes ("failed to pack reduction dimensions for partial reduction").

Products accumulate in the compute type (f32 unless set) and the result is
rounded once to the output's type.

Integer conv_fprop (INT8 / UINT8 operands): products and sums in the compute type, i32 unless set
(an integer compute type must be INT32 or INT64); INT8 operands are sign-extended (the named conv
ops' own cast), UINT8 ones zero-extended in a conversion of their own before the conv (the named ops
sign-extend, and a generic form gets its operands in the accumulator type too). Every fprop form
takes them (channels-first/last named ops, grouped, depthwise, 3-D as 2-D convs, the generic grouped
1-D/3-D form, varying spatial dims). conv_dgrad/conv_wgrad refuse integer operands ("unsupported").
"""
from __future__ import annotations

from typing import Sequence

from lowering._context import LowerContext
from lowering._emit import FLOAT_TYPES, Emitter, Sym, Value, is_static, tensor_type
from graph_ir._fbs.graph_generated import DataType
from lowering._registry import register_lowering
from graph_ir.desc import GraphError, NodeDesc, OpKind
from graph_ir.ops._conv import ConvParams, check_forward, forward_shape

_NAMED = {1: "linalg.conv_1d_ncw_fcw", 2: "linalg.conv_2d_nchw_fchw", 3: "linalg.conv_3d_ncdhw_fcdhw"}
_NAMED_GROUPED = {2: "linalg.conv_2d_ngchw_gfchw"}  # input [N,G,C,H,W], filter [G,F,C,R,S], out [N,G,F,H,W]
# Channels-last forms (CPU targets, see channels_last): input [N, *S, C], filter [*R, C, F].
_NAMED_CL = {1: "linalg.conv_1d_nwc_wcf", 2: "linalg.conv_2d_nhwc_hwcf", 3: "linalg.conv_3d_ndhwc_dhwcf"}
_DEPTHWISE_CL = {1: "linalg.depthwise_conv_1d_nwc_wc", 2: "linalg.depthwise_conv_2d_nhwc_hwc",
                 3: "linalg.depthwise_conv_3d_ndhwc_dhwc"}       # filter [*R, C], out [N, *O, C]
_DEPTHWISE_CL_M = {1: "linalg.depthwise_conv_1d_nwc_wcm", 2: "linalg.depthwise_conv_2d_nhwc_hwcm",
                   3: "linalg.depthwise_conv_3d_ndhwc_dhwcm"}    # filter [*R, C, M], out [N, *O, C, M]


# ---------------------------------------------------------------------------
# Geometry (shared with the frontend's validation)
# ---------------------------------------------------------------------------
















# ---------------------------------------------------------------------------
# Emission helpers
# ---------------------------------------------------------------------------


def _ints(v: Sequence[int]) -> str:
    return ", ".join(str(e) if isinstance(e, Sym) else str(int(e)) for e in v)


def _split(em: Emitter, v: Value, axis: int, parts: tuple[int, int]) -> Value:
    """``tensor.expand_shape`` of axis ``axis`` into the two axes ``parts``."""
    shape = v.shape[:axis] + tuple(parts) + v.shape[axis + 1:]
    groups, j = [], 0
    for i in range(len(v.shape)):
        groups.append([j, j + 1] if i == axis else [j])
        j += len(groups[-1])
    reassoc = "[" + ", ".join("[" + _ints(g) + "]" for g in groups) + "]"
    name = em.op(f"tensor.expand_shape {v.ssa} {reassoc} output_shape [{_ints(shape)}] "
                 f": {v.type} into {tensor_type(shape, v.elem)}", "r")
    return Value(name, shape, v.elem)


def _dim_mul(em: Emitter, a, b):
    """``a * b`` for sizes that may vary (Sym): an int when both are fixed, else a Sym whose index value
    is computed here (later ``tensor.empty``/``expand_shape`` ops read it)."""
    if is_static((a, b)):
        return a * b
    if a == 1 or b == 1:
        return b if a == 1 else a
    x, y = (str(d) if isinstance(d, Sym) else em.op(f"arith.constant {d} : index", "c") for d in (a, b))
    return Sym(f"({getattr(a, 'name', a)} * {getattr(b, 'name', b)})", em.op(f"arith.muli {x}, {y} : index", "dim"))


def _merge(em: Emitter, v: Value, axis: int) -> Value:
    """``tensor.collapse_shape`` of axes ``axis`` and ``axis + 1`` into one."""
    shape = v.shape[:axis] + (_dim_mul(em, v.shape[axis], v.shape[axis + 1]),) + v.shape[axis + 2:]
    groups = [[i] for i in range(axis)] + [[axis, axis + 1]] + [[i] for i in range(axis + 2, len(v.shape))]
    reassoc = "[" + ", ".join("[" + _ints(g) + "]" for g in groups) + "]"
    name = em.op(f"tensor.collapse_shape {v.ssa} {reassoc} : {v.type} into {tensor_type(shape, v.elem)}", "r")
    return Value(name, shape, v.elem)


def _place(em: Emitter, v: Value, low: Sequence[int], step: Sequence[int], size: Sequence[int]) -> Value:
    """Zero tensor of spatial ``size`` holding ``v[..., j]`` at ``low + j * step`` per spatial axis.

    Entries of ``v`` that land outside are dropped (``low`` may be negative). With unit
    steps this is ``tensor.pad`` (after a crop if needed); otherwise ``tensor.insert_slice``
    with strides into a zero fill.
    """
    lead = v.shape[:2]
    first, count = [], []
    for n, lo, st, sz in zip(v.shape[2:], low, step, size):
        j0 = max(0, -(lo // st)) if lo < 0 else 0            # first j with lo + j*st >= 0
        j1 = min(n, (sz - 1 - lo) // st + 1) if sz - 1 - lo >= 0 else 0   # first j past the end
        first.append(j0)
        count.append(j1 - j0)
    out_shape = lead + tuple(size)
    if any(c <= 0 for c in count):
        # NOTE: nothing of v lands inside (e.g. padding larger than the data): an all-zero result.
        return Value(em.filled(out_shape, v.elem, 0.0), out_shape, v.elem)
    if any(first) or tuple(count) != v.shape[2:]:
        shape = lead + tuple(count)
        name = em.op(f"tensor.extract_slice {v.ssa}[0, 0, {_ints(first)}] [{_ints(shape)}] "
                     f"[{_ints([1] * len(shape))}] : {v.type} to {tensor_type(shape, v.elem)}", "crop")
        v = Value(name, shape, v.elem)
    offsets = [lo + j0 * st for lo, j0, st in zip(low, first, step)]
    if all(st == 1 or c == 1 for st, c in zip(step, count)):
        high = [sz - off - c for sz, off, c in zip(size, offsets, count)]
        if not any(offsets) and not any(high):
            return v
        return em.zero_pad(v, [0, 0, *offsets], [0, 0, *high], out_shape)
    zeros = em.filled(out_shape, v.elem, 0.0)
    name = em.op(f"tensor.insert_slice {v.ssa} into {zeros}[0, 0, {_ints(offsets)}] [{_ints(v.shape)}] "
                 f"[1, 1, {_ints(step)}] : {v.type} into {tensor_type(out_shape, v.elem)}", "scatter")
    return Value(name, out_shape, v.elem)


def _extent(out_sp: Sequence[int], kern: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> list[int]:
    """Input extent a window needs per spatial axis: ``(O - 1) * stride + (R - 1) * dilation + 1``."""
    return [(o - 1) * s + (r - 1) * d + 1 for o, r, s, d in zip(out_sp, kern, stride, dilation)]


def _conv_attrs(stride: Sequence[int], dilation: Sequence[int]) -> str:
    """A named conv op's ``{dilations, strides}`` attribute dictionary."""
    rank = len(stride)
    return (f"{{dilations = dense<[{_ints(dilation)}]> : tensor<{rank}xi64>, "
            f"strides = dense<[{_ints(stride)}]> : tensor<{rank}xi64>}}")


def _window(o: str, r: str, stride: int, dilation: int) -> str:
    """Affine expression ``o * stride + r * dilation``."""
    a = o if stride == 1 else f"{o} * {stride}"
    b = r if dilation == 1 else f"{r} * {dilation}"
    return f"{a} + {b}"


def _mac(em: Emitter, ins: Sequence[Value], acc: str):
    """Region body ``out + a * b`` in the accumulator type (``arith.addi``/``muli`` for an integer
    one; integer operands are sign-extended: UINT8 ones reach a conv already in ``acc``)."""
    kind = "f" if acc in FLOAT_TYPES else "i"

    def body(args):
        a = em.cast(args[0], ins[0].elem, acc)
        b = em.cast(args[1], ins[1].elem, acc)
        return em.op(f"arith.add{kind} {args[2]}, {em.op(f'arith.mul{kind} {a}, {b} : {acc}')} : {acc}")
    return body


def _conv(em: Emitter, xp: Value, filt: Value, groups: int, stride: Sequence[int], dilation: Sequence[int],
          out_sp: Sequence[int], acc: str, split_groups: bool = False, gemm: bool = False) -> Value:
    """Correlation of ``xp`` ``[N, C, *window extent]`` (already padded) with ``filt``.

    ``filt`` is ``[F, C, *R]`` when ``groups == 1`` and ``[G, F/G, C/G, *R]`` otherwise.
    ``split_groups``: a grouped correlation as one ungrouped named op per group
    (``LoweringPolicy.conv_split_groups``). ``gemm``: as a gathered matrix times the filter
    (``LoweringPolicy.conv_as_gemm``, :func:`_conv_gemm`; static shapes). Returns ``[N, F, *out_sp]`` in ``acc``.
    """
    if gemm and is_static(xp.shape) and is_static(filt.shape):
        return _conv_gemm(em, xp, filt, groups, stride, dilation, out_sp, acc)
    rank = len(out_sp)
    attrs = _conv_attrs(stride, dilation)
    n = xp.shape[0]
    if groups == 1:
        out_shape = (n, filt.shape[0], *out_sp)
        init = em.filled(out_shape, acc, 0.0)
        t = tensor_type(out_shape, acc)
        name = em.op(f"{_NAMED[rank]} {attrs} ins({xp.ssa}, {filt.ssa} : {xp.type}, {filt.type}) "
                     f"outs({init} : {t}) -> {t}", "conv")
        return Value(name, out_shape, acc)
    if split_groups and is_static(xp.shape):
        return _conv_split(em, xp, filt, groups, stride, dilation, out_sp, acc)
    xg = _split(em, xp, 1, (groups, xp.shape[1] // groups))
    g_out = (n, groups, filt.shape[1], *out_sp)
    init = em.filled(g_out, acc, 0.0)
    if rank in _NAMED_GROUPED:
        t = tensor_type(g_out, acc)
        name = em.op(f"{_NAMED_GROUPED[rank]} {attrs} ins({xg.ssa}, {filt.ssa} : {xg.type}, {filt.type}) "
                     f"outs({init} : {t}) -> {t}", "conv")
        res = Value(name, g_out, acc)
    else:
        # NOTE: no named grouped 1-D/3-D conv in linalg: the same contraction as a generic.
        # loops: n, g, f, o..., c, r...
        d = [f"d{i}" for i in range(3 + 2 * rank + 1)]
        nn, g, f, o, c, r = d[0], d[1], d[2], d[3:3 + rank], d[3 + rank], d[4 + rank:]
        dom = f"({', '.join(d)})"
        xmap = f"affine_map<{dom} -> ({nn}, {g}, {c}, " + ", ".join(
            _window(o[i], r[i], stride[i], dilation[i]) for i in range(rank)) + ")>"
        wmap = f"affine_map<{dom} -> ({g}, {f}, {c}, {', '.join(r)})>"
        omap = f"affine_map<{dom} -> ({nn}, {g}, {f}, {', '.join(o)})>"
        res = em.generic([(xg, xmap), (filt, wmap)], g_out, acc,
                         ["parallel"] * (3 + rank) + ["reduction"] * (1 + rank), omap, _mac(em, [xg, filt], acc),
                         init=init)
    return _merge(em, res, 1)


def _gemm(policy, *vals: Value, kernel: Sequence[int] = ()) -> bool:
    """Whether a correlation of ``vals`` takes :func:`_conv_gemm` under ``policy`` (CUDA): f16/bf16 operands,
    or any float operands of a convolution whose filter ``kernel`` (its spatial dims) is all ones.

    NOTE: f32 1x1 convolutions with a stride on CUDA (issue 49, cuDNN FE v1.23's test_conv_fuzzer on an
    H200): IREE 3.13's conv code gave 93-98% wrong outputs for 2 of the file's 12 such cases (t716: 2-D
    wgrad, 32->40, stride 3x1; t925: 3-D fprop + bias, 256->8, stride 1x1x3); every other f32 case of the
    file was right. Their GEMM form is a strided gather (a copy of the sampled input) and one matmul."""
    if not policy.conv_as_gemm:
        return False
    return all(v.elem in ("f16", "bf16") for v in vals) or (bool(kernel) and all(k == 1 for k in kernel))


def _conv_gemm(em: Emitter, xp: Value, filt: Value, groups: int, stride: Sequence[int], dilation: Sequence[int],
               out_sp: Sequence[int], acc: str) -> Value:
    """``_conv`` as a batched matrix product over the groups: the windows of ``xp`` gathered into
    ``col [G, N*O, Cg*R]`` (one copy), times the filter as ``[G, Cg*R, Fg]``, with the reduction zero-padded
    to a multiple of 16 (:func:`lowering.ops.matmul.pad_reduction`); then ``[N, F, *out_sp]``.

    NOTE: the CUDA f16/bf16 form (``LoweringPolicy.conv_as_gemm``). IREE 3.13's CUDA code for its own
    convolutions (named and generic, any layout) gave wrong numbers for random shapes (H100/H200,
    issue 49; docs/known_issues.md 10): 1x1 and 1-D kernels, grouped ones, wgrad, 3-D, and NaN where the
    reduction is padded; some shapes failed to compile. Its batched matmul, with the same padding rule,
    was right on every random case. The gather costs one copy of the input per filter tap.
    """
    from lowering.ops.matmul import pad_reduction
    rank = len(out_sp)
    n, c = xp.shape[0], xp.shape[1]
    if groups == 1:
        filt = _split(em, filt, 0, (1, filt.shape[0]))               # [1, F, C, *R]
    g, fg, cg, kern = filt.shape[0], filt.shape[1], filt.shape[2], tuple(filt.shape[3:])
    # loops: g, n, o..., c, r...  ->  col[g, n, o..., c, r...] = xp[n, g*Cg + c, o*stride + r*dilation]
    d = [f"d{i}" for i in range(2 + rank + 1 + rank)]
    dg, dn, do, dc, dr = d[0], d[1], d[2:2 + rank], d[2 + rank], d[3 + rank:]
    dom = f"({', '.join(d)})"
    chan = f"{dg} * {cg} + {dc}" if g > 1 else dc
    xmap = f"affine_map<{dom} -> ({dn}, {chan}, " + ", ".join(
        _window(do[i], dr[i], stride[i], dilation[i]) for i in range(rank)) + ")>"
    col_shape = (g, n, *out_sp, cg, *kern)
    ident = f"affine_map<{dom} -> ({', '.join(d)})>"
    col = em.generic([(xp, xmap)], col_shape, xp.elem, ["parallel"] * len(d), ident, lambda a: a[0])
    rows, red = n * _prod(out_sp), cg * _prod(kern)
    col = _collapse(em, col, [[0], list(range(1, 2 + rank)), list(range(2 + rank, 3 + 2 * rank))], (g, rows, red))
    w2 = _collapse(em, filt, [[0], [1], list(range(2, 3 + rank))], (g, fg, red))
    if rows == 1:
        # NOTE: IREE 3.13 fails to compile some CUDA f16 batch_matmuls with M = 1 ("LLVM Translation failed":
        # e.g. 1x16 times 16x19); the transposed product [G, Fg, K] x [G, K, 1] (N = 1) compiles
        lhs, rhs = w2, _split(em, _collapse(em, col, [[0], [1, 2]], (g, red)), 1, (red, 1))
        mm_shape = (g, fg, 1)
    else:
        lhs, rhs = col, em.transpose(w2, [0, 2, 1])                    # [G, N*O, Cg*R] x [G, Cg*R, Fg]
        mm_shape = (g, rows, fg)
    lhs, rhs = pad_reduction(em, lhs, rhs)
    init = em.filled(mm_shape, acc, 0.0)
    t = tensor_type(mm_shape, acc)
    res = em.op(f"linalg.batch_matmul ins({lhs.ssa}, {rhs.ssa} : {lhs.type}, {rhs.type}) outs({init} : {t}) -> {t}", "mm")
    # NOTE: without the barrier IREE fuses the relayout below into the matmul's dispatch: the transposed-output
    # form that is wrong on CUDA (lowering/ops/matmul.py) and, with Fg = 1, fails to compile ("LLVM
    # Translation failed": depthwise and other one-filter-per-group convs; H100, issue 49)
    from lowering.ops.matmul import propagation_barrier
    res = propagation_barrier(em, Value(res, mm_shape, acc))
    if rows == 1:
        res = _split(em, _collapse(em, res, [[0], [1, 2]], (g, fg)), 1, (1, fg))   # [G, 1, Fg]
    # [G, N*O, Fg] -> [G, N, *O, Fg] -> [N, G, Fg, *O] -> [N, F, *O]
    full = (g, n, *out_sp, fg)
    groups_ = "[[0], [" + _ints(list(range(1, 2 + rank))) + "], [" + str(2 + rank) + "]]"
    name = em.op(f"tensor.expand_shape {res.ssa} {groups_} output_shape [{_ints(full)}] "
                 f": {res.type} into {tensor_type(full, acc)}", "r")
    res = em.transpose(Value(name, full, acc), [1, 0, 2 + rank, *range(2, 2 + rank)])
    return _merge(em, res, 1)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _collapse(em: Emitter, v: Value, groups: list, shape: tuple) -> Value:
    """``tensor.collapse_shape`` of ``v`` by the reassociation ``groups`` into ``shape``."""
    reassoc = "[" + ", ".join("[" + _ints(gr) + "]" for gr in groups) + "]"
    name = em.op(f"tensor.collapse_shape {v.ssa} {reassoc} : {v.type} into {tensor_type(shape, v.elem)}", "r")
    return Value(name, tuple(shape), v.elem)


def _conv_split(em: Emitter, xp: Value, filt: Value, groups: int, stride: Sequence[int], dilation: Sequence[int],
                out_sp: Sequence[int], acc: str) -> Value:
    """``_conv`` of a grouped correlation as ``groups`` ungrouped ones on channel slices of ``xp`` and on
    ``filt[g]``, each inserted into its channel range of one ``[N, F, *out_sp]`` result.

    NOTE: the GPU form. IREE 3.13's CUDA code for the grouped named op (``conv_2d_ngchw_gfchw``, and
    its generic 1-D/3-D twins) is wrong in f16/bf16 (issue 49: 87-97% of the outputs off; the
    channels-last preprocessing pass that makes ungrouped convs right leaves grouped ones as they are);
    each ungrouped slice takes the ungrouped path, which that pass converts (docs/known_issues.md 10).
    """
    n, cg = xp.shape[0], xp.shape[1] // groups
    fg = filt.shape[1]
    # NOTE: a channels-last filter binding reaches here through a transpose, which IREE 3.13 folds into
    # each slice's conv (filter read as [F, *R, C], reduction loops (*r, c) over a channels-first input);
    # that CUDA f16/bf16 form is wrong too (H200, issue 49: NHWC fprop 47-99% of the outputs off, NCHW
    # right). Behind the barrier the transpose is a dispatch of its own and each conv has the NCHW form.
    from lowering.ops.matmul import propagation_barrier
    filt = propagation_barrier(em, filt)
    out_shape = (n, groups * fg, *out_sp)
    t_out = tensor_type(out_shape, acc)
    out = em.empty(out_shape, acc)
    x_shape = (n, cg, *xp.shape[2:])
    f_shape = tuple(filt.shape[1:])
    part_shape = (n, fg, *out_sp)
    for g in range(groups):
        xs = em.op(f"tensor.extract_slice {xp.ssa}[0, {g * cg}, {_ints([0] * len(x_shape[2:]))}] [{_ints(x_shape)}] "
                   f"[{_ints([1] * len(x_shape))}] : {xp.type} to {tensor_type(x_shape, xp.elem)}", "xg")
        fs = em.op(f"tensor.extract_slice {filt.ssa}[{g}, {_ints([0] * len(f_shape))}] [1, {_ints(f_shape)}] "
                   f"[{_ints([1] * (1 + len(f_shape)))}] : {filt.type} to {tensor_type(f_shape, filt.elem)}", "wg")
        part = _conv(em, Value(xs, x_shape, xp.elem), Value(fs, f_shape, filt.elem), 1, stride, dilation, out_sp, acc)
        out = em.op(f"tensor.insert_slice {part.ssa} into {out}[0, {g * fg}, {_ints([0] * len(out_sp))}] "
                    f"[{_ints(part_shape)}] [{_ints([1] * len(part_shape))}] : {part.type} into {t_out}", "yg")
    return Value(out, out_shape, acc)


def _barrier(em: Emitter, v: Value) -> Value:
    """``util.optimization_barrier``: IREE fuses nothing across it, so the relayout that produced
    ``v`` runs in a dispatch of its own instead of inside the convolution's.

    NOTE: left out for a value with dynamic dims (graph_ir/dynamic.py): IREE 3.13 cannot resolve
    ``tensor.dim`` through the barrier ("dynamic dimensions must have been resolved prior to leaving
    the flow dialect"), so the relayout may fuse into the convolution there."""
    if not is_static(v.shape):
        return v
    name = em.op(f"util.optimization_barrier {v.ssa} : {v.type}", "ob")
    return Value(name, v.shape, v.elem)


def _transposed_arg(em: Emitter, v: Value, perm: Sequence[int]) -> bool:
    """Whether ``v`` is a ``linalg.transpose`` of a function argument that ``perm`` undoes (then
    transposing ``v`` by ``perm`` gives back the argument's memory order and IREE folds both away)."""
    prefix = f"{v.ssa} = linalg.transpose ins(%arg"
    for line in reversed(em.lines):
        text = line.strip()
        if text.startswith(f"{v.ssa} ="):
            if not text.startswith(prefix) or "permutation = [" not in text:
                return False
            inner = [int(e) for e in text.rsplit("permutation = [", 1)[1].rstrip("]").split(",")]
            return [inner[p] for p in perm] == list(range(len(perm)))
    return False


def _cl_pad(em: Emitter, v: Value, pre: Sequence[int], extent: Sequence[int]) -> Value:
    """``v [N, *S, C]`` zero-padded by ``pre`` and cropped/padded at the end to spatial ``extent``."""
    sp = v.shape[1:-1]
    count = [min(n, e - lo) for n, lo, e in zip(sp, pre, extent)]
    out_shape = (v.shape[0], *extent, v.shape[-1])
    if any(c <= 0 for c in count):
        return Value(em.filled(out_shape, v.elem, 0.0), out_shape, v.elem)
    if tuple(count) != tuple(sp):
        shape = (v.shape[0], *count, v.shape[-1])
        name = em.op(f"tensor.extract_slice {v.ssa}[{_ints([0] * len(shape))}] [{_ints(shape)}] "
                     f"[{_ints([1] * len(shape))}] : {v.type} to {tensor_type(shape, v.elem)}", "crop")
        v = Value(name, shape, v.elem)
    high = [e - lo - c for e, lo, c in zip(extent, pre, count)]
    if not any(pre) and not any(high):
        return v
    return em.zero_pad(v, [0, *pre, 0], [0, *high, 0], out_shape)


# NOTE: 1-D convs lift to 2-D named ops over a unit height (measured: IREE's 1-D conv code ran at
# 1-2 GFLOP/s in every 1-D form).
_LIFT_1D = True
# Which forms the other convs take is the lowering policy's (lowering/policy.py): conv_channels_last,
# conv3d_as_2d, dgrad/wgrad_channels_last, grouped_channels_last, grouped_split_max.
# NOTE: grouped 2-D convs on CPUs: one conv_2d_nhwc_hwcf per group beat conv_2d_ngchw_gfchw 2.5-20x and
# conv_2d_nhwgc_gfhwc 2-22x (G 2 and 32, docs/benchmarks/flags.md); past 64 groups (unmeasured, and
# as many dispatches) the single nhwgc op is used.


def channels_last(policy, groups: int, w_dims: Sequence[int]) -> bool:
    """Whether conv_fprop takes the channels-last form (``_conv_channels_last``) under ``policy``.

    NOTE: measured on the 2-core llvm-cpu machine with IREE 3.13 (docs/benchmarks/flags.md):
    ``conv_2d_nhwc_hwcf`` with its filter re-laid out in a dispatch of its own is the fastest form
    IREE generates, several times the NCHW form once the layout transposes no longer fuse into the
    conv dispatch. GPU targets keep the channels-first form their known CUDA workarounds rely on
    (targets.GPU_CONV_FLAGS, docs/known_issues.md): ``LoweringPolicy.for_target`` says so.
    """
    cg = w_dims[1]
    return policy.conv_channels_last and (groups == 1 or cg == 1)


def _cl_input(em: Emitter, x: Value, p: ConvParams, extent: Sequence[int]) -> Value:
    """Logical ``x [N, C, *S]`` as ``[N, *extent, C]``, zero-padded by ``p.pre``. When ``x`` is a
    channels-last argument the transpose undoes the argument's own and both fold away; otherwise it
    sits behind a barrier so it runs as a plain copy, not inside the convolution's dispatch."""
    to_cl = [0, *range(2, 2 + p.rank), 1]
    xc = em.transpose(x, to_cl)
    if not _transposed_arg(em, x, to_cl):
        xc = _barrier(em, xc)
    return _cl_pad(em, xc, p.pre, extent)


def _conv_channels_last(em: Emitter, x: Value, w: Value, groups: int, p: ConvParams,
                        out_sp: Sequence[int], acc: str) -> Value:
    """conv_fprop of logical ``x [N, C, *S]`` and ``w [K, C/G, *R]`` in a channels-last named op;
    ungrouped (``conv_*_nhwc_hwcf``) or depthwise (``depthwise_conv_*_nhwc_hwc[m]``). Returns the
    logical ``[N, K, *O]``.

    The activations are transposed to ``[N, *S, C]``: when ``x`` is a channels-last argument that
    transpose undoes the argument's own and both fold away; otherwise it sits behind a barrier so it
    runs as a plain copy. The filter's relayout is behind a barrier always (filters are small).
    """
    rank = p.rank
    kern = w.shape[2:]
    xp = _cl_input(em, x, p, _extent(out_sp, kern, p.stride, p.dilation))
    attrs = _conv_attrs(p.stride, p.dilation)
    n, k = x.shape[0], w.shape[0]
    if groups == 1:
        filt = _barrier(em, em.transpose(w, [*range(2, 2 + rank), 1, 0]))     # [*R, C, K]
        opname, out_shape = _NAMED_CL[rank], (n, *out_sp, k)
    else:
        c, mult = x.shape[1], k // groups
        wk = em.reshape(w, (k, *kern))                                          # [K, *R]
        wt = em.transpose(wk, [*range(1, 1 + rank), 0])                         # [*R, K]
        if mult == 1:
            filt, opname, out_shape = _barrier(em, wt), _DEPTHWISE_CL[rank], (n, *out_sp, c)
        else:
            filt = _barrier(em, _split(em, wt, rank, (c, mult)))                # [*R, C, M]
            opname, out_shape = _DEPTHWISE_CL_M[rank], (n, *out_sp, c, mult)
    lift = rank == 1 and _LIFT_1D
    if lift:
        # NOTE: 1-D as 2-D over a unit height (see _LIFT_1D).
        xp = _split(em, xp, 1, (1, xp.shape[1]))
        filt = _split(em, filt, 0, (1, filt.shape[0]))
        opname = {_NAMED_CL[1]: _NAMED_CL[2], _DEPTHWISE_CL[1]: _DEPTHWISE_CL[2],
                  _DEPTHWISE_CL_M[1]: _DEPTHWISE_CL_M[2]}[opname]
        out_shape = (out_shape[0], 1, *out_shape[1:])
        attrs = _conv_attrs((1, p.stride[0]), (1, p.dilation[0]))
    init = em.filled(out_shape, acc, 0.0)
    t = tensor_type(out_shape, acc)
    name = em.op(f"{opname} {attrs} ins({xp.ssa}, {filt.ssa} : {xp.type}, {filt.type}) "
                 f"outs({init} : {t}) -> {t}", "conv")
    res = Value(name, out_shape, acc)
    if lift:
        res = _merge(em, res, 0)                                                # [N, O, ...]
    if len(out_shape) - lift == rank + 3:
        res = _merge(em, res, rank + 1)                                         # [N, *O, K]
    return em.transpose(res, [0, rank + 1, *range(1, rank + 1)])


def _conv_grouped_channels_last(em: Emitter, x: Value, w: Value, groups: int, p: ConvParams,
                                out_sp: Sequence[int], acc: str) -> Value:
    """Grouped 2-D conv_fprop (1 < G < C) on CPUs: ``linalg.conv_2d_nhwgc_gfhwc`` on x as
    ``[N, H, W, G, Cg]`` and the filter as ``[G, Kg, R, S, Cg]``, each relaid out as in
    ``_conv_channels_last``. Returns the logical ``[N, K, *O]``."""
    n, c = x.shape[0], x.shape[1]
    k, cg, kern = w.shape[0], w.shape[1], w.shape[2:]
    kg = k // groups
    xp = _split(em, _cl_input(em, x, p, _extent(out_sp, kern, p.stride, p.dilation)), 3, (groups, cg))  # [N, H, W, G, Cg]
    filt = _barrier(em, em.transpose(_split(em, w, 0, (groups, kg)), [0, 1, 3, 4, 2]))   # [G, Kg, R, S, Cg]
    attrs = _conv_attrs(p.stride, p.dilation)
    out_shape = (n, *out_sp, groups, kg)
    init = em.filled(out_shape, acc, 0.0)
    t = tensor_type(out_shape, acc)
    name = em.op(f"linalg.conv_2d_nhwgc_gfhwc {attrs} ins({xp.ssa}, {filt.ssa} : {xp.type}, {filt.type}) "
                 f"outs({init} : {t}) -> {t}", "conv")
    res = _merge(em, Value(name, out_shape, acc), 3)                                # [N, *O, K]
    return em.transpose(res, [0, 3, 1, 2])


def _conv_grouped_split(em: Emitter, x: Value, w: Value, groups: int, p: ConvParams,
                        out_sp: Sequence[int], acc: str) -> Value:
    """Grouped 2-D conv_fprop on CPUs as ``groups`` ungrouped ``conv_2d_nhwc_hwcf`` on channel slices
    of the channels-last x and of the ``[R, S, Cg, K]`` filter, inserted into one output."""
    n = x.shape[0]
    k, cg, kern = w.shape[0], w.shape[1], w.shape[2:]
    kg = k // groups
    extent = _extent(out_sp, kern, p.stride, p.dilation)
    xp = _cl_input(em, x, p, extent)                                                # [N, Hp, Wp, C]
    filt = _barrier(em, em.transpose(w, [2, 3, 1, 0]))                              # [R, S, Cg, K]
    attrs = _conv_attrs(p.stride, p.dilation)
    out_shape = (n, *out_sp, k)
    out = em.empty(out_shape, acc)
    part_shape = (n, *out_sp, kg)
    xs_shape, fs_shape = (n, *extent, cg), (*kern, cg, kg)
    for g in range(groups):
        xs = em.op(f"tensor.extract_slice {xp.ssa}[0, 0, 0, {g * cg}] [{_ints(xs_shape)}] [1, 1, 1, 1] "
                   f": {xp.type} to {tensor_type(xs_shape, xp.elem)}", "xg")
        fs = em.op(f"tensor.extract_slice {filt.ssa}[0, 0, 0, {g * kg}] [{_ints(fs_shape)}] [1, 1, 1, 1] "
                   f": {filt.type} to {tensor_type(fs_shape, filt.elem)}", "wg")
        init = em.filled(part_shape, acc, 0.0)
        t = tensor_type(part_shape, acc)
        part = em.op(f"linalg.conv_2d_nhwc_hwcf {attrs} ins({xs}, {fs} : {tensor_type(xs_shape, xp.elem)}, "
                     f"{tensor_type(fs_shape, filt.elem)}) outs({init} : {t}) -> {t}", "conv")
        out = em.op(f"tensor.insert_slice {part} into {out}[0, 0, 0, {g * kg}] [{_ints(part_shape)}] [1, 1, 1, 1] "
                    f": {t} into {tensor_type(out_shape, acc)}", "yg")
    return em.transpose(Value(out, out_shape, acc), [0, 3, 1, 2])


def _conv3d_as_2d(em: Emitter, x: Value, w: Value, p: ConvParams, out_sp: Sequence[int], acc: str) -> Value:
    """Ungrouped 3-D conv_fprop on CPUs as KD channels-last 2-D convs accumulating into one output:
    ``y[n, od] = sum_kd conv2d(x_pad[n, od*stride_d + kd*dilation_d], w[:, :, kd])``, depth folded into
    the batch. IREE's 2-D ``conv_2d_nhwc_hwcf`` code is many times its 3-D one on CPUs."""
    n, k = x.shape[0], w.shape[0]
    c, kd_n = x.shape[1], w.shape[2]
    kern = w.shape[2:]
    extent = _extent(out_sp, kern, p.stride, p.dilation)
    xp = _cl_input(em, x, p, extent)                                                # [N, Dp, Hp, Wp, C]
    filt = _barrier(em, em.transpose(w, [2, 3, 4, 1, 0]))                           # [KD, R, S, C, K]
    od, oh, ow = out_sp
    hp, wp = extent[1], extent[2]
    attrs = _conv_attrs(p.stride[1:], p.dilation[1:])
    out_shape = (_dim_mul(em, n, od), oh, ow, k)
    t = tensor_type(out_shape, acc)
    out = em.filled(out_shape, acc, 0.0)
    xs_shape, f_shape = (n, od, hp, wp, c), (1, *kern[1:], c, k)
    for kd in range(kd_n):
        xs = em.op(f"tensor.extract_slice {xp.ssa}[0, {kd * p.dilation[0]}, 0, 0, 0] [{_ints(xs_shape)}] "
                   f"[1, {p.stride[0]}, 1, 1, 1] : {xp.type} to {tensor_type(xs_shape, xp.elem)}", "xd")
        xb = _merge(em, Value(xs, xs_shape, xp.elem), 0)                            # [N*OD, Hp, Wp, C]
        fs = em.op(f"tensor.extract_slice {filt.ssa}[{kd}, 0, 0, 0, 0] [{_ints(f_shape)}] [1, 1, 1, 1, 1] "
                   f": {filt.type} to {tensor_type(f_shape, filt.elem)}", "wd")
        fk = em.reshape(Value(fs, f_shape, filt.elem), f_shape[1:])                 # [R, S, C, K]
        out = em.op(f"linalg.conv_2d_nhwc_hwcf {attrs} ins({xb.ssa}, {fk.ssa} : {xb.type}, {fk.type}) "
                    f"outs({out} : {t}) -> {t}", "conv")
    res = _split(em, Value(out, out_shape, acc), 0, (n, od))                        # [N, OD, OH, OW, K]
    return em.transpose(res, [0, 4, 1, 2, 3])


def _check_float(node: NodeDesc, *vals: Value) -> None:
    for v in vals:
        if v.elem not in FLOAT_TYPES:
            what = (" (int8/uint8 operands: conv_fprop only)" if v.elem == "i8" else "")
            raise GraphError(f"{node.kind.name.lower()} '{node.name}': operands must be floating point{what}, "
                                f"got {v.elem}", "unsupported")


_INT_OPERANDS = (DataType.INT8, DataType.UINT8)
_INT_ACC = ("i32", "i64")


def _fprop_operands(ctx: LowerContext, node: NodeDesc, uids: Sequence[int], vals: Sequence[Value]) -> str:
    """Checks conv_fprop's operand types; returns the accumulator type (the compute type; i32 when
    unset and every operand is INT8/UINT8, else f32).

    Floating-point operands take any compute type as before. INT8/UINT8 operands are accepted with a
    float compute type (converted exactly) or an INT32/INT64 one; an integer compute type needs every
    operand to be an integer (INT8/UINT8). Anything else is refused ("unsupported")."""
    name = f"conv_fprop '{node.name}'"
    ints = []
    for uid, v in zip(uids, vals):
        dt = ctx.tensor(uid).data_type
        if v.elem in FLOAT_TYPES:
            ints.append(False)
        elif v.elem == "i8" and dt in _INT_OPERANDS:
            ints.append(True)
        else:
            raise GraphError(f"{name}: operands must be floating point or INT8/UINT8, got {v.elem}",
                                "unsupported")
    acc = ctx.compute_elem(node, default="i32" if all(ints) else "f32")
    if acc not in FLOAT_TYPES:
        if acc not in _INT_ACC:
            raise GraphError(f"{name}: integer convolutions accumulate in INT32 or INT64, not {acc} "
                                f"(set compute_data_type INT32)", "unsupported")
        if not all(ints):
            raise GraphError(f"{name}: an integer compute type ({acc}) needs INT8/UINT8 operands, got "
                                f"{' and '.join(v.elem for v in vals)}", "unsupported")
    return acc


def _unsigned_in(ctx: LowerContext, acc: str, uids: Sequence[int], vals: Sequence[Value]) -> tuple[Value, ...]:
    """UINT8 operands zero-extended to the accumulator type (the named conv ops sign-extend)."""
    return tuple(ctx.em.convert(v, acc, unsigned=True)
                 if ctx.tensor(u).data_type == DataType.UINT8 and v.elem != acc else v
                 for u, v in zip(uids, vals))


def _geometry(node: NodeDesc, x, w, y, given: str | None) -> tuple[ConvParams, int]:
    try:
        if given is None:
            want, p, groups = forward_shape(x, w, node.attrs)
            if tuple(y) != want:
                raise GraphError(f"field 'y_uid' dims {list(y)} differ from the inferred {list(want)}")
            return p, groups
        return check_forward(x, w, y, node.attrs, given)
    except GraphError as e:
        raise GraphError(f"{node.kind.name.lower()} '{node.name}': {e}") from None


# ---------------------------------------------------------------------------
# Lowerings
# ---------------------------------------------------------------------------


def _operands_in(ctx: LowerContext, acc: str, *vals: Value) -> tuple[Value, ...]:
    """The conv's operands, converted to the accumulator type when the policy asks for it
    (``conv_acc_operands``: IREE 3.13's CPU im2col pass breaks on f16/bf16 operands with an f32
    accumulator, ``arith.addf (f16, f32) -> f16``); as they are otherwise."""
    if ctx.policy.tf32_conv:
        vals = tuple(_round_tf32(ctx.em, v) if v.elem == "f32" else v for v in vals)
    if not ctx.policy.conv_acc_operands:
        return vals
    return tuple(v if v.elem == acc else ctx.em.convert(v, acc) for v in vals)


def _round_tf32(em: Emitter, v: Value) -> Value:
    """``v`` rounded to TF32 (10 mantissa bits, to nearest, ties to even); infinities and NaNs
    kept. The products of two TF32 values are exact in f32, so a conv over rounded operands with an
    f32 accumulator has TF32 tensor cores' numerics (``tf32_conv``: the cuDNN facade's default on
    CUDA, as cuDNN's and PyTorch's).

    NOTE: measured on an H200 (benchmarks/tf32_probe.py (retired; in git history at commit 9e99c4b), docs/gpu_results/tf32_probe_h200.json):
    torch's TF32 conv (cuDNN 9.19's kernel; N16 C128 64x64, K256 3x3) against IEEE convs of
    converted operands, outputs past atol = rtol = 1e-3 of 16.7M: ties to even 0 (max 7.9e-4),
    ties away from zero 2,920 (max 0.012), low bits dropped 6.7M, no conversion 2.7M."""
    lsb_shift, one, bias = (em.op(f"arith.constant {c} : i32", "c") for c in (13, 1, 4095))
    mask = em.op("arith.constant -8192 : i32", "c")
    big = em.op("arith.constant 3.40282347e+38 : f32", "c")

    def body(a):
        bits = em.op(f"arith.bitcast {a[0]} : f32 to i32")
        odd = em.op(f"arith.andi {em.op(f'arith.shrui {bits}, {lsb_shift} : i32')}, {one} : i32")
        up = em.op(f"arith.addi {em.op(f'arith.addi {bits}, {bias} : i32')}, {odd} : i32")
        kept = em.op(f"arith.andi {up}, {mask} : i32")
        rounded = em.op(f"arith.bitcast {kept} : i32 to f32")
        finite = em.op(f"arith.cmpf ole, {em.op(f'math.absf {a[0]} : f32')}, {big} : f32")
        return em.op(f"arith.select {finite}, {rounded}, {a[0]} : f32")
    return em.elementwise([v], v.shape, "f32", body)


@register_lowering(OpKind.CONV_FPROP)
def lower_conv_fprop(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    x, w = ctx.value(at.x_uid), ctx.value(at.w_uid)
    y_dims = ctx.dims(at.y_uid)
    uids = (at.x_uid, at.w_uid)
    acc = _fprop_operands(ctx, node, uids, (x, w))
    # NOTE: checked at the built dims (the same as x.shape etc. for a static lowering)
    p, groups = _geometry(node, ctx.tensor(at.x_uid).dims, w.shape, ctx.tensor(at.y_uid).dims, None)
    em = ctx.em
    x, w = _operands_in(ctx, acc, *_unsigned_in(ctx, acc, uids, (x, w)))
    out_sp, kern = y_dims[2:], w.shape[2:]
    pol = ctx.policy
    if not is_static(x.shape[2:]):
        ctx.define(at.y_uid, _conv_dynamic_spatial(node, em, x, w, groups, p, out_sp, acc, pol))
        return
    if pol.conv3d_as_2d and p.rank == 3 and groups == 1:
        ctx.define(at.y_uid, _conv3d_as_2d(em, x, w, p, out_sp, acc))
        return
    if channels_last(pol, groups, w.shape):
        ctx.define(at.y_uid, _conv_channels_last(em, x, w, groups, p, out_sp, acc))
        return
    if pol.grouped_channels_last and p.rank == 2:
        form = (_conv_grouped_split if groups <= pol.grouped_split_max
                else _conv_grouped_channels_last)
        ctx.define(at.y_uid, form(em, x, w, groups, p, out_sp, acc))
        return
    extent = _extent(out_sp, kern, p.stride, p.dilation)
    xp = _place(em, x, p.pre, [1] * p.rank, extent)
    filt = w if groups == 1 else _split(em, w, 0, (groups, w.shape[0] // groups))
    ctx.define(at.y_uid, _conv(em, xp, filt, groups, p.stride, p.dilation, out_sp, acc,
                                pol.conv_split_groups and w.shape[1] > 1, gemm=_gemm(pol, xp, filt, kernel=kern)))


def _conv_dynamic_spatial(node: NodeDesc, em: Emitter, x: Value, w: Value, groups: int, p: ConvParams,
                          out_sp: Sequence, acc: str, pol) -> Value:
    """conv_fprop whose H/W vary (graph_ir/dynamic.py, ``conv_spatial``): ungrouped 2-D only. The input is
    padded by the whole pre/post padding (a named conv reads the rows it needs of a larger input), in the
    channels-last form on CPUs and the channels-first form elsewhere, as the static lowering chooses."""
    if groups != 1 or p.rank != 2:
        raise GraphError(f"conv_fprop '{node.name}': varying spatial dims need an ungrouped 2-D convolution "
                            f"(this one: {p.rank}-D, {groups} groups)", "unsupported")
    cl = channels_last(pol, groups, w.shape)
    xv = em.transpose(x, [0, 2, 3, 1]) if cl else x
    sp = (1, 2) if cl else (2, 3)
    shape = list(xv.shape)
    for i, a in enumerate(sp):
        extra = p.pre[i] + p.post[i]
        d = shape[a]
        if extra and isinstance(d, Sym):
            c = em.op(f"arith.constant {extra} : index", "c")
            shape[a] = Sym(f"({d.name} + {extra})", em.op(f"arith.addi {d.ssa}, {c} : index", "dim"))
        elif extra:
            shape[a] = d + extra
    low, high = [0] * 4, [0] * 4
    for i, a in enumerate(sp):
        low[a], high[a] = p.pre[i], p.post[i]
    xp = em.zero_pad(xv, low, high, tuple(shape)) if any(low) or any(high) else xv
    attrs = _conv_attrs(p.stride, p.dilation)
    n, k = x.shape[0], w.shape[0]
    if not cl:
        return _conv(em, xp, w, 1, p.stride, p.dilation, out_sp, acc)
    filt = _barrier(em, em.transpose(w, [2, 3, 1, 0]))                       # [R, S, C, K]
    out_shape = (n, *out_sp, k)
    init = em.filled(out_shape, acc, 0.0)
    t = tensor_type(out_shape, acc)
    name = em.op(f"{_NAMED_CL[2]} {attrs} ins({xp.ssa}, {filt.ssa} : {xp.type}, {filt.type}) "
                 f"outs({init} : {t}) -> {t}", "conv")
    return em.transpose(Value(name, out_shape, acc), [0, 3, 1, 2])


def _dgrad_filter(em: Emitter, w: Value, groups: int) -> Value:
    """``w [K, Cg, *R]`` -> flipped, channel-swapped ``[C, K, *R]`` (G == 1) or ``[G, Cg, Kg, *R]``.

    NOTE: a gather (``tensor.extract`` at computed indices), not an indexing map such as
    ``(r) -> (2 - r)``: IREE's tiling assumes indexing expressions increase with the loop
    indices, and a reversed map fails to compile once fused into the conv's dispatch.
    """
    k, cg, kern = w.shape[0], w.shape[1], w.shape[2:]
    kg = k // groups
    ng = 1 if groups > 1 else 0
    shape = ((groups, cg, kg) if ng else (cg, k)) + tuple(kern)

    def body(args):
        idx = [em.op(f"linalg.index {i} : index", "i") for i in range(len(shape))]
        c, kk, r = idx[ng], idx[ng + 1], idx[ng + 2:]
        if ng and kg > 1:
            base = em.op(f"arith.muli {idx[0]}, {em.op(f'arith.constant {kg} : index', 'c')} : index")
            korig = em.op(f"arith.addi {base}, {kk} : index")
        else:
            korig = idx[0] if ng else kk
        flipped = []
        for ri, n in zip(r, kern):
            if n == 1:
                flipped.append(ri)
            else:
                last = em.op(f"arith.constant {n - 1} : index", "c")
                flipped.append(em.op(f"arith.subi {last}, {ri} : index"))
        return em.op(f"tensor.extract {w.ssa}[{', '.join([korig, c, *flipped])}] : {w.type}")

    ident = ", ".join(f"d{i}" for i in range(len(shape)))
    return em.generic([], shape, w.elem, ["parallel"] * len(shape), f"affine_map<({ident}) -> ({ident})>", body)


@register_lowering(OpKind.CONV_DGRAD)
def lower_conv_dgrad(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    dy, w = ctx.value(at.y_uid), ctx.value(at.w_uid)
    dx_dims = ctx.dims(at.x_uid)
    _check_float(node, dy, w)
    p, groups = _geometry(node, dx_dims, w.shape, dy.shape, "x_uid")
    em, acc = ctx.em, ctx.compute_elem(node)
    dy, w = _operands_in(ctx, acc, dy, w)
    kern = w.shape[2:]
    # NOTE: dx[i] = sum_r dy[o] w[r] over i + pre = o*stride + r*dilation. Scattering dy[o] to
    # position (R-1)*dilation - pre + o*stride of a zero tensor z makes this
    # dx[i] = sum_r' z[i + r'*dilation] w[R-1-r']: a stride-1 correlation with the flipped filter.
    low = [(k - 1) * d - pre for k, d, pre in zip(kern, p.dilation, p.pre)]
    extent = [i + (k - 1) * d for i, k, d in zip(dx_dims[2:], kern, p.dilation)]
    z = _place(em, dy, low, p.stride, extent)
    filt = _dgrad_filter(em, w, groups)
    if ctx.policy.dgrad_channels_last and groups == 1 and channels_last(ctx.policy, 1, w.shape):
        # NOTE: the same stride-1 correlation in the channels-last form conv_fprop uses on CPUs
        # (the flipped filter [C, K, *R] is its "w"; docs/benchmarks/flags.md has the figures)
        unit = ConvParams(pre=(0,) * p.rank, post=(0,) * p.rank, stride=(1,) * p.rank, dilation=p.dilation)
        ctx.define(at.x_uid, _conv_channels_last(em, z, filt, 1, unit, dx_dims[2:], acc))
        return
    ctx.define(at.x_uid, _conv(em, z, filt, groups, [1] * p.rank, p.dilation, dx_dims[2:], acc,
                               gemm=_gemm(ctx.policy, z, filt, kernel=kern)))


@register_lowering(OpKind.CONV_WGRAD)
def lower_conv_wgrad(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    dy, x = ctx.value(at.y_uid), ctx.value(at.x_uid)
    dw_dims = ctx.dims(at.w_uid)
    _check_float(node, dy, x)
    p, groups = _geometry(node, x.shape, dw_dims, dy.shape, "w_uid")
    em, acc = ctx.em, ctx.compute_elem(node)
    dy, x = _operands_in(ctx, acc, dy, x)
    rank, out_sp, kern = p.rank, dy.shape[2:], dw_dims[2:]
    extent = _extent(out_sp, kern, p.stride, p.dilation)
    xp = _place(em, x, p.pre, [1] * rank, extent)
    # NOTE: dw[k, c, r] = sum_{n, o} dy[n, k, o] * xp[n, c, o*stride + r*dilation] is a forward
    # correlation with batch and channels swapped: "batch" c, "input channels" n, "filter" dy
    # ([K, N, *O]), window position r, stride = dilation, dilation = stride; the window extent
    # (R-1)*dilation + (O-1)*stride + 1 is the same. A named conv op, unlike one generic reducing
    # over n and o, compiles for GPU targets at realistic sizes.
    sp = list(range(2, 2 + rank))
    if groups == 1:
        xs = em.transpose(xp, [1, 0, *sp])                                  # [C, N, *ext]
        filt = em.transpose(dy, [1, 0, *sp])                                # [K, N, *O]
    else:
        cg = dw_dims[1]
        xg = em.transpose(_split(em, xp, 1, (groups, cg)), [2, 1, 0, *[a + 1 for a in sp]])  # [Cg, G, N, *ext]
        xs = _merge(em, xg, 1)                                              # [Cg, G*N, *ext]
        filt = _split(em, em.transpose(dy, [1, 0, *sp]), 0, (groups, dw_dims[0] // groups))  # [G, Kg, N, *O]
    if ctx.policy.wgrad_channels_last and groups == 1 and channels_last(ctx.policy, 1, dw_dims):
        # NOTE: the same swapped correlation in conv_fprop's channels-last form on CPUs
        swapped = ConvParams(pre=(0,) * rank, post=(0,) * rank, stride=p.dilation, dilation=p.stride)
        res = _conv_channels_last(em, xs, filt, 1, swapped, kern, acc)    # [C, K, *R]
        ctx.define(at.w_uid, em.transpose(res, [1, 0, *sp]))
        return
    res = _conv(em, xs, filt, groups, p.dilation, p.stride, kern, acc,      # [Cg, K, *R]
                ctx.policy.conv_split_groups and dw_dims[1] > 1, gemm=_gemm(ctx.policy, xs, filt, kernel=kern))
    ctx.define(at.w_uid, em.transpose(res, [1, 0, *sp]))
