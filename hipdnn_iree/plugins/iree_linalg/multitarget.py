"""Which module of a several-target plan (FUSPLAN kind 3) a handle's device runs.

Rules (FORMATS.md, payload kind 3):
  - AMD GPUs (HAL driver ``hip``): the module for the device's exact gfx arch;
  - NVIDIA GPUs (``cuda``): the module with the highest ``sm_NN`` not above the device's;
  - CPUs (``local-task`` / ``local-sync``): only modules whose recorded CPU features this CPU has
    (``cpufeatures.py``; an entry without the record: its x86-64 level, else its name, decides);
    of those, the x86-64 micro-architecture level (``x86-64``, ``-v2``, ``-v3``, ``-v4``) that is
    the highest; else the module that names the handle's own CPU target (``host`` included); else
    the module for another named CPU that needs the most features.
A compile-only handle (no device) takes the module for its own target, else the first one: it
never runs it, and re-serializing keeps every module.
"""
from __future__ import annotations

import functools
import platform

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.iree_linalg.targets import Target, driver_of, parse_target

# x86-64 micro-architecture levels (the psABI's), as /proc/cpuinfo flag sets
_X86_LEVELS = {
    "x86-64": {"sse2"},
    "x86-64-v2": {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"},
    "x86-64-v3": {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"},
    "x86-64-v4": {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
}
_ORDER = list(_X86_LEVELS)


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_level(flags=None) -> str | None:
    """The highest x86-64 level this CPU supports (None off x86-64 or when it cannot be told)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    flags = cpu_flags() if flags is None else flags
    best, need = None, set()
    for level in _ORDER:
        need |= _X86_LEVELS[level]
        if not need <= flags:
            break
        best = level
    return best


def _sm(arch: str) -> int:
    digits = "".join(ch for ch in arch if ch.isdigit())
    return int(digits) if digits else 0


def device_text(device_uri: str | None, mine: Target | None) -> str:
    if device_uri is None:
        return f"no device (compile-only handle for {mine})"
    extra = ""
    if mine is not None and mine.backend == "llvm-cpu":
        extra = f", CPU level {cpu_level() or 'unknown'}"
    return f"device '{device_uri}' (target {mine}{extra})"


def choose(targets: list[str], device_uri: str | None, mine: Target | None, features=None) -> int:
    """Index of the entry the handle runs; NOT_SUPPORTED naming every target when none runs.
    ``features``: each entry's recorded CPU features ("" or None where not recorded)."""
    from hipdnn_iree.plugins.iree_linalg import cpufeatures
    parsed = []
    for t in targets:
        try:
            parsed.append(parse_target(t))
        except HipdnnError:
            parsed.append(None)   # NOTE: an entry for a backend this release does not know is skipped
    if device_uri is None:
        for i, t in enumerate(parsed):
            if t is not None and mine is not None and t == mine:
                return i
        return 0
    drv = driver_of(device_uri)
    best = None
    lacking = {}
    if drv in ("local-task", "local-sync"):
        level = cpu_level()
        feats = list(features or [""] * len(parsed))
        rank, own, other, other_n = -1, None, None, -1
        for i, t in enumerate(parsed):
            if t is None or t.backend != "llvm-cpu":
                continue
            if feats[i]:
                lacking[i] = cpufeatures.missing(feats[i])
                if lacking[i]:
                    continue
            if t.arch in _X86_LEVELS:
                runs = bool(feats[i]) or (level is not None and _ORDER.index(t.arch) <= _ORDER.index(level))
                if runs and _ORDER.index(t.arch) > rank:
                    best, rank = i, _ORDER.index(t.arch)
            elif mine is not None and t.arch == mine.arch:
                own = i if own is None else own
            elif feats[i] and len(cpufeatures.required(feats[i])) > other_n:
                other, other_n = i, len(cpufeatures.required(feats[i]))
        best = best if best is not None else own if own is not None else other
    elif drv == "hip":
        for i, t in enumerate(parsed):
            if t is not None and t.backend == "rocm" and mine is not None and t.arch == mine.arch:
                best = i
                break
    elif drv == "cuda":
        top = -1
        for i, t in enumerate(parsed):
            if t is not None and t.backend == "cuda" and mine is not None and top < _sm(t.arch) <= _sm(mine.arch):
                best, top = i, _sm(t.arch)
    if best is None:
        why = "".join(f"; {targets[i]} needs CPU features this CPU lacks: {', '.join(m)}"
                      for i, m in lacking.items() if m)
        raise HipdnnError(Status.NOT_SUPPORTED,
                          f"plan holds modules for {', '.join(targets)}; none of them runs on the handle's "
                          f"{device_text(device_uri, mine)}{why}: rebuild the plan with a target for this device")
    return best


def primary_target(targets: list[Target], device_uri: str | None) -> Target:
    """The target a handle created with a target list runs on its own device (the first when
    compile-only; for a GPU the first of its kind, which names the device's arch)."""
    if device_uri is None:
        return targets[0]
    drv = driver_of(device_uri)
    if drv in ("local-task", "local-sync"):
        cpus = [t for t in targets if t.backend == "llvm-cpu"]
        if cpus:
            i = choose([str(t) for t in cpus], device_uri, Target("llvm-cpu", "host"))
            return cpus[i]
    for t in targets:
        if drv in t.drivers:
            return t
    raise HipdnnError(Status.NOT_SUPPORTED,
                      f"none of the targets {', '.join(map(str, targets))} runs on device '{device_uri}': add a "
                      "target for it, or pass device=None for a compile-only handle")
