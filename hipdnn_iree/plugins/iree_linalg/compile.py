"""IREE compilation in a child process (the ``iree-compile`` executable of iree-base-compiler).

Imported only when a plan is built: restoring a plan never loads the compiler.

NOTE: the compiler runs in a child process, not in this one (``iree.compiler.api``), because
LLVM ends the process that hosts it on a fatal error (an unknown ``--iree-llvmcpu-target-cpu``
exits the caller with status 1: no exception, no atexit handlers). A child that fails, dies by a
signal or runs past the timeout becomes a :class:`HipdnnError`; the caller's process lives on.
The child also makes builds interruptible (timeout) and lets several compile at once. What it
costs per build is measured in ``docs/benchmarks/compile_process.md``.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.iree_linalg.targets import Target

INSTALL_HINT = "pip install 'iree-base-compiler==3.13.*'"
# Seconds one compile may run before its child is killed; HIPDNN_IREE_COMPILE_TIMEOUT overrides it
# (seconds; 0 or "none" = no limit), a ``timeout`` argument overrides both.
COMPILE_TIMEOUT_S = 600.0
TIMEOUT_ENV = "HIPDNN_IREE_COMPILE_TIMEOUT"
_DIAG_LIMIT = 20000   # characters of the child's output kept in an error message


@dataclass(frozen=True)
class Compiled:
    vmfb: bytes
    dispatch_count: int | None
    flags: tuple[str, ...]


def compiler_version() -> str:
    from iree.compiler import version
    return str(version.VERSION)


_TOOL: list[str] = []   # the path once found (a missing compiler is looked for again)


def _find_tool() -> str | None:
    if _TOOL:
        return _TOOL[0]
    exe = "iree-compile.exe" if os.name == "nt" else "iree-compile"
    candidates = []
    try:
        # NOTE: find_spec locates the package without importing it (no MLIR bindings loaded).
        spec = importlib.util.find_spec("iree.compiler")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            candidates.append(os.path.join(loc, "_mlir_libs", exe))
    if spec is not None:
        # the console script pip installs beside this interpreter (it runs the same binary)
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(sys.executable)), exe))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            _TOOL[:] = [c]
            return c
    return None


def find_compiler() -> str:
    """The path of the ``iree-compile`` executable shipped with iree-base-compiler (PATH is not
    searched, so the tool always matches the installed Python package).

    Raises:
        HipdnnError: NOT_SUPPORTED, naming the package, when the compiler is not installed (or
            ``iree.compiler`` cannot be imported in this process).
    """
    tool = _find_tool()
    if tool is None:
        raise HipdnnError(Status.NOT_SUPPORTED,
                          "building a plan needs the IREE compiler, which is not installed in this Python "
                          f"environment (package iree-base-compiler, its iree-compile tool): {INSTALL_HINT}. "
                          "Restoring compiled plans does not need it.")
    return tool


def compile_timeout(timeout: float | None = None) -> float | None:
    """The timeout of one compile in seconds (None: no limit): the argument, else
    ``HIPDNN_IREE_COMPILE_TIMEOUT``, else :data:`COMPILE_TIMEOUT_S`."""
    source = "timeout"
    if timeout is None:
        text = os.environ.get(TIMEOUT_ENV, "").strip()
        if not text:
            return COMPILE_TIMEOUT_S
        if text.lower() in ("0", "none", "off"):
            return None
        source, timeout = TIMEOUT_ENV, text
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise HipdnnError(Status.BAD_PARAM, f"{source} must be a number of seconds >= 0 (0 = no limit), "
                                            f"got {timeout!r}")
    return value or None


def _clip(text: str) -> str:
    text = text.strip()
    if len(text) > _DIAG_LIMIT:
        text = text[:_DIAG_LIMIT // 2] + "\n... (cut) ...\n" + text[-_DIAG_LIMIT // 2:]
    return text


def _rejected_flag(diag: str, tool: str) -> bool:
    """Whether iree-compile stopped at its command line (LLVM's option parser prefixes its errors
    with the program name)."""
    prefix = os.path.basename(tool) + ": "
    return any(line.startswith(prefix) and ("Unknown command line argument" in line or ": for the -" in line
                                            or "may only occur" in line)
               for line in diag.splitlines())


def _exit_description(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by {name} (exit status {rc})"
    return f"exited with status {rc}"


def compile_mlir(mlir: str, target: Target, extra_flags: tuple[str, ...] = (),
                 timeout: float | None = None) -> Compiled:
    """Compiles MLIR text to a ``.vmfb`` with ``iree-compile`` in a child process.

    Args:
        mlir: the module's text.
        target: the compile target (its flags come first).
        extra_flags: more ``iree-compile`` flags (graph flags, the plugin's own).
        timeout: seconds before the child is killed; see :func:`compile_timeout`.

    Returns:
        the module, its dispatch count (IREE's scheduling statistics) and the flags it was
        compiled with.

    Raises:
        HipdnnError: INTERNAL_ERROR with IREE's diagnostics and the MLIR when the compile fails,
            the child dies or times out; BAD_PARAM when iree-compile rejects a flag; NOT_SUPPORTED
            when the compiler is not installed.
    """
    tool = find_compiler()
    limit = compile_timeout(timeout)
    with tempfile.TemporaryDirectory(prefix="hipdnn_iree_") as tmp:
        stats_path = os.path.join(tmp, "stats.json")
        flags = tuple(target.compile_flags()) + (
            "--iree-scheduling-dump-statistics-format=json",
            f"--iree-scheduling-dump-statistics-file={stats_path}",
        ) + tuple(extra_flags)
        out_path = os.path.join(tmp, "module.vmfb")
        # NOTE: the MLIR goes in on stdin ("-"): a source file's temporary path would be written into
        # the module's debug locations, and two builds of one graph would differ byte for byte.
        try:
            proc = subprocess.run([tool, *flags, "-", "-o", out_path], input=mlir.encode("utf-8"),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=limit)
        except subprocess.TimeoutExpired as e:
            diag = (e.output or b"").decode("utf-8", "replace")
            raise HipdnnError(Status.INTERNAL_ERROR,
                              f"IREE compile for target '{target}' timed out after {limit:g} s and was stopped "
                              f"(raise the limit with {TIMEOUT_ENV}=<seconds>, 0 = none).\n"
                              f"--- IREE diagnostics ---\n{_clip(diag) or '(none)'}\n--- MLIR ---\n{mlir}") from None
        except OSError as e:
            raise HipdnnError(Status.NOT_SUPPORTED, f"the IREE compiler {tool} could not be started ({e}); "
                                                    f"reinstall it: {INSTALL_HINT}") from None
        diag = _clip(proc.stdout.decode("utf-8", "replace"))
        if proc.returncode == 0 and os.path.isfile(out_path):
            with open(out_path, "rb") as f:
                vmfb = f.read()
        elif proc.returncode != 0 and _rejected_flag(diag, tool):
            raise HipdnnError(Status.BAD_PARAM, f"IREE rejected compiler flags {list(flags)}:\n{diag}")
        else:
            what = ("produced no module" if proc.returncode == 0
                    else f"{_exit_description(proc.returncode)}")
            raise HipdnnError(Status.INTERNAL_ERROR,
                              f"IREE failed to compile the graph for target '{target}' (iree-compile {what}).\n"
                              f"--- IREE diagnostics ---\n{diag or '(none)'}\n--- MLIR ---\n{mlir}")
        dispatches = None
        try:
            with open(stats_path, encoding="utf-8") as f:
                stats = json.load(f)
            dispatches = int(stats["stream-aggregate"]["execution"]["dispatch-count"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return Compiled(vmfb, dispatches, flags)


# CPU names every llvm-cpu compile accepts whatever LLVM's list for the architecture says.
ALWAYS_VALID_CPUS = ("host", "generic")
CPU_LIST_COMMAND = "iree-compile --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu " \
                   "--iree-llvmcpu-target-cpu=help - -o /dev/null"


@functools.lru_cache(maxsize=None)
def known_cpus() -> tuple[str, tuple[str, ...]] | None:
    """(architecture, CPU names) LLVM accepts for llvm-cpu targets on this machine, asked once per
    process of ``iree-compile`` in a child process; None when that cannot be told (no compiler).

    NOTE: asked in a child because LLVM ends its host process on an unknown CPU name (a fatal
    error, not a diagnostic). The child prints the list on ``--iree-llvmcpu-target-cpu=help``
    (about 10 ms).
    """
    import subprocess
    tool = _find_tool()
    if tool is None:
        return None
    try:
        p = subprocess.run([tool, "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                            "--iree-llvmcpu-target-cpu=help", "-", "-o", os.devnull],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    text = p.stdout.decode("utf-8", "replace")
    arch = re.search(r"Unknown CPU for target architecture (\S+?)\.?$", text, re.M)
    names = re.search(r"^List of accepted CPUs: (.+)$", text, re.M)
    if not names:
        return None
    cpus = tuple(n.strip() for n in names.group(1).split(",") if n.strip())
    return (arch.group(1) if arch else "?", cpus) if cpus else None


def check_cpu_name(target: Target) -> None:
    """Raises NOT_SUPPORTED when an llvm-cpu target names a CPU that LLVM does not know.

    Only names other than ``host``/``generic`` are checked (one child process per process, cached);
    when the list cannot be had (no compiler) nothing is refused: compiles run in a child process,
    so an unknown name there still ends as a HipdnnError, never as the caller's exit.
    """
    if target.backend != "llvm-cpu" or target.arch in ALWAYS_VALID_CPUS:
        return
    known = known_cpus()
    if known is None or target.arch in known[1]:
        return
    import difflib
    arch, cpus = known
    close = difflib.get_close_matches(target.arch, cpus, n=3, cutoff=0.6)
    examples = [c for c in ("x86-64-v3", "x86-64-v4", "znver4", "skylake-avx512", "cascadelake", "neoverse-v2",
                            "apple-m1") if c in cpus][:4] or list(cpus[:4])
    raise HipdnnError(Status.NOT_SUPPORTED,
                      f"target '{target}': unknown CPU name {target.arch!r} for llvm-cpu on this machine's "
                      f"architecture ({arch})"
                      + (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ".")
                      + f" Use 'llvm-cpu:host', 'llvm-cpu:generic' or one of LLVM's {len(cpus)} names for {arch}, "
                        f"e.g. {', '.join(examples)}; the full list: {CPU_LIST_COMMAND}")
