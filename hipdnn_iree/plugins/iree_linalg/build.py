"""Building a plan: graph bytes + engine config -> lowering policy and flags -> cached or compiled
``.vmfb`` per target -> a context loaded on the session's device.

The graph is decoded once per build and lowered once per target (twice on a compile cache miss: the
unverified text keys the cache, the verified one is compiled); the compile cache key is the MLIR
text, the target, every compiler flag (spec files by content), the compiler's identity and the ABI
and entry format versions (``cache.py``), so a change of any knob or policy field that changes the
module gives another entry, never a cached one built under other settings.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

from hipdnn_iree.plugin_sdk.errors import to_hipdnn
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.iree_linalg import cache as _cache
from hipdnn_iree.plugins.iree_linalg.context import ENGINE_NAME, IreeExecutionContext, tensors_from_abi
from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, Resolved, resolve, shape_specialize
from hipdnn_iree.plugins.iree_linalg.session import IreeSession
from hipdnn_iree.plugins.iree_linalg.targets import Target
from lowering import LOWERINGS
from graph_ir import GraphError, decode_graph
from graph_ir.desc import GraphDesc, unsupported_reason

MEMO_GRAPHS = 4   # decoded graphs a session keeps (one build asks for one graph several times)


def _decoded(op_graph, session: IreeSession | None) -> GraphDesc:
    """``decode_graph(op_graph)``, memoized in ``session`` (keyed by the bytes themselves: a bytes
    object caches its hash, and equal bytes decode to equal graphs), so that
    get_applicable_engine_ids, get_engine_configs and the build decode one graph once."""
    memo = session.decoded_graphs if session is not None else None
    key = op_graph if isinstance(op_graph, bytes) else bytes(op_graph)
    if memo is not None:
        hit = memo.get(key)
        if hit is not None:
            return hit
    desc = decode_graph(key)
    if memo is not None:
        memo[key] = desc
        while len(memo) > MEMO_GRAPHS:
            try:
                del memo[next(iter(memo))]
            except (KeyError, StopIteration, RuntimeError):   # NOTE: another thread trimmed it first
                break
    return desc


def decode(op_graph: bytes, session: IreeSession | None = None) -> GraphDesc:
    try:
        return _decoded(op_graph, session)
    except GraphError as e:
        raise to_hipdnn(e, "graph", "IREE_LINALG cannot read the op graph: ") from None


def applicable(op_graph: bytes, session: IreeSession | None = None) -> bool:
    try:
        g = _decoded(op_graph, session)
    except GraphError:
        return False
    return all(n.kind in LOWERINGS for n in g.nodes) and unsupported_reason(g, tuple(LOWERINGS)) is None


def build(session: IreeSession, op_graph: bytes, knobs: dict, engine_name: str = ENGINE_NAME,
          desc: GraphDesc | None = None, refusal: tuple[str, str] = ("", "graph"), dynamic=None,
          load: bool = True) -> IreeExecutionContext:
    """One context: a module per session target (FUSPLAN kind 3 when several), the one for the
    session's own target loaded on its device. ``refusal``: (what the graph is, where it came from:
    ``"graph"`` or ``"plan"``, plugin_sdk/errors.py) for the refusals of graphs that cannot be
    lowered. ``dynamic``: a dynamic-shape build (backend/plan.py): the module takes symbolic dims;
    its kernel cache is asked before compiling. With ``SHAPE_SPECIALIZE`` on (AUTO: override-shape
    builds) the module also holds the static function of the build shape (lowering/_lower.py
    ``specialize``; run.entry_for picks per call).
    ``load=False``: the module is not loaded on the device (``IreeSession.load`` does it later)."""
    desc = desc if desc is not None else decode(op_graph, session)
    summary = GraphSummary.of(desc)
    targets = session.targets or (session.target,)
    spec = _spec(dynamic)
    kc = (dynamic or {}).get("kernel_cache")
    special = shape_specialize(knobs, spec, bool((dynamic or {}).get("override")))
    if len(targets) == 1:
        ctx = _build_one(session, targets[0], op_graph, desc, summary, knobs, refusal, spec, kc, special)
        ctx.cpu_features = cpu_features_of(ctx)
    else:
        # NOTE: each target compiles in its own child process (compile.py); threads just wait on them.
        workers = max(1, min(len(targets), os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            built = list(pool.map(lambda t: _build_one(session, t, op_graph, desc, summary, knobs, refusal, spec, kc,
                                                       special), targets))
        for c in built:
            c.cpu_features = cpu_features_of(c)
        ctx = built[targets.index(session.target)]
        ctx.variants = tuple((c.target, c.vmfb, c.compiler_version) for c in built)
        ctx.variant_features = {str(c.target): c.cpu_features for c in built if c.cpu_features}
    ctx.engine_name, ctx.knobs = engine_name, dict(knobs)
    if knobs.get("GPU_KERNELS") == "GENERATED" and not getattr(ctx.policy, "generated_kernels", ""):
        ctx.knobs["GPU_KERNELS"] = "IREE"   # API.md: no pattern (or no CUDA target): reports what was built
    ctx.shape_spec, ctx.override = spec, bool((dynamic or {}).get("override"))
    if load:
        session.load(ctx)
    return ctx


def cpu_features_of(ctx: IreeExecutionContext) -> str:
    """The "+" LLVM CPU features an llvm-cpu module needs ("" for other targets): read from the
    target attribute IREE wrote into the module, else asked of the compiler (cpufeatures.py)."""
    if ctx.target.backend != "llvm-cpu":
        return ""
    from hipdnn_iree.plugins.iree_linalg import cpufeatures
    found = cpufeatures.features_in_vmfb(ctx.vmfb)
    if found is None:   # NOTE: a module without a dispatch carries no executable target attribute
        found = cpufeatures.resolve(ctx.target, ctx.compile_flags)
    return cpufeatures.canonical(found)


def source_text(op_graph: bytes, target: str, dynamic=None) -> str:
    """The verified MLIR a build with every knob AUTO compiles for ``target`` (no device needed)."""
    from hipdnn_iree.plugins.iree_linalg.compile import find_compiler
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    parsed = parse_target(target)
    desc = decode(op_graph)
    spec = _spec(dynamic)
    knobs: dict = {}
    resolved = resolve(parsed, GraphSummary.of(desc), knobs, dynamic=spec is not None and spec.is_dynamic())
    special = shape_specialize(knobs, spec, bool((dynamic or {}).get("override")))
    find_compiler()   # NOT_SUPPORTED naming iree-base-compiler when it is missing (the MLIR is verified with it)
    return lower(desc, op_graph, resolved, shape_spec=spec, specialize=special).mlir


def _spec(dynamic):
    if not dynamic:
        return None
    from graph_ir.dynamic import ShapeSpec
    try:
        return ShapeSpec.from_json(dynamic["shape_spec"])
    except GraphError as e:
        raise to_hipdnn(e, "graph", "IREE_LINALG: the dynamic build's shape spec is unreadable: ") from None
    except (KeyError, TypeError, ValueError) as e:
        raise HipdnnError(Status.BAD_PARAM, f"IREE_LINALG: the dynamic build's shape spec is unreadable: {e}") from None


def topology_key(desc: GraphDesc, spec) -> str:
    """What a compiled dynamic module depends on, without the dims that may vary: the ops and their
    attributes, every tensor's uid, type and role, bound tensors' fixed dims and memory order
    (strides of strided views), scalar values. Graph, node and tensor names are left out."""
    import hashlib
    from dataclasses import replace as _replace
    from graph_ir.layout import physical_layout
    varying = {int(u): set(d) for u, d in spec.varying().items()}
    tensors = []
    for t in desc.tensors:
        item = [t.uid, t.data_type, t.is_virtual, t.is_scalar, t.scalar_value if t.is_scalar else 0.0]
        if not t.is_virtual and not t.is_scalar:
            dims = [None if i in varying.get(t.uid, ()) else int(d) for i, d in enumerate(t.dims)]
            try:
                lay = physical_layout(t.dims, t.strides)
                form = [list(lay.order), sorted(lay.bcast_axes), lay.is_dense]
            except GraphError:
                form = None
            if form is None or not form[2]:
                form = [list(t.strides)]
            item += [dims, form]
        tensors.append(item)
    nodes = [repr(_replace(n, name="")) for n in desc.nodes]
    text = json.dumps([desc.io_data_type, desc.intermediate_data_type, desc.compute_data_type, tensors, nodes],
                      default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _abi_at(abi: dict, desc: GraphDesc) -> dict:
    """A kernel-cache module's ABI with this graph's own dims, strides and names (its module was
    built from another graph of the same topology)."""
    out = dict(abi)
    out["tensors"] = [dict(t, dims=list(desc.tensor(int(t["uid"])).dims),
                           strides=list(desc.tensor(int(t["uid"])).strides),
                           name=desc.tensor(int(t["uid"])).name) for t in abi["tensors"]]
    return out


def _build_one(session: IreeSession, target: Target, op_graph: bytes, desc: GraphDesc, summary: GraphSummary,
               knobs: dict, refusal: tuple, spec=None, kernel_cache=None, special=False) -> IreeExecutionContext:
    resolved = resolve(target, summary, knobs, dynamic=spec is not None and spec.is_dynamic())
    resolved, kernels = generated_kernels(desc, resolved, spec)
    flags = resolved.flags + tuple(session.compile_flags)   # NOTE: the caller's flags last: they win
    kc_key = None
    if spec is not None:
        # NOTE: the shape spec and the specialization show in the MLIR, hence in the compile cache key
        if kernel_cache is not None:
            # NOTE: a hit serves another shape of the topology with this module as is: its static
            # function stays the first graph's (its ABI says which dims), the others run dynamic code
            kc_key = (ENGINE_NAME, topology_key(desc, spec), str(target), _cache.key_flags(flags),
                      resolved.policy.to_json(), special)
            got = kernel_cache.get(kc_key)
            if got is not None:   # NOTE: compiled for another graph of this topology: nothing is lowered
                abi = _abi_at(got.abi, desc)
                return IreeExecutionContext(got.vmfb, abi, target, tensors_from_abi(abi),
                                            dispatch_count=got.dispatch_count, mlir=got.mlir, compile_flags=got.flags,
                                            compiler_version=got.compiler_version, policy=resolved.policy)
    store = _cache.resolve(session.cache)
    remote = _cache.shared_store(session.store, store)
    if store is None and remote is None:
        from hipdnn_iree.plugins.iree_linalg.compile import find_compiler
        find_compiler()   # NOT_SUPPORTED naming iree-base-compiler when it is missing (lowering verifies with it)
        lowered = lower(desc, op_graph, resolved, refusal=refusal, shape_spec=spec, specialize=special,
                        kernels=kernels)
        key = None
    else:
        # NOTE: the key is the MLIR text: lower first (pure Python, no compiler), verify only on a miss
        lowered = lower(desc, op_graph, resolved, verify=False, refusal=refusal, shape_spec=spec, specialize=special,
                        kernels=kernels)
        key = _cache.key_of(lowered.mlir, target, flags)
        hit = store.get(key) if store is not None else None
        if hit is None and remote is not None:
            hit = _cache.remote_get(remote, key)
            if hit is not None and store is not None:
                store.put(key, hit)   # NOTE: the next build on this machine needs no network
        if hit is not None:   # NOTE: a hit skips the compiler (it is not imported)
            if kc_key is not None:
                kernel_cache.put(kc_key, hit)
            return IreeExecutionContext(hit.vmfb, hit.abi, target, tensors_from_abi(hit.abi),
                                        dispatch_count=hit.dispatch_count, mlir=hit.mlir, compile_flags=hit.flags,
                                        compiler_version=hit.compiler_version or _cache.compiler_version_string(),
                                        policy=resolved.policy)
        from hipdnn_iree.plugins.iree_linalg.compile import find_compiler
        find_compiler()
        verify(lowered.mlir, refusal)   # the text just keyed, verified once (iree.compiler.ir)
    from hipdnn_iree.plugins.iree_linalg.compile import compile_mlir, compiler_version
    try:
        compiled = compile_mlir(lowered.mlir, target, flags)
    except HipdnnError as e:
        flags = _untiled_retry(e, flags, knobs)
        if flags is None:
            raise
        compiled = compile_mlir(lowered.mlir, target, flags)
    ctx = IreeExecutionContext(compiled.vmfb, lowered.abi, target, tensors_from_abi(lowered.abi),
                               dispatch_count=compiled.dispatch_count, mlir=lowered.mlir,
                               compile_flags=compiled.flags, compiler_version=compiler_version(),
                               policy=resolved.policy)
    entry = _cache.CachedModule(compiled.vmfb, lowered.abi, compiled.dispatch_count, compiled.flags,
                                lowered.mlir, ctx.compiler_version)
    if store is not None:
        store.put(key, entry)
    if remote is not None:
        _cache.remote_put(remote, key, entry)
    if kc_key is not None:
        kernel_cache.put(kc_key, entry)
    return ctx


def generated_kernels(desc: GraphDesc, resolved: Resolved, spec=None) -> tuple[Resolved, dict | None]:
    """``(resolved, {pattern key: kernels})`` when the policy asks for generated kernels and the graph
    has patterns (kernels generated here, with Triton); ``(resolved without them, None)`` when it has
    none (the module is IREE's, and reports GPU_KERNELS=IREE); ``(resolved, None)`` otherwise."""
    from dataclasses import replace as _replace
    if not resolved.policy.generated_kernels:
        return resolved, None
    from lowering.ops.generated_matmul import find_patterns
    from lowering.ops.generated_sdpa import find_sdpa_patterns
    from lowering.ops.generated_conv import find_conv_patterns
    patterns = find_patterns(desc) + find_sdpa_patterns(desc) if spec is None else []
    if spec is None and str(resolved.policy.target).startswith("cuda"):
        patterns += find_conv_patterns(desc)   # NOTE: the conv template is CUDA only (no HSACO yet)
    if not patterns:
        return _replace(resolved, policy=resolved.policy.with_(generated_kernels="")), None
    from hipdnn_iree.plugins.iree_linalg.kernels import generate
    return resolved, {p.key(): generate(p, resolved.policy.target) for p in patterns}


def _untiled_retry(err: HipdnnError, flags: tuple, knobs: dict):
    """The flags to compile again with when a CPU compile with AUTO's data tiling failed on IREE's stack
    limit, else None.

    NOTE: IREE 3.13's llvm-cpu data tiling of a matmul whose operand is a padded strided view (the view's
    gather fused into the packing dispatch) asks for more than its 32 KiB stack limit ("exceeded stack
    allocation limit"): f32 [1, 51, 104] x [1, 104, 20] with A's rows 107 apart failed to build (found by
    tests/fuzz_ops.py). AUTO then builds the graph untiled, as DATA_TILING=OFF does; an explicit ON fails.
    """
    from hipdnn_iree.plugins.iree_linalg.targets import CPU_FLAGS
    if (err.status != Status.INTERNAL_ERROR or "exceeded stack allocation limit" not in str(err)
            or knobs.get("DATA_TILING", "AUTO") != "AUTO" or not set(CPU_FLAGS) <= set(flags)):
        return None
    return tuple(f for f in flags if f not in CPU_FLAGS)


def lower(desc: GraphDesc, op_graph: bytes, resolved: Resolved, verify: bool = True,
          refusal: tuple[str, str] = ("", "graph"), shape_spec=None, specialize: bool = False, kernels=None):
    """The graph's MLIR under ``resolved.policy`` (with symbolic dims where ``shape_spec`` lets
    dims vary, plus the build shape's static function with ``specialize``); lowering refusals as
    HipdnnErrors (plugin_sdk/errors.py's table for ``refusal``'s origin)."""
    from lowering._lower import lower_graph
    what, origin = refusal
    try:
        if shape_spec is not None:
            return lower_graph(desc, resolved.policy.target, verify=verify, graph_bytes=op_graph,
                               policy=resolved.policy, shape_spec=shape_spec, specialize=specialize)
        return lower_graph(desc, resolved.policy.target, verify=verify, graph_bytes=op_graph, policy=resolved.policy,
                           kernels=kernels)
    except GraphError as e:
        raise to_hipdnn(e, origin, f"IREE_LINALG cannot lower the graph{what}: ") from None


def verify(mlir: str, refusal: tuple[str, str] = ("", "graph")) -> None:
    """Verifies lowered text with the compiler's parser; a failure reported as :func:`lower` reports it."""
    from lowering._lower import verify_mlir
    what, origin = refusal
    try:
        verify_mlir(mlir)
    except GraphError as e:
        raise to_hipdnn(e, origin, f"IREE_LINALG cannot lower the graph{what}: ") from None


def knobs_json(knobs: dict) -> str:
    return json.dumps(dict(knobs), sort_keys=True, separators=(",", ":"))
