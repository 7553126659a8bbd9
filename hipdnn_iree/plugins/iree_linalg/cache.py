"""Persistent compile cache: a compiled ``.vmfb`` is reused across processes.

Building a graph whose module is already in the cache skips the IREE compiler (the graph is
lowered first: lowering is pure Python, about a millisecond for a small graph, and its text is
the key). Entries are keyed by SHA-256 over what the compiler is given and what reads its
output: the emitted MLIR text (the graph, the lowering policy, the shape spec and the module ABI
all show in it), the target string, the full compiler flag list (a flag that names a file, such
as a transform-dialect spec, enters as the SHA-256 of that file's content, never its path), the
IREE compiler's identity (version and revision), the module ABI version
(``lowering.abi.ABI_FORMAT_VERSION``) and this cache's entry format (``ENTRY_FORMAT``). No path,
temporary folder or source-file digest is part of a key, so an edited lowering gets new keys
exactly when its output changes.

Settings (read at each build):

- ``HIPDNN_IREE_CACHE_DIR``: the folder; default ``$XDG_CACHE_HOME/hipdnn-iree`` or
  ``~/.cache/hipdnn-iree``.
- ``HIPDNN_IREE_CACHE``: ``0``/``false``/``off``/``no`` turns the cache off (default on).
- ``HIPDNN_IREE_CACHE_MAX_BYTES``: size cap (suffixes K, M, G allowed; default 1 GiB);
  least-recently-used entries (by mtime, touched on every hit) are evicted past it.
- ``hd.create_handle(cache=...)``: ``False`` off, ``True`` on, a path: that folder; it wins
  over ``HIPDNN_IREE_CACHE``.

Entry file ``<key>.hdc`` (all integers little-endian):

| offset | size | field |
|---|---|---|
| 0 | 8 | magic ``b"HDICACHE"`` |
| 8 | 2 | entry format version (1) |
| 10 | 2 | header size (56) |
| 12 | 4 | meta length ``m`` (UTF-8 JSON: key, dispatch count, ABI, flags, versions, MLIR) |
| 16 | 8 | module length ``v`` |
| 24 | 32 | SHA-256 of the body (meta followed by module) |
| 56 | m + v | body |

A file whose header, length, digest or meta does not check out is deleted and the graph
is compiled again; its module is never loaded. Writes go to a temporary file in the same
folder, are fsync'ed, then renamed over the entry, so concurrent builders of one graph
each leave a complete entry and readers never see a partial one.

Trust: entries hold native code that runs on a hit, like plan files. The folder is
created private to the user (mode 0700); do not point it at a folder others can write.

Example:
    >>> import hipdnn_iree as hd                                 # doctest: +SKIP
    >>> h = hd.create_handle(cache="/tmp/my-cache")   # or cache=False to always compile
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import struct
import tempfile
import time
from dataclasses import dataclass, field

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

ENV_DIR = "HIPDNN_IREE_CACHE_DIR"
ENV_ENABLED = "HIPDNN_IREE_CACHE"
ENV_MAX_BYTES = "HIPDNN_IREE_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30
MAGIC = b"HDICACHE"
# History: 1 (2026-11-29) first layout (header above; meta keys key, dispatch_count, abi, flags, mlir).
ENTRY_FORMAT = 1
SUFFIX = ".hdc"
_HEADER = struct.Struct("<8sHHIQ32s")
_KEY_DOMAIN = b"hipdnn-iree compile cache key v2\0"   # v2: keyed by the MLIR text (v1: graph bytes + code digest)
_STALE_TMP_S = 3600.0
_LOG = logging.getLogger("hipdnn_iree.cache")


@dataclass(frozen=True)
class CachedModule:
    """What a compile gives the IREE engine, as stored in (or read from) an entry."""

    vmfb: bytes
    abi: dict
    dispatch_count: int | None
    flags: tuple[str, ...] = ()
    mlir: str | None = None
    compiler_version: str = ""


@dataclass
class CacheStats:
    """Per-process counters (tests and benchmarks read them)."""

    hits: int = 0
    misses: int = 0
    stores: int = 0
    corrupt: int = 0
    evicted: int = 0
    remote_hits: int = 0      # the plan store's module entries (plugin_sdk/store.py)
    remote_misses: int = 0
    remote_stores: int = 0

    def reset(self) -> None:
        self.hits = self.misses = self.stores = self.corrupt = self.evicted = 0
        self.remote_hits = self.remote_misses = self.remote_stores = 0


STATS = CacheStats()


# -- key ---------------------------------------------------------------------------------
def cache_key(mlir: str, target: str, flags, compiler_identity: str, abi_version: int,
              entry_format: int = ENTRY_FORMAT) -> str:
    """The entry key: hex SHA-256 over the length-prefixed parts (pure; no I/O). ``flags``: as
    :func:`key_flags` gives them (no file paths).

    Example:
        >>> k = cache_key("module {}", "llvm-cpu:host", ["--a"], "3.13.0", 1)
        >>> k != cache_key("module {}", "llvm-cpu:znver3", ["--a"], "3.13.0", 1)
        True
    """
    h = hashlib.sha256(_KEY_DOMAIN)
    for part in (str(mlir).encode("utf-8"), str(target).encode(), json.dumps([str(f) for f in flags]).encode(),
                 str(compiler_identity).encode(), str(int(abi_version)).encode(), str(int(entry_format)).encode()):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.hexdigest()


_FILE_FLAG = re.compile(r"^(--[\w.-]+=)([^@]+)(@.*)?$")


def key_flags(flags) -> tuple[str, ...]:
    """``flags`` as they enter a key: a flag whose value is an absolute path of a file (``--x=/p`` or
    ``--x=/p@symbol``: a transform-dialect library, a tuning spec) has the path replaced by
    ``sha256:<hex of the file's content>``, so where the file was written (a temporary folder)
    never changes a key and a change of its content always does."""
    out = []
    for f in flags:
        f = str(f)
        m = _FILE_FLAG.match(f)
        if m and os.path.isabs(m.group(2)) and os.path.isfile(m.group(2)):
            out.append(f"{m.group(1)}sha256:{_file_sha256(m.group(2))}{m.group(3) or ''}")
        else:
            out.append(f)
    return tuple(out)


def _file_sha256(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return "unreadable:" + path   # NOTE: the compile then fails on it too


@functools.lru_cache(maxsize=1)
def compiler_identity() -> str:
    """The IREE compiler's version and revision, read without importing the compiler.

    NOTE: importing ``iree.compiler`` costs time and a restored-only process may block it;
    the installed distribution's ``version.py`` holds the same strings.
    """
    from importlib import metadata
    for dist_name in ("iree-base-compiler", "iree-compiler"):
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        text = ""
        for f in dist.files or ():
            if str(f).replace("\\", "/").endswith("iree/compiler/version.py"):
                try:
                    text = f.read_text(encoding="utf-8")
                except OSError:
                    text = ""
                break
        found = dict(re.findall(r'^(VERSION|PACKAGE_SUFFIX)\s*=\s*"([^"]*)"', text, re.M))
        revision = re.search(r'"IREE"\s*:\s*"([0-9a-fA-F]+)"', text)
        return (f"{dist_name} {dist.version} VERSION={found.get('VERSION', '?')}{found.get('PACKAGE_SUFFIX', '')} "
                f"IREE={revision.group(1) if revision else '?'}")
    from hipdnn_iree.plugins.iree_linalg.compile import compiler_version  # NOTE: imports the compiler; last resort
    return f"iree.compiler VERSION={compiler_version()}"


def compiler_version_string() -> str:
    """``iree.compiler.version.VERSION`` as the compile path reports it (no import)."""
    m = re.search(r"VERSION=(\S+)", compiler_identity())
    return m.group(1) if m else ""


# -- settings ----------------------------------------------------------------------------
def default_dir() -> str:
    """``$HIPDNN_IREE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hipdnn-iree``, else ``~/.cache/hipdnn-iree``."""
    env = os.environ.get(ENV_DIR)
    if env:
        return os.path.abspath(os.path.expanduser(env))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "hipdnn-iree")


def env_enabled() -> bool:
    raw = os.environ.get(ENV_ENABLED, "").strip().lower()
    if raw in ("", "1", "true", "on", "yes"):
        return True
    if raw in ("0", "false", "off", "no"):
        return False
    raise HipdnnError(Status.BAD_PARAM, f"environment variable {ENV_ENABLED}={os.environ[ENV_ENABLED]!r}: "
                                        "use 1 (cache on) or 0 (cache off)")


def parse_size(text: str, what: str = ENV_MAX_BYTES) -> int:
    """``"1048576"``, ``"512M"``, ``"1G"`` (binary units) -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", str(text))
    if not m:
        raise HipdnnError(Status.BAD_PARAM, f"{what}={text!r} is not a size: use bytes or a number with K, M or "
                                            "G (e.g. 536870912 or 512M)")
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2).upper() or " "))


def env_max_bytes() -> int:
    raw = os.environ.get(ENV_MAX_BYTES)
    return DEFAULT_MAX_BYTES if raw is None or not raw.strip() else parse_size(raw)


def check_setting(setting) -> None:
    """Raises BAD_PARAM unless ``setting`` is None, a bool, a path or a :class:`CompileCache`."""
    if setting is None or isinstance(setting, (bool, CompileCache)):
        return
    if isinstance(setting, (str, os.PathLike)) and os.fspath(setting):
        return
    raise HipdnnError(Status.BAD_PARAM, f"cache must be None, True, False, a folder path or a CompileCache, "
                                        f"got {setting!r}")


def resolve(setting=None) -> "CompileCache | None":
    """The cache a build uses for ``setting`` (a handle's ``cache=``), or None when off."""
    check_setting(setting)
    if isinstance(setting, CompileCache):
        return setting
    if setting is False:
        return None
    if setting is None and not env_enabled():
        return None
    folder = default_dir() if setting is None or setting is True else os.path.abspath(os.fspath(setting))
    return CompileCache(folder, env_max_bytes())


# -- the store ---------------------------------------------------------------------------
@dataclass
class CompileCache:
    """A cache folder with a size cap. Cheap to create; holds no open files.

    Cache problems (unwritable folder, full disk) are logged and the build goes on
    compiling: the cache never makes a build fail.
    """

    directory: str
    max_bytes: int = DEFAULT_MAX_BYTES
    _warned: bool = field(default=False, repr=False)

    def key_for(self, mlir: str, target, extra_flags=()) -> str:
        """The key of compiling ``mlir`` (the lowering's text) for ``target`` (a ``Target``) with
        ``extra_flags`` after the target's own: every input of the module."""
        return key_of(mlir, target, extra_flags)

    def path_of(self, key: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", key):
            raise HipdnnError(Status.BAD_PARAM, f"compile cache key must be 64 hex digits, got {key!r}")
        return os.path.join(self.directory, key + SUFFIX)

    # -- read ----------------------------------------------------------------------------
    def get(self, key: str) -> CachedModule | None:
        """The entry for ``key``, or None (a missing or damaged entry; damaged ones are deleted)."""
        path = self.path_of(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            STATS.misses += 1
            return None
        except OSError as e:
            self._warn(f"cannot read compile cache entry {path}: {e}")
            STATS.misses += 1
            return None
        try:
            entry = decode_entry(data, key)
        except ValueError as e:
            _LOG.warning("compile cache entry %s is damaged (%s); deleting it and compiling again", path, e)
            STATS.corrupt += 1
            STATS.misses += 1
            _unlink(path)
            return None
        try:
            os.utime(path)   # LRU: a hit makes the entry the most recently used
        except OSError:
            pass
        STATS.hits += 1
        return entry

    # -- write ---------------------------------------------------------------------------
    def put(self, key: str, module: CachedModule) -> bool:
        """Stores ``module`` under ``key`` atomically, then evicts past the cap. False if not stored."""
        parts = encode_entry_parts(key, module)   # NOTE: written as is: the module is not copied
        size = sum(len(p) for p in parts)
        if size > self.max_bytes:
            _LOG.info("compile cache: a %d-byte entry is over the %d-byte cap; not stored", size, self.max_bytes)
            return False
        path = self.path_of(key)
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=self.directory)
        except OSError as e:
            self._warn(f"cannot write to compile cache folder {self.directory}: {e}")
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                f.writelines(parts)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)   # NOTE: atomic; concurrent writers of one key each leave a whole entry
        except OSError as e:
            _unlink(tmp)
            self._warn(f"cannot write compile cache entry {path}: {e}")
            return False
        STATS.stores += 1
        self.evict(keep=path)
        return True

    def entries(self) -> list[tuple[str, int, float]]:
        """``(path, size, mtime)`` of every entry, oldest first."""
        out = []
        try:
            names = os.listdir(self.directory)
        except OSError:
            return out
        now = time.time()
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if name.endswith(SUFFIX) and len(name) == 64 + len(SUFFIX):
                out.append((path, st.st_size, st.st_mtime))
            elif name.startswith(".") and name.endswith(".tmp") and now - st.st_mtime > _STALE_TMP_S:
                _unlink(path)   # left by a writer that died mid-write
        out.sort(key=lambda e: e[2])
        return out

    def size(self) -> int:
        return sum(s for _, s, _ in self.entries())

    def evict(self, keep: str | None = None) -> int:
        """Deletes least-recently-used entries until the total is within the cap; returns how many."""
        entries = self.entries()
        total = sum(s for _, s, _ in entries)
        removed = 0
        for path, size, _ in entries:
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            if _unlink(path):
                removed += 1
            total -= size   # NOTE: counted even if another process removed it first
        STATS.evicted += removed
        return removed

    def clear(self) -> int:
        """Deletes every entry; returns how many."""
        return sum(1 for path, _, _ in self.entries() if _unlink(path))

    def _warn(self, message: str) -> None:
        if not self._warned:
            _LOG.warning("%s (the build goes on without the cache)", message)
            self._warned = True


def key_of(mlir: str, target, extra_flags=()) -> str:
    """:meth:`CompileCache.key_for` without a cache: the key a plan store's ``module`` entries use too."""
    from lowering.abi import ABI_FORMAT_VERSION
    flags = key_flags(tuple(target.compile_flags()) + tuple(extra_flags))
    return cache_key(mlir, str(target), flags, compiler_identity(), ABI_FORMAT_VERSION)


# -- the plan store's module namespace (plugin_sdk/store.py) -------------------------------
def shared_store(store, local: "CompileCache | None"):
    """The handle's plan store as a second level after the local cache, or None: none set, or a
    directory store in the local cache's own folder (the same machine's disk twice)."""
    if store is None:
        return None
    if local is not None and store.kind == "directory" and os.path.abspath(store.url) == os.path.abspath(local.directory):
        return None
    return store


def remote_get(store, key: str) -> CachedModule | None:
    """The store's ``module`` entry for ``key``; None when absent, damaged (the store warns and
    deletes it; an entry whose inner compile cache record does not decode is deleted here, with a
    warning naming the key) or the store is unreachable (warned once)."""
    data = store.try_get("module", key)
    if data is None:
        STATS.remote_misses += 1
        return None
    try:
        entry = decode_entry(data, key)
    except ValueError as e:
        import warnings
        warnings.warn(f"plan store {store.url}: entry module/{key} is damaged ({e}); treated as a miss, deleted, "
                      "and rebuilt", RuntimeWarning, stacklevel=2)
        try:
            store.delete("module", key)
        except HipdnnError:
            pass
        STATS.remote_misses += 1
        return None
    STATS.remote_hits += 1
    return entry


def remote_put(store, key: str, module: CachedModule) -> bool:
    """Writes ``module`` to the store (first writer wins); False when not written."""
    ok = store.try_put("module", key, encode_entry(key, module))
    STATS.remote_stores += int(ok)
    return ok


# -- entry codec -------------------------------------------------------------------------
def encode_entry_parts(key: str, module: CachedModule) -> list:
    """An entry as buffers to write one after another: header, meta, the module (not copied)."""
    meta = json.dumps({"key": key, "dispatch_count": module.dispatch_count, "abi": module.abi,
                       "flags": list(module.flags), "mlir": module.mlir,
                       "compiler_version": module.compiler_version, "created": time.time()},
                      separators=(",", ":")).encode("utf-8")
    digest = hashlib.sha256(meta)
    digest.update(module.vmfb)
    header = _HEADER.pack(MAGIC, ENTRY_FORMAT, _HEADER.size, len(meta), len(module.vmfb), digest.digest())
    return [header, meta, module.vmfb]


def encode_entry(key: str, module: CachedModule) -> bytes:
    return b"".join(encode_entry_parts(key, module))


def decode_entry(data: bytes, key: str | None = None) -> CachedModule:
    """Checks and parses an entry; raises ``ValueError`` naming the first problem."""
    if len(data) < _HEADER.size:
        raise ValueError(f"{len(data)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, fmt, header_size, meta_len, vmfb_len, digest = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError(f"magic {magic!r}, expected {MAGIC!r}")
    if fmt != ENTRY_FORMAT or header_size != _HEADER.size:
        raise ValueError(f"entry format {fmt} (header {header_size} bytes); this reader knows format "
                         f"{ENTRY_FORMAT} ({_HEADER.size} bytes)")
    if header_size + meta_len + vmfb_len != len(data):
        raise ValueError(f"lengths {header_size}+{meta_len}+{vmfb_len} do not add up to the {len(data)}-byte file")
    body = memoryview(data)[header_size:]
    if hashlib.sha256(body).digest() != digest:
        raise ValueError("SHA-256 of the body does not match the header")
    try:
        meta = json.loads(bytes(body[:meta_len]).decode("utf-8"))
        if key is not None and meta["key"] != key:
            raise ValueError(f"entry is for key {meta['key']!r}")
        abi, dispatches = meta["abi"], meta["dispatch_count"]
        if not isinstance(abi, dict) or not (dispatches is None or isinstance(dispatches, int)):
            raise ValueError("meta has a malformed abi or dispatch_count")
        return CachedModule(bytes(body[meta_len:]), abi, dispatches, tuple(meta.get("flags") or ()),
                            meta.get("mlir"), str(meta.get("compiler_version") or ""))
    except (KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"meta is malformed: {e!r}") from None


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
