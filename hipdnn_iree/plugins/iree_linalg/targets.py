"""Compile targets and HAL devices: parsing, flags and compatibility."""
from __future__ import annotations

from dataclasses import dataclass

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

# target backend -> HAL driver(s) whose devices run its executables
_DRIVERS = {"llvm-cpu": ("local-task", "local-sync"), "rocm": ("hip",), "cuda": ("cuda",)}
DEFAULT_CUDA_ARCH = "sm_80"   # NOTE: IREE 3.13 rejects sm_90; sm_80 PTX is JIT-compiled on Hopper.
# GPU targets compile convolutions channels-last when the graph has a conv_fprop or conv_wgrad
# and no conv_dgrad. NOTE: measured on an H200 (IREE 3.13, sm_80 PTX): f16/bf16 conv_fprop in
# the NCHW form gave wrong results (NaN) and was right and 16% faster with IREE's channels-last
# pass, while f16/bf16 strided conv_dgrad was right only WITHOUT the pass; emitting NHWC fprop in
# the lowering instead was wrong too (docs/performance.md). Graphs with both keep the pass.
GPU_CONV_FLAGS = ("--iree-preprocessing-pass-pipeline=builtin.module(util.func("
                  "iree-preprocessing-convert-conv-to-channels-last))",)

# llvm-cpu flags, from measurements on the 2-core build machine (IREE 3.13; docs/benchmarks/flags.md):
# for graphs whose float tensors are all f32 (knobs.resolve): data tiling sends matmuls to IREE's mmt4d ukernel (f32 1024^3: about 2x) and does not slow the
# channels-last convolutions (lowering/ops/conv.py).
CPU_FLAGS = ("--iree-opt-data-tiling",)
# Graphs whose convolutions are all 1-D: IREE's conv code for them ran at 8-13 GFLOP/s in every
# linalg form (NCW, NWC, NWC lifted to NHWC); im2col turns them into data-tiled matmuls (about 6x).
# NOTE: on 2-D convolutions im2col is slower than the channels-last named op (IREE_NOTES).
CPU_CONV1D_FLAGS = ("--iree-global-opt-use-im2col-for-convs",)


@dataclass(frozen=True)
class Target:
    backend: str   # llvm-cpu | rocm | cuda
    arch: str      # host / cpu name | gfxNNN | sm_NN

    def __str__(self) -> str:
        return f"{self.backend}:{self.arch}"

    @property
    def drivers(self) -> tuple[str, ...]:
        return _DRIVERS[self.backend]

    def compile_flags(self) -> list[str]:
        if self.backend == "llvm-cpu":
            return ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                    f"--iree-llvmcpu-target-cpu={self.arch}"]
        if self.backend == "rocm":
            return ["--iree-hal-target-device=hip", f"--iree-rocm-target={self.arch}"]
        return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={self.arch}"]


DOUBLE_FLAG = "--iree-input-demote-f64-to-f32=false"


def parse_target(text: str) -> Target:
    """``llvm-cpu`` / ``llvm-cpu:<cpu>`` / ``rocm:<gfx>`` / ``cuda:<sm>``."""
    if not isinstance(text, str) or not text:
        raise HipdnnError(Status.BAD_PARAM, f"target must be a string such as 'llvm-cpu', 'rocm:gfx942' or "
                                            f"'cuda:sm_80', got {text!r}")
    backend, _, arch = text.partition(":")
    backend = {"cpu": "llvm-cpu", "hip": "rocm"}.get(backend, backend)
    if backend not in _DRIVERS:
        raise HipdnnError(Status.NOT_SUPPORTED, f"target {text!r}: unknown backend {backend!r}; "
                                                f"use llvm-cpu, rocm:<gfx> or cuda:<sm>")
    if backend == "llvm-cpu":
        arch = arch or "host"
    elif backend == "rocm" and not arch:
        raise HipdnnError(Status.BAD_PARAM, f"target {text!r}: name the AMD GPU arch, e.g. 'rocm:gfx942'")
    elif backend == "cuda":
        arch = arch or DEFAULT_CUDA_ARCH
        if not arch.startswith("sm_"):
            raise HipdnnError(Status.BAD_PARAM, f"target {text!r}: CUDA arch must look like sm_80")
    return Target(backend, arch)


def driver_of(device_uri: str) -> str:
    return device_uri.split("://", 1)[0]


def default_target_for(device_uri: str) -> Target:
    drv = driver_of(device_uri)
    if drv in ("local-task", "local-sync"):
        return Target("llvm-cpu", "host")
    if drv == "cuda":
        return Target("cuda", DEFAULT_CUDA_ARCH)
    if drv == "hip":
        raise HipdnnError(Status.BAD_PARAM, f"device {device_uri!r}: the GPU arch could not be detected; "
                                            "pass target='rocm:<gfx>' (e.g. 'rocm:gfx942')")
    raise HipdnnError(Status.NOT_SUPPORTED, f"device {device_uri!r}: driver {drv!r} is not supported; "
                                            "use local-task, local-sync, cuda or hip")


def check_runs_on(target: Target, device_uri: str | None, what: str = "plan") -> None:
    """Raises NOT_SUPPORTED when a module compiled for ``target`` cannot run on the device."""
    if device_uri is None:
        return
    if driver_of(device_uri) not in target.drivers:
        if what == "handle":
            raise HipdnnError(Status.NOT_SUPPORTED,
                              f"target '{target}' does not run on device '{device_uri}' (its code runs on HAL "
                              f"drivers {', '.join(target.drivers)}): pass a matching device, or device=None "
                              f"for a compile-only handle that builds plans for '{target}'")
        raise HipdnnError(Status.NOT_SUPPORTED,
                          f"plan was compiled for target '{target}' (runs on HAL drivers "
                          f"{', '.join(target.drivers)}), but the handle's device is '{device_uri}': "
                          f"restore it on a matching device or rebuild the plan for this device")
