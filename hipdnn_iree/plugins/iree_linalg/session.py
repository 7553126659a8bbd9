"""The IREE engine's per-handle session: device, compile targets, cache setting.

The plugin object is shared and stateless; ``IreeLinalgPlugin.create_session`` makes one of these
for each handle (hipDNN's plugin handle). Everything here is read-only after creation, so one
plugin object serves handles of different targets, concurrently; the one exception is a small memo
of decoded graphs (``decoded_graphs``), so that one build (applicability, engine configs, the build
itself) decodes its graph bytes once.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lowering.abi import ENTRY_POINT

from hipdnn_iree.plugin_sdk.contract import SessionSettings
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.iree_linalg.targets import Target, check_runs_on, default_target_for, parse_target


@dataclass(frozen=True)
class IreeSession:
    """One handle's view of the IREE engine.

    Attributes:
        device_uri: HAL device URI, None for a compile-only handle.
        target: the target the device runs (the handle's own).
        targets: every target a build compiles (several: one plan, FUSPLAN kind 3).
        cache: the compile cache setting (``cache.resolve``).
        compile_flags: extra flags after every other (tests and experiments; part of the cache key).
        view_cache: reuse bound buffer views across calls (run.py); ``HIPDNN_IREE_VIEW_CACHE=0``
            turns it off, read when the session is made.
    """

    device_uri: str | None
    target: Target
    targets: tuple = ()
    cache: object = None
    compile_flags: tuple = field(default_factory=tuple)
    view_cache: bool = True
    store: object = None   # the handle's PlanStore (plugin_sdk/store.py), or None
    # graph bytes -> GraphDesc (frozen, safe to share), newest last; see build.decode
    decoded_graphs: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def target_name(self) -> str:
        return str(self.target)

    @property
    def device_identity(self) -> str:
        from hipdnn_iree.plugins.iree_linalg.tuning_db import device_identity
        return device_identity(self.device_uri)

    def load(self, ctx) -> None:
        """Loads ``ctx``'s module on the session's device (nothing on a compile-only handle)."""
        ctx.reuse_views = self.view_cache
        if self.device_uri is None:
            return
        from hipdnn_iree.plugins.iree_linalg.runtime import LoadedModule
        check_runs_on(ctx.target, self.device_uri)
        from hipdnn_iree.plugins.iree_linalg.cpufeatures import check_host
        check_host(ctx.target, ctx.cpu_features)   # NOTE: before the module is loaded: its code would SIGILL
        ctx.module = LoadedModule(ctx.vmfb, self.device_uri, ctx.abi.get("entry", ENTRY_POINT), module=ctx.vm_module)


def create_session(settings: SessionSettings) -> IreeSession:
    """Validates and resolves a handle's settings: the target(s) (parsed, CPU names checked, derived
    from the device when not given), the device (created now, so a bad one fails here with the
    driver's message) and the cache setting."""
    from hipdnn_iree.plugins.iree_linalg.cache import check_setting
    device, target = settings.device, settings.target
    if isinstance(target, (list, tuple)):
        if not target or len(set(map(str, target))) != len(target):
            raise HipdnnError(Status.BAD_PARAM, f"target list must name at least one target, each once, got {target!r}")
        parsed = [parse_target(t) for t in target]
        if len({str(t) for t in parsed}) != len(parsed):
            raise HipdnnError(Status.BAD_PARAM, f"target list names a target twice: {[str(t) for t in parsed]}")
        from hipdnn_iree.plugins.iree_linalg.multitarget import primary_target
        primary = primary_target(parsed, device)
    else:
        primary = parse_target(target) if target is not None else default_target_for(device)
        parsed = [primary]
    from hipdnn_iree.plugins.iree_linalg.compile import check_cpu_name
    for t in parsed:
        check_cpu_name(t)   # NOTE: an unknown LLVM CPU name is refused here, not at the first build
    if device is not None:
        check_runs_on(primary, device, what="handle")
        from hipdnn_iree.plugins.iree_linalg.runtime import device as make_device
        make_device(device)  # fail now, with the driver's message, if the device is unusable
    check_setting(settings.cache)
    flags = tuple(settings.compile_flags or ())
    if not all(isinstance(f, str) and f for f in flags):
        raise HipdnnError(Status.BAD_PARAM, f"compile flags must be non-empty strings, got {list(flags)!r}")
    return IreeSession(device, primary, tuple(parsed), settings.cache, flags, view_cache=view_cache_enabled(),
                       store=getattr(settings, "store", None))


VIEW_CACHE_ENV = "HIPDNN_IREE_VIEW_CACHE"


def view_cache_enabled() -> bool:
    """``HIPDNN_IREE_VIEW_CACHE`` now: any value but ``0`` (or unset) keeps the view cache on."""
    import os
    return os.environ.get(VIEW_CACHE_ENV, "1").strip() != "0"
