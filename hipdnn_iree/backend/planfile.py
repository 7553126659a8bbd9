"""Plan files: atomic writes, bounded reads."""
from __future__ import annotations

import os
import stat
import struct
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

    ``data``: bytes or any C-contiguous buffer of 1-byte items (bytearray, memoryview, numpy uint8
    array); other buffers are BAD_PARAM naming what was given.

    Example:
        >>> hd.save_plan("mlp.plan", graph.serialize_compiled_plan())   # doctest: +SKIP
    """
    if data is None:
        raise HipdnnError(Status.BAD_PARAM_NULL_POINTER, "save_plan: data is None: pass the plan bytes")
    data = _envelope.plan_buffer(data, "save_plan: data")
    if len(data) == 0:
        raise HipdnnError(Status.BAD_PARAM, "save_plan: data must be non-empty plan bytes (got 0 bytes)")
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


class FileError(HipdnnError):
    """A plan file that could not be opened or read (missing, a folder, no permission): BAD_PARAM.

    NOTE: the command line tells these (exit 2, usage) from files whose bytes are not a plan (exit 3).
    """


def _os_error(what: str, path: str, e: OSError):
    return FileError(Status.BAD_PARAM, f"{what}: reading {path!r} failed: {e.strerror or e}")


def _open(path: str, what: str):
    """(file, stat) of ``path`` opened for reading; a folder is refused."""
    try:
        f = open(path, "rb")
    except IsADirectoryError:
        raise FileError(Status.BAD_PARAM, f"{what}: {path!r} is a folder, not a plan file") from None
    except OSError as e:
        raise _os_error(what, path, e) from None
    st = os.fstat(f.fileno())
    if stat.S_ISDIR(st.st_mode):
        f.close()
        raise FileError(Status.BAD_PARAM, f"{what}: {path!r} is a folder, not a plan file")
    return f, st


def _plan_limit() -> int:
    """The plan size limit, read from the environment at each call (``envelope.max_plan_bytes``)."""
    return _envelope.max_plan_bytes()


def _limit_text(limit: int) -> str:
    plan = limit == _plan_limit()
    return f"the {limit}-byte " + ("plan limit (HIPDNN_IREE_MAX_PLAN_BYTES)" if plan else "limit")


def _over_limit(what: str, path: str, size: int, limit: int):
    return HipdnnError(Status.BAD_PARAM, f"{what}: {path!r} is {size} bytes, over {_limit_text(limit)}")


def could_start_plan(head, limit: int | None = None) -> str | None:
    """Why ``head`` (a plan's first bytes, up to a chunk) cannot begin a plan envelope, or None.

    NOTE: every FlatBuffer builder writes the root table last, at the front of the buffer, with
    its vtable beside it; an envelope's root table and vtable therefore lie in its first few
    hundred bytes, whatever follows (the payload). So within the first chunk: the root offset is
    4-aligned and points inside it, the vtable lies inside it, vtable and table sizes are sane and
    every field the envelope reads from the table (version, engine id, workspace size, tensor_uids)
    lies inside the table, with tensor_uids' vector 4-aligned within the plan limit. Random bytes
    pass all of that with a probability around 2**-27 or less (the root offset alone: 2**-14 for a
    1 MiB chunk); /dev/zero fails the first test.
    """
    limit = _plan_limit() if limit is None else limit
    n = len(head)
    if n < 12:
        return f"{n} bytes is too short for a plan"
    root = struct.unpack_from("<I", head, 0)[0]
    if root < 4 or root % 4 or root + 4 > n:
        return (f"its first 4 bytes (root table offset {root}) do not point at a table within its first {n} "
                "bytes")
    vt = root - struct.unpack_from("<i", head, root)[0]
    if vt < 0 or vt % 2 or vt + 4 > n:
        return f"its root table's vtable offset {vt} lies outside its first {n} bytes"
    vt_size, tbl_size = struct.unpack_from("<HH", head, vt)
    if vt_size < 4 or vt_size % 2 or vt + vt_size > n or tbl_size < 4 or root + tbl_size > n:
        return f"its root table's vtable is not a FlatBuffer vtable (vtable size {vt_size}, table size {tbl_size})"
    for slot, inline in enumerate((4, 8, 8, 4)):   # version, engine_id, workspace_size, tensor_uids
        if 4 + 2 * slot + 2 > vt_size:
            break
        voff = struct.unpack_from("<H", head, vt + 4 + 2 * slot)[0]
        if voff and (voff < 4 or voff + inline > tbl_size):
            return f"field {slot} of its root table (offset {voff}) lies outside the {tbl_size}-byte table"
        if voff and slot == 3:
            vec = root + voff + struct.unpack_from("<I", head, root + voff)[0]
            if vec % 4 or vec + 4 > limit:
                return f"its tensor_uids vector offset {vec} is misaligned or past the {limit}-byte plan limit"
    return None


def _read_stream(f, path: str, limit: int, what: str = "load_plan", check=could_start_plan,
                 kind: str = "a plan") -> bytes:
    """A pipe, socket, device or size-less file: read in chunks, refusing as soon as the bytes
    cannot be a plan (``check`` on the first chunk) or pass ``limit``."""
    chunks, total, judged = [], 0, check is None
    while True:
        try:
            chunk = f.read(min(_CHUNK, limit + 1 - total))
        except OSError as e:
            raise _os_error(what, path, e) from None
        if chunk:
            chunks.append(chunk)
            total += len(chunk)
        if not judged and (total >= _CHUNK or not chunk):
            judged = True
            head = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            why = check(head[:_CHUNK], limit) if head else None
            if why:
                raise HipdnnError(Status.BAD_PARAM, f"{what}: {path!r} is not {kind}: {why} (refused after "
                                                    f"reading {total} bytes)")
        if total > limit:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: {path!r} holds more than {_limit_text(limit)} (refused "
                                                f"after reading {total} bytes)")
        if not chunk:
            return b"".join(chunks)


def read_bounded(path, what: str, limit: int, check=None, kind: str = "a plan") -> bytes:
    """The bytes of ``path``, never reading more than ``limit`` + 1 of them: a regular file over
    ``limit`` is refused from its size, anything else (pipe, device, a size-less file) is read in
    chunks, ``check(first_chunk, limit)`` (returning why not, or None) refusing it early."""
    path = _fspath(path, what)
    f, st = _open(path, what)
    with f:
        if stat.S_ISREG(st.st_mode) and st.st_size > 0:
            if st.st_size > limit:
                raise _over_limit(what, path, st.st_size, limit)
            try:
                data = f.read(limit + 1)
            except OSError as e:
                raise _os_error(what, path, e) from None
            if len(data) > limit:
                raise _over_limit(what, path, len(data), limit)
            return data
        return _read_stream(f, path, limit, what, check, kind)


def load_plan(path) -> bytes:
    """Reads a plan file without ever reading more than the plan size limit.

    A regular file over the limit (``HIPDNN_IREE_MAX_PLAN_BYTES``, default 1 GiB) is refused from
    its size before reading. Pipes, devices and files without a size are read in 1 MiB chunks and
    refused at the first chunk when it cannot begin a plan envelope (``/dev/zero``,
    ``/dev/urandom``: after 1 MiB), or when they pass the limit. Missing file, folder, bad path or
    OS error: BAD_PARAM.

    Example:
        >>> r = hd.Graph.from_compiled_plan(handle, hd.load_plan("mlp.plan"))   # doctest: +SKIP
    """
    return read_bounded(path, "load_plan", _plan_limit(), could_start_plan)


def read_plan_private(path, what: str = "from_compiled_plan_file"):
    """A plan file's bytes copied into private 64-byte aligned memory, for a restore that reads
    the module in place from that copy (one copy, no further ones); the file may change or vanish
    afterwards without affecting the restored plan. Checks and errors as :func:`load_plan`.
    """
    path = _fspath(path, what)
    limit = _plan_limit()
    f, st = _open(path, what)
    with f:
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return _read_stream(f, path, limit, what)     # bytes: immutable, fine as they are
        if st.st_size > limit:
            raise _over_limit(what, path, st.st_size, limit)
        view = _envelope.aligned_empty(st.st_size)
        got = 0
        try:
            while got < st.st_size:
                k = f.readinto(view[got:])
                if not k:
                    break
                got += k
            grew = f.read(1)
        except OSError as e:
            raise _os_error(what, path, e) from None
        if grew:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: {path!r} grew while it was being read (it was "
                                                f"{st.st_size} bytes): it is being written; read it once it is "
                                                "complete (hd.save_plan writes atomically)")
        return _envelope.InPlace(view[:got].toreadonly())


def map_plan(path, what: str = "from_compiled_plan_file"):
    """A plan file memory-mapped read-only, for a restore that imports the module from the mapping.

    The same checks as :func:`load_plan` run first (folder, size limit). Files that cannot be
    mapped (pipes, sockets, devices, empty files) are read as :func:`load_plan` reads them.
    NOTE: the mapping follows the file: truncating it or rewriting it in place while a plan restored
    from it is alive kills the process (SIGBUS) or changes the code it runs. ``save_plan`` and ``mv``
    replace files by renaming, which is safe: the mapping keeps the old file.
    """
    import mmap
    path = _fspath(path, what)
    limit = _plan_limit()
    f, st = _open(path, what)
    with f:
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return _read_stream(f, path, limit, what)
        if st.st_size > limit:
            raise _over_limit(what, path, st.st_size, limit)
        try:
            return _envelope.InPlace(memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)))
        except (OSError, ValueError) as e:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: cannot map {path!r}: {e}") from None
