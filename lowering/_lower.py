"""Emits one ``func.func @main`` for a whole graph.

ABI: one argument per bound tensor (non-virtual, non-scalar), in ascending
UID order, each in its physical (memory-order) shape; outputs are arguments
marked ``{iree.abi.output = N}`` so results land in caller storage. The
UID <-> argument mapping travels in ``iree.reflection`` as JSON under the key
``hipdnn_iree.abi`` so a compiled module is self-describing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import lowering.ops  # noqa: F401  (registers the op lowerings)
from lowering._context import LowerContext
from lowering._emit import ELEMENT_TYPES, Emitter, Value, element_type, storage_type, tensor_type
from graph_ir._fbs.graph_generated import DataType
from lowering._registry import LOWERINGS
from graph_ir.desc import GraphDesc, GraphError, decode_graph
from lowering import _goldens, strided
from graph_ir.layout import physical_layout
from graph_ir.dtypes import CODES_PER_BYTE, MINIFLOAT_FORMATS, packed_shape
from lowering._minifloat import pack_codes, unpack_codes
from lowering.policy import LoweringPolicy
from lowering.ops.matmul import needs_relayout_barrier, propagation_barrier
from lowering.ops.generated_sdpa import SdpaPattern
from lowering.ops.generated_conv import ConvPattern

from lowering.abi import ABI_FORMAT_VERSION, ENTRY_POINT, GRAPH_KEY, REFLECTION_KEY, STATIC_ENTRY  # noqa: F401

_DTYPE_NAMES = {v: k for k, v in vars(DataType).items() if not k.startswith("_") and isinstance(v, int)}


@dataclass(frozen=True)
class Lowered:
    mlir: str
    abi: dict


def _mlir_string(s: str) -> str:
    return '"' + "".join(c if c not in '"\\' and 32 <= ord(c) < 127 else f"\\{ord(c):02X}"
                         for c in s) + '"'


def lower(graph_bytes: bytes, target: str = "llvm-cpu:host", verify: bool = True,
          policy: LoweringPolicy | None = None, shape_spec=None, specialize: bool = False) -> Lowered:
    """Lowers a ``schemas/graph.fbs`` graph to MLIR text (parsed and verified by default).

    ``policy`` chooses every form (lowering/policy.py); ``None`` takes ``target``'s defaults.
    ``shape_spec`` (a :class:`graph_ir.dynamic.ShapeSpec`, or its JSON): the arguments carry ``?``
    for its varying dims and one module serves every shape ``shape_spec.resolve`` accepts.
    ``specialize`` (with ``shape_spec``): the module also holds ``@main_static``, the static lowering
    at the built dims (:func:`lower_graph`)."""
    graph = decode_graph(graph_bytes)
    return lower_graph(graph, target, verify, graph_bytes=graph_bytes, policy=policy, shape_spec=shape_spec,
                       specialize=specialize)


@_goldens.recording   # off unless tests/goldens/record.py registers its sink (lowering/_goldens.py)
def lower_graph(graph: GraphDesc, target: str, verify: bool = True, graph_bytes: bytes | None = None,
                policy: LoweringPolicy | None = None, shape_spec=None, specialize: bool = False,
                kernels: dict | None = None, _entry: str = ENTRY_POINT, _reflect: bool = True) -> Lowered:
    """``graph_bytes`` (the graph's FlatBuffer) goes into the module's reflection as ``hipdnn_iree.graph``
    (base64): a restored plan can then be checked against the reference (hipdnn_iree/backend/selfcheck.py).

    ``specialize`` (dynamic lowerings only): the module gets a second public function,
    ``@main_static``, which is the static lowering of the same graph (byte for byte, renamed, without
    reflection); the ABI (``@main``'s reflection) lists it under ``"specializations"`` with the
    exact dims and strides of every bound tensor it serves. Both functions take the same
    arguments in the same order, so a caller picks one per call (plugins/iree_linalg/run.py).

    ``kernels`` (static lowerings for CUDA with ``policy.generated_kernels`` set): ``{pattern key:
    (GeneratedKernel, ...)}`` from the engine's generator; each matmul pattern
    (``lowering/ops/generated_matmul.py``), sdpa pattern (``lowering/ops/generated_sdpa.py``) and conv
    pattern (``lowering/ops/generated_conv.py``) with kernels is emitted as one ``hal.dispatch.extern``."""
    if policy is None:
        policy = LoweringPolicy.for_target(target)
    elif policy.target != target:
        raise GraphError(f"lowering policy is for target {policy.target!r}, not {target!r}", "internal")
    if not graph.nodes:
        raise GraphError(f"graph '{graph.name}' has no nodes")
    _check_sizes(graph)
    produced = graph.output_uids()
    bound = graph.bound_tensors()
    em = Emitter()
    spec, dyn = _dynamic(graph, shape_spec)
    ctx = LowerContext(graph, em, policy, dyn, symbol_prefix="" if _entry == ENTRY_POINT else f"{_entry}_")
    args, abi_tensors, outputs = [], [], []
    raw_args: dict = {}   # uid -> the bound argument as it is (memory-order shape): generated kernels read it
    for i, t in enumerate(bound):
        what = f"tensor '{t.name}' (uid {t.uid})"
        elem = storage_type(t.data_type, what)
        role = "output" if t.uid in produced else "input"
        # NOTE: an input (only read) may alias (a gather layout); an output may not
        lay = physical_layout(t.dims, t.strides, what, output=role == "output")
        if dyn is not None:
            lay = _dyn_layout(lay, dyn[t.uid])
        if role == "output" and lay.bcast_axes:
            raise GraphError(f"{what}: an output cannot have stride 0 on axes {list(lay.bcast_axes)}")
        arg = f"%arg{i}"
        attr = ""
        arg_shape = _byte_shape(t, lay, what)
        if role == "output":
            attr = f" {{iree.abi.output = {len(outputs)} : index}}"
            outputs.append((t, lay, Value(arg, arg_shape, elem)))
        args.append(f"{arg}: {tensor_type(arg_shape, elem)}{attr}")
        raw_args[t.uid] = Value(arg, arg_shape, elem)
        abi_tensors.append({"uid": t.uid, "name": t.name, "role": role, "arg": i,
                            "data_type": _DTYPE_NAMES.get(t.data_type, str(t.data_type)),
                            "dims": list(t.dims), "strides": list(t.strides)})
        if role == "input":
            def read(t=t, lay=lay, arg=arg, arg_shape=arg_shape, elem=elem) -> Value:
                """The argument's elements in logical order (codes for minifloat types)."""
                v = Value(arg, arg_shape, elem)
                if arg_shape != lay.phys_shape:
                    v = unpack_codes(em, v)
                if not lay.is_dense:
                    v = strided.read(em, v, lay)
                kept = [a for a in range(len(t.dims)) if a not in lay.bcast_axes]
                # memory order -> logical order of the kept axes
                v = em.transpose(v, [lay.order.index(a) for a in kept])
                return em.broadcast(v, ctx.dims(t.uid), lay.bcast_axes)
            if t.data_type in MINIFLOAT_FORMATS:
                ctx.codes[t.uid] = read   # read again where a dispatch region needs them (block_scale.py)
            ctx.values[t.uid] = ctx.decode_input(t.uid, read())
    if not outputs:
        raise GraphError(f"graph '{graph.name}' has no output tensor: mark one with set_output(True)")
    generated = _generated(graph, policy, kernels, dyn)
    for i, node in enumerate(graph.nodes):
        if i in generated:
            pattern, kerns = generated[i]
            if isinstance(pattern, SdpaPattern):
                from lowering.ops.generated_sdpa import lower_pattern
                lower_pattern(ctx, em, pattern, kerns, raw_args)
            elif isinstance(pattern, ConvPattern):
                from lowering.ops.generated_conv import lower_pattern as lower_conv
                lower_conv(ctx, em, pattern, kerns, raw_args)
            elif pattern is not None:
                from lowering.ops.generated_matmul import emit_extern
                res = emit_extern(em, pattern, kerns, [raw_args[o.uid] for o in pattern.operands])
                ctx.define(pattern.out_uid, Value(res, ctx.dims(pattern.out_uid), pattern.out_dtype))
            continue
        fn = LOWERINGS.get(node.kind)
        if fn is None:
            raise GraphError(f"node '{node.name}': op kind {node.kind.name} has no lowering", "unsupported")
        ctx.node_index = i
        fn(ctx, node)
    results = []
    for t, lay, run in outputs:
        v = ctx.stored(t.uid)
        if v is None:
            raise GraphError(f"output tensor '{t.name}' (uid {t.uid}) is never produced")
        if tuple(lay.order) != tuple(range(len(lay.order))) and needs_relayout_barrier(ctx, t.uid):
            v = propagation_barrier(em, v)   # NOTE: an IREE CUDA fault, see lowering/ops/matmul.py
        v = em.transpose(v, lay.order)
        if run.shape != lay.phys_shape:
            v = pack_codes(em, v)
        # NOTE: a strided output is written into the caller's run: its other elements keep their values
        results.append(v if lay.is_dense else strided.write(em, run, v, lay))
    abi = {"version": ABI_FORMAT_VERSION, "graph": graph.name, "target": target,
           "entry": ENTRY_POINT, "tensors": abi_tensors}
    if spec is not None:
        abi["shape_spec"] = spec.to_json()
    static_fn = []
    if specialize and spec is not None:
        static = lower_graph(graph, target, verify=False, policy=policy, _entry=STATIC_ENTRY, _reflect=False)
        lines = static.mlir.split("\n")
        assert lines[0] == "module {" and lines[-2:] == ["}", ""], "static lowering's module layout changed"
        static_fn = lines[1:-2]
        abi["specializations"] = [{"entry": STATIC_ENTRY, "tensors": [
            [t["uid"], list(t["dims"]), list(t["strides"])] for t in abi_tensors]}]
    refl_graph = ""
    if graph_bytes is not None:
        import base64
        refl_graph = f", {GRAPH_KEY} = \"{base64.b64encode(bytes(graph_bytes)).decode('ascii')}\""
    refl = (f"iree.reflection = {{{REFLECTION_KEY} = {_mlir_string(json.dumps(abi, separators=(',', ':')))}"
            f"{refl_graph}}}")
    res_types = ", ".join(r.type for r in results)
    attrs = f" attributes {{{refl}}}" if _reflect else ""
    header = f"func.func @{_entry}({', '.join(args)}) -> ({res_types}){attrs} {{"
    body = _dim_lines(spec, dyn, bound, args) + em.lines + [f"  return {', '.join(r.ssa for r in results)} : {res_types}"]
    text = "\n".join(["module {", header, *body, "}", *ctx.functions, *static_fn, "}", ""])
    if verify:
        verify_mlir(text)
    return Lowered(text, abi)


def _generated(graph: GraphDesc, policy: LoweringPolicy, kernels, dyn) -> dict:
    """Node position -> (pattern, its kernels) at a pattern's first node (the matmul, the sdpa, the conv),
    (None, None) at the other nodes it covers; empty without kernels (IREE's code for every node)."""
    if not kernels or not policy.generated_kernels or dyn is not None:
        return {}
    from lowering.ops.generated_matmul import find_patterns
    from lowering.ops.generated_sdpa import find_sdpa_patterns
    from lowering.ops.generated_conv import find_conv_patterns
    out: dict = {}
    for p in find_patterns(graph) + find_sdpa_patterns(graph) + find_conv_patterns(graph):
        kerns = kernels.get(p.key())
        if not kerns:
            continue
        out[p.nodes[0]] = (p, tuple(kerns))
        for j in p.nodes[1:]:
            out[j] = (None, None)
    return out


def _dynamic(graph: GraphDesc, shape_spec):
    """``(spec, uid -> dims with Syms)`` for a dynamic lowering; ``(None, None)`` for a static one."""
    if shape_spec is None:
        return None, None
    from lowering._emit import Sym
    from graph_ir.dynamic import ShapeSpec
    spec = ShapeSpec.from_json(shape_spec) if isinstance(shape_spec, str) else shape_spec
    for t in graph.tensors:
        if tuple(spec.built.get(t.uid, ())) != tuple(t.dims):
            raise GraphError(f"shape spec does not fit graph '{graph.name}': tensor '{t.name}' (uid {t.uid}) "
                                f"has dims {list(t.dims)}, the spec was made for "
                                f"{list(spec.built[t.uid]) if t.uid in spec.built else 'no such tensor'}")
    syms: dict = {}
    for name in spec.symbols:
        syms[name] = Sym(name, f"%dim_{name}")

    def sym(d):
        if isinstance(d, int):
            return d
        if isinstance(d, str):
            return syms[d]
        key = d.text()
        if key not in syms:
            syms[key] = Sym(key, f"%dimd{len(syms)}")
            derived[key] = d
        return syms[key]

    derived: dict = {}
    dyn = {t.uid: tuple(sym(d) for d in spec.dims[t.uid]) for t in graph.tensors}
    dyn[_DERIVED] = tuple((syms[k], d) for k, d in derived.items())
    return spec, dyn


_DERIVED = "derived"   # key of dyn holding (Sym, Derived) pairs: sizes computed from symbols at entry


def _dyn_layout(lay, dims):
    """``lay`` with the tensor's dims (Syms included); a strided layout cannot have varying dims."""
    from dataclasses import replace
    if not any(not isinstance(d, int) for d in dims):
        return lay
    if not lay.is_dense or lay.bcast_axes:
        raise GraphError(f"tensor with dims {list(lay.dims)} and strides {list(lay.strides)}: varying dims "
                            "are not supported for strided (non-dense) or broadcast (stride 0) layouts", "unsupported")
    return replace(lay, dims=tuple(dims))


def _dim_lines(spec, dyn, bound, args) -> list[str]:
    """``tensor.dim`` of the first bound tensor carrying each symbol, at the top of the body."""
    if spec is None:
        return []
    from lowering._emit import Sym
    lines, done = [], set()
    arg_of = {t.uid: (i, a.split(":", 1)[1].split("{")[0].strip()) for i, (t, a) in enumerate(zip(bound, args))}
    for t in bound:
        lay = physical_layout(t.dims, t.strides)
        for axis, d in enumerate(dyn[t.uid]):
            if isinstance(d, Sym) and d.name in spec.symbols and d.name not in done:
                done.add(d.name)
                i, typ = arg_of[t.uid]
                pos = lay.order.index(axis)
                lines.append(f"  %dimc_{d.name} = arith.constant {pos} : index")
                lines.append(f"  {d.ssa} = tensor.dim %arg{i}, %dimc_{d.name} : {typ}")
    missing = [s for s in spec.symbols if s not in done]
    if missing:
        raise GraphError(f"symbols {missing} are carried by no bound tensor", "internal")
    for n, (s, d) in enumerate(dyn[_DERIVED]):
        v = f"%dim_{d.of}"
        for j, step in enumerate(d.steps):
            tag = f"{n}_{j}"
            lines += [f"  %dimk{tag} = arith.constant {step.pad - step.extent} : index",
                      f"  %dims{tag} = arith.constant {step.stride} : index",
                      f"  %dima{tag} = arith.addi {v}, %dimk{tag} : index",
                      # NOTE: the numerator is >= 0 for every size resolve() accepts: floor division
                      f"  %dimq{tag} = arith.divsi %dima{tag}, %dims{tag} : index",
                      f"  %dim1{tag} = arith.constant 1 : index"]
            v = s.ssa if j == len(d.steps) - 1 else f"%dimv{tag}"
            lines.append(f"  {v} = arith.addi %dimq{tag}, %dim1{tag} : index")
    return lines


def _byte_shape(t, lay, what: str) -> tuple:
    """The shape of a tensor's argument: its memory-order shape, with the innermost axis halved for
    FP4 (two codes per byte, graph_ir/dtypes.py), which must then be dense, static and even."""
    if t.data_type not in CODES_PER_BYTE:
        return lay.phys_shape
    n = CODES_PER_BYTE[t.data_type]
    if not lay.is_dense:
        raise GraphError(f"{what}: a {_DTYPE_NAMES.get(t.data_type)} tensor is stored {n} codes per byte and must be "
                         f"dense; strides {list(t.strides)} for dims {list(t.dims)} are not", "unsupported")
    shape = lay.phys_shape
    if not shape or any(not isinstance(d, int) for d in shape):
        raise GraphError(f"{what}: a {_DTYPE_NAMES.get(t.data_type)} tensor needs a fixed memory shape with at least "
                         f"one axis (packed {n} codes per byte); got {[str(d) for d in shape]}", "unsupported")
    if shape[-1] % n:
        raise GraphError(f"{what}: a {_DTYPE_NAMES.get(t.data_type)} tensor is stored {n} codes per byte along its "
                         f"innermost memory axis, whose size {shape[-1]} must then be a multiple of {n}", "unsupported")
    return packed_shape(t.data_type, shape)


# NOTE: what any target can address (x86-64 user space); the frontend refuses larger tensors at
# validate(), this catches graphs that arrive as bytes (kind-1 plans, hipDNN graphs).
MAX_TENSOR_BYTES = 2**47


def _check_sizes(graph: GraphDesc) -> None:
    from lowering._emit import _FLOAT_WIDTH, _INT_WIDTH
    for t in graph.tensors:
        if not t.dims:
            continue
        strides = t.strides if len(t.strides) == len(t.dims) else [1] * len(t.dims)
        span = 1 + sum((d - 1) * abs(s) for d, s in zip(t.dims, strides)) if all(d > 0 for d in t.dims) else 0
        try:
            bits = {**_FLOAT_WIDTH, **_INT_WIDTH}[storage_type(t.data_type)]
        except (KeyError, GraphError):
            bits = 8
        if max(span, 1) * max(bits // 8, 1) > MAX_TENSOR_BYTES or any(d >= 2**62 for d in t.dims):
            raise GraphError(f"tensor '{t.name}' (uid {t.uid}): dims {list(t.dims)} span more than "
                                f"{MAX_TENSOR_BYTES} bytes (2**47), more than a target can address")


def verify_mlir(text: str) -> None:
    """Parses and verifies ``text`` with ``iree.compiler.ir``; raises GraphError with diagnostics.

    When the module fails and holds a custom op's registered function that fails on its own too,
    the error names that custom op (kind "invalid": the caller's code, not this project's)."""
    why = _check_mlir(text)
    if why is None:
        return
    from lowering.ops.custom_op import custom_functions
    for op_id, node, fn in custom_functions(text):
        own = _check_mlir(f"module {{\n{fn}\n}}\n")
        if own is not None:
            raise GraphError(f"custom_op '{node}' ('{op_id}'): its registered MLIR function {own}\n--- function "
                             f"---\n{fn}")
    raise GraphError(f"emitted MLIR {why}\n--- MLIR ---\n{text}", "internal")


def _check_mlir(text: str) -> str | None:
    """None when ``text`` parses and verifies; else "does not parse: ..." or "fails verification: ..."."""
    from iree.compiler import ir  # NOTE: imported here so restoring a plan never loads the compiler

    with ir.Context() as context:
        diags = []
        handle = context.attach_diagnostic_handler(lambda d: diags.append(str(d)) or True)
        try:
            module = ir.Module.parse(text)
            ok = module.operation.verify()
        except Exception as e:  # MLIRError carries the parser's diagnostics
            return f"does not parse: {e}"
        finally:
            handle.detach()
        return None if ok else "fails verification: " + "; ".join(diags)
