"""In-process IREE compilation (``iree.compiler.api``) with captured diagnostics.

Imported only when a plan is built: restoring a plan never loads the compiler.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.iree_linalg.targets import Target

_LOCK = threading.Lock()  # NOTE: diagnostics are captured by redirecting fd 2, a process-wide resource


@dataclass(frozen=True)
class Compiled:
    vmfb: bytes
    dispatch_count: int | None
    flags: tuple[str, ...]


def compiler_version() -> str:
    from iree.compiler import version
    return str(version.VERSION)


def compile_mlir(mlir: str, target: Target, extra_flags: tuple[str, ...] = ()) -> Compiled:
    """Compiles MLIR text to a ``.vmfb``; errors carry IREE's diagnostics and the MLIR."""
    try:
        from iree.compiler.api import Output, Session, Source
    except ImportError as e:
        raise HipdnnError(Status.NOT_SUPPORTED,
                          f"building a plan needs the IREE compiler (pip install iree-base-compiler): {e}") from None
    with tempfile.TemporaryDirectory(prefix="hipdnn_iree_") as tmp:
        stats_path = os.path.join(tmp, "stats.json")
        flags = tuple(target.compile_flags()) + (
            "--iree-scheduling-dump-statistics-format=json",
            f"--iree-scheduling-dump-statistics-file={stats_path}",
        ) + tuple(extra_flags)
        diag_path = os.path.join(tmp, "diag.txt")
        with _LOCK:
            session = Session()
            try:
                session.set_flags(*flags)
            except Exception as e:
                raise HipdnnError(Status.BAD_PARAM, f"IREE rejected compiler flags {list(flags)}: {e}") from None
            inv = session.invocation()
            inv.enable_console_diagnostics()
            ok, vmfb = _run_capturing_stderr(diag_path, lambda: _run(inv, session, mlir, Source, Output))
            inv.close()
            session.close()
        diag = ""
        if os.path.exists(diag_path):
            with open(diag_path, encoding="utf-8", errors="replace") as f:
                diag = f.read()
        if not ok:
            raise HipdnnError(Status.INTERNAL_ERROR,
                              f"IREE failed to compile the graph for target '{target}'.\n"
                              f"--- IREE diagnostics ---\n{diag.strip() or '(none)'}\n--- MLIR ---\n{mlir}")
        dispatches = None
        try:
            with open(stats_path, encoding="utf-8") as f:
                stats = json.load(f)
            dispatches = int(stats["stream-aggregate"]["execution"]["dispatch-count"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return Compiled(vmfb, dispatches, flags)


def _run(inv, session, mlir, Source, Output):
    source = Source.wrap_buffer(session, mlir.encode("utf-8"))
    if not inv.parse_source(source):
        return False, b""
    if not inv.execute():
        return False, b""
    out = Output.open_membuffer()
    inv.output_vm_bytecode(out)
    data = bytes(out.map_memory())
    out.close()
    return True, data


def _run_capturing_stderr(path: str, fn):
    saved = os.dup(2)
    with open(path, "wb") as f:
        os.dup2(f.fileno(), 2)
        try:
            return fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
