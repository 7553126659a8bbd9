"""Generated matmul kernels: the matmul (+ pointwise epilogue) pattern and its ``hal.dispatch.extern``.

A :class:`MatmulPattern` is a graph's matmul whose operands are bound tensors (f16, bf16 or f32,
dense, rank 2 or 3, static dims) followed by the chain of pointwise ops that only it feeds (bias or
any tensor add/sub/mul broadcast to the output, scalar add/sub/mul, relu, gelu, gelu-tanh, tanh,
sigmoid). :func:`find_patterns` finds them; the engine (``hipdnn_iree/plugins/iree_linalg/kernels``)
turns each into kernels (:class:`GeneratedKernel`: plain data, cubin or PTX bytes) and passes them to
``lowering.lower_graph``, which emits the whole chain as one :func:`emit_extern` dispatch and lowers
every other node as before. This module imports no kernel generator: bytes in, text out.

IREE's CUDA ABI (docs/generated_kernels.md): the kernel's parameters are the dispatch's tensor
bindings, operands first then results, as 64-bit pointers, then 32-bit push constants (none here:
every size and stride is compiled into the kernel). Triton 3.6 appends two pointer parameters (global
and profile scratch) after the declared ones, so the dispatch has two extra ``tensor<16xi8>`` results
whose bindings line up with them; the generator requires both scratch sizes to be 0.

Example:
    >>> MatmulPattern(nodes=(0,), batch=1, m=8, n=8, k=8, a=Operand(1, "f16", (0, 8, 1)),
    ...               b=Operand(2, "f16", (0, 8, 1)), acc_round="f32", steps=(), out_uid=3,
    ...               out_dtype="f32").key()[:30]
    '{"a":{"dtype":"f16","strides":'
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from graph_ir._fbs.graph_generated import DataType, PointwiseMode
from graph_ir.desc import GraphDesc, OpKind
from graph_ir.layout import physical_layout

_DTYPES = {DataType.HALF: "f16", DataType.BFLOAT16: "bf16", DataType.FLOAT: "f32"}
# epilogue op -> (pointwise mode, takes a second operand)
_UNARY = {PointwiseMode.RELU_FWD: "relu", PointwiseMode.GELU_FWD: "gelu",
          PointwiseMode.GELU_APPROX_TANH_FWD: "gelu_tanh", PointwiseMode.TANH_FWD: "tanh",
          PointwiseMode.SIGMOID_FWD: "sigmoid", PointwiseMode.IDENTITY: "identity"}
_BINARY = {PointwiseMode.ADD: "add", PointwiseMode.SUB: "sub", PointwiseMode.MUL: "mul"}
MAX_STEPS = 4          # epilogue steps the kernel template has slots for
MAX_TENSOR_STEPS = 4   # of them with a tensor operand (one pointer each)
SCRATCH_RESULTS = 2    # Triton 3.6's trailing global/profile scratch pointers


@dataclass(frozen=True)
class Operand:
    """A tensor the kernel reads: its uid, element type and element strides over the logical
    ``[batch, rows, cols]`` view (0 on broadcast axes)."""

    uid: int
    dtype: str
    strides: tuple


@dataclass(frozen=True)
class EpilogueStep:
    """One pointwise op after the matmul: ``op`` on the running value (and ``operand`` or ``scalar``),
    its result rounded to ``round_to`` (the op's output tensor's type) as the IREE lowering does."""

    op: str
    round_to: str
    operand: Operand | None = None
    scalar: float | None = None


@dataclass(frozen=True)
class MatmulPattern:
    """A matmul and its fused epilogue: ``out[b, m, n] = epilogue(sum_k a[b, m, k] * b[b, k, n])``
    accumulated in f32; ``nodes``: the graph positions it replaces; ``out_uid``: the chain's last tensor."""

    nodes: tuple
    batch: int
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    acc_round: str
    steps: tuple
    out_uid: int
    out_dtype: str
    out_rank: int = 3

    def key(self) -> str:
        """Canonical text of everything the kernel depends on (uids and node positions left out)."""
        d = asdict(self)
        for name in ("nodes", "out_uid"):
            d.pop(name)
        for o in ("a", "b"):
            d[o].pop("uid")
        for s in d["steps"]:
            if s["operand"] is not None:
                s["operand"].pop("uid")
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def operands(self) -> tuple:
        """The tensors bound to the kernel, in parameter order: a, b, then each step's operand."""
        return (self.a, self.b) + tuple(s.operand for s in self.steps if s.operand is not None)


@dataclass(frozen=True)
class GeneratedKernel:
    """One compiled kernel variant: ``arch`` ("sm_90a", "sm_80"; "gfx942", "gfx950"), ``fmt``
    ("cubin" or "ptx"; "hsaco"), ``image`` its bytes, ``name`` its entry symbol, the launch shape it
    was compiled for (``shared``: dynamic shared memory on CUDA, static LDS inside the HSACO on ROCm)."""

    name: str
    arch: str
    fmt: str
    image: bytes
    block: int
    grid: tuple
    shared: int
    generator: str = ""


def _ok_dtype(t) -> str | None:
    return _DTYPES.get(t.data_type)


def _view_strides(t, out_dims: tuple) -> tuple | None:
    """Element strides of bound tensor ``t`` over ``[batch, rows, cols]`` when it broadcasts to
    ``out_dims`` (right-aligned, size 1 or equal), dense in memory; None otherwise."""
    if t.is_virtual or t.is_scalar or len(t.dims) > 3 or len(t.dims) > len(out_dims) or not t.dims:
        return None
    if any(not isinstance(d, int) for d in t.dims) or len(t.strides) != len(t.dims):
        return None
    try:
        lay = physical_layout(t.dims, t.strides)
    except Exception:   # noqa: BLE001  (any layout the lowering refuses is IREE's to report)
        return None
    if not lay.is_dense:
        return None
    full = (1,) * (3 - len(t.dims)) + tuple(t.dims)
    strides = (0,) * (3 - len(t.dims)) + tuple(t.strides)
    out3 = (1,) * (3 - len(out_dims)) + tuple(out_dims)
    res = []
    for d, s, o in zip(full, strides, out3):
        if d == o:
            res.append(0 if d == 1 else int(s))
        elif d == 1:
            res.append(0)
        else:
            return None
    return tuple(res)


def _default_relu(at) -> bool:
    lo, hi, slope = at.relu_lower_clip, at.relu_upper_clip, at.relu_lower_clip_slope
    return ((math.isnan(lo) or lo == 0.0) and (math.isnan(hi) or math.isinf(hi) and hi > 0)
            and (math.isnan(slope) or slope == 0.0))


def _f32_compute(graph: GraphDesc, node) -> bool:
    return all(dt in (DataType.UNSET, DataType.FLOAT) for dt in (node.compute_data_type, graph.compute_data_type))


def find_patterns(graph: GraphDesc) -> list[MatmulPattern]:
    """Every matmul of ``graph`` the kernel template covers, with the longest epilogue chain it can
    fuse (a value read by one pointwise op only, never a graph output before the chain's end)."""
    consumers: dict = {}
    for i, n in enumerate(graph.nodes):
        for u in n.attrs.inputs():
            consumers.setdefault(u, []).append(i)
    out: list[MatmulPattern] = []
    for i, node in enumerate(graph.nodes):
        if node.kind != OpKind.MATMUL or not _f32_compute(graph, node):
            continue
        at = node.attrs
        ta, tb, tc = graph.tensor(at.a_uid), graph.tensor(at.b_uid), graph.tensor(at.c_uid)
        da, db, dc = _ok_dtype(ta), _ok_dtype(tb), _ok_dtype(tc)
        if None in (da, db, dc) or da != db or len(tc.dims) not in (2, 3):
            continue
        if len(ta.dims) < 2 or len(tb.dims) < 2 or ta.dims[-1] != tb.dims[-2]:
            continue
        cdims = tuple(tc.dims)
        if any(not isinstance(d, int) or d <= 0 for d in cdims):
            continue
        m, n, k = cdims[-2], cdims[-1], ta.dims[-1]
        batch = cdims[0] if len(cdims) == 3 else 1
        sa = _view_strides(ta, cdims[:-2] + (m, k))
        sb = _view_strides(tb, cdims[:-2] + (k, n))
        if sa is None or sb is None or k <= 0:
            continue
        steps, chain, cur, cur_t = epilogue_chain(graph, consumers, at.c_uid, cdims, _view_strides)
        nodes = (i, *chain)
        out.append(MatmulPattern(nodes, batch, m, n, k, Operand(at.a_uid, da, sa), Operand(at.b_uid, db, sb),
                                 dc, tuple(steps), cur, _ok_dtype(cur_t), len(cdims)))
    return out


def epilogue_chain(graph: GraphDesc, consumers: dict, start: int, y_dims: tuple, operand_strides,
                   produced: frozenset = frozenset()) -> tuple:
    """``(steps, node positions, last uid, last tensor)`` of the pointwise chain a kernel can fuse after
    tensor ``start``: each step a pointwise op of f32 compute with ``y_dims`` whose input is the one reader
    of a virtual tensor; a tensor operand's strides over ``y_dims`` come from ``operand_strides(tensor,
    y_dims)`` (None: not fusable); a bound tensor in ``produced`` (written by another node) ends it."""
    steps: list = []
    nodes: list = []
    cur, cur_t = start, graph.tensor(start)
    while len(steps) < MAX_STEPS and cur_t.is_virtual and len(consumers.get(cur, ())) == 1:
        j = consumers[cur][0]
        pn = graph.nodes[j]
        if pn.kind != OpKind.POINTWISE or not _f32_compute(graph, pn):
            break
        pa = pn.attrs
        mode = pa.operation
        y = graph.tensor(pa.out_0_uid)
        ydt = _ok_dtype(y)
        if ydt is None or tuple(y.dims) != y_dims or pa.in_2_uid not in (None, -1) and pa.in_2_uid >= 0:
            break
        if mode in _UNARY and pa.in_0_uid == cur and (pa.in_1_uid is None or pa.in_1_uid < 0):
            if mode == PointwiseMode.RELU_FWD and not _default_relu(pa):
                break
            step = EpilogueStep(_UNARY[mode], ydt)
        elif mode in _BINARY and pa.in_1_uid is not None and pa.in_1_uid >= 0:
            other = pa.in_1_uid if pa.in_0_uid == cur else pa.in_0_uid
            if cur not in (pa.in_0_uid, pa.in_1_uid) or other == cur:
                break
            if mode == PointwiseMode.SUB and pa.in_0_uid != cur:
                break
            to = graph.tensor(other)
            if other in produced:
                break   # NOTE: a bound tensor another node writes: not an input the kernel may read
            if to.is_scalar:
                if _ok_dtype(to) is None and to.data_type not in (DataType.DOUBLE,):
                    break
                step = EpilogueStep(_BINARY[mode], ydt, scalar=float(to.scalar_value))
            else:
                st = operand_strides(to, y_dims)
                odt = _ok_dtype(to)
                if st is None or odt is None or sum(s.operand is not None for s in steps) >= MAX_TENSOR_STEPS:
                    break
                step = EpilogueStep(_BINARY[mode], ydt, operand=Operand(other, odt, st))
        else:
            break
        steps.append(step)
        nodes.append(j)
        cur, cur_t = pa.out_0_uid, y
    return tuple(steps), tuple(nodes), cur, cur_t


_TARGET = '#hal.executable.target<"cuda", "cuda-nvptx-fb", {{hipdnn.kernel = "{tag}"}}>'
# NOTE: IREE 3.13's ROCm target wraps an external variant's one object (the HSACO) in its HIP flatbuffer
# (abi "hip"); it reads no arch from this attribute for that, and keeps no workgroup_local_memory
_ROCM_TARGET = '#hal.executable.target<"rocm", "rocm-hsaco-fb", {{abi = "hip", hipdnn.kernel = "{tag}"}}>'


def _condition(em, major: int | None) -> str:
    """The variant's ``if`` region (generic form): the device's compute capability major == ``major``."""
    if major is None:
        return "{\n}"
    d, q, c, e, r = (em.fresh(h) for h in ("dev", "cc", "c", "eq", "ok"))
    return ("{\n"
            f"^bb0({d}: !hal.device):\n"
            f'  {q}:2 = "hal.device.query"({d}) <{{category = "cuda.device", key = "compute_capability_major"}}> '
            ": (!hal.device) -> (i1, i32)\n"
            f'  {c} = "arith.constant"() <{{value = {major} : i32}}> : () -> i32\n'
            f'  {e} = "arith.cmpi"({q}#1, {c}) <{{predicate = 0 : i64}}> : (i32, i32) -> i1\n'
            f'  {r} = "arith.andi"({q}#0, {e}) : (i1, i1) -> i1\n'
            f'  "hal.return"({r}) : (i1) -> ()\n'
            "}")


def variant_tag(k: GeneratedKernel) -> str:
    return f"{k.arch}-{k.fmt}"


def emit_extern(em, pattern: MatmulPattern, kernels: tuple, args: list) -> str:
    """The ``hal.dispatch.extern`` of ``pattern`` (:func:`emit_dispatch`). ``args``: the bound
    operands' ``Value``s in :attr:`MatmulPattern.operands` order. Returns the SSA name of the result
    ``[batch,] m x n`` tensor (logical, row-major)."""
    out_shape = ((pattern.batch,) if pattern.out_rank == 3 else ()) + (pattern.m, pattern.n)
    out_type = f"tensor<{'x'.join(str(d) for d in out_shape)}x{pattern.out_dtype}>"
    return f"{emit_dispatch(em, kernels, args, [out_type], f'pattern {pattern.key()}')}#0"


def emit_dispatch(em, kernels: tuple, args: list, results: list, comment: str) -> str:
    """A ``hal.dispatch.extern`` (generic op form: IREE 3.13's custom syntax cannot carry
    ``workgroup_size``/``workgroup_local_memory``) with one variant per kernel in ``kernels``: a
    cubin picked when the device's compute capability major matches its arch, the last one (PTX)
    unconditional; an HSACO (ROCm) unconditional. Bindings: ``args`` (read-only, the kernel's first parameters), then one per type
    in ``results`` and Triton's two scratch slots (writable). Returns the op's SSA name (its
    results are ``name#0``, ``name#1``...; the scratch ones last)."""
    first = kernels[0]
    if any((k.name, k.block, k.grid) != (first.name, first.block, first.grid) for k in kernels):
        raise ValueError("generated kernel variants of one dispatch must share name, block size and grid")
    shared = max(k.shared for k in kernels)
    scratch = "tensor<16xi8>"
    n_in = len(args)
    n_res = len(results) + SCRATCH_RESULTS
    bindings = (["#hal.pipeline.binding<storage_buffer, ReadOnly>"] * n_in
                + ["#hal.pipeline.binding<storage_buffer>"] * n_res)
    objs, targets, conds = [], [], []
    for k in kernels:
        objs.append(f'[#hal.executable.object<{{data = dense<"0x{k.image.hex().upper()}"> : vector<{len(k.image)}xi8>}}>]')
        if k.fmt == "hsaco":   # ROCm: one HSACO for the plan's one arch, unconditional
            targets.append(_ROCM_TARGET.format(tag=variant_tag(k)))
            conds.append(_condition(em, None))
            continue
        targets.append(_TARGET.format(tag=variant_tag(k)))
        major = None if k.fmt == "ptx" else int(k.arch[3:].rstrip("a")) // 10
        conds.append(_condition(em, major))
    d = em.fresh("dev")
    gx, gy, gz = (em.fresh("g") for _ in range(3))
    count = ("{\n"
             f"^bb0({d}: !hal.device):\n"
             + "".join(f'  {g} = "arith.constant"() <{{value = {v} : index}}> : () -> index\n'
                       for g, v in zip((gx, gy, gz), first.grid))
             + f'  "hal.return"({gx}, {gy}, {gz}) : (index, index, index) -> ()\n'
             "}")
    res = em.fresh("gk")
    ords = ", ".join("0 : index" for _ in kernels)
    tied = ", ".join("-1 : index" for _ in range(n_res))
    props = (f'export_name = "{first.name}", layout = #hal.pipeline.layout<bindings = [{", ".join(bindings)}]>, '
             f"operandSegmentSizes = array<i32: 0, {n_in}, 0, 0>, target_objects = [{', '.join(objs)}], "
             f"target_ordinals = [{ords}], targets = [{', '.join(targets)}], tied_operands = [{tied}], "
             f"workgroup_local_memory = {shared} : index, "
             f"workgroup_size = [{first.block} : index, 1 : index, 1 : index]")
    in_types = ", ".join(a.type for a in args)
    out_types = ", ".join(list(results) + [scratch] * SCRATCH_RESULTS)
    em.emit(f'// generated kernel {first.name}: {comment}')
    em.emit(f'{res}:{n_res} = "hal.dispatch.extern"({", ".join(a.ssa for a in args)}) <{{{props}}}> '
            f"({', '.join([count] + conds)}) : ({in_types}) -> ({out_types})")
    return res
