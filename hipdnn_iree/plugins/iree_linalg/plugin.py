"""The ``IREE_LINALG`` engine: graph -> linalg MLIR -> IREE ``.vmfb`` -> IREE runtime.

The plugin object is stateless and shared: what belongs to one handle lives in its session
(``session.py``). The entry points are hipDNN's (``plugin_sdk/contract.py``); the work is done by
``build.py`` (lowering policy, compile cache, compiler), ``payload.py`` (FUSPLAN: serialize and
restore, no compiler), ``run.py`` (binding buffers, invoking) and ``describe.py`` (``inspect``).
"""
from __future__ import annotations

from hipdnn_iree.plugin_sdk.engine_config import HeurMode
from hipdnn_iree.plugin_sdk.engine_ids import FUSILLI_ENGINE_ID, FUSILLI_ENGINE_NAME, engine_id_from_name
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.version import __version__
from hipdnn_iree.plugins.iree_linalg import build as _build
from hipdnn_iree.plugins.iree_linalg import payload as _payload
from hipdnn_iree.plugins.iree_linalg import run as _run
from hipdnn_iree.plugins.iree_linalg.context import IreeExecutionContext  # noqa: F401  (re-exported)
from hipdnn_iree.plugins.iree_linalg.knobs import KNOBS, GraphSummary, candidates
from hipdnn_iree.plugins.iree_linalg.session import IreeSession, create_session

ENGINE_NAME = _payload.ENGINE_NAME
ENGINE_ID = engine_id_from_name(ENGINE_NAME)


def _session(session) -> IreeSession:
    if not isinstance(session, IreeSession):
        raise HipdnnError(Status.NOT_INITIALIZED, "IREE_LINALG needs its session (create_session) for this call: "
                                                  "use it through a handle (hd.create_handle)")
    return session


class IreeLinalgPlugin:
    """Engine plugin object: stateless; one per process is enough for every handle."""

    name = _payload.PLUGIN_NAME
    version = __version__
    # NOTE: the engine also answers for hipDNN's fusilli-provider id, so that plans whose envelope
    # names FUSILLI_ENGINE (FUSPLAN kind 1, a hipDNN graph) restore here. Building keeps IREE_LINALG:
    # get_applicable_engine_ids offers only that id, so heuristics never pick FUSILLI_ENGINE.
    engine_names = {ENGINE_ID: ENGINE_NAME, FUSILLI_ENGINE_ID: FUSILLI_ENGINE_NAME}
    # serialize_compiled_plan(payload=...): the envelope engine_id each payload form is written under
    payload_engine_ids = {"compiled": ENGINE_ID, "hipdnn_graph": FUSILLI_ENGINE_ID}
    # the contract's optional groups this engine implements (plugin_sdk/contract.py); plan_info: the
    # backend hands the envelope fields to the serialization hooks (FUSPLAN signs them)
    capabilities = frozenset({"sessions", "serialization", "plan_info", "plan_compatibility", "hipdnn_graph_payload",
                              "engine_configs", "tuning", "deferred_load", "dynamic_shapes", "description",
                              "source_text"})

    # -- sessions -------------------------------------------------------------------------
    def create_session(self, settings) -> IreeSession:
        return create_session(settings)

    def destroy_session(self, session) -> None:
        pass   # NOTE: devices are shared per process (runtime.py); nothing is held per session

    # -- discovery and engine configs -----------------------------------------------------
    def get_all_engine_ids(self) -> list[int]:
        return [ENGINE_ID, FUSILLI_ENGINE_ID]

    def get_applicable_engine_ids(self, op_graph: bytes, session=None) -> list[int]:
        return [ENGINE_ID] if _build.applicable(op_graph, session if isinstance(session, IreeSession) else None) else []

    def get_workspace_size(self, engine_id: int, op_graph: bytes, session=None) -> int:
        return 0  # IREE allocates its transients itself

    def get_knobs(self, engine_id: int, session=None) -> list:
        """Every knob, less ``GPU_KERNELS`` for a handle whose targets are all CPUs (API.md: absent there)."""
        if isinstance(session, IreeSession):
            targets = session.targets or (session.target,)
            if all(t.backend == "llvm-cpu" for t in targets):
                return [k for k in KNOBS if k.name != "GPU_KERNELS"]
        return list(KNOBS)

    def get_engine_configs(self, engine_id: int, op_graph: bytes, heur_mode, session=None) -> list[dict]:
        """Knob dicts for ``heur_mode`` (knobs.candidates); A takes the tuning database's entry."""
        s = _session(session)
        summary = GraphSummary.of(_build.decode(op_graph, s))
        tuned = self._tuned(s, op_graph) if heur_mode in (HeurMode.A, HeurMode.B) else None
        return candidates(s.target, summary, HeurMode(heur_mode), tuned)

    def _tuned(self, s: IreeSession, op_graph: bytes) -> dict | None:
        from hipdnn_iree.plugins.iree_linalg.tuning_db import TuningDb
        folder = _tuning_folder(s)
        found = TuningDb(folder).lookup(op_graph, s.target_name, s.device_identity) if folder else None
        if found is None and s.store is not None:   # NOTE: winners tuned elsewhere, shared through the plan store
            from hipdnn_iree.plugins.iree_linalg.tuning_db import store_lookup
            found = store_lookup(s.store, op_graph, s.target_name, s.device_identity)
        return found

    def record_tuning(self, engine_id: int, op_graph: bytes, knobs: dict, timings: list, session=None) -> None:
        from hipdnn_iree.plugins.iree_linalg.tuning_db import TuningDb
        s = _session(session)
        folder = _tuning_folder(s)
        name = _build.decode(op_graph).name
        if folder:
            TuningDb(folder).store(op_graph, s.target_name, s.device_identity, knobs, timings, name)
        if s.store is not None:
            from hipdnn_iree.plugins.iree_linalg.tuning_db import store_record
            store_record(s.store, op_graph, s.target_name, s.device_identity, knobs, timings, name)

    # -- build, execute -------------------------------------------------------------------
    def create_execution_context(self, engine_id: int, op_graph: bytes, engine_config=None,
                                 session=None, dynamic=None, defer_load=False) -> IreeExecutionContext:
        """``dynamic``: a dynamic-shape build (``{"shape_spec", "override", "kernel_cache"}``,
        backend/plan.py): one module with symbolic dims, shared through the kernel cache.
        ``defer_load``: compile only; ``load_execution_context`` loads it on the device."""
        knobs = dict(getattr(engine_config, "knobs", None) or {})
        return _build.build(_session(session), op_graph, knobs, dynamic=dynamic, load=not defer_load)

    def source_text(self, op_graph: bytes, target: str, dynamic=None) -> str:
        """The MLIR this engine compiles for ``op_graph`` and ``target`` with every knob AUTO (``hd.Graph.get_mlir``)."""
        return _build.source_text(op_graph, target, dynamic)

    def load_execution_context(self, ctx: IreeExecutionContext, session=None) -> None:
        """Loads a ``defer_load`` build on the session's device, on the calling thread: on a CUDA
        device the VM context must be made where IREE's device context is current (IREE 3.13 on an
        H200: CUDA_ERROR_INVALID_CONTEXT from a build_plans(ALL) worker thread)."""
        if ctx.module is None:
            _session(session).load(ctx)

    def destroy_execution_context(self, ctx: IreeExecutionContext) -> None:
        ctx.view_cache.clear()
        ctx.staging.clear()
        ctx.module = None

    def execute_op_graph(self, ctx: IreeExecutionContext, variant_pack: dict, workspace=None,
                         overrides=None) -> None:
        _run.execute(ctx, variant_pack, overrides)

    # -- serialization hooks --------------------------------------------------------------
    def serialize_execution_context(self, ctx: IreeExecutionContext, engine_config=None, plan_info=None) -> bytes:
        return _payload.serialize(ctx, self.version, plan_info)

    def destroy_serialized_execution_context(self, serialized) -> None:
        pass  # the bytes object is released by Python; nothing else is held

    def create_execution_context_from_serialized(self, serialized, plan_info=None,
                                                 session=None) -> IreeExecutionContext:
        return _payload.restore(_session(session), serialized, plan_info)

    def graph_from_serialized(self, serialized, plan_info=None, session=None) -> bytes:
        """The checked hipDNN graph of a kind-1 payload, without compiling (``hipdnn-iree upgrade``)."""
        return _payload.graph_from_serialized(_session(session), serialized, plan_info)

    def check_plan_compatibility(self, info: dict, session=None) -> None:
        """Rejects plans this handle cannot run, from identity fields (0.1.0 envelopes carry them)."""
        _payload.check_compatibility(_session(session), info)

    def describe_payload(self, envelope, file_bytes: int, engine_name: str, legacy: bool, verify_key=None):
        """``inspect``: every layer of the payload, read without a device or the compiler."""
        from hipdnn_iree.plugins.iree_linalg.describe import describe_payload
        return describe_payload(envelope, file_bytes, engine_name, legacy, verify_key)

    def describe_context(self, ctx: IreeExecutionContext) -> dict:
        """What a built or restored plan says of itself (``EXECUTION_PLAN_ENGINE_CONFIG`` and ``inspect``)."""
        sp = ctx.specialization
        return {"engine_name": ctx.engine_name, "knobs": dict(ctx.knobs), "target": str(ctx.target),
                "override_shapes": bool(ctx.override),
                # specialized dynamic plans: the static function and the dims it serves
                "shape_specialization": None if sp is None else
                {"entry": sp[0], "dims": {u: list(d) for u, (d, _) in sorted(sp[1].items())}}}


def _tuning_folder(s: IreeSession) -> str | None:
    """The tuning database's folder: the compile cache's (a handle's cache=folder, else the default)."""
    from hipdnn_iree.plugins.iree_linalg import cache as _cache
    if isinstance(s.cache, _cache.CompileCache):
        return s.cache.directory
    if isinstance(s.cache, (str,)) or hasattr(s.cache, "__fspath__"):
        import os
        return os.path.abspath(os.fspath(s.cache))
    return _cache.default_dir()
