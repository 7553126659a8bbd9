"""The plugin resource manager: engine id -> plugin, one session per plugin per handle, and every
call into a plugin (the contract is ``hipdnn_iree/plugin_sdk/contract.py``).

The backend never imports an engine's modules: it knows plugins only through the contract, finds
the installed ones through the ``hipdnn_iree.engine_plugins`` entry point group, and ranks the
engines that accept a graph (the heuristics).
"""
from __future__ import annotations

from importlib import metadata

from hipdnn_iree.plugin_sdk.contract import SESSION_METHODS, Declaration, SessionSettings, check_plugin, plugin_name
from hipdnn_iree.plugin_sdk.engine_config import EngineConfig, HeurMode, Knob, check_knob_values
from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

ENTRY_POINT_GROUP = "hipdnn_iree.engine_plugins"
# Engines ranked by the heuristics (first = preferred); unknown engines go in between.
RANKING = ("IREE_LINALG", "NUMPY_REFERENCE")
REFERENCE_ENGINE = "NUMPY_REFERENCE"


def discover_plugins() -> list:
    """Instantiates every plugin registered under the entry point group."""
    plugins = []
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            factory = ep.load()
            plugins.append(factory() if callable(factory) else factory)
        except Exception as e:
            raise HipdnnError(Status.PLUGIN_ERROR, f"engine plugin entry point '{ep.name}' ({ep.value}) "
                                                   f"failed to load: {type(e).__name__}: {e}") from None
    if not plugins:
        raise HipdnnError(Status.PLUGIN_ERROR, f"no engine plugins are installed (entry point group "
                                               f"{ENTRY_POINT_GROUP}): install hipdnn-iree with pip")
    return plugins


def call_plugin(plugin, method: str, *args, **kw):
    """``plugin.method(*args, **kw)``: the one way into a plugin. HipdnnError passes unchanged; any
    other exception becomes PLUGIN_ERROR naming the plugin and the method."""
    try:
        return getattr(plugin, method)(*args, **kw)
    except HipdnnError:
        raise
    except Exception as e:
        raise HipdnnError(Status.PLUGIN_ERROR, f"engine plugin {plugin_name(plugin)} failed in {method}: "
                                               f"{type(e).__name__}: {e}") from None


class PluginResourceManager:
    """engine_id -> plugin for one handle, with each plugin's session for that handle."""

    def __init__(self, plugins: list, settings: SessionSettings):
        self.plugins = list(plugins)
        self.settings = settings
        self._by_engine: dict[int, object] = {}
        self._sessions: dict[int, object] = {}
        self._declared: dict[int, Declaration] = {}
        self._keep: list = []
        for p in self.plugins:
            if any(q is p for q in self.plugins[:self.plugins.index(p)]):
                raise HipdnnError(Status.PLUGIN_ERROR, f"engine plugin {plugin_name(p)} is given twice")
            self._declared[id(p)] = check_plugin(p)
            for eid in self.call(p, "get_all_engine_ids"):
                if int(eid) in self._by_engine:
                    raise HipdnnError(Status.PLUGIN_ERROR,
                                      f"engine id {eid} is served by two plugins: "
                                      f"{plugin_name(self._by_engine[int(eid)])} and {plugin_name(p)}")
                self._by_engine[int(eid)] = p
        for p in self.plugins:
            if self.has(p, "sessions"):
                self._sessions[id(p)] = call_plugin(p, "create_session", settings)

    # -- declarations ----------------------------------------------------------------------
    def declared(self, plugin) -> Declaration:
        """``plugin``'s declaration: read when the handle loaded it (or, for a plugin from outside the
        handle, such as the self-check's installed reference, on first use)."""
        d = self._declared.get(id(plugin))
        if d is None:
            d = self._declared[id(plugin)] = check_plugin(plugin)
            self._keep.append(plugin)   # NOTE: keeps id(plugin) from being reused while it is cached
        return d

    def has(self, plugin, capability: str) -> bool:
        """Whether ``plugin`` declared ``capability`` (``plugin_sdk/contract.py``, CAPABILITIES)."""
        return capability in self.declared(plugin).capabilities

    def payload_engine_ids(self, plugin) -> dict:
        """The plugin's ``payload_engine_ids`` (payload form -> envelope engine id), or {}."""
        return self.declared(plugin).payload_engine_ids

    # -- sessions ------------------------------------------------------------------------
    def session_of(self, plugin):
        return self._sessions.get(id(plugin))

    def session_attr(self, name: str, default=None):
        """The first session's ``name`` attribute (e.g. the resolved ``target``)."""
        for s in self._sessions.values():
            v = getattr(s, name, None)
            if v is not None:
                return v
        return default

    def close(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for p in self.plugins:
            s = sessions.get(id(p))
            if s is not None:
                try:
                    call_plugin(p, "destroy_session", s)
                except HipdnnError:   # NOTE: releasing must not fail a handle's teardown
                    pass

    # -- calls ---------------------------------------------------------------------------
    def call(self, plugin, method: str, *args, **kw):
        """``plugin.method(*args, **kw)`` through :func:`call_plugin`, with ``session=`` for the
        methods that take it of a plugin with sessions."""
        if method in SESSION_METHODS and self.has(plugin, "sessions"):
            kw["session"] = self._sessions.get(id(plugin))
        return call_plugin(plugin, method, *args, **kw)

    def plugin_for(self, engine_id: int):
        return self._by_engine.get(int(engine_id))

    def engine_ids(self) -> list[int]:
        return list(self._by_engine)

    def engine_name(self, engine_id: int) -> str:
        """The engine's name as its plugin tells it (``engine_names``), else the id."""
        plugin = self.plugin_for(engine_id)
        names = self.declared(plugin).engine_names if plugin is not None else {}
        return str(names.get(int(engine_id), engine_id))

    def engine_id_of(self, engine) -> int:
        """An engine id from an id or an UPPER_CASE name; BAD_PARAM for anything else."""
        if isinstance(engine, str):
            return engine_id_from_name(engine)
        if isinstance(engine, bool) or not isinstance(engine, int):
            raise HipdnnError(Status.BAD_PARAM, f"engine must be an id or a name, got {engine!r}")
        return int(engine)

    def loaded_text(self) -> str:
        return ", ".join(f"{self.engine_name(e)} (id {e})" for e in self.engine_ids()) or "none"

    # -- heuristics ----------------------------------------------------------------------
    def applicable_engines(self, op_graph: bytes, preferred: int | None = None) -> list[int]:
        """Every engine that accepts the graph, ranked (RANKING; a preferred engine first). On a GPU
        handle the host-only reference engine is a candidate only when it is the preferred one: a
        GPU handle never falls back to it silently (it would read and write host memory)."""
        found = []
        for p in self.plugins:
            found += [int(e) for e in self.call(p, "get_applicable_engine_ids", op_graph)]
        ref = engine_id_from_name(REFERENCE_ENGINE)
        device = self.settings.device
        if device is not None and device.split("://", 1)[0] not in ("local-task", "local-sync") and preferred != ref:
            found = [e for e in found if e != ref]
        rank = {engine_id_from_name(n): i for i, n in enumerate(RANKING)}
        found.sort(key=lambda e: rank.get(e, len(RANKING) - 1.5))
        if preferred is not None and preferred in found:
            found.remove(preferred)
            found.insert(0, preferred)
        return found

    def knobs(self, engine_id: int) -> list[Knob]:
        plugin = self.plugin_for(engine_id)
        if plugin is None:
            raise HipdnnError(Status.BAD_PARAM, f"engine id {engine_id} is not loaded; the handle's engines are: "
                                                f"{self.loaded_text()}")
        if not self.has(plugin, "engine_configs"):
            return []
        return list(self.call(plugin, "get_knobs", engine_id))

    def check_knobs(self, engine_id: int, values) -> dict:
        return check_knob_values(self.knobs(engine_id), values, self.engine_name(engine_id))

    def engine_configs(self, engine_id: int, op_graph: bytes, mode: HeurMode) -> list[EngineConfig]:
        """The configs ``mode`` asks of one engine (one knob-less config for plugins without knobs)."""
        plugin = self.plugin_for(engine_id)
        name = self.engine_name(engine_id)
        if not self.has(plugin, "engine_configs"):
            return [EngineConfig(engine_id, name, {})] if mode != HeurMode.B else []
        found = self.call(plugin, "get_engine_configs", engine_id, op_graph, mode)
        return [EngineConfig(engine_id, name, self.check_knobs(engine_id, k)) for k in found]

    def record_tuning(self, config: EngineConfig, op_graph: bytes, timings: list) -> None:
        plugin = self.plugin_for(config.engine_id)
        if self.has(plugin, "tuning"):
            self.call(plugin, "record_tuning", config.engine_id, op_graph, dict(config.knobs), timings)

    def reference_plugin(self):
        """The plugin serving the reference engine (self-check): the handle's own, else an installed one."""
        eid = engine_id_from_name(REFERENCE_ENGINE)
        p = self.plugin_for(eid)
        if p is not None:
            return p
        for q in discover_plugins():
            if eid in [int(e) for e in call_plugin(q, "get_all_engine_ids")]:
                return q
        return None
