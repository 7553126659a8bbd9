"""IREE runtime: one VM instance per process, devices cached per URI."""
from __future__ import annotations

import threading

import numpy as np

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

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


HOST_ALIGNMENT = 64  # IREE_HAL_HEAP_BUFFER_ALIGNMENT


def element_type(dtype):
    """numpy dtype -> HalElementType."""
    from iree.runtime import array_interop
    return array_interop.map_dtype_to_element_type(dtype)


class LoadedModule:
    """A ``.vmfb`` loaded into a VM context on one device, ready to invoke.

    Invocation goes through ``VmContext.invoke`` with buffer views that alias the caller's
    memory where IREE allows it (host arrays on CPU devices, DLPack device tensors on GPUs),
    so inputs are not copied and outputs land in place through ``iree.abi.output``.
    """

    def __init__(self, vmfb: bytes, device_uri: str, entry: str, module=None):
        r = rt()
        self.device_uri = device_uri
        self.is_host = device_uri.split("://", 1)[0] in ("local-task", "local-sync")
        self.device = device(device_uri)
        inst = instance()
        try:
            # NOTE: a restored plan passes the VmModule it already made (in place, for mapped files)
            self.module = module if module is not None else r.VmModule.copy_buffer(inst, vmfb)
        except Exception as e:
            raise HipdnnError(Status.PLUGIN_ERROR, f"IREE cannot load the plan's module ({len(vmfb)} bytes): {e}") from None
        self.entry = entry
        self.function = self.module.lookup_function(entry)
        if self.function is None:
            raise HipdnnError(Status.PLUGIN_ERROR, f"the plan's module has no entry function '{entry}'")
        self.functions = {entry: self.function}
        self.calls = {}   # function name -> invocations through invoke_list (which code ran: tests, benchmarks)
        try:
            hal = r.create_hal_module(inst, self.device)
            self.context = r.VmContext(inst, modules=[hal, self.module])
        except Exception as e:
            raise HipdnnError(Status.NOT_SUPPORTED,
                              f"IREE cannot run the plan's module on device '{device_uri}': {e}") from None
        self._import_type = r.MemoryType.DEVICE_LOCAL | r.MemoryType.HOST_VISIBLE
        self._usage = r.BufferUsage.DEFAULT
        self._lock = threading.Lock()
        self._rt = r

    def host_view(self, arr):
        """A buffer view aliasing a 64-byte aligned, writable host array (no copy).

        Callers stage other arrays into aligned buffers first (plugins/iree_linalg/plugin.py).
        """
        r = rt()
        if not (self.is_host and arr.flags.writeable and arr.__array_interface__["data"][0] % HOST_ALIGNMENT == 0):
            raise HipdnnError(Status.INTERNAL_ERROR, "host_view needs a writable, 64-byte aligned array on a CPU device")
        buf = self.device.allocator.import_host_allocation(arr, self._import_type, self._usage)
        # NOTE: FP8/FP4/E8M0 arrays (ml_dtypes) are one code per byte; the module takes them as i8
        # (lowering/_minifloat.py)
        dt = np.dtype(np.int8) if arr.dtype.name.startswith(("float8_", "float4_")) else arr.dtype
        return r.HalBufferView(buf, list(arr.shape), element_type(dt))

    def dlpack_view(self, obj):
        """Imports a DLPack tensor (device or host memory) without copying."""
        return self.device.from_dlpack_capsule(obj.__dlpack__())

    def arg_list(self, views: list):
        """A ``VmVariantList`` of ``views``, built once and reused by ``invoke_list``."""
        args = self._rt.VmVariantList(len(views))
        for v in views:
            args.push_ref(v)
        return args

    def lookup(self, name: str):
        """The module's public function ``name`` (a specialized plan's static one), looked up once."""
        fn = self.functions.get(name)
        if fn is None:
            fn = self.module.lookup_function(name)
            if fn is None:
                raise HipdnnError(Status.PLUGIN_ERROR, f"the plan's module has no function '{name}'")
            self.functions[name] = fn
        return fn

    def invoke_list(self, args, n_results: int, entry: str | None = None) -> None:
        """Invokes ``entry`` (None: the module's entry) with a prebuilt argument list; results land
        in the caller's buffers (``iree.abi.output``), so the returned views are not read back."""
        fn = self.function if entry is None else self.lookup(entry)
        name = entry or self.entry
        rets = self._rt.VmVariantList(n_results)
        with self._lock:
            self.calls[name] = self.calls.get(name, 0) + 1
            self.context.invoke(fn, args, rets)

    def invoke(self, views: list, n_results: int) -> list:
        r = rt()
        args = r.VmVariantList(len(views))
        for v in views:
            args.push_ref(v)
        rets = r.VmVariantList(n_results)
        # NOTE: a VM context is not safe for concurrent invocations; serialize calls on one module.
        with self._lock:
            self.context.invoke(self.function, args, rets)
        return [rets.get_as_object(i, r.HalBufferView) for i in range(n_results)]
