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


# NOTE: cuDNN code gates features on backend_version() (``< 8905``: no layernorm, ...); the number
# is the cuDNN release whose Python surface this facade follows (9.10.0), not a cuDNN that is loaded.
FOLLOWS_CUDNN = 91000


def backend_version() -> int:
    """The cuDNN version number whose API this facade follows (91000 = 9.10.0): cuDNN code gates
    features on it. ``backend_version_string()`` names this engine."""
    return FOLLOWS_CUDNN


def backend_version_string() -> str:
    return f"hipdnn-iree {__version__} (cuDNN frontend API as of 9.10.0)"


def create_kernel_cache():
    """A kernel cache for ``pygraph(kernel_cache=...)`` (an ``hd.KernelCache``): graphs of one
    topology share one compiled module (implies dynamic shapes)."""
    from hipdnn_iree.frontend.kernel_cache import KernelCache
    return KernelCache()


def get_last_error_string() -> str:
    return _LAST_ERROR[0]
