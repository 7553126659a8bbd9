"""Plan files: atomic writes, bounded reads."""
from __future__ import annotations

import os
import tempfile

from hipdnn_iree import _envelope
from hipdnn_iree._status import HipdnnError, Status


def save_plan(path, data) -> None:
    """Writes plan bytes to ``path`` atomically.

    The bytes go to a temporary file in the same folder, are fsync'ed, then renamed over
    ``path`` (and the folder fsync'ed), so a crash mid-write never leaves a truncated plan
    under the final name: readers see the old file or the new one.

    Example:
        >>> hd.save_plan("mlp.plan", graph.serialize_compiled_plan())   # doctest: +SKIP
    """
    if not isinstance(data, (bytes, bytearray, memoryview)) or memoryview(data).nbytes == 0:
        raise HipdnnError(Status.BAD_PARAM, "save_plan: data must be non-empty plan bytes")
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    except OSError as e:
        raise HipdnnError(Status.BAD_PARAM, f"save_plan: cannot write in {folder!r}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise HipdnnError(Status.BAD_PARAM, f"save_plan: writing {path!r} failed: {e.strerror}") from None
        raise
    try:
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # NOTE: some filesystems refuse fsync on folders; the rename is still atomic
        pass


def load_plan(path) -> bytes:
    """Reads a plan file, refusing files over the plan size limit before reading them."""
    path = os.fspath(path)
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise HipdnnError(Status.BAD_PARAM, f"load_plan: cannot open {path!r}: {e.strerror}") from None
    if size > _envelope.MAX_ENVELOPE_BYTES:
        raise HipdnnError(Status.BAD_PARAM, f"load_plan: {path!r} is {size} bytes, over the "
                                            f"{_envelope.MAX_ENVELOPE_BYTES}-byte plan limit")
    try:
        with open(path, "rb") as f:
            return f.read(_envelope.MAX_ENVELOPE_BYTES + 1)
    except OSError as e:
        raise HipdnnError(Status.BAD_PARAM, f"load_plan: reading {path!r} failed: {e.strerror}") from None
