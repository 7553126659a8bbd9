"""``pygraph``'s lifecycle and plan selection: validate, build, heuristics, engines, knobs, notes."""
from __future__ import annotations

import math


from hipdnn_iree.cudnn import _enums as E
from hipdnn_iree.cudnn._handle import check
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.cudnn._common import _default_handle, _translate, _unsupported
from hipdnn_iree.cudnn._tensor import knob

class PlanMethods:
    """The lifecycle and plan methods of ``pygraph``."""


    # -- lifecycle ---------------------------------------------------------------------------------
    @_translate
    def validate(self):
        self._refuse_deferred(validate=True)
        self._hd.validate()
        return self

    @_translate
    def build_operation_graph(self, handle=None):
        if not self._hd._validated:
            self.validate()
        self._hd.build_operation_graph(self._hd_handle(handle))
        return self

    def _hd_handle(self, handle=None):
        h = check(handle) if handle is not None else (self._handle or _default_handle())
        if self._handle is None:
            self._handle = h
        return h.hd

    @_translate
    def create_execution_plans(self, heur_modes=None):
        self._refuse_deferred()
        modes = heur_modes if isinstance(heur_modes, (list, tuple)) else [heur_modes or E.heur_mode.A]
        hd_modes = []
        for m in modes:
            if m == E.heur_mode.INSTANT:
                m = E.heur_mode.A
            hm = E.to_hd(E.HD_HEUR, m, "heur_mode")
            if hm not in hd_modes:
                hd_modes.append(hm)
        self._heur = hd_modes
        if self._hd._op_graph is None:
            self.build_operation_graph()
        self._hd.create_execution_plans(hd_modes)
        if self._deselected:
            self._hd._drop_plans_of(self._deselected)
        self._cudnn_numerics()
        return self

    def _cudnn_numerics(self) -> None:
        """cuDNN's numerics on NVIDIA GPUs: FLOAT convolutions on TF32 tensor cores, as cuDNN (and
        PyTorch) run them: configs that leave ``F32_CONV_MATH`` AUTO get TF32 on a CUDA target."""
        target = str(getattr(self._hd._handle, "target", "") or "")
        if not target.startswith("cuda"):
            return
        rm = self._hd._handle.resource_manager
        has = {}                               # engine id -> whether it has the knob
        for slot in self._hd._plans or []:
            eid, knobs = slot.config.engine_id, slot.config.knobs
            if eid not in has:
                has[eid] = any(k.name == "F32_CONV_MATH" for k in rm.knobs(eid))
            if slot.plan is None and has[eid] and knobs.get("F32_CONV_MATH", "AUTO") == "AUTO":
                knobs["F32_CONV_MATH"] = "TF32"

    @_translate
    def check_support(self):
        self._refuse_deferred()
        self._hd.check_support()
        return self

    @_translate
    def build_plans(self, policy=E.build_plan_policy.HEURISTICS_CHOICE):
        self._refuse_deferred()
        self._policy = E.to_hd(E.HD_POLICY, policy, "build_plan_policy")
        if self._eps:
            self._pending = True     # the baked scalars' values come with the first execute
            return self
        self._hd.build_plans(self._policy)
        return self

    @_translate
    def build_plan_at_index(self, index):
        if self._eps:
            self._pending = True
            return self
        self._hd.build_plan_at_index(index)
        return self

    @_translate
    def build(self, heur_modes=None):
        """No argument: validate and build the operation graph (cuDNN's ``build()``); with heuristic
        modes: the whole pipeline up to built plans."""
        self.validate().build_operation_graph()
        if heur_modes is not None:
            self.create_execution_plans(heur_modes).check_support().build_plans()
        return self

    def get_execution_plan_count(self):
        return self._hd.get_execution_plan_count()

    @_translate
    def get_workspace_size(self):
        if self._pending:
            return 0
        self._require_built("get_workspace_size")
        return self._hd.get_workspace_size()

    def _require_built(self, what: str, index=None) -> None:
        """NOT_INITIALIZED naming the lifecycle step the graph has not reached, when ``what`` (execute,
        serialize, ...) needs a built plan (``index`` given: plans created and supported, plan
        ``index`` is built on use). A restored graph, and one whose plans wait for the first execute
        (pass-by-value scalars baked), have what they need.

        NOTE: without it ``execute`` before ``build`` reached the variant pack's binding with the
        tensors' data types still unset (``KeyError: 0`` from inside)."""
        if self._restored or self._pending:
            return
        g = self._hd
        if (g._plans is not None and g._supported) if index is not None else g._plan is not None:
            return
        steps = (("validate()", g._validated), ("build_operation_graph()", g._op_graph is not None),
                 ("create_execution_plans([cudnn.heur_mode.A])", g._plans is not None),
                 ("check_support()", g._supported), ("build_plans()", False))
        step = next(name for name, done in steps if not done)
        raise HipdnnError(Status.NOT_INITIALIZED,
                          f"{what}: graph '{g.name}' has no built plan (its next lifecycle step is {step}): call "
                          f"build([cudnn.heur_mode.A]) first (or validate(), build_operation_graph(), "
                          f"create_execution_plans(...), check_support() and build_plans() in that order; a step "
                          f"that raised leaves the graph before it), or deserialize(handle, data) a serialized plan")

    def get_workspace_size_plan_at_index(self, index):
        return 0

    # -- engines, knobs and plans as cuDNN FE numbers them --------------------------------------
    def _engines(self, what: str) -> list:
        """The engines that take this graph, in rank order: cuDNN's engine index i is the i-th."""
        if self._hd._op_graph is None:
            self.build_operation_graph()
        rm = self._hd._handle.resource_manager
        found = rm.applicable_engines(self._hd._op_graph, self._hd._preferred)
        return [e for e in found if e not in self._deselected]

    def _engine(self, engine, what: str) -> int:
        """An engine index (cuDNN's numbering: 0 .. get_engine_count() - 1), an engine id or a name."""
        if isinstance(engine, str):
            return self._hd._handle.resource_manager.engine_id_of(engine)
        if isinstance(engine, bool) or not isinstance(engine, int):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: expected an engine index, id or name, got {engine!r}")
        engines = self._engines(what)
        if 0 <= engine < len(engines):
            return engines[engine]
        if engine in engines:
            return engine
        raise HipdnnError(Status.BAD_PARAM, f"{what}: engine {engine} is out of range: graph '{self._hd.name}' has "
                                            f"{len(engines)} engine(s) (get_engine_count())")

    def _kernel_configs(self, eid: int) -> list:
        """The engine's configurations, KERNEL_CFG's values: its HeurMode.A choice, then HeurMode.B's."""
        rm = self._hd._handle.resource_manager
        out = []
        for mode in (E.HD_HEUR.A, E.HD_HEUR.B):
            for cfg in rm.engine_configs(eid, self._hd._op_graph, mode):
                if all(cfg.knobs != c.knobs for c in out):
                    out.append(cfg)
        return out

    @_translate
    def get_engine_count(self) -> int:
        """How many engines take this graph (engine indices for get_knobs_for_engine / create_execution_plan)."""
        return len(self._engines("get_engine_count"))

    @_translate
    def get_knobs_for_engine(self, engine):
        """The engine's knobs as cuDNN FE lists them (``.type``, ``.min_value``, ``.max_value``,
        ``.stride``): ``KERNEL_CFG`` indexes the engine's configurations; each engine knob's values
        index its ``choices``."""
        eid = self._engine(engine, "get_knobs_for_engine")
        rm = self._hd._handle.resource_manager
        n = len(self._kernel_configs(eid))
        out = [knob(E.knob_type.KERNEL_CFG, tuple(range(n)), 0)] if n > 1 else []
        for k in rm.knobs(eid):
            if k.name in E.knob_type.__members__:
                out.append(knob(E.knob_type[k.name], tuple(k.choices), k.default))
        return out

    @_translate
    def create_execution_plan(self, engine_id, knobs=None):
        """Appends one plan: ``engine_id`` (an engine index, id or name; None: IREE_LINALG) with ``knobs``
        (``{knob_type: value}``: a KERNEL_CFG index, or an engine knob's choice or choice index)."""
        eid = self._engine(engine_id if engine_id is not None else "IREE_LINALG", "create_execution_plan")
        values = {}
        for k, v in (knobs or {}).items():
            name = k.name if isinstance(k, E.knob_type) else str(k)
            if name == "KERNEL_CFG":
                cfgs = self._kernel_configs(eid)
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(cfgs):
                    raise HipdnnError(Status.BAD_PARAM, f"create_execution_plan: KERNEL_CFG {v!r} is out of range: "
                                                        f"the engine has {len(cfgs)} configuration(s)")
                values.update(cfgs[v].knobs)
                continue
            if name not in E.ENGINE_KNOBS:
                _unsupported(f"knob {k}: cuDNN kernel knobs have no meaning for IREE-compiled code; this engine's "
                             f"knobs are {', '.join(E.ENGINE_KNOBS)} and KERNEL_CFG")
            values[name] = v
        rm = self._hd._handle.resource_manager
        choices = {k.name: k.choices for k in rm.knobs(eid)}
        for name, v in list(values.items()):
            if isinstance(v, int) and not isinstance(v, bool) and v not in choices.get(name, ()) \
                    and 0 <= v < len(choices.get(name, ())):
                values[name] = choices[name][v]      # a choice index, as cuDNN's knob values are numbers
        self._hd.create_execution_plan(eid, values)
        self._cudnn_numerics()
        return self

    @_translate
    def deselect_engines(self, engines):
        """Engines (names, or ids) left out of the plans ``create_execution_plans`` makes; cuDNN
        names engines ``"eng<N>"``, which name none here and are ignored."""
        rm = None
        for e in engines or []:
            if isinstance(e, str) and e.startswith("eng") and e[3:].isdigit():
                continue
            if rm is None:
                rm = self._hd_handle().resource_manager
            self._deselected.add(rm.engine_id_of(e))
        return self

    def _notes(self, eid: int) -> list:
        rm = self._hd._handle.resource_manager
        plugin = rm.plugin_for(eid)
        # NOTE: an engine that compiles source at build time (IREE's, which declares source_text) is
        # cuDNN's RUNTIME_COMPILATION; the numpy reference compiles nothing
        return [E.behavior_note.RUNTIME_COMPILATION] if rm.has(plugin, "source_text") else []

    @_translate
    def get_behavior_notes_for_plan_at_index(self, index):
        return self._notes(self._hd.get_engine_config_at_index(index).engine_id)

    @_translate
    def get_behavior_notes(self):
        """The behavior notes of the selected plan."""
        return self._notes(self._hd.get_engine_config_at_index(self._hd.get_selected_plan_index()).engine_id)

    @_translate
    def get_plan_name_at_index(self, index) -> str:
        cfg = self._hd.get_engine_config_at_index(index)
        knobs = [f"{k}={v}" for k, v in cfg.knobs.items() if v != "AUTO"]
        return "_".join([cfg.engine_name] + knobs)

    @_translate
    def get_engine_and_knobs_at_index(self, index):
        cfg = self._hd.get_engine_config_at_index(index)
        return cfg.engine_id, {E.knob_type[k]: v for k, v in cfg.knobs.items() if k in E.knob_type.__members__}

    @_translate
    def query_tensor_attributes_of_uid(self, uid):
        """The graph tensor with ``uid``."""
        for t in self._by_hd.values():
            if t.get_uid() == uid:
                return t
        raise HipdnnError(Status.BAD_PARAM, f"query_tensor_attributes_of_uid: graph '{self._hd.name}' has no tensor "
                                            f"with uid {uid}")

    @_translate
    def key(self) -> int:
        """A 64-bit key of the graph's content (ops, tensors, types, shapes, layouts), as cuDNN's
        graph key: two graphs with the same key build the same plans."""
        import hashlib
        if not self._hd._validated:
            self.validate()
        data = self._hd.to_hipdnn_graph()
        return int.from_bytes(hashlib.sha256(data).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF

    def deselect_numeric_notes(self, notes):
        return self

    def deselect_behavior_notes(self, notes):
        return self

    def deselect_workspace_greater_than(self, size):
        return self

    def select_numeric_notes(self, notes):
        return self

    def select_behavior_notes(self, notes):
        return self

    # -- execution ------------------------------------------------------------------------------------
    def _ensure_plans(self, values: dict):
        """Bakes the pass-by-value scalars' values; (re)builds the plans when they changed."""
        if not self._eps:
            return
        baked = []
        for t, c in self._eps:
            if t not in values:
                raise HipdnnError(Status.BAD_PARAM, f"variant pack has no value for pass-by-value tensor "
                                                    f"'{t.get_name()}' (uid {t.get_uid()})")
            baked.append(values[t])
        if baked == self._baked and not self._pending:
            return
        for (t, c), v in zip(self._eps, baked):
            if not math.isfinite(v):
                raise HipdnnError(Status.BAD_PARAM, f"pass-by-value tensor '{t.get_name()}': value {v} is not finite")
            c._set_constant(float(v))
        heur, policy = self._heur, self._policy or E.HD_POLICY.HEURISTICS_CHOICE
        self.validate()
        self._hd.build_operation_graph(self._hd_handle())
        self._hd.create_execution_plans(heur or [E.HD_HEUR.A])
        self._cudnn_numerics()
        self._hd.check_support()
        self._hd.build_plans(policy)
        self._baked, self._pending = baked, False

    def _restored_override(self) -> bool:
        return self._restored and bool(getattr(self._hd, "is_override_shape_enabled", lambda: False)())
