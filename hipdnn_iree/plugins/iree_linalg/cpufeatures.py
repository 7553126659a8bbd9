"""The CPU features an llvm-cpu module's code needs, and whether this host has them.

A CPU module is native code for one CPU: run on a CPU without one of its instructions (a plan for
``llvm-cpu:bdver1``, which has XOP and FMA4, on a Zen or Intel CPU; a ``host`` plan from an
AVX-512 machine on an AVX2 one), it dies with SIGILL at its first dispatch, taking the process
with it. So a plan records the LLVM feature string its modules were compiled with
(``+avx,+avx2,...``, the ``cpu_features`` of IREE's ``#hal.executable.target``; FUSPLAN metadata
``cpu_features``, kind-3 entries likewise), and loading a CPU module on a local device compares its
``+`` features with the host's (``/proc/cpuinfo`` flags on Linux x86-64): any missing one is a
NOT_SUPPORTED naming them, before a dispatch runs.

Where the string comes from: IREE writes the executable target attribute, ``cpu_features``
included, into the ``.vmfb`` it produces; :func:`features_in_vmfb` reads it back (at build, and at
restore for plans written before the metadata field existed). When a module holds none (a module
with no dispatch), :func:`resolve` asks ``iree-compile --compile-to=executable-targets`` for the
target's string, once per target and flags per process.

LLVM and Linux name some features differently (``sse4.1`` / ``sse4_1``, ``sse3`` / ``pni``,
``avx512vnni`` / ``avx512_vnni``): :data:`CPUINFO_NAME` maps them; any other name is looked for
as is, with ``.`` and ``-`` read as ``_``. A few features are system instructions that IREE's
tensor code never emits and whose cpuinfo flag the kernel may hide (shadow stacks, protection
keys...): :data:`UNCHECKED`. On hosts other than x86-64 only the features of :data:`AARCH64_NAME`
are checked (others are not known to this table).
"""
from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
import tempfile

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

# LLVM x86 feature name -> /proc/cpuinfo flag (where they differ)
CPUINFO_NAME = {
    "64bit": "lm", "x87": "fpu", "sse3": "pni", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "crc32": "sse4_2",
    "pclmul": "pclmulqdq", "rdrnd": "rdrand", "bmi": "bmi1", "lzcnt": "abm", "sahf": "lahf_lm",
    "prfchw": "3dnowprefetch", "sha": "sha_ni", "mwaitx": "monitorx",
    "avx512vbmi2": "avx512_vbmi2", "avx512bf16": "avx512_bf16", "avx512vnni": "avx512_vnni",
    "avx512bitalg": "avx512_bitalg", "avx512vpopcntdq": "avx512_vpopcntdq", "avx512fp16": "avx512_fp16",
    "avx512vp2intersect": "avx512_vp2intersect", "avxvnni": "avx_vnni", "avxvnniint8": "avx_vnni_int8",
    "avxvnniint16": "avx_vnni_int16", "avxifma": "avx_ifma", "avxneconvert": "avx_ne_convert",
}
# NOTE: system instructions (control-flow enforcement, protection keys, enclaves, TSX, user
# interrupts...) that IREE's generated tensor code does not emit; the kernel hides several of these
# flags (it lists shstk as user_shstk only when it enables user shadow stacks), so checking them
# would refuse a host plan on the very machine that built it.
UNCHECKED = frozenset({
    "shstk", "pku", "sgx", "ptwrite", "pconfig", "kl", "widekl", "uintr", "usermsr", "hreset", "serialize",
    "tsxldtrk", "rtm", "enqcmd", "movdiri", "movdir64b", "cldemote", "waitpkg", "mwaitx", "clzero", "rdpru",
    "wbnoinvd", "invpcid", "fsgsbase", "rdpid", "lwp", "prefetchi", "raoint", "clflushopt", "clwb",
    "xsaveopt", "xsavec", "xsaves", "rdseed", "rdrnd", "retpoline", "lvi-cfi", "lvi-load-hardening",
    "64bit", "x87", "cx8", "fxsr", "mmx",
})
# LLVM AArch64 feature name -> /proc/cpuinfo "Features" name (the vector and number formats only)
AARCH64_NAME = {"neon": "asimd", "fp-armv8": "fp", "fullfp16": "asimdhp", "dotprod": "asimddp", "sve": "sve",
                "sve2": "sve2", "i8mm": "i8mm", "bf16": "bf16", "sme": "sme", "crc": "crc32", "aes": "aes",
                "sha2": "sha2", "lse": "atomics", "rcpc": "lrcpc"}
_TARGET_RE = re.compile(rb'#hal\.executable\.target<"llvm-cpu", "[\w.-]+", \{(.{0,8192}?)\}>', re.S)
_FEATURES_RE = re.compile(rb'\bcpu_features = "([^"]*)"')


def features_in_vmfb(vmfb) -> str | None:
    """The ``cpu_features`` of the llvm-cpu executable targets IREE wrote into ``vmfb`` (several
    executables: their features joined), or None when it holds no llvm-cpu target attribute."""
    found: list[str] = []
    for m in _TARGET_RE.finditer(vmfb):   # NOTE: a memoryview (a mapped plan) is searched in place
        f = _FEATURES_RE.search(m.group(1))
        if f is not None:
            text = f.group(1).decode("utf-8", "replace")
            if text not in found:
                found.append(text)
    if not found:
        return None
    return ",".join(x for x in found if x)


def required(features: str | None) -> tuple[str, ...]:
    """The features a feature string turns on (LLVM reads it left to right: the last sign wins)."""
    state: dict[str, bool] = {}
    for item in (features or "").split(","):
        item = item.strip()
        if len(item) > 1 and item[0] in "+-":
            state.pop(item[1:], None)
            state[item[1:]] = item[0] == "+"
    return tuple(name for name, on in state.items() if on)


def canonical(features: str | None) -> str:
    """The ``+`` features of a feature string, in order, as one string (what a plan records)."""
    return ",".join("+" + name for name in required(features))


@functools.lru_cache(maxsize=1)
def host_flags() -> frozenset:
    """This CPU's /proc/cpuinfo flags (x86: ``flags``, AArch64: ``Features``); empty when unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _machine() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def missing(features: str | None, flags=None, machine: str | None = None) -> list[str]:
    """The LLVM features of ``features`` this host's CPU lacks (empty when it runs the code, or
    when the host's flags cannot be read)."""
    flags = host_flags() if flags is None else frozenset(flags)
    machine = _machine() if machine is None else machine
    if not flags:
        return []
    out = []
    for name in required(features):
        if machine == "x86_64":
            if name in UNCHECKED:
                continue
            flag = CPUINFO_NAME.get(name, name.replace(".", "_").replace("-", "_"))
        elif machine == "aarch64":
            flag = AARCH64_NAME.get(name)
            if flag is None:
                continue
        else:
            continue
        if flag not in flags:
            out.append(name)
    return out


def check_host(target, features: str | None, what: str = "plan") -> None:
    """NOT_SUPPORTED, naming the missing features, when this host's CPU cannot run a module for
    ``target`` compiled with ``features``; nothing for non-CPU targets or unknown features."""
    if getattr(target, "backend", "llvm-cpu") != "llvm-cpu" or not features:
        return
    lacks = missing(features)
    if lacks:
        raise HipdnnError(Status.NOT_SUPPORTED,
                          f"{what} holds CPU code for '{target}', which needs CPU features this host's CPU lacks: "
                          f"{', '.join(lacks)} (its code would stop the process with an illegal instruction). "
                          f"Run it on a CPU that has them, or rebuild it for this CPU (target 'llvm-cpu:host', or "
                          f"a level it supports such as 'llvm-cpu:x86-64-v3')")


@functools.lru_cache(maxsize=32)
def _resolved(tool: str, flags: tuple[str, ...]) -> str | None:
    src = "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n" \
          "  %0 = arith.addf %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n"
    with tempfile.TemporaryDirectory(prefix="hipdnn_iree_cpu_") as tmp:
        try:
            p = subprocess.run([tool, *flags, "--compile-to=executable-targets", "-", "-o",
                                os.path.join(tmp, "out.mlir")], input=src.encode(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=120)
            with open(os.path.join(tmp, "out.mlir"), "rb") as f:
                text = f.read()
        except (OSError, subprocess.SubprocessError):
            return None
    if p.returncode != 0:
        return None
    return features_in_vmfb(text)


def resolve(target, flags=()) -> str | None:
    """The feature string IREE compiles ``target`` with under ``flags`` (only the
    ``--iree-llvmcpu-*`` ones matter), asked of ``iree-compile`` in a child process; None when it
    cannot be told. Used when a built module does not carry the string itself."""
    if getattr(target, "backend", None) != "llvm-cpu":
        return None
    from hipdnn_iree.plugins.iree_linalg.compile import _find_tool
    tool = _find_tool()
    if tool is None:   # NOTE: a compile cache hit in a process without the compiler: nothing recorded
        return None
    own = tuple(target.compile_flags())
    return _resolved(tool, own + tuple(f for f in flags if str(f).startswith("--iree-llvmcpu-") and f not in own))
