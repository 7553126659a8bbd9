"""Handles: a device (or none), a compile target and the engine plugins.

The plugin resource manager maps engine IDs to plugin objects, as hipDNN's
does. Plugins come from the ``hipdnn_iree.engine_plugins`` entry point group
unless the caller passes them explicitly.
"""
from __future__ import annotations

from importlib import metadata

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

ENTRY_POINT_GROUP = "hipdnn_iree.engine_plugins"
REQUIRED_METHODS = ("get_all_engine_ids", "get_applicable_engine_ids", "get_workspace_size",
                    "create_execution_context", "destroy_execution_context", "execute_op_graph")
SERIALIZATION_HOOKS = ("serialize_execution_context", "destroy_serialized_execution_context",
                       "create_execution_context_from_serialized")


def _builtin_plugins() -> list:
    from hipdnn_iree.plugins.iree_linalg.plugin import IreeLinalgPlugin
    from hipdnn_iree.plugins.numpy_reference.plugin import NumpyReferencePlugin
    return [IreeLinalgPlugin(), NumpyReferencePlugin()]


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
    # NOTE: running from a source checkout without `pip install` has no entry points.
    return plugins or _builtin_plugins()


class PluginResourceManager:
    """engine_id -> plugin for one handle."""

    def __init__(self, plugins: list, device_uri: str | None, target: str | None, targets: list[str] | None = None):
        self.plugins = list(plugins)
        self._by_engine: dict[int, object] = {}
        for p in self.plugins:
            missing = [m for m in REQUIRED_METHODS if not callable(getattr(p, m, None))]
            if missing:
                raise HipdnnError(Status.PLUGIN_ERROR,
                                  f"engine plugin {plugin_name(p)} lacks required method(s) {missing}")
            if targets and len(targets) > 1 and callable(getattr(p, "bind_targets", None)):
                p.bind_targets(device_uri, list(targets))   # one module per target (FUSPLAN kind 3)
            elif callable(getattr(p, "bind", None)):
                p.bind(device_uri, target)
            for eid in p.get_all_engine_ids():
                if eid in self._by_engine:
                    raise HipdnnError(Status.PLUGIN_ERROR,
                                      f"engine id {eid} is served by two plugins: "
                                      f"{plugin_name(self._by_engine[eid])} and {plugin_name(p)}")
                self._by_engine[int(eid)] = p

    def plugin_for(self, engine_id: int):
        return self._by_engine.get(int(engine_id))

    def engine_ids(self) -> list[int]:
        return list(self._by_engine)


SELF_CHECK_ENV = "HIPDNN_IREE_SELF_CHECK"


def self_check_enabled(setting) -> bool:
    """The handle's self-check setting (``selfcheck.py``): ``None`` follows ``HIPDNN_IREE_SELF_CHECK``."""
    import os
    if setting is None:
        return os.environ.get(SELF_CHECK_ENV, "0") not in ("", "0", "false", "False", "no", "off")
    if not isinstance(setting, bool):
        raise HipdnnError(Status.BAD_PARAM, f"self_check must be True, False or None, got {setting!r}")
    return setting


def engine_name(handle, engine_id: int) -> str:
    """The engine's name as its plugin tells it (``engine_names``), else the id."""
    plugin = handle.resource_manager.plugin_for(engine_id)
    names = getattr(plugin, "engine_names", None) or {}
    return str(names.get(engine_id, engine_id))


def plugin_name(p) -> str:
    return str(getattr(p, "name", type(p).__name__))


def has_serialization_hooks(p) -> bool:
    return all(callable(getattr(p, h, None)) for h in SERIALIZATION_HOOKS)


class Handle:
    """Create with :func:`create_handle`."""

    self_check = False   # first execution of each plan compared with NUMPY_REFERENCE (selfcheck.py)

    def __init__(self, device: str | None, target: str, plugins: list, targets: tuple[str, ...] | None = None):
        self.device = device
        self.target = target                              # the target this handle's device runs
        self.targets = tuple(targets) if targets else (target,)   # every target plans are built for
        self.resource_manager = PluginResourceManager(plugins, device, target, list(self.targets))

    def __repr__(self) -> str:
        return f"Handle(device={self.device!r}, target={self.target!r})"


def create_handle(device: str | None = "local-task", target: str | None = None,
                  engine_plugins: list | None = None, cache=None, self_check: bool | None = None) -> Handle:
    """Creates a handle.

    Args:
        device: an IREE HAL device URI (``"local-task"``, ``"local-sync"``, ``"cuda"``,
            ``"cuda://0"``, ``"hip://0"``), or ``None`` for a compile-only handle.
        target: ``"llvm-cpu[:<cpu>]"``, ``"rocm:<gfx>"`` or ``"cuda:<sm>"``; derived from the
            device when omitted. A list of targets builds one module per target into one plan
            (FUSPLAN kind 3); the device runs the entry made for it (``plugins/iree_linalg/multitarget.py``).
        engine_plugins: exactly these plugin objects; ``None`` loads the installed ones.
        cache: the persistent compile cache (``hipdnn_iree/plugins/iree_linalg/cache.py``): ``None`` follows the
            environment (on unless ``HIPDNN_IREE_CACHE=0``), ``False`` always compiles, ``True``
            turns it on, a folder path uses that folder. Set on plugins with a ``cache`` attribute.
        self_check: compare the first execution of each plan with the NUMPY_REFERENCE engine and
            raise EXECUTION_FAILED on a mismatch (``hipdnn_iree/backend/selfcheck.py``); ``None`` follows
            ``HIPDNN_IREE_SELF_CHECK=1``.

    Example:
        >>> import hipdnn_iree as hd
        >>> h = hd.create_handle(device=None, target="rocm:gfx942")
        >>> h.device is None
        True
    """
    from hipdnn_iree.plugins.iree_linalg.targets import default_target_for, parse_target
    if device is not None and (not isinstance(device, str) or not device):
        raise HipdnnError(Status.BAD_PARAM, f"device must be a HAL device URI string or None, got {device!r}")
    if device == "cpu":
        device = "local-task"
    if device is None and target is None:
        raise HipdnnError(Status.BAD_PARAM, "a compile-only handle (device=None) needs a target, e.g. "
                                            "target='rocm:gfx942'")
    targets = None
    if isinstance(target, (list, tuple)):
        if not target or len(set(map(str, target))) != len(target):
            raise HipdnnError(Status.BAD_PARAM, f"target list must name at least one target, each once, got {target!r}")
        parsed = [parse_target(t) for t in target]
        if len({str(t) for t in parsed}) != len(parsed):
            raise HipdnnError(Status.BAD_PARAM, f"target list names a target twice: {[str(t) for t in parsed]}")
        from hipdnn_iree.plugins.iree_linalg.multitarget import primary_target
        tgt = primary_target(parsed, device)
        targets = tuple(str(t) for t in parsed)
    else:
        tgt = parse_target(target) if target is not None else default_target_for(device)
    from hipdnn_iree.plugins.iree_linalg.targets import check_cpu_name
    for t in (parsed if targets else [tgt]):
        check_cpu_name(t)   # NOTE: an unknown LLVM CPU name is refused here, not at the first build
    if device is not None:
        from hipdnn_iree.plugins.iree_linalg.targets import check_runs_on
        check_runs_on(tgt, device, what="handle")
        from hipdnn_iree.plugins.iree_linalg.runtime import device as make_device
        make_device(device)  # fail now, with the driver's message, if the device is unusable
    if engine_plugins is not None and not isinstance(engine_plugins, (list, tuple)):
        raise HipdnnError(Status.BAD_PARAM, f"engine_plugins must be a list of plugin objects or None, "
                                            f"got {type(engine_plugins).__name__}")
    plugins = discover_plugins() if engine_plugins is None else list(engine_plugins)
    if cache is not None:
        from hipdnn_iree.plugins.iree_linalg.cache import check_setting
        check_setting(cache)
        for p in plugins:
            if hasattr(p, "cache"):
                p.cache = cache
    check = self_check_enabled(self_check)
    handle = Handle(device, str(tgt), plugins, targets)
    handle.self_check = check
    return handle
