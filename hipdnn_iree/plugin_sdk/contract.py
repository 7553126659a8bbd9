"""The engine plugin contract: hipDNN's plugin entry points as Python methods.

A plugin is one shared, stateless object. What belongs to one handle (device, compile target,
cache setting) lives in a *session*, which the backend asks the plugin for once per handle
(``create_session``), as hipDNN creates one plugin handle per backend handle. A plugin that keeps
nothing per handle may omit ``create_session``; it is then called without a session.

Calling convention (the backend's, ``hipdnn_iree/backend/engines.py``): for a plugin with
``create_session``, every entry point marked *session* below gets ``session=`` as a keyword
argument; the others get what they get for any plugin. ``op_graph`` is always hipDNN's graph
FlatBuffer (``schemas/graph.fbs``), as hipDNN hands graphs to plugins.

Required: ``name``, ``version``, ``get_all_engine_ids``, ``get_applicable_engine_ids``,
``get_workspace_size``, ``create_execution_context``, ``destroy_execution_context``,
``execute_op_graph``. Optional groups (each all or nothing):

- serialization: ``serialize_execution_context``, ``destroy_serialized_execution_context``,
  ``create_execution_context_from_serialized`` (without them a plan cannot be serialized:
  NOT_SUPPORTED);
- sessions: ``create_session``, ``destroy_session``;
- engine configs: ``get_knobs``, ``get_engine_configs``, ``record_tuning``;
- description: ``describe_payload`` (``inspect``/``plan_info``), ``describe_context``;
- deferred loading: ``create_execution_context(..., defer_load=True)`` builds without loading the
  plan onto the device, ``load_execution_context`` loads it (``build_plans(ALL)`` compiles on worker
  threads, and a GPU module must be loaded on the thread where the device's context is current).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

REQUIRED_METHODS = ("get_all_engine_ids", "get_applicable_engine_ids", "get_workspace_size",
                    "create_execution_context", "destroy_execution_context", "execute_op_graph")
SERIALIZATION_HOOKS = ("serialize_execution_context", "destroy_serialized_execution_context",
                       "create_execution_context_from_serialized")
# Entry points that take ``session=`` (plugins with create_session only).
SESSION_METHODS = ("get_applicable_engine_ids", "get_workspace_size", "create_execution_context",
                   "create_execution_context_from_serialized", "get_knobs", "get_engine_configs",
                   "record_tuning", "check_plan_compatibility", "graph_from_serialized", "load_execution_context")


@dataclass(frozen=True)
class SessionSettings:
    """What a handle asks of every plugin's session.

    Attributes:
        device: IREE HAL device URI, or None (compile-only).
        target: the compile target the caller named (``"llvm-cpu:znver4"``, a list of several),
            or None to derive it from the device.
        cache: compile cache setting: None (environment), False, True or a folder path.
        compile_flags: extra compiler flags for engines that compile (the CLI's ``--iree-flag``);
            such an engine puts them in its compile cache key; other engines ignore them.
    """

    device: str | None
    target: Any = None
    cache: Any = None
    compile_flags: tuple = ()


@runtime_checkable
class EnginePlugin(Protocol):
    """What the backend calls. Every method may raise ``hd.HipdnnError``; any other exception is
    reported as PLUGIN_ERROR naming the plugin."""

    name: str
    version: str

    def get_all_engine_ids(self) -> list[int]:
        """Every engine id this plugin serves (FNV-1a 64 of the UPPER_CASE engine name)."""

    def get_applicable_engine_ids(self, op_graph: bytes, **session) -> list[int]:
        """*session* The engines that can run this graph (empty when none)."""

    def get_workspace_size(self, engine_id: int, op_graph: bytes, **session) -> int:
        """*session* Workspace bytes the caller passes to ``execute``."""

    def create_execution_context(self, engine_id: int, op_graph: bytes, engine_config=None, **session):
        """*session* Builds the plan of ``engine_config`` (an ``EngineConfig``; its knobs). For IREE:
        lowers and compiles (through the compile cache)."""

    def destroy_execution_context(self, ctx) -> None:
        """Releases what ``ctx`` holds (always called once per context)."""

    def execute_op_graph(self, ctx, variant_pack: dict, workspace=None) -> None:
        """Runs ``ctx`` on the caller's buffers (UID -> buffer); outputs written in place."""


class DeferredLoadPlugin(Protocol):
    """Optional: build on one thread, load on another."""

    def create_execution_context(self, engine_id: int, op_graph: bytes, engine_config=None, defer_load=False,
                                 **session):
        """With ``defer_load=True``: compiled (or taken from a cache) but not loaded on the device."""

    def load_execution_context(self, ctx, **session) -> None:
        """*session* Loads a context built with ``defer_load=True`` on the session's device (a no-op
        for one already loaded), on the calling thread."""


class SessionPlugin(Protocol):
    """Optional: per-handle state."""

    def create_session(self, settings: SessionSettings):
        """A session for one handle: validates and resolves the settings (e.g. the target from the
        device), or raises HipdnnError. The session's ``target`` attribute, when present, is the
        handle's resolved target string."""

    def destroy_session(self, session) -> None:
        """Releases the session."""


class ConfigurablePlugin(Protocol):
    """Optional: engine configs, knobs and tuning (API.md, "Engine configs, knobs and autotuning")."""

    def get_knobs(self, engine_id: int, **session) -> list:
        """*session* The engine's knobs (``hd.Knob``)."""

    def get_engine_configs(self, engine_id: int, op_graph: bytes, heur_mode, **session) -> list[dict]:
        """*session* Knob dicts worth building for this graph under ``heur_mode``, best first."""

    def record_tuning(self, engine_id: int, op_graph: bytes, knobs: dict, timings: list, **session) -> None:
        """*session* Remembers the autotuned knobs of this graph on this session's device."""


class SerializablePlugin(Protocol):
    """Optional: compiled-plan serialization (RFC 0009)."""

    def serialize_execution_context(self, ctx, engine_config=None, **kw) -> bytes:
        """The plugin payload of a built plan (bytes-like). When ``plan_info["gather"]`` is true (the
        backend sets it), a list of bytes-like buffers to concatenate may be returned instead: the
        backend copies each once, straight into the envelope."""

    def destroy_serialized_execution_context(self, serialized) -> None:
        """Always called once per serialized payload, error paths included."""

    def create_execution_context_from_serialized(self, serialized, **kw):
        """Restores a payload into a context, with no compiler."""

    def describe_payload(self, serialized) -> dict:
        """What ``inspect`` shows of a payload: a JSON-able dict, without loading any module."""
