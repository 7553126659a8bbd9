"""Building a plan: graph bytes + engine config -> lowering policy and flags -> cached or compiled
``.vmfb`` per target -> a context loaded on the session's device.

The graph is decoded once per build and lowered once per target; the compile cache key is the
graph bytes, the target, the resolved lowering policy, every compiler flag, the compiler's
identity and this engine's code (``cache.py``), so a change of any knob or policy field gives
another module, never a cached one built under other settings.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.iree_linalg import cache as _cache
from hipdnn_iree.plugins.iree_linalg.context import IreeExecutionContext, tensors_from_abi
from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, Resolved, resolve
from hipdnn_iree.plugins.iree_linalg.session import IreeSession
from hipdnn_iree.plugins.iree_linalg.targets import Target
from lowering import LOWERINGS, LoweringError, decode_graph
from lowering.graph_ir import GraphDesc, unsupported_reason

_LOWERING_STATUS = {"unsupported": Status.NOT_SUPPORTED, "internal": Status.INTERNAL_ERROR}


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
    except LoweringError as e:
        raise HipdnnError(Status.BAD_PARAM, f"IREE_LINALG cannot read the op graph: {e}") from None


def applicable(op_graph: bytes, session: IreeSession | None = None) -> bool:
    try:
        g = _decoded(op_graph, session)
    except LoweringError:
        return False
    return all(n.kind in LOWERINGS for n in g.nodes) and unsupported_reason(g, tuple(LOWERINGS)) is None


def build(session: IreeSession, op_graph: bytes, knobs: dict, engine_name: str = "IREE_LINALG",
          desc: GraphDesc | None = None, refusal: tuple = ("", _LOWERING_STATUS)) -> IreeExecutionContext:
    """One context: a module per session target (FUSPLAN kind 3 when several), the one for the
    session's own target loaded on its device. ``refusal``: (what the graph is, lowering error kind ->
    status) for the messages of graphs that cannot be lowered."""
    desc = desc if desc is not None else decode(op_graph, session)
    summary = GraphSummary.of(desc)
    targets = session.targets or (session.target,)
    if len(targets) == 1:
        ctx = _build_one(session, targets[0], op_graph, desc, summary, knobs, refusal)
    else:
        # NOTE: each target compiles in its own child process (compile.py); threads just wait on them.
        workers = max(1, min(len(targets), os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            built = list(pool.map(lambda t: _build_one(session, t, op_graph, desc, summary, knobs, refusal), targets))
        ctx = built[targets.index(session.target)]
        ctx.variants = tuple((c.target, c.vmfb, c.compiler_version) for c in built)
    ctx.engine_name, ctx.knobs = engine_name, dict(knobs)
    session.load(ctx)
    return ctx


def _build_one(session: IreeSession, target: Target, op_graph: bytes, desc: GraphDesc, summary: GraphSummary,
               knobs: dict, refusal: tuple) -> IreeExecutionContext:
    resolved = resolve(target, summary, knobs)
    flags = tuple(session.compile_flags) + resolved.flags
    store = _cache.resolve(session.cache)
    key = store.key_for(op_graph, target, flags, resolved.policy.to_json()) if store is not None else None
    hit = store.get(key) if store is not None else None
    if hit is not None:   # NOTE: a hit skips lowering and the compiler (neither is imported)
        return IreeExecutionContext(hit.vmfb, hit.abi, target, tensors_from_abi(hit.abi),
                                    dispatch_count=hit.dispatch_count, mlir=hit.mlir, compile_flags=hit.flags,
                                    compiler_version=hit.compiler_version or _cache.compiler_version_string(),
                                    policy=resolved.policy)
    from hipdnn_iree.plugins.iree_linalg.compile import compile_mlir, compiler_version, find_compiler
    find_compiler()   # NOT_SUPPORTED naming iree-base-compiler when it is missing (lowering verifies with it)
    lowered = lower(desc, op_graph, resolved, refusal=refusal)
    compiled = compile_mlir(lowered.mlir, target, flags)
    ctx = IreeExecutionContext(compiled.vmfb, lowered.abi, target, tensors_from_abi(lowered.abi),
                               dispatch_count=compiled.dispatch_count, mlir=lowered.mlir,
                               compile_flags=compiled.flags, compiler_version=compiler_version(),
                               policy=resolved.policy)
    if store is not None:
        store.put(key, _cache.CachedModule(compiled.vmfb, lowered.abi, compiled.dispatch_count, compiled.flags,
                                           lowered.mlir, ctx.compiler_version))
    return ctx


def lower(desc: GraphDesc, op_graph: bytes, resolved: Resolved, verify: bool = True,
          refusal: tuple = ("", _LOWERING_STATUS)):
    """The graph's MLIR under ``resolved.policy``; lowering refusals as HipdnnErrors."""
    from lowering._lower import lower_graph
    what, statuses = refusal
    try:
        return lower_graph(desc, resolved.policy.target, verify=verify, graph_bytes=op_graph, policy=resolved.policy)
    except LoweringError as e:
        status = statuses.get(e.kind, statuses.get("", Status.BAD_PARAM))
        raise HipdnnError(status, f"IREE_LINALG cannot lower the graph{what}: {e}") from None


def knobs_json(knobs: dict) -> str:
    return json.dumps(dict(knobs), sort_keys=True, separators=(",", ":"))
