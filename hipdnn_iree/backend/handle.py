"""Handles: a device (or none), a compile target and the engine plugins.

The plugin resource manager (``engines.py``) maps engine IDs to plugin objects and keeps one
session per plugin for the handle, as hipDNN's backend keeps a plugin handle per backend handle.
Plugins come from the ``hipdnn_iree.engine_plugins`` entry point group unless the caller passes
them explicitly. This module imports no engine: the IREE engine's session checks the target and
the device.
"""
from __future__ import annotations

from dataclasses import dataclass

from hipdnn_iree.backend.engines import PluginResourceManager, discover_plugins, plugin_name  # noqa: F401
from hipdnn_iree.plugin_sdk.contract import SessionSettings
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status


SELF_CHECK_ENV = "HIPDNN_IREE_SELF_CHECK"


def self_check_enabled(setting) -> bool:
    """The handle's self-check setting (``selfcheck.py``): ``None`` follows ``HIPDNN_IREE_SELF_CHECK``."""
    import os
    if setting is None:
        return os.environ.get(SELF_CHECK_ENV, "0") not in ("", "0", "false", "False", "no", "off")
    if not isinstance(setting, bool):
        raise HipdnnError(Status.BAD_PARAM, f"self_check must be True, False or None, got {setting!r}")
    return setting


@dataclass(frozen=True)
class HandleSettings:
    """What a handle reads from the environment, once, when it is made (never at import).

    Attributes:
        max_plan_bytes: the size limit of plans restored on the handle (``HIPDNN_IREE_MAX_PLAN_BYTES``,
            default 1 GiB; ``backend/envelope.py``).
    """

    max_plan_bytes: int

    @classmethod
    def from_environment(cls) -> "HandleSettings":
        from hipdnn_iree.backend import envelope as _envelope
        return cls(max_plan_bytes=_envelope.max_plan_bytes())


def engine_name(handle, engine_id: int) -> str:
    """The engine's name as its plugin tells it (``engine_names``), else the id."""
    return handle.resource_manager.engine_name(engine_id)


class Handle:
    """Create with :func:`create_handle`."""

    self_check = False   # first execution of each plan compared with NUMPY_REFERENCE (selfcheck.py)
    store = None         # the plan store (plugin_sdk/store.py) or None

    def __init__(self, device: str | None, resource_manager: PluginResourceManager, target: str = "",
                 targets: tuple = (), settings: HandleSettings | None = None):
        self._settings = settings if settings is not None else HandleSettings.from_environment()
        self.device = device
        self.resource_manager = resource_manager
        self.target = target                              # the target this handle's device runs
        self.targets = tuple(targets) or ((target,) if target else ())   # every target plans are built for

    def __repr__(self) -> str:
        return f"Handle(device={self.device!r}, target={self.target!r})"


def create_handle(device: str | None = "local-task", target: str | None = None,
                  engine_plugins: list | None = None, cache=None, self_check: bool | None = None,
                  store=None) -> Handle:
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
        store: the plan store (``hd.PlanStore``, a ``redis://host:port/db`` URL or a folder) that builds
            share compiled modules, tuning results and finished plans through; ``None`` follows
            ``HIPDNN_IREE_STORE`` (unset: no store, builds use the local compile cache only). An
            unreachable store never fails a build: it goes on locally, saying so once.

    Example:
        >>> import hipdnn_iree as hd
        >>> h = hd.create_handle(device=None, target="rocm:gfx942")
        >>> h.device is None
        True
    """
    return open_handle(device, target, engine_plugins, cache, self_check, store=store)


def open_handle(device, target, engine_plugins, cache, self_check, compile_flags: tuple = (), store=None) -> Handle:
    """:func:`create_handle` with the settings the public call does not expose: ``compile_flags``
    (extra compiler flags, the CLI's ``--iree-flag``; part of the compile cache key)."""
    if device is not None and (not isinstance(device, str) or not device):
        raise HipdnnError(Status.BAD_PARAM, f"device must be a HAL device URI string or None, got {device!r}")
    if device == "cpu":
        device = "local-task"
    if device is None and target is None:
        raise HipdnnError(Status.BAD_PARAM, "a compile-only handle (device=None) needs a target, e.g. "
                                            "target='rocm:gfx942'")
    if engine_plugins is not None and not isinstance(engine_plugins, (list, tuple)):
        raise HipdnnError(Status.BAD_PARAM, f"engine_plugins must be a list of plugin objects or None, "
                                            f"got {type(engine_plugins).__name__}")
    check = self_check_enabled(self_check)
    settings = HandleSettings.from_environment()
    from hipdnn_iree.plugin_sdk.store import resolve as _resolve_store
    store = _resolve_store(store)
    plugins = discover_plugins() if engine_plugins is None else list(engine_plugins)
    target_arg = list(target) if isinstance(target, (list, tuple)) else target
    rm = PluginResourceManager(plugins, SessionSettings(device, target_arg, cache, tuple(compile_flags), store))
    resolved = rm.session_attr("target")
    targets = rm.session_attr("targets") or ()
    name = str(resolved) if resolved is not None else (target if isinstance(target, str) else "")
    handle = Handle(device, rm, name, tuple(str(t) for t in targets), settings)
    handle.self_check = check
    handle.store = store
    return handle
