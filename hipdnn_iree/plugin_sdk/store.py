"""The plan store: compiled modules, tuning results and finished plans, shared by key.

One interface (:class:`PlanStore`), two backends:

- a **directory** (the default: ``hd.PlanStore()`` is the compile cache's folder,
  ``HIPDNN_IREE_CACHE_DIR`` or ``~/.cache/hipdnn-iree``; ``hd.PlanStore("/some/folder")`` another), for
  one machine or a shared file system;
- **Redis** (``hd.PlanStore("redis://host:6379/0")``), a fleet's shared store.

Selected by ``create_handle(store=...)`` or the environment variable ``HIPDNN_IREE_STORE`` (a
``redis://`` URL or a folder); with neither, a handle has no store and builds exactly as before
(the compile cache and the tuning database in the cache folder).

Entries are content-addressed: ``(namespace, key)`` with ``key`` 64 hex digits (a SHA-256), in three
namespaces: ``module`` (a compile cache entry, keyed as the compile cache keys it: MLIR, target,
flags, knobs, compiler identity, ABI), ``tuning`` (the autotuned knobs of a graph on a target and a
kind of device) and ``plan`` (a finished plan, keyed by :func:`plan_key`). Every value is framed
(below) with the SHA-256 of namespace, key and bytes, checked on every read: a damaged entry is a
miss, deleted, with a warning naming its key, and is rebuilt, never served.

Frame (little-endian): ``b"HDSTORE1"`` | u16 namespace length | u16 key length | u64 value length |
32-byte SHA-256 over (namespace, key, value) | namespace | key | value.

Writes are atomic: a directory entry is written to a temporary file, fsync'ed and renamed over the
entry; a Redis entry is one ``SET``. Two writers of one key: one value wins, each reader sees one
whole value. ``module`` entries are written only when absent (``SET NX``): content-addressed, the
first is as good as the next; ``plan`` and ``tuning`` entries are replaced (an autotuned plan
replaces the untuned one).

Failure behaviour: a store that cannot be reached (Redis down, a folder that cannot be written) is
:class:`StoreUnavailable` (``HipdnnError`` with ``INTERNAL_ERROR`` naming the store). Builds never
raise it: they go on locally, and one warning per store and process says so (:meth:`PlanStore.try_get`,
:meth:`PlanStore.try_put`). ``hd.Graph.from_store`` raises it. After a failure a Redis store is not
asked again for ``RETRY_AFTER_S`` seconds, then reconnects (a restarted Redis is used again).

Example:
    >>> import tempfile, hipdnn_iree as hd
    >>> s = hd.PlanStore(tempfile.mkdtemp())
    >>> s.put("plan", "ab" * 32, b"bytes")
    True
    >>> s.get("plan", "ab" * 32)
    b'bytes'
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
import tempfile
import threading
import time
import warnings

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

ENV_STORE = "HIPDNN_IREE_STORE"
NAMESPACES = ("module", "tuning", "plan")
MAGIC = b"HDSTORE1"
_FRAME = struct.Struct("<8sHHQ32s")
RETRY_AFTER_S = 2.0
CONNECT_TIMEOUT_S = 1.0
IO_TIMEOUT_S = 10.0
REDIS_PREFIX = "hipdnn-iree"
_KEY_RE = re.compile(r"[0-9a-f]{64}")
_LOG = logging.getLogger("hipdnn_iree.store")
_WARNED: set = set()
_WARN_LOCK = threading.Lock()


class StoreUnavailable(HipdnnError):
    """The store cannot be reached (INTERNAL_ERROR naming it)."""

    def __init__(self, url: str, why: str):
        super().__init__(Status.INTERNAL_ERROR, f"plan store {url} is unreachable: {why}")
        self.url = url


# -- frame -------------------------------------------------------------------------------
def _digest(namespace: str, key: str, value) -> bytes:
    h = hashlib.sha256(b"hipdnn-iree store\0")
    for part in (namespace.encode(), key.encode()):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    h.update(value)
    return h.digest()


def frame(namespace: str, key: str, value) -> bytes:
    """``value`` framed for the store (module docstring)."""
    value = bytes(value)
    ns, k = namespace.encode(), key.encode()
    return _FRAME.pack(MAGIC, len(ns), len(k), len(value), _digest(namespace, key, value)) + ns + k + value


def unframe(data, namespace: str, key: str) -> bytes:
    """The value of a framed entry; ``ValueError`` naming the first thing that does not check out."""
    data = memoryview(data)
    if len(data) < _FRAME.size:
        raise ValueError(f"{len(data)} bytes, shorter than the {_FRAME.size}-byte frame header")
    magic, ns_len, key_len, value_len, digest = _FRAME.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError(f"magic {bytes(magic)!r}, expected {MAGIC!r}")
    if _FRAME.size + ns_len + key_len + value_len != len(data):
        raise ValueError(f"lengths do not add up to the {len(data)}-byte entry (truncated or padded)")
    pos = _FRAME.size
    ns = bytes(data[pos:pos + ns_len]).decode("utf-8", "replace")
    k = bytes(data[pos + ns_len:pos + ns_len + key_len]).decode("utf-8", "replace")
    if (ns, k) != (namespace, key):
        raise ValueError(f"entry is {ns}/{k}, not {namespace}/{key}")
    value = data[pos + ns_len + key_len:]
    if _digest(namespace, key, value) != digest:
        raise ValueError("SHA-256 of the entry does not match its frame")
    return bytes(value)


def _check(namespace: str, key: str) -> None:
    if namespace not in NAMESPACES:
        raise HipdnnError(Status.BAD_PARAM, f"plan store namespace must be one of {list(NAMESPACES)}, got {namespace!r}")
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise HipdnnError(Status.BAD_PARAM, f"plan store key must be 64 lowercase hex digits (a SHA-256, as "
                                            f"g.plan_key(target) gives), got {key!r}")


# -- backends ----------------------------------------------------------------------------
class _DirectoryBackend:
    """``<folder>/store/<namespace>/<key>.hds``; folders made private to the user (0700)."""

    def __init__(self, folder: str):
        self.folder = os.path.abspath(os.path.expanduser(folder))
        self.url = self.folder

    def _path(self, namespace: str, key: str) -> str:
        return os.path.join(self.folder, "store", namespace, key + ".hds")

    def get(self, namespace, key):
        try:
            with open(self._path(namespace, key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreUnavailable(self.url, f"cannot read {self._path(namespace, key)}: {e.strerror}") from None

    def put(self, namespace, key, data, overwrite):
        path = self._path(namespace, key)
        if not overwrite and os.path.exists(path):
            return False
        folder = os.path.dirname(path)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=folder)
        except OSError as e:
            raise StoreUnavailable(self.url, f"cannot write in {folder}: {e.strerror}") from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)   # NOTE: atomic: a reader sees the old entry or the new one, whole
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise StoreUnavailable(self.url, f"cannot write {path}: {e.strerror}") from None
        return True

    def delete(self, namespace, key):
        try:
            os.unlink(self._path(namespace, key))
        except OSError:
            pass

    def keys(self, namespace):
        try:
            names = os.listdir(os.path.join(self.folder, "store", namespace))
        except OSError:
            return []
        return sorted(n[:-4] for n in names if n.endswith(".hds") and _KEY_RE.fullmatch(n[:-4]))

    def ping(self):
        return True


class _RedisBackend:
    """Keys ``hipdnn-iree:<namespace>:<key>``; a client made on first use, per process."""

    def __init__(self, url: str):
        self.url = url
        self._client = None
        self._pid = None
        self._down_until = 0.0
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"url": self.url}

    def __setstate__(self, state):
        self.__init__(state["url"])

    def _redis(self):
        try:
            import redis
        except ImportError:
            raise HipdnnError(Status.NOT_SUPPORTED, f"plan store {self.url}: the 'redis' package is not installed "
                                                    "(pip install 'hipdnn-iree[fleet]')") from None
        return redis

    def _conn(self):
        redis = self._redis()
        if time.monotonic() < self._down_until:
            raise StoreUnavailable(self.url, f"it failed less than {RETRY_AFTER_S:g} s ago")
        with self._lock:
            if self._client is None or self._pid != os.getpid():   # NOTE: never share a socket across fork
                self._client = redis.Redis.from_url(self.url, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                                    socket_timeout=IO_TIMEOUT_S, retry_on_timeout=False)
                self._pid = os.getpid()
            return self._client

    def _name(self, namespace, key):
        return f"{REDIS_PREFIX}:{namespace}:{key}"

    def _call(self, fn):
        redis = self._redis()
        client = self._conn()
        try:
            return fn(client)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.BusyLoadingError,
                OSError) as e:
            self._down_until = time.monotonic() + RETRY_AFTER_S
            with self._lock:
                self._client = None
            raise StoreUnavailable(self.url, f"{type(e).__name__}: {e}") from None
        except redis.exceptions.RedisError as e:
            raise StoreUnavailable(self.url, f"{type(e).__name__}: {e}") from None

    def get(self, namespace, key):
        return self._call(lambda c: c.get(self._name(namespace, key)))

    def put(self, namespace, key, data, overwrite):
        return bool(self._call(lambda c: c.set(self._name(namespace, key), data, nx=not overwrite)))

    def delete(self, namespace, key):
        self._call(lambda c: c.delete(self._name(namespace, key)))

    def keys(self, namespace):
        prefix = f"{REDIS_PREFIX}:{namespace}:"
        names = self._call(lambda c: list(c.scan_iter(match=prefix + "*", count=1000)))
        return sorted(n.decode()[len(prefix):] for n in names)

    def ping(self):
        return bool(self._call(lambda c: c.ping()))


# -- the store ---------------------------------------------------------------------------
def default_folder() -> str:
    """The compile cache's folder (``HIPDNN_IREE_CACHE_DIR``, ``$XDG_CACHE_HOME/hipdnn-iree`` or
    ``~/.cache/hipdnn-iree``)."""
    env = os.environ.get("HIPDNN_IREE_CACHE_DIR")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "hipdnn-iree")


class PlanStore:
    """A plan store (module docstring): ``PlanStore()`` the default folder, ``PlanStore(path)`` a
    folder, ``PlanStore("redis://host:6379/0")`` a Redis database.

    Example:
        >>> import hipdnn_iree as hd
        >>> hd.PlanStore("redis://localhost:6379/0").kind
        'redis'
    """

    def __init__(self, location=None):
        if isinstance(location, PlanStore):
            location = location.url
        if location is None:
            location = default_folder()
        if isinstance(location, os.PathLike):
            location = os.fspath(location)
        if not isinstance(location, str) or not location.strip():
            raise HipdnnError(Status.BAD_PARAM, f"plan store must be a folder path or a redis://host:port/db URL, "
                                                f"got {location!r}")
        location = location.strip()
        if location.startswith(("redis://", "rediss://", "unix://")):
            self.kind = "redis"
            self._backend = _RedisBackend(location)
        elif "://" in location:
            raise HipdnnError(Status.BAD_PARAM, f"plan store {location!r}: only redis:// (or rediss://, unix://) "
                                                "URLs and folder paths are supported")
        else:
            self.kind = "directory"
            self._backend = _DirectoryBackend(location)
        self.url = self._backend.url

    def __repr__(self) -> str:
        return f"PlanStore({self.url!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, PlanStore) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __reduce__(self):
        return (PlanStore, (self.url,))

    # -- strict calls (raise StoreUnavailable) ---------------------------------------------
    def get(self, namespace: str, key: str) -> bytes | None:
        """The value stored under ``key``, or None when absent or damaged (a damaged entry is deleted
        and named in a warning). Raises :class:`StoreUnavailable`."""
        _check(namespace, key)
        data = self._backend.get(namespace, key)
        if data is None:
            return None
        try:
            return unframe(data, namespace, key)
        except ValueError as e:
            warnings.warn(f"plan store {self.url}: entry {namespace}/{key} is damaged ({e}); treated as a miss, "
                          "deleted, and rebuilt", RuntimeWarning, stacklevel=2)
            try:
                self._backend.delete(namespace, key)
            except StoreUnavailable:
                pass
            return None

    def put(self, namespace: str, key: str, value, overwrite: bool | None = None) -> bool:
        """Stores ``value`` atomically; ``overwrite`` defaults to False for ``module`` entries (first
        writer wins) and True otherwise. True when written. Raises :class:`StoreUnavailable`."""
        _check(namespace, key)
        if overwrite is None:
            overwrite = namespace != "module"
        return self._backend.put(namespace, key, frame(namespace, key, value), overwrite)

    def delete(self, namespace: str, key: str) -> None:
        _check(namespace, key)
        self._backend.delete(namespace, key)

    def keys(self, namespace: str) -> list[str]:
        if namespace not in NAMESPACES:
            _check(namespace, "0" * 64)
        return self._backend.keys(namespace)

    def ping(self) -> bool:
        """True when the store answers; raises :class:`StoreUnavailable` when it does not."""
        return self._backend.ping()

    # -- soft calls: what builds use (never raise for an unreachable store) ----------------
    def try_get(self, namespace: str, key: str) -> bytes | None:
        """:meth:`get`, with an unreachable store a miss (warned about once)."""
        try:
            return self.get(namespace, key)
        except StoreUnavailable as e:
            self.warn_unreachable(e)
            return None

    def try_put(self, namespace: str, key: str, value, overwrite: bool | None = None) -> bool:
        """:meth:`put`, with an unreachable store False (warned about once)."""
        try:
            return self.put(namespace, key, value, overwrite)
        except StoreUnavailable as e:
            self.warn_unreachable(e)
            return False

    def warn_unreachable(self, e: Exception) -> None:
        """One warning per store and process: the build goes on locally."""
        with _WARN_LOCK:
            if self.url in _WARNED:
                _LOG.info("%s", e)
                return
            _WARNED.add(self.url)
        warnings.warn(f"{e}; building locally (plans and compile results are not shared until it is back)",
                      RuntimeWarning, stacklevel=3)


def resolve(setting) -> PlanStore | None:
    """A handle's store: ``setting`` (a PlanStore, a URL or a folder), else ``HIPDNN_IREE_STORE``,
    else None (no store: today's single-machine behaviour)."""
    if setting is None:
        env = os.environ.get(ENV_STORE, "").strip()
        return PlanStore(env) if env else None
    if setting is False:
        return None
    return setting if isinstance(setting, PlanStore) else PlanStore(setting)


def reset_warnings() -> None:
    """Forgets which stores were warned about (tests)."""
    with _WARN_LOCK:
        _WARNED.clear()
