"""FUSPLAN: the IREE engine's plugin payload (FORMATS.md, layer 2).

Payload format versions (separate from the envelope version):
  1.0 (2026-11-29, hipdnn-iree 0.1): 20-byte header; payload_kind 2 = IREE VM FlatBuffer module.
  1.1 (2026-12-06, hipdnn-iree 0.2): ``header_size`` also covers a metadata FlatBuffer
      (``schemas/fusplan_metadata.fbs``: identity, versions, target, body SHA-256, optional
      HMAC-SHA256 signature) and zero padding, so the body starts 64-byte aligned in the plan
      file; payload_kind 3 = several modules for several targets behind an index.

Payload kinds: 1 = a hipDNN graph FlatBuffer (``schemas/graph.fbs``), as hipDNN's fusilli-provider
writes it (format 1.0: the 20 fixed bytes, ``header_size`` 20, then the graph); restoring it means
compiling it. 2 = one IREE ``.vmfb``. 3 = several ``.vmfb`` behind an index (format 1.1 only).

Layout: ``magic(8) major(2) minor(2) kind(4) header_size(4) [metadata] [padding] body``.
Readers of 1.0 skip to ``header_size`` and read the body as before.

What the signature covers (``signed_contents``): a domain string, the envelope's engine_id,
workspace_size and tensor_uids, the header's magic/major/minor/kind, every metadata field but
the signature, and the body through its SHA-256 (which ``unpack`` checks against the body
before anything else reads it). ``header_size`` only says where the body starts: moving it moves
the body, which the digest then refuses.
"""
from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass, field, replace

import flatbuffers

from hipdnn_iree.flatbuffers_sdk import fusplan_metadata_generated as M
from hipdnn_iree.flatbuffers_sdk.verify import SCALAR, VECTOR, FlatBufferError, check_table, slot_vector, table_vector

MAGIC = b"FUSPLAN\0"
FORMAT_MAJOR = 1
FORMAT_MINOR = 1              # what this writer produces (minor 0: hipdnn-iree 0.1)
FIXED_HEADER_SIZE = 20
BODY_ALIGNMENT = 64           # IREE's VmModule.wrap_buffer needs the module this aligned
KIND_GRAPH_FLATBUFFER = 1     # hipDNN graph FlatBuffer (what hipDNN's fusilli-provider writes): compiled on restore
KIND_IREE_VMFB = 2
KIND_MULTI_TARGET = 3
KIND_NAMES = {KIND_GRAPH_FLATBUFFER: "hipDNN graph FlatBuffer", KIND_IREE_VMFB: "IREE .vmfb",
              KIND_MULTI_TARGET: "several IREE .vmfb modules, one per target"}
MAX_STRING_BYTES = 4096
MAX_ENTRIES = 256
_HEADER = struct.Struct("<8sHHII")
_SIG_DOMAIN = b"hipdnn-iree FUSPLAN signature v1\0"
_STRINGS = ("plugin_name", "plugin_version", "producer_version", "compiler_version", "target_device", "target_arch")
# Third edition (appended after body_sha256 and signature): the engine config and the shape spec;
# then the LLVM CPU features a kind-2 llvm-cpu module needs (cpufeatures.py).
_EXTRA_STRINGS = ("engine_name", "engine_knobs", "shape_spec", "cpu_features")
_META_FIELDS = ([(name, VECTOR, 1) for name in _STRINGS] + [("body_sha256", VECTOR, 1), ("signature", VECTOR, 1)]
                + [(name, VECTOR, 1) for name in _EXTRA_STRINGS])
_ENTRY_FIELDS = [("target", VECTOR, 1), ("target_device", VECTOR, 1), ("offset", SCALAR, 8), ("size", SCALAR, 8),
                 ("sha256", VECTOR, 1), ("cpu_features", VECTOR, 1)]   # cpu_features: third edition
_INDEX_FIELDS = [("entries", VECTOR, 4)]


class FusplanError(ValueError):
    """The payload is not one this reader accepts; the backend reports PLUGIN_ERROR."""


class FusplanSignatureError(FusplanError):
    """Unsigned where a signature is required, or a signature that does not verify (BAD_PARAM)."""


@dataclass(frozen=True)
class Metadata:
    plugin_name: str = ""
    plugin_version: str = ""
    producer_version: str = ""
    compiler_version: str = ""
    target_device: str = ""
    target_arch: str = ""
    body_sha256: bytes = b""
    signature: bytes = b""
    engine_name: str = ""
    engine_knobs: str = ""      # JSON object of knob values
    shape_spec: str = ""        # JSON: the dims an override-shape plan lets vary
    cpu_features: str = ""      # kind 2 llvm-cpu: the LLVM feature string its code needs ("" = not recorded)


@dataclass(frozen=True)
class Entry:
    """One module of a kind-3 payload; ``offset`` is relative to the body start."""

    target: str
    target_device: str
    offset: int
    size: int
    sha256: bytes
    cpu_features: str = ""      # llvm-cpu modules: the LLVM feature string its code needs ("" = not recorded)


@dataclass(frozen=True)
class Fusplan:
    format_major: int
    format_minor: int
    payload_kind: int
    body: object                      # bytes or a memoryview into the plan's bytes
    header_size: int = FIXED_HEADER_SIZE
    metadata: Metadata | None = None  # None in minor 0
    entries: tuple[Entry, ...] = field(default_factory=tuple)
    signature_verified: bool = False

    def module(self, entry: Entry):
        """The bytes of one kind-3 module (a view, no copy, when the body is a view)."""
        return self.body[entry.offset: entry.offset + entry.size]


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def envelope_fields(engine_id: int, workspace_size: int, tensor_uids) -> bytes:
    uids = sorted(int(u) for u in tensor_uids)
    return struct.pack(f"<qqI{len(uids)}q", int(engine_id), int(workspace_size), len(uids), *uids)


def signed_contents(kind: int, minor: int, meta: Metadata, envelope: bytes) -> bytes:
    parts = [_SIG_DOMAIN, struct.pack("<I", len(envelope)), envelope,
             _HEADER.pack(MAGIC, FORMAT_MAJOR, minor, kind, 0)[:16]]
    for name in _STRINGS:
        raw = getattr(meta, name).encode("utf-8")
        parts.append(struct.pack("<I", len(raw)) + raw)
    parts.append(struct.pack("<I", len(meta.body_sha256)) + bytes(meta.body_sha256))
    for name in _EXTRA_STRINGS:   # NOTE: signed when present; plans without them verify as before
        raw = getattr(meta, name).encode("utf-8")
        if raw:
            parts.append(name.encode() + struct.pack("<I", len(raw)) + raw)
    return b"".join(parts)


def _key_bytes(key) -> bytes:
    if isinstance(key, str) and key:
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)) and len(key) > 0:
        return bytes(key)
    raise TypeError(f"key must be non-empty bytes or str, got {type(key).__name__}")


def _encode_metadata(meta: Metadata) -> bytes:
    b = flatbuffers.Builder(512)
    offs = {name: b.CreateString(getattr(meta, name)) for name in _STRINGS}
    digest = b.CreateByteVector(bytes(meta.body_sha256))
    sig = b.CreateByteVector(bytes(meta.signature)) if meta.signature else None
    extra = {name: b.CreateString(getattr(meta, name)) for name in _EXTRA_STRINGS if getattr(meta, name)}
    M.MetadataStart(b)
    for name in _STRINGS:
        getattr(M, "MetadataAdd" + "".join(p.capitalize() for p in name.split("_")))(b, offs[name])
    M.MetadataAddBodySha256(b, digest)
    if sig is not None:
        M.MetadataAddSignature(b, sig)
    for name in _EXTRA_STRINGS:
        if name in extra:
            getattr(M, "MetadataAdd" + "".join(p.capitalize() for p in name.split("_")))(b, extra[name])
    b.Finish(M.MetadataEnd(b))
    return bytes(b.Output())


def _encode_index(entries: list[Entry]) -> bytes:
    b = flatbuffers.Builder(256 + 96 * len(entries))
    tables = []
    for e in entries:
        t, d, s = b.CreateString(e.target), b.CreateString(e.target_device), b.CreateByteVector(e.sha256)
        f = b.CreateString(e.cpu_features) if e.cpu_features else None
        M.ModuleEntryStart(b)
        M.ModuleEntryAddTarget(b, t)
        M.ModuleEntryAddTargetDevice(b, d)
        M.ModuleEntryAddOffset(b, e.offset)
        M.ModuleEntryAddSize(b, e.size)
        M.ModuleEntryAddSha256(b, s)
        if f is not None:
            M.ModuleEntryAddCpuFeatures(b, f)
        tables.append(M.ModuleEntryEnd(b))
    M.ModuleIndexStartEntriesVector(b, len(tables))
    for t in reversed(tables):
        b.PrependUOffsetTRelative(t)
    vec = b.EndVector()
    M.ModuleIndexStart(b)
    M.ModuleIndexAddEntries(b, vec)
    b.Finish(M.ModuleIndexEnd(b))
    return bytes(b.Output())


def multi_target_parts(modules: list[tuple]) -> list:
    """Kind-3 body as buffers to concatenate (no module copied): index, then each
    ``(target, target_device, vmfb[, cpu_features])`` module 64-byte aligned (zero padding between)."""
    if not modules:
        raise ValueError("a multi-target payload needs at least one module")
    # NOTE: the index's size does not depend on the offsets' values (uint64 fields), as long as none
    # is the default 0 that builders leave out: one provisional encoding gives the final size.
    provisional = [Entry(t, d, BODY_ALIGNMENT, len(m), hashlib.sha256(m).digest(), *rest[:1])
                   for t, d, m, *rest in modules]
    modules = [(t, d, m) for t, d, m, *_ in modules]
    pos = _round_up(len(_encode_index(provisional)), BODY_ALIGNMENT)
    entries = []
    for (t, d, m), e in zip(modules, provisional):
        entries.append(replace(e, offset=pos))
        pos = _round_up(pos + len(m), BODY_ALIGNMENT)
    index = _encode_index(entries)
    assert len(index) <= entries[0].offset, "kind-3 index outgrew its provisional size"
    parts, at = [index], len(index)
    for (_, _, m), e in zip(modules, entries):
        parts += [bytes(e.offset - at), m]
        at = e.offset + e.size
    parts.append(bytes(pos - at))
    return parts


def multi_target_body(modules: list[tuple]) -> bytes:
    """Kind-3 body: index, then each ``(target, target_device, vmfb[, cpu_features])`` module 64-byte aligned."""
    return b"".join(multi_target_parts(modules))


def pack_parts(body, kind: int = KIND_IREE_VMFB, metadata: Metadata | None = None, signing_key=None,
               envelope: bytes = b"", minor: int = FORMAT_MINOR) -> list:
    """:func:`pack` as buffers to concatenate: the header (fixed part, metadata, padding), then the
    body's buffers as given (``body``: one buffer or a list of them), none of them copied."""
    parts = list(body) if isinstance(body, list) else [body]
    if minor == 0:
        if signing_key is not None:
            raise ValueError("FUSPLAN minor 0 has no signature field")
        return [_HEADER.pack(MAGIC, FORMAT_MAJOR, 0, kind, FIXED_HEADER_SIZE), *parts]
    digest = hashlib.sha256()
    for p in parts:
        digest.update(p)
    meta = replace(metadata or Metadata(), body_sha256=digest.digest(), signature=b"")
    if signing_key is not None:
        sig = hmac.new(_key_bytes(signing_key), signed_contents(kind, minor, meta, envelope), hashlib.sha256).digest()
        meta = replace(meta, signature=sig)
    raw = _encode_metadata(meta)
    header_size = _round_up(FIXED_HEADER_SIZE + len(raw), BODY_ALIGNMENT)
    pad = header_size - FIXED_HEADER_SIZE - len(raw)
    return [_HEADER.pack(MAGIC, FORMAT_MAJOR, minor, kind, header_size) + raw + bytes(pad), *parts]


def pack(body, kind: int = KIND_IREE_VMFB, metadata: Metadata | None = None, signing_key=None,
         envelope: bytes = b"", minor: int = FORMAT_MINOR) -> bytes:
    """Header + metadata + padding + body. ``minor=0`` writes the 0.1 layout (no metadata).

    With ``minor >= 1`` the body digest is filled in, and with ``signing_key`` the signature over
    ``signed_contents`` (``envelope`` = :func:`envelope_fields` of the plan being written).
    """
    return b"".join(pack_parts(bytes(body), kind, metadata, signing_key, envelope, minor))


def _string(buf, pos: int, slot: int, what: str) -> str:
    found = slot_vector(buf, pos, slot)
    if found is None:
        return ""
    start, n = found
    if n > MAX_STRING_BYTES:
        raise FusplanError(f"FUSPLAN {what} is {n} bytes (limit {MAX_STRING_BYTES})")
    return bytes(buf[start:start + n]).decode("utf-8", "replace")


def _blob(buf, pos: int, slot: int) -> bytes:
    found = slot_vector(buf, pos, slot)
    return b"" if found is None else bytes(buf[found[0]:found[0] + found[1]])


def _decode_metadata(buf) -> Metadata:
    try:
        pos = check_table(buf, _META_FIELDS, max_vector_len=len(buf))
    except FlatBufferError as e:
        raise FusplanError(f"FUSPLAN metadata block is not a valid Metadata FlatBuffer ({len(buf)} bytes): {e}: "
                           "the plan is damaged") from None
    fields = {name: _string(buf, pos, i, name) for i, name in enumerate(_STRINGS)}
    extra = {name: _string(buf, pos, 8 + i, name) for i, name in enumerate(_EXTRA_STRINGS)}
    return Metadata(**fields, body_sha256=_blob(buf, pos, 6), signature=_blob(buf, pos, 7), **extra)


def _decode_index(body) -> tuple[Entry, ...]:
    n = len(body)
    try:
        root = check_table(body, _INDEX_FIELDS, max_vector_len=MAX_ENTRIES)
        positions = table_vector(body, root, 0)
        entries = []
        for p in positions:
            check_table(body, _ENTRY_FIELDS, max_vector_len=n, table_pos=p)
            t = M.ModuleEntry()
            t.Init(body, p)
            entries.append(Entry(_string(body, p, 0, "entry target"), _string(body, p, 1, "entry device"),
                                 int(t.Offset()), int(t.Size()), _blob(body, p, 4),
                                 _string(body, p, 5, "entry cpu_features")))
    except FlatBufferError as e:
        raise FusplanError(f"FUSPLAN kind-3 module index is malformed: {e}: the plan is damaged") from None
    if not entries:
        raise FusplanError("FUSPLAN kind-3 module index lists no modules")
    for i, e in enumerate(entries):
        if e.offset % BODY_ALIGNMENT or e.size <= 0 or e.offset + e.size > n or len(e.sha256) != 32:
            raise FusplanError(f"FUSPLAN kind-3 index entry {i} ({e.target!r}: offset {e.offset}, size {e.size}) "
                               f"does not lie 64-byte aligned inside the {n}-byte body: the plan is damaged")
    return tuple(entries)


def unpack(payload, verify_key=None, envelope: bytes = b"") -> Fusplan:
    """Parses and checks a payload; every problem is a FusplanError.

    Order: header, metadata (minor >= 1), body digest, signature (with ``verify_key``), then the
    kind-3 index: nothing reads a body byte before its digest matched. ``payload`` may be a
    memoryview (e.g. into a memory-mapped plan file): the body is then a view, not a copy.
    """
    view = payload if isinstance(payload, (bytes, memoryview)) else memoryview(payload)
    n = len(view)
    if n < FIXED_HEADER_SIZE:
        raise FusplanError(f"FUSPLAN payload is {n} bytes, shorter than the {FIXED_HEADER_SIZE}-byte header")
    magic, major, minor, kind, header_size = _HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise FusplanError(f"FUSPLAN payload has magic {bytes(magic)!r}, expected {MAGIC!r}")
    if major != FORMAT_MAJOR:
        raise FusplanError(f"FUSPLAN format major version {major} is not supported (this reader: {FORMAT_MAJOR})")
    if kind not in KIND_NAMES:
        raise FusplanError(f"FUSPLAN payload_kind {kind} is unknown; this reader loads kinds "
                           f"{KIND_GRAPH_FLATBUFFER} (hipDNN graph FlatBuffer, compiled when restored), "
                           f"{KIND_IREE_VMFB} (IREE .vmfb) and {KIND_MULTI_TARGET} (one .vmfb per target)")
    if header_size < FIXED_HEADER_SIZE or header_size >= n:
        raise FusplanError(f"FUSPLAN header_size {header_size} is invalid for a {n}-byte payload "
                           f"(needs {FIXED_HEADER_SIZE} <= header_size < payload size)")
    meta = None
    if minor >= 1:
        if header_size == FIXED_HEADER_SIZE:
            raise FusplanError(f"FUSPLAN format 1.{minor} payload has no metadata block (header_size 20): "
                               "the plan is damaged")
        meta = _decode_metadata(view[FIXED_HEADER_SIZE:header_size])
    elif kind == KIND_MULTI_TARGET:
        raise FusplanError("FUSPLAN format 1.0 payload claims kind 3, which needs format 1.1: the plan is damaged")
    body = view[header_size:]
    verified = False
    if meta is not None:
        if len(meta.body_sha256) != 32:
            raise FusplanError(f"FUSPLAN metadata has a body_sha256 of {len(meta.body_sha256)} bytes (needs 32): "
                               "the plan is damaged")
        actual = hashlib.sha256(body).digest()
        if not hmac.compare_digest(actual, meta.body_sha256):
            raise FusplanError(f"plan body digest mismatch: the FUSPLAN metadata says {meta.body_sha256.hex()}, the "
                               f"body hashes to {actual.hex()}: the plan is damaged or altered")
    if verify_key is not None:
        if meta is None or not meta.signature:
            raise FusplanSignatureError(f"plan is unsigned (FUSPLAN format 1.{minor}) but a verify_key was given: "
                                        "refusing it")
        want = hmac.new(_key_bytes(verify_key), signed_contents(kind, minor, meta, envelope), hashlib.sha256).digest()
        if not hmac.compare_digest(want, meta.signature):
            raise FusplanSignatureError("plan signature does not verify with the given verify_key: the plan was "
                                        "signed with another key or altered")
        verified = True
    entries = _decode_index(body) if kind == KIND_MULTI_TARGET else ()
    return Fusplan(major, minor, kind, body, header_size, meta, entries, verified)
