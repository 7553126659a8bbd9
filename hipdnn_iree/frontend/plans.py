"""A graph's execution plans: one per engine config, built one or all, timed, one selected.

cuDNN's and hipDNN's model (API.md, "Engine configs, knobs and autotuning"): heuristics give a
ranked list of engine configs; ``build_plans`` builds plan 0 (or all); ``autotune`` times the
built plans on the caller's buffers and selects the fastest; ``execute`` and
``serialize_compiled_plan`` use the selected plan.
"""
from __future__ import annotations

import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from hipdnn_iree import backend as _backend
from hipdnn_iree.backend.engines import REFERENCE_ENGINE
from hipdnn_iree.plugin_sdk.engine_config import BuildPlanPolicy, EngineConfig, HeurMode
from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import as_enum


@dataclass
class PlanSlot:
    config: EngineConfig
    plan: object = None       # ExecutionPlanDescriptor once built
    error: object = None      # the HipdnnError of a failed build


def _progress(message: str) -> None:
    """Progress of long builds (build_plans(ALL), autotune) on stderr, when HIPDNN_IREE_PROGRESS=1."""
    if os.environ.get("HIPDNN_IREE_PROGRESS", "") not in ("", "0"):
        import sys
        print(f"[hipdnn-iree] {message}", file=sys.stderr, flush=True)


def _modes(heur_modes) -> list[HeurMode]:
    if heur_modes is None:
        return [HeurMode.A]
    if isinstance(heur_modes, (HeurMode, int, str)) and not isinstance(heur_modes, bool):
        heur_modes = [heur_modes]
    if not isinstance(heur_modes, (list, tuple)) or not heur_modes:
        raise HipdnnError(Status.BAD_PARAM, f"heur_modes must be a non-empty list of hd.HeurMode, got {heur_modes!r}")
    return [as_enum(HeurMode, m, "heur_modes") for m in heur_modes]


class PlanOps:
    """The plan-list half of ``hd.Graph`` (state set up by ``Graph._reset_build``)."""

    # -- heuristics ------------------------------------------------------------------------
    def create_execution_plans(self, heur_modes=None):
        """Engine configs for every applicable engine (ranked: IREE_LINALG first, a preferred engine
        before all), one plan each, for each heuristic mode in ``heur_modes`` (default ``[HeurMode.A]``)."""
        self._check_not_restored("create_execution_plans")
        modes = _modes(heur_modes)
        if self._op_graph is None:
            raise HipdnnError(Status.NOT_INITIALIZED, "call build_operation_graph(handle) first")
        rm = self._handle.resource_manager
        self._candidates = rm.applicable_engines(self._op_graph, self._preferred)
        self._plans = []
        for eid in self._candidates:
            for mode in modes:
                for cfg in rm.engine_configs(eid, self._op_graph, mode):
                    self._add_slot(cfg)
        self._selected, self._plan = 0, None
        return self

    def _add_slot(self, cfg: EngineConfig) -> int:
        for i, s in enumerate(self._plans):
            if s.config.engine_id == cfg.engine_id and s.config.knobs == cfg.knobs:
                return i
        self._plans.append(PlanSlot(cfg))
        return len(self._plans) - 1

    def get_execution_plan_count(self) -> int:
        return len(self._plans or ())

    def get_knobs_for_engine(self, engine) -> list:
        """The knobs (``hd.Knob``) of an engine, by id or name (the handle's engines)."""
        rm = self._require_handle("get_knobs_for_engine").resource_manager
        return rm.knobs(rm.engine_id_of(engine))

    def create_execution_plan(self, engine, knobs=None):
        """Appends one plan: ``engine`` (id or name) with ``knobs`` (a dict keyed by knob name)."""
        self._check_not_restored("create_execution_plan")
        if self._op_graph is None:
            raise HipdnnError(Status.NOT_INITIALIZED, "call build_operation_graph(handle) first")
        rm = self._handle.resource_manager
        eid = rm.engine_id_of(engine)
        if rm.plugin_for(eid) is None:
            raise HipdnnError(Status.BAD_PARAM, f"engine {engine!r} is not loaded; the handle's engines are: "
                                                f"{rm.loaded_text()}")
        values = rm.check_knobs(eid, knobs)
        if eid not in rm.call(rm.plugin_for(eid), "get_applicable_engine_ids", self._op_graph):
            raise HipdnnError(Status.NOT_SUPPORTED, f"engine {rm.engine_name(eid)} does not support graph '{self.name}'")
        if self._plans is None:
            self._plans, self._candidates, self._selected = [], [eid], 0
        self._add_slot(EngineConfig(eid, rm.engine_name(eid), values))
        return self

    def check_support(self):
        self._check_not_restored("check_support")
        if self._plans is None:
            raise HipdnnError(Status.NOT_INITIALIZED, "call create_execution_plans() first")
        rm = self._handle.resource_manager
        if not self._plans:
            from graph_ir.desc import unsupported_reason
            kinds = sorted({n.kind.name for n in self._nodes})
            why = unsupported_reason(self._desc) if self._desc is not None else None
            raise HipdnnError(Status.NOT_SUPPORTED, f"no loaded engine supports graph '{self.name}' (ops: {kinds})"
                                                    + (f": {why}" if why else ""))
        if self._preferred is not None and self._plans[0].config.engine_id != self._preferred:
            label = getattr(self, "_preferred_label", f"id {self._preferred}")
            if rm.plugin_for(self._preferred) is None:
                raise HipdnnError(Status.NOT_SUPPORTED, f"preferred engine {label} is not loaded; the handle's "
                                                        f"engines are: {rm.loaded_text()}")
            raise HipdnnError(Status.NOT_SUPPORTED, f"preferred engine {label} does not support graph "
                                                    f"'{self.name}'; the handle's engines are: {rm.loaded_text()}")
        self._supported = True
        return self

    # -- building --------------------------------------------------------------------------
    def build_plans(self, policy=BuildPlanPolicy.HEURISTICS_CHOICE):
        """Builds plan 0 (``HEURISTICS_CHOICE``, the default) or every plan (``ALL``, several compiles
        at once). With ALL, a config that fails to build is dropped from the plan list (as cuDNN drops
        an engine config that fails to finalize) with a warning naming it and why; ALL fails only when
        no config builds (NOT_SUPPORTED naming each one's reason)."""
        self._check_not_restored("build_plans")
        policy = as_enum(BuildPlanPolicy, policy, "build_plans policy")
        if not self._supported:
            raise HipdnnError(Status.NOT_INITIALIZED, "call check_support() first")
        if policy == BuildPlanPolicy.HEURISTICS_CHOICE:
            self.build_plan_at_index(0)
        else:
            self._build_many(range(len(self._plans)))
        if self._plan is None:
            self._select(next(i for i, s in enumerate(self._plans) if s.plan is not None))
        return self

    def build_plan_at_index(self, index: int):
        """Builds plan ``index`` (for IREE: compiles it, through the compile cache)."""
        slot = self._slot(index, "build_plan_at_index")
        self._build_slot(slot)
        if self._plan is None and index == self._selected:
            self._plan = slot.plan
        return self

    def _build_slot(self, slot: PlanSlot, defer_load: bool = False) -> None:
        if slot.plan is None:
            slot.plan = _backend.build_execution_plan(self._handle, slot.config.engine_id, self._op_graph,
                                                      [t.uid for t in self._desc.bound_tensors()], slot.config,
                                                      dynamic=self._dynamic_request(), defer_load=defer_load)
            slot.error = None

    def _build_many(self, indices) -> None:
        """Builds the plans at ``indices``, several compiles at once, and loads each on the device
        on this thread (NOTE: a GPU module loaded on a worker thread fails: the device's context is
        current on the thread that made it). Configs that fail are dropped from the plan list."""
        todo = [self._plans[i] for i in indices if self._plans[i].plan is None]
        if not todo:
            return

        start, done = time.perf_counter(), []

        def one(slot):
            t0 = time.perf_counter()
            try:
                self._build_slot(slot, defer_load=True)
            except HipdnnError as e:
                slot.error = e
            done.append(slot)
            _progress(f"graph '{self.name}': config {len(done)} of {len(todo)} {'built' if slot.error is None else 'FAILED'}"
                      f" in {time.perf_counter() - t0:.1f} s ({slot.config}); {time.perf_counter() - start:.1f} s elapsed")
        workers = max(1, min(len(todo), os.cpu_count() or 1))
        _progress(f"graph '{self.name}': building {len(todo)} engine configs, {workers} at a time")
        # NOTE: each IREE compile runs in a child process: threads only wait on them
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, todo))
        for slot in todo:
            if slot.plan is not None:
                try:
                    _backend.load_execution_plan(slot.plan)
                except HipdnnError as e:
                    slot.plan.release()
                    slot.plan, slot.error = None, e
        failed = [s for s in todo if s.plan is None]
        if not failed:
            return
        selected = self._plans[self._selected] if self._plans else None
        self._dropped = getattr(self, "_dropped", []) + [(s.config, s.error) for s in failed]
        self._plans = [s for s in self._plans if s.plan is not None or s not in failed]
        if not any(s.plan is not None for s in self._plans):
            raise HipdnnError(Status.NOT_SUPPORTED, f"graph '{self.name}': no engine config built on "
                                                    f"{self._device_text()}: " + " | ".join(
                                                        f"{c}: {e}" for c, e in self._dropped))
        self._selected = self._plans.index(selected) if selected in self._plans else 0
        self._plan = self._plans[self._selected].plan
        warnings.warn(f"graph '{self.name}': engine configs that failed to build are dropped from the plan list: "
                      + " | ".join(f"{s.config}: {s.error}" for s in failed), RuntimeWarning, stacklevel=3)

    def _device_text(self) -> str:
        h = self._handle
        target = f" (target {h.target})" if h.target else ""
        return f"device {h.device!r}{target}" if h.device is not None else f"compile-only target {h.target}"

    def get_dropped_engine_configs(self) -> list:
        """``[(EngineConfig, HipdnnError), ...]``: the configs ``build_plans(ALL)`` or ``autotune``
        dropped because they failed to build, with why."""
        return list(getattr(self, "_dropped", []))

    def _slot(self, index, what: str) -> PlanSlot:
        if self._plans is None:
            raise HipdnnError(Status.NOT_INITIALIZED, f"{what}: call create_execution_plans() first")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self._plans):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: plan index {index!r} is out of range: the graph has "
                                                f"{len(self._plans)} plan(s)")
        return self._plans[index]

    def _select(self, index: int) -> None:
        self._selected = index
        self._plan = self._plans[index].plan

    def get_engine_config_at_index(self, index: int) -> EngineConfig:
        return self._slot(index, "get_engine_config_at_index").config

    def get_selected_plan_index(self) -> int:
        if self._plans is None:
            raise HipdnnError(Status.NOT_INITIALIZED, "get_selected_plan_index: the graph has no plans")
        return self._selected

    def execute_plan_at_index(self, handle, variant_pack, workspace=None, index: int = 0) -> None:
        """Runs plan ``index`` (built first if it is not)."""
        slot = self._slot(index, "execute_plan_at_index")
        if slot.plan is None:
            self.build_plan_at_index(index)
        self._execute(slot.plan, handle, variant_pack, workspace)

    # -- autotuning ------------------------------------------------------------------------
    def autotune(self, handle, variant_pack, workspace=None):
        """Times the graph's plans on ``handle``'s device with the caller's buffers and selects the
        fastest; returns ``[(index, median_ms), ...]``, fastest first.

        Plans not built yet are built (several compiles at once). When the top engine has a single
        plan, the engine's ``HeurMode.B`` configs are added first. Each candidate's outputs are
        compared with plan 0's; one that disagrees beyond tolerance (or fails) is dropped with a
        warning, never selected. Plans of the reference engine are the oracle, not candidates. The
        result is stored in the engine's tuning database (keyed by graph, target and device), so a
        later ``build()`` of this graph on this kind of device takes it (``HeurMode.A``).
        """
        self._check_not_restored("autotune")
        if self._plans is None or not self._supported:
            raise HipdnnError(Status.NOT_INITIALIZED, "autotune: build the graph first (build(handle), or "
                                                      "create_execution_plans() and check_support())")
        if handle is not self._handle and getattr(handle, "device", None) != self._handle.device:
            raise HipdnnError(Status.BAD_PARAM_STREAM_MISMATCH, f"autotune: the graph was built for device "
                                                                f"{self._handle.device!r}, not {handle!r}")
        rm = self._handle.resource_manager
        top = self._plans[0].config.engine_id
        if sum(1 for s in self._plans if s.config.engine_id == top) < 2:
            for cfg in rm.engine_configs(top, self._op_graph, HeurMode.B):
                self._add_slot(cfg)
        ref = engine_id_from_name(REFERENCE_ENGINE)
        self._build_many([i for i, s in enumerate(self._plans) if s.config.engine_id != ref or top == ref])
        candidates = [(i, s.plan) for i, s in enumerate(self._plans)
                      if s.plan is not None and (s.config.engine_id != ref or top == ref)]
        if not candidates:
            raise HipdnnError(Status.NOT_SUPPORTED, f"autotune: no engine config of graph '{self.name}' built on "
                                                    f"{self._device_text()}")
        _progress(f"graph '{self.name}': autotune: timing {len(candidates)} plans")
        from hipdnn_iree.backend.autotune import time_plans
        timings, _ = time_plans(candidates, variant_pack, workspace)
        best = timings[0][0]
        self._select(best)
        # NOTE: the outputs hold the last candidate's results; the selected plan writes them once more
        self._plan.execute(variant_pack, workspace)
        rm.record_tuning(self._plans[best].config, self._op_graph, timings)
        return timings
