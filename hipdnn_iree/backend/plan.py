"""Backend layer: execution plan descriptors and compiled-plan (de)serialization.

Mirrors hipDNN's backend extension API (RFC 0009) in Python:

    >>> from hipdnn_iree import backend                        # doctest: +SKIP
    >>> n = backend.get_serialized_execution_plan(plan, 0, None)  # size query
    >>> buf = bytearray(n)
    >>> backend.get_serialized_execution_plan(plan, n, buf)
    >>> plan2 = backend.create_and_deserialize_execution_plan(handle, bytes(buf))
"""
from __future__ import annotations

import enum
import numbers
from dataclasses import dataclass, field

from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.backend.handle import Handle, engine_name, plugin_name
from hipdnn_iree.backend.engines import call_plugin
from hipdnn_iree.plugin_sdk.engine_config import EngineConfig
from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status


class Attribute(enum.IntEnum):
    """Execution-plan attributes (``HIPDNN_ATTR_EXECUTION_PLAN_*``)."""

    EXECUTION_PLAN_HANDLE = 1
    EXECUTION_PLAN_ENGINE_CONFIG = 2
    EXECUTION_PLAN_WORKSPACE_SIZE = 3
    EXECUTION_PLAN_TENSOR_UIDS_EXT = 4
    EXECUTION_PLAN_ENGINE_ID_EXT = 5
    EXECUTION_PLAN_TENSORS_EXT = 6        # per-UID role, dims, strides, data type


@dataclass(frozen=True)
class PlanTensor:
    """A tensor a plan binds at execute time, as the plan itself describes it."""

    uid: int
    name: str
    role: str                 # "input" | "output"
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    data_type: object         # hd.DataType


@dataclass
class ExecutionPlanDescriptor:
    """A finalized execution plan: built from a graph, or restored from bytes."""

    handle: Handle
    engine_id: int
    workspace_size: int
    tensor_uids: tuple[int, ...]
    plugin: object
    context: object
    engine_config: EngineConfig | None = None   # restored: what the payload says (describe_context), if anything
    restored: bool = False
    finalized: bool = True
    envelope: object = None                     # the decoded envelope when restored
    op_graph: bytes | None = None               # the graph FlatBuffer when built (the self-check's input)
    self_checked: bool = False                  # selfcheck.py: first execution compared already
    self_check_error: str | None = None         # selfcheck.py: the verdict of a failed comparison
    _serialized_memo: tuple | None = None        # (arguments, bytes) of the last size query: the fill reuses it
    override_enabled: bool = False               # execute takes other shapes (envelope slot 5 when serialized)

    def get_attribute(self, attr: Attribute):
        attr = Attribute(attr)
        if not self.finalized:
            raise HipdnnError(Status.BAD_PARAM_NOT_FINALIZED, "execution plan is not finalized")
        if attr == Attribute.EXECUTION_PLAN_TENSOR_UIDS_EXT:
            return list(self.tensor_uids)
        if attr == Attribute.EXECUTION_PLAN_WORKSPACE_SIZE:
            return int(self.workspace_size)
        if attr == Attribute.EXECUTION_PLAN_ENGINE_ID_EXT:
            return int(self.engine_id)
        if attr == Attribute.EXECUTION_PLAN_HANDLE:
            return self.handle
        if attr == Attribute.EXECUTION_PLAN_TENSORS_EXT:
            from hipdnn_iree.plugin_sdk.types import DataType
            tensors = getattr(self.context, "tensors", None)
            if tensors is None:
                raise HipdnnError(Status.NOT_SUPPORTED, "this engine's plans do not describe their tensors")
            return [PlanTensor(t.uid, t.name, t.role, tuple(t.dims), tuple(t.strides), DataType(t.data_type))
                    for t in sorted(tensors, key=lambda t: t.uid)]
        if attr == Attribute.EXECUTION_PLAN_ENGINE_CONFIG:
            if self.engine_config is None:
                raise HipdnnError(Status.NOT_SUPPORTED,
                                  "EXECUTION_PLAN_ENGINE_CONFIG is not available on this restored plan: its payload "
                                  "does not record the engine config (written before hipdnn-iree 0.3, or by an "
                                  "engine that does not say)")
            return self.engine_config
        raise HipdnnError(Status.NOT_SUPPORTED, f"attribute {attr.name} is not supported")

    def execute(self, variant_pack: dict, workspace=None, overrides=None) -> None:
        if self.handle.device is None:
            raise HipdnnError(Status.NOT_INITIALIZED,
                              f"handle has no device (compile-only for target '{self.handle.target}'); "
                              "create a handle with a device to execute")
        need = int(self.workspace_size)
        have = _workspace_nbytes(workspace)
        if need > 0:
            if have < need:
                raise HipdnnError(Status.BAD_PARAM_SIZE_INSUFFICIENT,
                                  f"workspace of {have} bytes is smaller than the plan's {need} bytes")
        if overrides is not None and not self.override_enabled:
            raise HipdnnError(Status.BAD_PARAM, "execute: shape overrides given, but the plan was not built with "
                                                "override shapes enabled")
        # NOTE: the self-check compares at the built shapes; an override-shape plan skips it
        check = self.handle.self_check and not self.self_checked and not self.override_enabled and \
            engine_name(self.handle, self.engine_id) != "NUMPY_REFERENCE"
        if check or self.self_check_error is not None:
            from hipdnn_iree.backend import selfcheck as _selfcheck
            _selfcheck.before_execute(self)
        # NOTE: per-call cost: execute_op_graph takes no session, so the one wrapper is called directly
        if self.override_enabled:
            call_plugin(self.plugin, "execute_op_graph", self.context, variant_pack, workspace,
                        overrides=overrides or {})
        else:
            call_plugin(self.plugin, "execute_op_graph", self.context, variant_pack, workspace)
        if check:
            _selfcheck.after_execute(self, variant_pack)

    def release(self) -> None:
        if self.context is not None:
            try:
                self.handle.resource_manager.call(self.plugin, "destroy_execution_context", self.context)
            finally:
                self.context = None
                self.finalized = False


def build_execution_plan(handle: Handle, engine_id: int, op_graph: bytes, tensor_uids,
                         config: EngineConfig | None = None, dynamic: dict | None = None,
                         defer_load: bool = False) -> ExecutionPlanDescriptor:
    """Normal build path: engine config + graph + plugin -> finalized plan.

    ``dynamic`` (a dynamic-shape build): ``{"shape_spec": JSON, "override": bool, "kernel_cache":
    hd.KernelCache or None}``, handed to the engine as ``dynamic=``; an engine without the
    ``dynamic_shapes`` capability cannot build dynamic plans (NOT_SUPPORTED).
    ``defer_load``: an engine with ``deferred_load`` builds without loading the plan on the device;
    :func:`load_execution_plan` loads it, on the calling thread."""
    rm = handle.resource_manager
    plugin = rm.plugin_for(engine_id)
    if plugin is None:
        raise HipdnnError(Status.INTERNAL_ERROR, f"no loaded engine plugin serves engine id {engine_id}")
    ws = int(rm.call(plugin, "get_workspace_size", engine_id, op_graph))
    config = config or EngineConfig(engine_id, engine_name(handle, engine_id))
    kw = {}
    if dynamic is not None:
        if not rm.has(plugin, "dynamic_shapes"):
            raise HipdnnError(Status.NOT_SUPPORTED, f"engine {engine_name(handle, engine_id)} (plugin "
                                                    f"{plugin_name(plugin)}) cannot build dynamic-shape plans")
        kw["dynamic"] = dynamic
    if defer_load and rm.has(plugin, "deferred_load"):
        kw["defer_load"] = True
    ctx = rm.call(plugin, "create_execution_context", engine_id, op_graph, config, **kw)
    return ExecutionPlanDescriptor(handle, engine_id, ws, tuple(sorted(tensor_uids)), plugin, ctx, config,
                                   op_graph=bytes(op_graph),
                                   override_enabled=bool(dynamic is not None and dynamic.get("override")))


def load_execution_plan(plan: ExecutionPlanDescriptor) -> None:
    """Loads a plan built with ``defer_load`` on its handle's device, on the calling thread (a no-op
    for engines that load as they build)."""
    rm = plan.handle.resource_manager
    if rm.has(plan.plugin, "deferred_load"):
        rm.call(plan.plugin, "load_execution_context", plan.context)


def _plan_info(plan_engine_id: int, workspace_size: int, tensor_uids, **extra) -> dict:
    """What a plugin that takes ``plan_info`` gets beside its payload: the envelope fields it
    may sign or check (FUSPLAN signs them with its own payload), the key, and the producer."""
    from hipdnn_iree.plugin_sdk.version import __version__
    return dict(engine_id=int(plan_engine_id), workspace_size=int(workspace_size),
                tensor_uids=tuple(sorted(int(u) for u in tensor_uids)), producer_version=__version__, **extra)


PAYLOADS = ("compiled", "hipdnn_graph")


def _payload_engine_id(plan: ExecutionPlanDescriptor, payload: str) -> int:
    """The envelope engine_id for ``payload``: the plugin's ``payload_engine_ids`` says under which
    id each payload form is written (the IREE engine: compiled -> IREE_LINALG, hipdnn_graph ->
    FUSILLI_ENGINE); a plugin without it writes only ``compiled``, under the plan's own id."""
    if payload not in PAYLOADS:
        raise HipdnnError(Status.BAD_PARAM, f"payload must be one of {list(PAYLOADS)}, got {payload!r}")
    rm = plan.handle.resource_manager
    ids = rm.payload_engine_ids(plan.plugin)
    if payload == "compiled":
        return int(ids.get("compiled", plan.engine_id))
    if payload not in ids or not rm.has(plan.plugin, "hipdnn_graph_payload"):
        raise HipdnnError(Status.NOT_SUPPORTED, f"engine {engine_name(plan.handle, plan.engine_id)} (plugin "
                                                f"{plugin_name(plan.plugin)}) cannot write a {payload!r} payload")
    return int(ids[payload])


def _serialize(plan: ExecutionPlanDescriptor, signing_key=None, version: int = _envelope.ENVELOPE_VERSION,
               payload: str = "compiled") -> bytes:
    if plan is None:
        raise HipdnnError(Status.BAD_PARAM_NULL_POINTER, "execution plan is None")
    if not plan.finalized or plan.context is None:
        raise HipdnnError(Status.NOT_INITIALIZED, "execution plan is not finalized: build the plan first")
    plugin = plan.plugin
    rm = plan.handle.resource_manager
    if not rm.has(plugin, "serialization"):
        raise HipdnnError(Status.NOT_SUPPORTED,
                          f"engine {engine_name(plan.handle, plan.engine_id)} (plugin {plugin_name(plugin)}) "
                          "does not support compiled-plan serialization")
    engine_id = _payload_engine_id(plan, payload)
    # NOTE: the envelope is hipDNN's five fields (FORMATS.md); identity, digest and signature are the
    # plugin's to write inside its payload. Plugins that say so get the envelope fields to sign.
    takes_info = rm.has(plugin, "plan_info")
    if signing_key is not None and not takes_info:
        raise HipdnnError(Status.NOT_SUPPORTED, f"plugin {plugin_name(plugin)} cannot sign its plans (it does not "
                                                "take plan_info): serialize without signing_key")
    if signing_key is not None:
        _envelope._key(signing_key, "signing_key")
    serialized = None
    try:
        if takes_info:
            # NOTE: gather=True: the plugin may return its payload as a list of buffers, which
            # encode copies once, straight into the envelope (no joined copy in between)
            info = _plan_info(engine_id, plan.workspace_size, plan.tensor_uids, signing_key=signing_key,
                              payload=payload, op_graph=plan.op_graph, gather=True)
            serialized = rm.call(plugin, "serialize_execution_context", plan.context, plan.engine_config,
                                 plan_info=info)
        else:
            serialized = rm.call(plugin, "serialize_execution_context", plan.context, plan.engine_config)
        if isinstance(serialized, list) and takes_info:   # buffers to concatenate (gather=True)
            payload_bytes = [bytes(p) if not isinstance(p, (bytes, memoryview)) else p for p in serialized]
            size = sum(len(p) for p in payload_bytes)
        else:
            payload_bytes = None if serialized is None else bytes(serialized)  # the envelope owns a copy
            size = 0 if serialized is None else len(payload_bytes)
        if size == 0:
            raise HipdnnError(Status.PLUGIN_ERROR, f"plugin {plugin_name(plugin)} returned an empty payload")
    finally:
        if serialized is not None:
            rm.call(plugin, "destroy_serialized_execution_context", serialized)
    env = _envelope.Envelope(version, engine_id, plan.workspace_size, tuple(sorted(plan.tensor_uids)), payload_bytes,
                             is_override_shape_enabled=bool(plan.override_enabled and payload == "compiled"))
    return _envelope.encode(env)


def get_serialized_execution_plan(plan: ExecutionPlanDescriptor, requested_byte_size: int,
                                  serialized_plan, signing_key=None, payload: str = "compiled") -> int:
    """Two-call pattern: with ``serialized_plan=None`` returns the size; else fills it.

    Returns the plan's size in bytes. A buffer smaller than the plan raises
    BAD_PARAM_SIZE_INSUFFICIENT. ``signing_key`` adds an HMAC-SHA256 signature. ``payload``:
    ``"compiled"`` (the engine's compiled module) or ``"hipdnn_graph"`` (see
    ``Graph.serialize_compiled_plan``).
    """
    # NOTE: the two-call pattern serializes once: the size query keeps the bytes for the fill
    args = (signing_key if isinstance(signing_key, (bytes, str, type(None))) else id(signing_key), payload)
    memo = getattr(plan, "_serialized_memo", None)
    if memo is not None and memo[0] == args:
        data = memo[1]
    else:
        data = _serialize(plan, signing_key, payload=payload)
    if serialized_plan is None:
        plan._serialized_memo = (args, data)
        return len(data)
    plan._serialized_memo = None
    if requested_byte_size < len(data):
        raise HipdnnError(Status.BAD_PARAM_SIZE_INSUFFICIENT,
                          f"requested_byte_size {requested_byte_size} is smaller than the plan's {len(data)} bytes")
    try:
        view = memoryview(serialized_plan).cast("B")
    except TypeError:
        raise HipdnnError(Status.BAD_PARAM, f"serialized_plan must be a writable byte buffer, got "
                                            f"{type(serialized_plan).__name__}") from None
    if view.readonly:
        raise HipdnnError(Status.BAD_PARAM, "serialized_plan buffer is read-only")
    if len(view) < len(data):
        raise HipdnnError(Status.BAD_PARAM_SIZE_INSUFFICIENT,
                          f"buffer of {len(view)} bytes is smaller than the plan's {len(data)} bytes")
    view[:len(data)] = data
    return len(data)


def serialize_execution_plan(plan: ExecutionPlanDescriptor, signing_key=None,
                             envelope_version: int = _envelope.ENVELOPE_VERSION, payload: str = "compiled") -> bytes:
    """Convenience: the plan's envelope bytes (version 1, the RFC's five fields: the only one written).

    Version 2 (hipdnn-iree 0.1.0's layout) is read, never written: hipDNN's forks misread it.
    """
    if envelope_version != _envelope.ENVELOPE_VERSION:
        raise HipdnnError(Status.NOT_SUPPORTED, f"cannot write envelope version {envelope_version}: hipdnn-iree "
                                                f"writes version {_envelope.ENVELOPE_VERSION} (the RFC's five "
                                                "fields); version 2 is read-only, for plans from hipdnn-iree 0.1.0")
    return _serialize(plan, signing_key, envelope_version, payload=payload)


def create_and_deserialize_execution_plan(handle: Handle, serialized_plan, verify_key=None) -> ExecutionPlanDescriptor:
    """Restores a finalized plan from envelope bytes, with no graph and no compiler.

    With ``verify_key`` the plan must carry a valid HMAC-SHA256 signature.
    """
    if handle is None:
        raise HipdnnError(Status.BAD_PARAM_NULL_POINTER, "handle is None")
    if not isinstance(handle, Handle):
        raise HipdnnError(Status.BAD_PARAM, f"expected a handle from create_handle(), got {type(handle).__name__}")
    env = _envelope.decode(serialized_plan, verify_key, handle._settings.max_plan_bytes)
    plugin = handle.resource_manager.plugin_for(env.engine_id)
    writer = f" (written by plugin {env.plugin_name} {env.plugin_version})" if env.plugin_name else ""
    if plugin is None:
        raise HipdnnError(Status.INTERNAL_ERROR,
                          f"no loaded engine plugin serves engine id {env.engine_id}{writer}; loaded engines: "
                          f"{', '.join(engine_name(handle, e) for e in handle.resource_manager.engine_ids()) or 'none'}")
    rm = handle.resource_manager
    if not rm.has(plugin, "serialization"):
        raise HipdnnError(Status.NOT_SUPPORTED, f"engine plugin {plugin_name(plugin)} cannot restore compiled plans "
                                                "(no serialization hooks)")
    legacy = env.layout == _envelope.LAYOUT_LEGACY_V2
    if rm.has(plugin, "plan_compatibility") and legacy:
        # NOTE: 0.1.0 plans keep their identity in the envelope
        rm.call(plugin, "check_plan_compatibility", {"plugin_name": env.plugin_name, "plugin_version": env.plugin_version,
               "producer_version": env.producer_version, "compiler_version": env.compiler_version,
               "target_device": env.target_device, "target_arch": env.target_arch})
    takes_info = rm.has(plugin, "plan_info")
    if verify_key is not None and not legacy and not takes_info:
        raise HipdnnError(Status.NOT_SUPPORTED, f"plugin {plugin_name(plugin)} cannot check plan signatures (it does "
                                                "not take plan_info): restore without verify_key")
    if takes_info:
        info = _plan_info(env.engine_id, env.workspace_size, env.tensor_uids,
                          verify_key=None if legacy else verify_key, envelope_layout=env.layout,
                          envelope_checked=legacy, is_override_shape_enabled=env.is_override_shape_enabled)
        ctx = rm.call(plugin, "create_execution_context_from_serialized", env.plugin_payload, plan_info=info)
    else:
        ctx = rm.call(plugin, "create_execution_context_from_serialized", bytes(env.plugin_payload))
    ctx_uids = sorted(t.uid for t in getattr(ctx, "tensors", []))
    if ctx_uids and ctx_uids != sorted(env.tensor_uids):
        raise HipdnnError(Status.BAD_PARAM, f"envelope tensor_uids {sorted(env.tensor_uids)} disagree with the "
                                            f"plan payload's {ctx_uids}")
    config = None
    override = False
    if rm.has(plugin, "description"):
        said = rm.call(plugin, "describe_context", ctx) or {}
        if said.get("engine_name"):
            config = EngineConfig(engine_id_from_name(said["engine_name"]), said["engine_name"],
                                  dict(said.get("knobs") or {}))
        # NOTE: the payload decides (its module takes other shapes or not); the envelope's slot 5
        # only tells hipDNN's forks, and a plan whose payload cannot take them is not made to
        override = bool(said.get("override_shapes")) and rm.has(plugin, "dynamic_shapes")
    return ExecutionPlanDescriptor(handle, env.engine_id, env.workspace_size, env.tensor_uids, plugin, ctx,
                                   engine_config=config, restored=True, envelope=env, override_enabled=override)


def _workspace_nbytes(workspace) -> int:
    """Bytes of an ``execute`` workspace: None (0), a buffer (bytes, bytearray, memoryview, numpy
    array) or a ``__dlpack__`` tensor (torch, CuPy, JAX; its ``nbytes``). Anything else is BAD_PARAM,
    also when the plan needs no workspace."""
    if workspace is None:
        return 0
    if isinstance(workspace, (str, numbers.Number)):   # NOTE: numbers are not sizes; str is not memory
        raise HipdnnError(Status.BAD_PARAM, f"workspace must be None or a buffer (numpy array, bytearray, a "
                                            f"__dlpack__ tensor), got {type(workspace).__name__} {workspace!r}")
    try:
        return memoryview(workspace).nbytes
    except (TypeError, ValueError, BufferError):
        pass
    nbytes = getattr(workspace, "nbytes", None)
    if hasattr(workspace, "__dlpack__") and isinstance(nbytes, numbers.Integral) and not isinstance(nbytes, bool):
        return int(nbytes)
    raise HipdnnError(Status.BAD_PARAM, f"workspace must be None or a buffer (numpy array, bytearray, a "
                                        f"__dlpack__ tensor), got {type(workspace).__name__}")
