"""cuDNN's handle functions over ``hd.create_handle``: a handle picks IREE's GPU when IREE sees
one (CUDA, then HIP), else the CPU; ``set_stream`` orders execution after the stream's queued
work (the stream is synchronized before IREE runs, and IREE's call completes before execute
returns, so work queued on the stream afterwards runs after it)."""
from __future__ import annotations

from hipdnn_iree.backend.handle import create_handle as _hd_create_handle
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.version import __version__

_LAST_ERROR = [""]


class Handle:
    """What ``cudnn.create_handle()`` returns: an ``hd.Handle`` (``.hd``) and the stream set on it."""

    def __init__(self, hd_handle):
        self.hd = hd_handle
        self.stream = None
        self.destroyed = False

    @property
    def device(self):
        return self.hd.device

    def __repr__(self) -> str:
        return f"cudnn.Handle(device={self.hd.device!r}, target={self.hd.target!r})"


def _gpu_device() -> str | None:
    """``"cuda"`` or ``"hip"`` when IREE's runtime has that driver and it finds a device."""
    try:
        import iree.runtime as rt
        drivers = rt.query_available_drivers()
    except Exception:
        return None
    for name in ("cuda", "hip"):
        if name not in drivers:
            continue
        try:
            if rt.get_driver(name).query_available_devices():
                return name
        except Exception:
            continue
    return None


def create_handle(device=None, target=None, cache=None) -> Handle:
    """A handle on IREE's GPU when it sees one, else on the CPU.

    ``device`` / ``target`` (this project's extension) pick explicitly: ``device="cpu"``,
    ``device="cuda", target="cuda:sm_80"``, or ``device=None, target="rocm:gfx942"`` for a
    compile-only handle (build and serialize plans for a GPU this machine lacks).
    """
    if device is None and target is None:
        device = _gpu_device() or "local-task"
    elif device == "cpu":
        device = "local-task"
    return Handle(_hd_create_handle(device=device, target=target, cache=cache))


def destroy_handle(handle) -> None:
    check(handle)
    handle.destroyed = True


def check(handle) -> Handle:
    if not isinstance(handle, Handle):
        raise HipdnnError(Status.BAD_PARAM, f"expected a handle from cudnn.create_handle(), got {type(handle).__name__}")
    if handle.destroyed:
        raise HipdnnError(Status.BAD_PARAM, "the handle was destroyed (cudnn.destroy_handle)")
    return handle


def set_stream(handle, stream) -> None:
    """Execution on ``handle`` is ordered after work already queued on ``stream`` and before work
    queued on it after the call. ``stream``: a torch/CuPy stream object or a raw stream pointer."""
    check(handle).stream = stream


def get_stream(handle):
    return check(handle).stream


def sync_stream(stream) -> None:
    """Waits for the work queued on ``stream`` (an object with ``synchronize()`` or a raw pointer)."""
    if stream is None:
        return
    sync = getattr(stream, "synchronize", None)
    if callable(sync):
        sync()
        return
    import sys
    torch = sys.modules.get("torch")
    if isinstance(stream, int) and torch is not None and torch.cuda.is_available():
        torch.cuda.ExternalStream(stream).synchronize()
        return
    if isinstance(stream, int) and stream == 0:
        return
    raise HipdnnError(Status.BAD_PARAM, f"set_stream: cannot synchronize stream {stream!r}: pass a torch or "
                                        "CuPy stream object, or a raw pointer with torch's CUDA available")


# NOTE: cuDNN code gates features on backend_version() (``< 8905``: no layernorm, ``< "9.11"``: no
# deviceless compilation, ...); the number is the cuDNN API level this facade implements (9.11.0),
# not a cuDNN that is loaded. engine_version_string() names this engine.
FOLLOWS_CUDNN = 91100
FOLLOWS_CUDNN_TEXT = "9.11.0"
# The cuDNN frontend release whose Python surface (cudnn.pygraph's methods) the facade follows.
FRONTEND_API = "1.32.0"


def backend_version() -> int:
    """The cuDNN API level this facade implements, as cuDNN numbers it (91100 = 9.11.0): cuDNN code
    gates features on it. ``engine_version_string()`` names the engine behind it."""
    return FOLLOWS_CUDNN


def backend_version_string() -> str:
    """``"9.11.0"``: compares as cuDNN's version string does (``LooseVersion(...) < "9.5.0"``)."""
    return FOLLOWS_CUDNN_TEXT


def engine_version_string() -> str:
    """This project's identity: ``"hipdnn-iree 0.5.0 (cuDNN API 9.11.0, cuDNN frontend API 1.32.0)"``."""
    return f"hipdnn-iree {__version__} (cuDNN API {FOLLOWS_CUDNN_TEXT}, cuDNN frontend API {FRONTEND_API})"


class DeviceProperties:
    """What ``cudnn.create_device_properties`` returns: the device a graph is compiled for without
    a handle (deviceless ahead-of-time compilation), as this engine needs it: IREE's driver and
    compile target, plus the numbers cuDNN's object carries. ``serialize()`` gives JSON that
    ``create_device_properties(json)`` reads back."""

    FIELDS = ("device", "target", "device_name", "sm_version", "sm_count")

    def __init__(self, device, target, device_name="", sm_version=0, sm_count=0):
        self.device, self.target = device, target
        self.device_name, self.sm_version, self.sm_count = device_name, int(sm_version), int(sm_count)

    def serialize(self) -> str:
        import json
        return json.dumps({k: getattr(self, k) for k in self.FIELDS}, sort_keys=True)

    def __repr__(self) -> str:
        return f"cudnn.DeviceProperties({self.serialize()})"


def create_device_properties(device_or_json=0) -> DeviceProperties:
    """Device properties of GPU ``device_or_json`` (an index) as IREE sees it, or read back from the
    JSON of ``DeviceProperties.serialize()``. Without a GPU, index 0 is the CPU."""
    import json
    if isinstance(device_or_json, (str, bytes)):
        try:
            d = json.loads(device_or_json)
            return DeviceProperties(**{k: d[k] for k in DeviceProperties.FIELDS})
        except (ValueError, KeyError, TypeError) as e:
            raise HipdnnError(Status.BAD_PARAM, f"create_device_properties: not the JSON of "
                                                f"DeviceProperties.serialize(): {e}") from None
    if isinstance(device_or_json, bool) or not isinstance(device_or_json, int) or device_or_json < 0:
        raise HipdnnError(Status.BAD_PARAM, f"create_device_properties: expected a device index or JSON, got "
                                            f"{device_or_json!r}")
    from hipdnn_iree.backend.handle import create_handle as _hd_create
    dev = _gpu_device()
    h = _hd_create(device=f"{dev}://{device_or_json}" if dev and device_or_json else dev or "local-task")
    name, sm, count = "", 0, 0
    import sys
    torch = sys.modules.get("torch")
    if dev == "cuda" and torch is not None and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(device_or_json)
        name, sm, count = p.name, p.major * 10 + p.minor, p.multi_processor_count
    return DeviceProperties(h.device, h.target, name, sm, count)


def create_kernel_cache():
    """A kernel cache for ``pygraph(kernel_cache=...)`` (an ``hd.KernelCache``): graphs of one
    topology share one compiled module (implies dynamic shapes)."""
    from hipdnn_iree.frontend.kernel_cache import KernelCache
    return KernelCache()


def get_last_error_string() -> str:
    return _LAST_ERROR[0]
