"""The engine plugin contract: hipDNN's plugin entry points as Python methods.

A plugin is one shared, stateless object. It states once, in a class attribute, which optional
groups of the contract it implements::

    class MyPlugin:
        name, version = "my_plugin", "1.0"
        capabilities = frozenset({"serialization", "sessions"})
        engine_names = {MY_ENGINE_ID: "MY_ENGINE"}      # optional: engine id -> UPPER_CASE name

Every plugin implements :class:`EnginePlugin`'s methods; a plugin that declares a capability
implements the methods of that capability's Protocol (``CAPABILITIES``). Some parameters exist only
with a capability (``session``, ``dynamic``, ``defer_load``, ``overrides``, ``plan_info``; see
``CONDITIONAL_PARAMETERS``): a plugin without it leaves them out. :func:`expected_signature` gives
the signature a plugin with given capabilities must have, and :func:`check_plugin` (the backend
calls it once per plugin, when a handle loads it) checks it: a plugin that lacks a method or whose
method's parameters (names, kinds, defaults) differ from the contract is rejected with PLUGIN_ERROR
naming the plugin and the method. A plugin without ``capabilities`` declares none.

Calling convention (the backend's, ``hipdnn_iree/backend/engines.py``): every call goes through one
wrapper; a method may raise ``hd.HipdnnError`` (passed on unchanged); any other exception becomes
PLUGIN_ERROR naming the plugin and the method. For a plugin with ``sessions``, every method whose
contract signature has ``session`` gets ``session=`` as a keyword argument. ``op_graph`` is always
hipDNN's graph FlatBuffer (``schemas/graph.fbs``), as hipDNN hands graphs to plugins.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status


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
        store: the handle's plan store (``plugin_sdk/store.py``), or None: engines that compile look
            compiled modules and tuning results up there after their own cache, and write them there.
    """

    device: str | None
    target: Any = None
    cache: Any = None
    compile_flags: tuple = ()
    store: Any = None


# -- the required methods ------------------------------------------------------------------

@runtime_checkable
class EnginePlugin(Protocol):
    """What every plugin implements. Parameters marked [capability] exist only with it."""

    name: str
    version: str

    def get_all_engine_ids(self) -> list[int]:
        """Every engine id this plugin serves (FNV-1a 64 of the UPPER_CASE engine name)."""

    def get_applicable_engine_ids(self, op_graph: bytes, session=None) -> list[int]:
        """The engines that can run this graph (empty when none). [sessions: ``session``]"""

    def get_workspace_size(self, engine_id: int, op_graph: bytes, session=None) -> int:
        """Workspace bytes the caller passes to ``execute``. [sessions: ``session``]"""

    def create_execution_context(self, engine_id: int, op_graph: bytes, engine_config=None, session=None,
                                 dynamic=None, defer_load=False):
        """Builds the plan of ``engine_config`` (an ``EngineConfig``; its knobs); for IREE: lowers and
        compiles (through the compile cache). [sessions: ``session``] [dynamic_shapes: ``dynamic``, a
        dynamic-shape build: ``{"shape_spec", "override", "kernel_cache"}``, backend/plan.py]
        [deferred_load: ``defer_load=True`` compiles without loading on the device]"""

    def destroy_execution_context(self, ctx) -> None:
        """Releases what ``ctx`` holds (always called once per context)."""

    def execute_op_graph(self, ctx, variant_pack: dict, workspace=None, overrides=None) -> None:
        """Runs ``ctx`` on the caller's buffers (UID -> buffer); outputs written in place.
        [dynamic_shapes: ``overrides``, UID -> dims of a plan built with override shapes]"""


# -- optional groups (each all or nothing) -----------------------------------------------

class SessionPlugin(Protocol):
    """``sessions``: per-handle state (hipDNN creates one plugin handle per backend handle)."""

    def create_session(self, settings: SessionSettings):
        """A session for one handle: validates and resolves the settings (e.g. the target from the
        device), or raises HipdnnError. The session's ``target`` attribute, when present, is the
        handle's resolved target string."""

    def destroy_session(self, session) -> None:
        """Releases the session."""


class SerializationPlugin(Protocol):
    """``serialization``: compiled-plan serialization (RFC 0009); without it serializing or restoring
    a plan is NOT_SUPPORTED."""

    def serialize_execution_context(self, ctx, engine_config=None, plan_info=None) -> bytes:
        """The plugin payload of a built plan (bytes-like). [plan_info: ``plan_info``, the envelope
        fields to sign; when ``plan_info["gather"]`` is true a list of bytes-like buffers to
        concatenate may be returned instead: the backend copies each once, into the envelope]"""

    def destroy_serialized_execution_context(self, serialized) -> None:
        """Always called once per serialized payload, error paths included."""

    def create_execution_context_from_serialized(self, serialized, plan_info=None, session=None):
        """Restores a payload into a context, with no compiler. [plan_info: ``plan_info``, the
        envelope fields and ``verify_key`` to check] [sessions: ``session``]"""


class PlanInfoPlugin(Protocol):
    """``plan_info`` (needs ``serialization``): the serialization hooks take ``plan_info=`` (the
    plugin signs and checks the envelope fields inside its payload); no methods of its own."""


class PlanCompatibilityPlugin(Protocol):
    """``plan_compatibility`` (needs ``serialization``): checks a legacy (0.1.0) envelope's identity."""

    def check_plan_compatibility(self, info: dict, session=None) -> None:
        """Rejects plans this handle cannot run, from identity fields (0.1.0 envelopes carry them)."""


class HipdnnGraphPayloadPlugin(Protocol):
    """``hipdnn_graph_payload`` (needs ``plan_info``): payloads that carry a hipDNN graph (FUSPLAN
    kind 1). The plugin's ``payload_engine_ids`` attribute (payload form -> envelope engine id,
    ``{"compiled": ..., "hipdnn_graph": ...}``) says under which id each form is written."""

    payload_engine_ids: dict

    def graph_from_serialized(self, serialized, plan_info=None, session=None) -> bytes:
        """The checked hipDNN graph of a graph payload, without compiling."""


class EngineConfigPlugin(Protocol):
    """``engine_configs``: knobs and heuristic configs (API.md, "Engine configs, knobs and
    autotuning"); without it an engine has no knobs and one knob-less config."""

    def get_knobs(self, engine_id: int, session=None) -> list:
        """The engine's knobs (``hd.Knob``)."""

    def get_engine_configs(self, engine_id: int, op_graph: bytes, heur_mode, session=None) -> list[dict]:
        """Knob dicts worth building for this graph under ``heur_mode``, best first."""


class TuningPlugin(Protocol):
    """``tuning``: remembers autotune results."""

    def record_tuning(self, engine_id: int, op_graph: bytes, knobs: dict, timings: list, session=None) -> None:
        """Remembers the autotuned knobs of this graph on this session's device."""


class DeferredLoadPlugin(Protocol):
    """``deferred_load``: build on one thread, load on another (``build_plans(ALL)`` compiles on
    worker threads; a GPU module must be loaded where the device's context is current).
    ``create_execution_context`` takes ``defer_load``."""

    def load_execution_context(self, ctx, session=None) -> None:
        """Loads a context built with ``defer_load=True`` on the session's device (a no-op for one
        already loaded), on the calling thread."""


class DynamicShapesPlugin(Protocol):
    """``dynamic_shapes``: ``create_execution_context`` takes ``dynamic`` and ``execute_op_graph``
    takes ``overrides``; no methods of its own."""


class DescriptionPlugin(Protocol):
    """``description``: what plans say of themselves, read without a device or the compiler."""

    def describe_payload(self, envelope, file_bytes: int, engine_name: str, legacy: bool, verify_key=None):
        """``inspect``: every layer of the payload (a report with ``as_dict()`` and ``text()``)."""

    def describe_context(self, ctx) -> dict:
        """What a built or restored plan says of itself: ``engine_name``, ``knobs``,
        ``override_shapes`` (``EXECUTION_PLAN_ENGINE_CONFIG`` and ``inspect``)."""


class SourceTextPlugin(Protocol):
    """``source_text``: the engine compiles source text (``hd.Graph.get_mlir``)."""

    def source_text(self, op_graph: bytes, target: str, dynamic=None) -> str:
        """The source this engine compiles for ``op_graph`` and ``target`` with every knob AUTO."""


# capability -> its Protocol
CAPABILITIES: dict[str, type] = {
    "sessions": SessionPlugin,
    "serialization": SerializationPlugin,
    "plan_info": PlanInfoPlugin,
    "plan_compatibility": PlanCompatibilityPlugin,
    "hipdnn_graph_payload": HipdnnGraphPayloadPlugin,
    "engine_configs": EngineConfigPlugin,
    "tuning": TuningPlugin,
    "deferred_load": DeferredLoadPlugin,
    "dynamic_shapes": DynamicShapesPlugin,
    "description": DescriptionPlugin,
    "source_text": SourceTextPlugin,
}
# capability -> the capabilities it needs
CAPABILITY_NEEDS: dict[str, frozenset] = {
    "plan_info": frozenset({"serialization"}),
    "plan_compatibility": frozenset({"serialization"}),
    "hipdnn_graph_payload": frozenset({"plan_info"}),
}
# (method, parameter) -> the capability without which the parameter is left out. ``session`` is
# conditional on ``sessions`` in every method that has it (SESSION_METHODS).
CONDITIONAL_PARAMETERS: dict[tuple[str, str], str] = {
    ("create_execution_context", "dynamic"): "dynamic_shapes",
    ("create_execution_context", "defer_load"): "deferred_load",
    ("execute_op_graph", "overrides"): "dynamic_shapes",
    ("serialize_execution_context", "plan_info"): "plan_info",
    ("create_execution_context_from_serialized", "plan_info"): "plan_info",
}


def _methods(protocol: type) -> tuple[str, ...]:
    return tuple(n for n, v in vars(protocol).items() if not n.startswith("_") and inspect.isfunction(v))


REQUIRED_METHODS = _methods(EnginePlugin)
# every contract method -> the Protocol stating it
METHODS: dict[str, type] = {m: EnginePlugin for m in REQUIRED_METHODS}
for _protocol in CAPABILITIES.values():
    METHODS.update({m: _protocol for m in _methods(_protocol)})
# methods that take ``session=`` (from a plugin with ``sessions``); destroy_session's is its argument
SESSION_METHODS = tuple(m for m, p in METHODS.items()
                        if p is not SessionPlugin and "session" in inspect.signature(getattr(p, m)).parameters)


def capability_methods(capability: str) -> tuple[str, ...]:
    return _methods(CAPABILITIES[capability])


def _param_capability(method: str, param: str) -> str | None:
    if param == "session" and method in SESSION_METHODS:
        return "sessions"
    return CONDITIONAL_PARAMETERS.get((method, param))


def expected_signature(method: str, capabilities) -> inspect.Signature:
    """The signature (without ``self``) that ``method`` has in a plugin declaring ``capabilities``:
    the contract's, less the parameters of capabilities it does not declare."""
    sig = inspect.signature(getattr(METHODS[method], method))
    params = [p for p in list(sig.parameters.values())[1:]
              if _param_capability(method, p.name) in (None, *capabilities)]
    return sig.replace(parameters=params, return_annotation=inspect.Signature.empty)


def _shape(sig: inspect.Signature) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def _text(sig: inspect.Signature) -> str:
    return str(sig.replace(parameters=[p.replace(annotation=inspect.Parameter.empty)
                                       for p in sig.parameters.values()], return_annotation=inspect.Signature.empty))


def signature_mismatch(plugin, method: str, capabilities) -> str | None:
    """Why ``plugin.method`` differs from the contract (names, kinds, defaults), or None."""
    fn = getattr(plugin, method, None)
    if not callable(fn):
        return "is missing"
    want = expected_signature(method, capabilities)
    try:
        got = inspect.signature(fn)
    except (TypeError, ValueError):
        return "has no signature to check"
    if _shape(got) != _shape(want):
        return f"has signature {_text(got)}, the contract's is {_text(want)}"
    return None


def plugin_name(plugin) -> str:
    return str(getattr(plugin, "name", type(plugin).__name__))


def declared_capabilities(plugin) -> frozenset:
    """The plugin's ``capabilities`` (none when it has no such attribute)."""
    caps = getattr(plugin, "capabilities", frozenset())
    if not isinstance(caps, (set, frozenset, tuple, list)) or not all(isinstance(c, str) for c in caps):
        raise HipdnnError(Status.PLUGIN_ERROR, f"engine plugin {plugin_name(plugin)}: capabilities must be a set of "
                                               f"names, got {caps!r}")
    return frozenset(caps)


@dataclass(frozen=True)
class Declaration:
    """What a plugin declares of itself (read once, by :func:`check_plugin`).

    Attributes:
        capabilities: the optional groups it implements (``CAPABILITIES``' names).
        engine_names: engine id -> UPPER_CASE name (``engine_names``; {} when not given).
        payload_engine_ids: payload form -> envelope engine id (``payload_engine_ids``; {}).
    """

    capabilities: frozenset
    engine_names: dict
    payload_engine_ids: dict


def _mapping(plugin, attr: str) -> dict:
    value = getattr(plugin, attr, None) or {}
    if not isinstance(value, dict):
        raise HipdnnError(Status.PLUGIN_ERROR, f"engine plugin {plugin_name(plugin)}: {attr} must be a dict, "
                                               f"got {type(value).__name__}")
    return value


def check_plugin(plugin) -> Declaration:
    """Checks ``plugin`` against the contract and returns its declaration. Raises PLUGIN_ERROR naming
    the plugin and the method for a missing method or one whose signature differs."""
    name = plugin_name(plugin)
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(plugin, m, None))]
    if missing:
        raise HipdnnError(Status.PLUGIN_ERROR, f"engine plugin {name} lacks required method(s) {missing}")
    caps = declared_capabilities(plugin)
    unknown = sorted(caps - set(CAPABILITIES))
    if unknown:
        raise HipdnnError(Status.PLUGIN_ERROR, f"engine plugin {name} declares unknown capability(ies) {unknown}; "
                                               f"the contract's are {sorted(CAPABILITIES)}")
    for cap in sorted(caps):
        lacking = sorted(CAPABILITY_NEEDS.get(cap, frozenset()) - caps)
        if lacking:
            raise HipdnnError(Status.PLUGIN_ERROR, f"engine plugin {name} declares capability '{cap}' without "
                                                   f"{lacking}, which it needs")
    for method, protocol in METHODS.items():
        cap = next((c for c, p in CAPABILITIES.items() if p is protocol), None)
        if cap is not None and cap not in caps:
            continue
        why = signature_mismatch(plugin, method, caps)
        if why is not None:
            what = "required method" if cap is None else f"method of capability '{cap}'"
            raise HipdnnError(Status.PLUGIN_ERROR, f"engine plugin {name}: {what} {method} {why}")
    names = {int(k): str(v) for k, v in _mapping(plugin, "engine_names").items()}
    payload_ids = {str(k): int(v) for k, v in _mapping(plugin, "payload_engine_ids").items()}
    if "hipdnn_graph_payload" in caps and "hipdnn_graph" not in payload_ids:
        raise HipdnnError(Status.PLUGIN_ERROR, f"engine plugin {name} declares capability 'hipdnn_graph_payload' "
                                               "but its payload_engine_ids names no 'hipdnn_graph' engine id")
    return Declaration(caps, names, payload_ids)
