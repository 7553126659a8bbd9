"""IREE runtime: one VM instance per process, devices cached per URI."""
from __future__ import annotations

import threading

from hipdnn_iree._status import HipdnnError, Status

_LOCK = threading.Lock()
_INSTANCE = None
_DEVICES: dict[str, object] = {}


def rt():
    import iree.runtime as _rt
    return _rt


def runtime_version() -> str:
    try:
        from iree.runtime import version
        return str(version.VERSION)
    except Exception:  # pragma: no cover
        return "unknown"


def instance():
    global _INSTANCE
    with _LOCK:
        if _INSTANCE is None:
            _INSTANCE = rt().VmInstance()
        return _INSTANCE


def device(uri: str):
    """The HAL device for ``uri`` (``local-task``, ``cuda``, ``hip://0``...), created once."""
    with _LOCK:
        dev = _DEVICES.get(uri)
        if dev is None:
            r = rt()
            driver_name = uri.split("://", 1)[0]
            try:
                if driver_name not in r.query_available_drivers():
                    raise RuntimeError(f"driver '{driver_name}' is not in this IREE runtime "
                                       f"(available: {', '.join(r.query_available_drivers())})")
                driver = r.get_driver(driver_name)
                dev = driver.create_device_by_uri(uri) if "://" in uri else driver.create_default_device()
            except Exception as e:
                raise HipdnnError(Status.NOT_INITIALIZED, f"cannot create IREE device '{uri}': {e}") from None
            _DEVICES[uri] = dev
        return dev


class LoadedModule:
    """A ``.vmfb`` loaded into a VM context on one device, ready to invoke."""

    def __init__(self, vmfb: bytes, device_uri: str, entry: str):
        r = rt()
        self.device = device(device_uri)
        inst = instance()
        try:
            self.module = r.VmModule.copy_buffer(inst, vmfb)
        except Exception as e:
            raise HipdnnError(Status.PLUGIN_ERROR, f"IREE cannot load the plan's module ({len(vmfb)} bytes): {e}") from None
        self.function = self.module.lookup_function(entry)
        if self.function is None:
            raise HipdnnError(Status.PLUGIN_ERROR, f"the plan's module has no entry function '{entry}'")
        try:
            hal = r.create_hal_module(inst, self.device)
            self.context = r.VmContext(inst, modules=[hal, self.module])
        except Exception as e:
            raise HipdnnError(Status.NOT_SUPPORTED,
                              f"IREE cannot run the plan's module on device '{device_uri}': {e}") from None
        self.invoker = r.FunctionInvoker(self.context, self.device, self.function)
        self._lock = threading.Lock()

    def reflection(self) -> dict:
        return dict(self.function.reflection)

    def __call__(self, *args):
        # NOTE: FunctionInvoker keeps per-call state; serialize calls on one module.
        with self._lock:
            result = self.invoker(*args)
            if not isinstance(result, tuple):
                result = (result,)
            return [r.to_host() for r in result]
