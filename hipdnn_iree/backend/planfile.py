"""Plan files: atomic writes, bounded reads."""
from __future__ import annotations

import os
import stat
import tempfile
import threading

from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status


def _fspath(path, what: str) -> str:
    try:
        path = os.fspath(path)
    except TypeError:
        raise HipdnnError(Status.BAD_PARAM, f"{what}: path must be a str or os.PathLike, got "
                                            f"{type(path).__name__}") from None
    return os.fsdecode(path)


_UMASK_LOCK = threading.Lock()
_CHUNK = 1 << 20


def _umask() -> int:
    # NOTE: reading the umask means setting it; the lock keeps two savers from racing on it.
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


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
    path = _fspath(path, "save_plan")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    except OSError as e:
        raise HipdnnError(Status.BAD_PARAM, f"save_plan: cannot write in {folder!r}: {e.strerror}") from None
    try:
        # NOTE: mkstemp makes the file 0600; a plan file is meant to be shared like any other file
        # written by this process, so it gets the mode open(path, "w") would give it.
        os.fchmod(fd, 0o666 & ~_umask())
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
    path = _fspath(path, "load_plan")
    limit = _envelope.MAX_ENVELOPE_BYTES
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISDIR(st.st_mode):
                raise HipdnnError(Status.BAD_PARAM, f"load_plan: {path!r} is a folder, not a plan file")
            if stat.S_ISREG(st.st_mode):
                if st.st_size > limit:
                    raise HipdnnError(Status.BAD_PARAM, f"load_plan: {path!r} is {st.st_size} bytes, over the "
                                                        f"{limit}-byte plan limit")
                return f.read(limit + 1)
            return _read_stream(f, path, limit)
    except OSError as e:
        raise HipdnnError(Status.BAD_PARAM, f"load_plan: reading {path!r} failed: {e.strerror}") from None


def _read_stream(f, path: str, limit: int) -> bytes:
    """A pipe, socket or device: read in chunks, refusing as soon as the bytes cannot be a plan.

    NOTE: such files have no size to check first. A plan starts with the FlatBuffer root offset,
    which points past itself (>= 4) and inside the limit: /dev/zero fails that on its first chunk,
    and anything else is cut off at the limit instead of being read whole.
    """
    chunks, total = [], 0
    while True:
        chunk = f.read(min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if len(chunks) == 1 and len(chunk) >= 4:
            root = int.from_bytes(chunk[:4], "little")
            if root < 4 or root >= limit:
                raise HipdnnError(Status.BAD_PARAM, f"load_plan: {path!r} is not a plan: its first bytes are not "
                                                    f"a FlatBuffer root offset (got {root})")
        if total > limit:
            raise HipdnnError(Status.BAD_PARAM, f"load_plan: {path!r} holds more than the {limit}-byte plan limit")
    return b"".join(chunks)


def map_plan(path):
    """A plan file's bytes, memory-mapped read-only: a ``memoryview`` whose buffer stays mapped as
    long as anything (a restored plan's module included) refers to it.

    The same checks as :func:`load_plan` run first (folder, size limit). Files that cannot be
    mapped (pipes, sockets, devices, empty files) are read as :func:`load_plan` reads them.
    NOTE: the mapping follows the file: a plan file must not be truncated or rewritten in place
    while a plan restored from it is alive (``save_plan`` replaces files by renaming, which is safe:
    the mapping keeps the old file).
    """
    import mmap
    path = _fspath(path, "load_plan")
    limit = _envelope.MAX_ENVELOPE_BYTES
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISDIR(st.st_mode):
                raise HipdnnError(Status.BAD_PARAM, f"load_plan: {path!r} is a folder, not a plan file")
            if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
                return memoryview(f.read(limit + 1) if stat.S_ISREG(st.st_mode) else _read_stream(f, path, limit))
            if st.st_size > limit:
                raise HipdnnError(Status.BAD_PARAM, f"load_plan: {path!r} is {st.st_size} bytes, over the "
                                                    f"{limit}-byte plan limit")
            return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    except OSError as e:
        raise HipdnnError(Status.BAD_PARAM, f"load_plan: reading {path!r} failed: {e.strerror}") from None
