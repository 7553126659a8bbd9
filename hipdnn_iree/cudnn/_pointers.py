"""Raw pointers in a variant pack, checked before anything reads or writes through them.

cuDNN binds device pointers (``torch_tensor.data_ptr()``); the facade keeps that, but an integer
is only an address the driver vouches for: on a CUDA or HIP handle the driver is asked (through
ctypes on ``libcuda`` / ``libamdhip64``, which IREE's HAL has already loaded) whether it is device
memory of the handle's device, with an allocation that covers the tensor's span from it. On a CPU
handle a bare integer is refused: nothing can tell a host address from any other number, and a
wrong one kills the process (pass the array itself: numpy, a torch CPU tensor, anything with the
buffer protocol, ``__array_interface__`` or ``__dlpack__``).

Every refusal is ``BAD_PARAM`` naming the tensor and its uid.
"""
from __future__ import annotations

import ctypes
import functools

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

CPU_DEVICES = (None, "local-task", "local-sync")

# CUpointer_attribute / hipPointer_attribute (the same numbers in cuda.h and hip_runtime_api.h)
_ATTR_MEMORY_TYPE, _ATTR_DEVICE_ORDINAL, _ATTR_RANGE_START, _ATTR_RANGE_SIZE = 2, 9, 11, 12
_CU_MEMORYTYPE_DEVICE, _CU_MEMORYTYPE_UNIFIED = 2, 4
# hipMemoryType: ROCm 6 renumbered it (Device 2, Managed 3, Unified 11; ROCm 5: Device 1, Unified 3, Managed 4)
_HIP_DEVICE_TYPES = {6: (2, 3, 11), 5: (1, 3, 4)}


class PointerFacts:
    """What the driver says about an address: memory type accepted as device memory, the device
    ordinal, and the allocation's ``[start, start + size)``."""

    def __init__(self, is_device: bool, ordinal: int, start: int, size: int, kind: str):
        self.is_device, self.ordinal, self.start, self.size, self.kind = is_device, ordinal, start, size, kind


def check_pointer(ptr: int, nbytes: int, device: str | None, what: str, query=None) -> None:
    """Refuses (BAD_PARAM naming ``what``) an integer that is not ``nbytes`` of device memory of
    ``device`` (an IREE device URI: ``cuda``, ``cuda://1``, ``hip://0``; a CPU device refuses
    every integer). ``query``: ``(ptr, driver) -> PointerFacts | None`` (the driver's, by default;
    a test passes its own)."""
    if device in CPU_DEVICES:
        raise HipdnnError(Status.BAD_PARAM, f"{what}: got the integer {ptr:#x}, a raw pointer; a CPU handle does "
                                            f"not bind raw addresses (nothing can check a host pointer, and a wrong "
                                            f"one kills the process): pass the array itself (numpy, a torch CPU "
                                            f"tensor, or any object with the buffer protocol, __array_interface__ "
                                            f"or __dlpack__)")
    driver, ordinal = _driver_and_ordinal(device)
    try:
        facts = (query or _query)(ptr, driver)
    except HipdnnError:
        raise
    except Exception as e:         # NOTE: a driver that cannot be loaded or called: the pointer is unchecked
        raise HipdnnError(Status.BAD_PARAM, f"{what}: cannot check the raw pointer {ptr:#x} with the {driver} "
                                            f"driver ({e}); pass the device tensor itself (torch, CuPy, any "
                                            f"__dlpack__ object)") from None
    if facts is None or not facts.is_device:
        raise HipdnnError(Status.BAD_PARAM, f"{what}: {ptr:#x} is not device memory the {driver} driver knows "
                                            f"({facts.kind if facts is not None else 'no allocation'}); pass a "
                                            f"device pointer of the handle's device (tensor.data_ptr()) or the "
                                            f"device tensor itself")
    if ordinal is not None and facts.ordinal != ordinal:
        raise HipdnnError(Status.BAD_PARAM, f"{what}: {ptr:#x} is memory of {driver} device {facts.ordinal}, the "
                                            f"handle's device is {device!r} (device {ordinal})")
    have = facts.start + facts.size - ptr
    if facts.size and have < nbytes:
        raise HipdnnError(Status.BAD_PARAM, f"{what}: the allocation at {facts.start:#x} holds {max(have, 0)} bytes "
                                            f"from {ptr:#x}; the tensor's dims and strides span {nbytes} bytes")


def _driver_and_ordinal(device: str) -> tuple[str, int | None]:
    """``"cuda"`` -> (cuda, 0): IREE's default device is the driver's first; ``"hip://1"`` -> (hip, 1);
    a path that is not a number (a UUID) -> ordinal None (not compared)."""
    name, _, path = device.partition("://")
    driver = "hip" if name.startswith("hip") else "cuda"
    if not path:
        return driver, 0
    return driver, int(path) if path.isdigit() else None


def _query(ptr: int, driver: str) -> PointerFacts | None:
    return _query_cuda(ptr) if driver == "cuda" else _query_hip(ptr)


@functools.lru_cache(maxsize=None)
def _lib(names: tuple) -> ctypes.CDLL:
    err = None
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError as e:
            err = e
    raise OSError(f"none of {', '.join(names)} can be loaded: {err}")


def _query_cuda(ptr: int) -> PointerFacts | None:
    """``cuPointerGetAttributes``: unlike ``cuPointerGetAttribute`` it returns success for an
    address CUDA does not know, with the attributes left zero (memory type 0)."""
    cu = _lib(("libcuda.so.1", "libcuda.so", "nvcuda.dll"))
    rc = cu.cuInit(ctypes.c_uint(0))
    if rc != 0:
        raise OSError(f"cuInit failed (CUresult {rc})")
    mem_type, ordinal = ctypes.c_uint(0), ctypes.c_int(-1)
    start, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    attrs = (ctypes.c_int * 4)(_ATTR_MEMORY_TYPE, _ATTR_DEVICE_ORDINAL, _ATTR_RANGE_START, _ATTR_RANGE_SIZE)
    data = (ctypes.c_void_p * 4)(*(ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in
                                   (mem_type, ordinal, start, size)))
    rc = cu.cuPointerGetAttributes(ctypes.c_uint(4), attrs, data, ctypes.c_uint64(ptr))
    if rc != 0:
        return None
    kind = {0: "unregistered", 1: "host memory", 2: "device memory", 3: "an array", 4: "unified memory"}.get(
        mem_type.value, f"memory type {mem_type.value}")
    is_device = mem_type.value in (_CU_MEMORYTYPE_DEVICE, _CU_MEMORYTYPE_UNIFIED)
    return PointerFacts(is_device, ordinal.value, start.value, size.value, kind)


def _query_hip(ptr: int) -> PointerFacts | None:
    """``hipPointerGetAttribute`` per attribute (hipPointerGetAttributes' struct changed between
    ROCm releases); an address HIP does not know is an error code: None."""
    hip = _lib(("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", "amdhip64.dll"))
    version = ctypes.c_int(0)
    hip.hipRuntimeGetVersion(ctypes.byref(version))
    device_types = _HIP_DEVICE_TYPES[6 if version.value >= 60000000 else 5]
    mem_type, ordinal = ctypes.c_uint(0), ctypes.c_int(-1)
    start, size = ctypes.c_void_p(0), ctypes.c_size_t(0)
    get = hip.hipPointerGetAttribute
    for value, attr in ((mem_type, _ATTR_MEMORY_TYPE), (ordinal, _ATTR_DEVICE_ORDINAL), (start, _ATTR_RANGE_START),
                        (size, _ATTR_RANGE_SIZE)):
        if get(ctypes.byref(value), ctypes.c_int(attr), ctypes.c_void_p(ptr)) != 0:
            return None
    return PointerFacts(mem_type.value in device_types, ordinal.value, start.value or 0, size.value,
                        f"hipMemoryType {mem_type.value}")
