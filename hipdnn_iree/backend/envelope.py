"""The hipDNN envelope of a serialized compiled plan (``schemas/execution_plan.fbs``).

Envelope versions (a separate axis from the IREE engine's FUSPLAN payload version):
  1 (RFC 0009, 2026-11-29): version, engine_id, workspace_size, tensor_uids, plugin_payload.
     Written by hipdnn-iree 0.2 and later, with exactly these five fields (FORMATS.md, 2nd ed.).
  2 (hipdnn-iree 0.1.0 only, 2026-11-29): appended plugin_name, plugin_version, producer_version,
     compiler_version, target_device, target_arch, payload_sha256, signature. Read, never written:
     hipDNN's forks read those slots as their own fields, so the second edition moved them into
     the plugin payload (FUSPLAN minor 1, ``plugins/iree_linalg/fusplan.py``).

Layouts this reader recognises from the bytes (``Envelope.layout``):
  ``rfc-v1``              the RFC's five fields;
  ``v1+fork-fields``      version 1 with fields after slot 4 (a fork's override-shape flag, tensor
                          alignments, ...): ignored;
  ``v1-engine_config``    the hipDNN fork that puts ``engine_config: [ubyte]`` in slot 4 and the
                          payload in slot 5;
  ``hipdnn-iree-0.1-v2``  version 2 as hipdnn-iree 0.1.0 wrote it (its payload digest is checked).
Anything else is NOT_SUPPORTED, with the found layout named; a foreign layout is never called
damaged. Bytes that claim one of the layouts above and break it are BAD_PARAM (damaged).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import struct
from dataclasses import dataclass

import flatbuffers

from hipdnn_iree.flatbuffers_sdk.verify import SCALAR, VECTOR, FlatBufferError, check_table, slot_vector
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

ENVELOPE_VERSION = 1          # what this writer produces
SUPPORTED_VERSIONS = (1, 2)   # what this reader accepts (2: hipdnn-iree 0.1.0's layout only)
PAYLOAD_ALIGNMENT = 64        # the payload vector's data starts this aligned in the envelope
# Size bounds, checked before anything is copied or allocated from the bytes.
# NOTE: the plan size limit is read from the environment when it is used (a handle reads it once,
# when it is made: backend/handle.py HandleSettings), never at import.
MAX_PLAN_BYTES_ENV = "HIPDNN_IREE_MAX_PLAN_BYTES"
DEFAULT_MAX_ENVELOPE_BYTES = 1 << 30   # 1 GiB
MAX_TENSOR_UIDS = 1 << 16
MAX_STRING_BYTES = 4096
_SIG_DOMAIN = b"hipdnn-iree signed plan v1\0"   # 0.1.0's envelope signature (version 2)

LAYOUT_RFC = "rfc-v1"
LAYOUT_FORK_FIELDS = "v1+fork-fields"
LAYOUT_ENGINE_CONFIG = "v1-engine_config"
LAYOUT_LEGACY_V2 = "hipdnn-iree-0.1-v2"
_SUPPORTED_TEXT = ("version 1 (the RFC's five fields, optionally followed by fork fields after slot 4, or "
                   "hipDNN's engine_config-in-slot-4 variant) and version 2 as hipdnn-iree 0.1.0 wrote it")

_HEAD = [("version", SCALAR, 4), ("engine_id", SCALAR, 8), ("workspace_size", SCALAR, 8), ("tensor_uids", VECTOR, 8)]
_RFC = _HEAD + [("plugin_payload", VECTOR, 1)]
_ENGINE_CONFIG = _HEAD + [("engine_config", VECTOR, 1), ("plugin_payload", VECTOR, 1)]
_STRINGS = ("plugin_name", "plugin_version", "producer_version", "compiler_version", "target_device", "target_arch")
_LEGACY_V2 = _RFC + [(name, VECTOR, 1) for name in _STRINGS] + [("payload_sha256", VECTOR, 1),
                                                                 ("signature", VECTOR, 1)]


@dataclass(frozen=True)
class Envelope:
    version: int
    engine_id: int
    workspace_size: int
    tensor_uids: tuple[int, ...]
    plugin_payload: object            # bytes, or a memoryview when decoded in place (see plan_buffer)
    # hipdnn-iree 0.1.0's version-2 fields; empty in version 1 (the payload carries them now)
    plugin_name: str = ""
    plugin_version: str = ""
    producer_version: str = ""
    compiler_version: str = ""
    target_device: str = ""
    target_arch: str = ""
    payload_sha256: bytes = b""
    signature: bytes = b""
    layout: str = LAYOUT_RFC
    payload_offset: int = -1          # where the payload starts in the envelope bytes
    # hipDNN forks' slot 5 (third edition): the plan takes shapes other than the built ones.
    # Written (true) only by override-shape plans; readers of the RFC's five fields ignore it.
    is_override_shape_enabled: bool = False


def max_plan_bytes() -> int:
    """The plan size limit: ``HIPDNN_IREE_MAX_PLAN_BYTES`` (a positive byte count) as it is now,
    else 1 GiB. A value that is not a positive integer is BAD_PARAM naming the variable."""
    raw = os.environ.get(MAX_PLAN_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_ENVELOPE_BYTES
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n <= 0:
        raise HipdnnError(Status.BAD_PARAM, f"environment variable {MAX_PLAN_BYTES_ENV}={raw!r}: expected a "
                                            "positive number of bytes (default 1073741824, 1 GiB)")
    return n


def signed_contents(env: Envelope) -> bytes:
    """What a version-2 (hipdnn-iree 0.1.0) signature covers: every field but the signature."""
    parts = [_SIG_DOMAIN, struct.pack("<Iqq", env.version, env.engine_id, env.workspace_size),
             struct.pack(f"<I{len(env.tensor_uids)}q", len(env.tensor_uids), *env.tensor_uids)]
    for name in _STRINGS:
        raw = getattr(env, name).encode("utf-8")
        parts.append(struct.pack("<I", len(raw)) + raw)
    parts.append(struct.pack("<I", len(env.payload_sha256)) + env.payload_sha256)
    return b"".join(parts)


def _key(key, what: str) -> bytes:
    if isinstance(key, str) and key:
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)) and len(key) > 0:
        return bytes(key)
    raise HipdnnError(Status.BAD_PARAM, f"{what} must be non-empty bytes or str, got {type(key).__name__}")


def _uids(b: flatbuffers.Builder, uids) -> int:
    b.StartVector(8, len(uids), 8)
    for u in reversed(uids):
        b.PrependInt64(int(u))
    return b.EndVector()


def _aligned_bytes(b: flatbuffers.Builder, data) -> int:
    """A [ubyte] vector whose data starts PAYLOAD_ALIGNMENT-aligned in the finished buffer.

    NOTE: the builder aligns relative to the buffer's end and pads the finished buffer to its
    largest alignment, so an alignment from the end is the same alignment from the start.
    """
    n = len(data)
    b.StartVector(1, n, PAYLOAD_ALIGNMENT)
    b.head -= n
    b.Bytes[b.head:b.head + n] = data
    return b.EndVector()


def _parts(payload) -> list:
    """The payload as buffers: a list of them (a plugin that gathers, see backend/plan.py), or one."""
    return list(payload) if isinstance(payload, (list, tuple)) else [payload]


def _encode_v1(env: Envelope, parts: list) -> bytes:
    """The version-1 envelope around ``parts`` (the payload's buffers), each copied once.

    NOTE: the envelope is built around a placeholder payload of ``n % 64`` zero bytes: every
    alignment in it is of 64 bytes or less and is measured from the buffer's end, so the bytes
    before and after the payload are those of the envelope built around the real payload, but
    for the payload's length field; the result is then one join of those, the length and the
    payload's buffers (a FlatBuffers builder would copy the payload in, and Output out again).
    """
    n = sum(len(p) for p in parts)
    m = n % PAYLOAD_ALIGNMENT
    b = flatbuffers.Builder(1024)
    p = _aligned_bytes(b, bytes(m))
    u = _uids(b, env.tensor_uids)
    # NOTE: slot 5 is the hipDNN forks' `is_override_shape_enabled: bool = false`
    # (tests/data/hipdnn_envelope_override_flag.fbs); written only when true, as flatc's
    # builders leave a default out.
    b.StartObject(6 if env.is_override_shape_enabled else 5)
    b.PrependUint32Slot(0, env.version, 0)
    b.PrependInt64Slot(1, env.engine_id, 0)
    b.PrependInt64Slot(2, env.workspace_size, 0)
    b.PrependUOffsetTRelativeSlot(3, u, 0)
    b.PrependUOffsetTRelativeSlot(4, p, 0)
    if env.is_override_shape_enabled:
        b.PrependBoolSlot(5, True, False)
    b.Finish(b.EndObject())
    skeleton = memoryview(b.Output())
    start = len(skeleton) - p + 4          # the payload's first byte (after its uint32 length)
    return b"".join([skeleton[:start - 4], struct.pack("<I", n), *parts, skeleton[start + m:]])


def encode(env: Envelope, signing_key=None, fill_digest: bool = True) -> bytes:
    """Serializes ``env``. Version 1: exactly the RFC's five fields, the payload 64-byte aligned.

    ``env.plugin_payload`` may be a list of buffers (concatenated): version 1 then copies each
    once, straight into the result (:func:`_encode_v1`).

    Version 2 writes hipdnn-iree 0.1.0's layout; only tests use it (damaged/old plans). There,
    the payload digest is filled in (unless ``fill_digest=False``) and a key adds the signature.
    """
    if env.version == 1:
        if signing_key is not None:
            raise HipdnnError(Status.NOT_SUPPORTED, "the version-1 envelope has no signature field: the plugin "
                                                    "signs its own payload")
        return _encode_v1(env, _parts(env.plugin_payload))
    payload = b"".join(_parts(env.plugin_payload))
    b = flatbuffers.Builder(len(payload) + 1024)
    if fill_digest:
        env = Envelope(**{**env.__dict__, "payload_sha256": hashlib.sha256(payload).digest()})
        if signing_key is not None:
            sig = hmac.new(_key(signing_key, "signing_key"), signed_contents(env), hashlib.sha256).digest()
            env = Envelope(**{**env.__dict__, "signature": sig})
    p = b.CreateByteVector(payload)
    strings = [b.CreateString(getattr(env, name)) for name in _STRINGS]
    digest = b.CreateByteVector(env.payload_sha256) if env.payload_sha256 else 0
    sig = b.CreateByteVector(env.signature) if env.signature else 0
    u = _uids(b, env.tensor_uids)
    b.StartObject(13)
    b.PrependUint32Slot(0, env.version, 0)
    b.PrependInt64Slot(1, env.engine_id, 0)
    b.PrependInt64Slot(2, env.workspace_size, 0)
    b.PrependUOffsetTRelativeSlot(3, u, 0)
    b.PrependUOffsetTRelativeSlot(4, p, 0)
    for i, s in enumerate(strings):
        b.PrependUOffsetTRelativeSlot(5 + i, s, 0)
    if digest:
        b.PrependUOffsetTRelativeSlot(11, digest, 0)
    if sig:
        b.PrependUOffsetTRelativeSlot(12, sig, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


# -- reading -----------------------------------------------------------------------------------

def _vtable(buf) -> tuple[int, int, list[int]]:
    """(root, table size, field offsets by slot) of a buffer whose header check_table accepted."""
    root = struct.unpack_from("<I", buf, 0)[0]
    vt = root - struct.unpack_from("<i", buf, root)[0]
    vt_size, tbl_size = struct.unpack_from("<HH", buf, vt)
    voffs = [struct.unpack_from("<H", buf, vt + 4 + 2 * i)[0] for i in range((vt_size - 4) // 2)]
    return root, tbl_size, voffs


def _reads_as_byte_vector(buf, root: int, tbl_size: int, voff: int) -> bool:
    """Whether a field holds a uoffset to a [ubyte] vector (as opposed to a scalar such as a bool).

    NOTE: a uoffset field is 4-byte aligned and 4 bytes wide, and points at a 4-aligned vector that
    lies outside its table (children are written before the table) and inside the buffer. A bool
    (1 byte) fails at least one of these: true is the byte 1, which no uoffset (a multiple of 4)
    starts with, and false is the default that builders leave out.
    """
    n = len(buf)
    pos = root + voff
    if voff == 0 or pos % 4 or voff + 4 > tbl_size:
        return False
    rel = struct.unpack_from("<I", buf, pos)[0]
    vec = pos + rel
    if rel == 0 or rel % 4 or vec % 4 or vec < root + tbl_size or vec + 4 > n:
        return False
    return vec + 4 + struct.unpack_from("<I", buf, vec)[0] <= n


def _detect_layout(buf, version: int) -> str:
    root, tbl_size, voffs = _vtable(buf)
    present = [i for i, v in enumerate(voffs) if v]
    slots = ", ".join(map(str, present))
    if version == 2:
        if len(voffs) > 11 and voffs[11] and _reads_as_byte_vector(buf, root, tbl_size, voffs[11]):
            return LAYOUT_LEGACY_V2
        raise HipdnnError(Status.NOT_SUPPORTED,
                          f"serialized plan has envelope version 2 in a layout that is not hipdnn-iree 0.1.0's "
                          f"(fields in slots {slots}; 0.1.0's has its payload digest in slot 11): it was written by "
                          f"a hipDNN fork this reader does not know. Supported: {_SUPPORTED_TEXT}")
    if version != 1:
        raise HipdnnError(Status.NOT_SUPPORTED,
                          f"serialized plan has envelope version {version}; this reader (hipdnn-iree) supports "
                          f"versions {', '.join(map(str, SUPPORTED_VERSIONS))}: {_SUPPORTED_TEXT}")
    if any(i >= 6 for i in present):
        return LAYOUT_FORK_FIELDS
    slot4 = voffs[4] if len(voffs) > 4 else 0
    slot5 = voffs[5] if len(voffs) > 5 else 0
    if not slot5:
        return LAYOUT_RFC
    if _reads_as_byte_vector(buf, root, tbl_size, slot5) and (
            not slot4 or _reads_as_byte_vector(buf, root, tbl_size, slot4)):
        return LAYOUT_ENGINE_CONFIG
    return LAYOUT_FORK_FIELDS


def _table_size(buf, root: int) -> int:
    return _vtable(buf)[1]


class InPlace:
    """Plan bytes that may be read in place (no copy): memory nothing else writes to (a private
    aligned buffer filled from a file), or a mapped file whose owner accepted the mapping's terms
    (``Graph.from_compiled_plan_file(..., mmap=True)``). Internal: callers' buffers are copied."""
    __slots__ = ("view",)

    def __init__(self, view: memoryview):
        self.view = view


def plan_buffer(data, what: str):
    """``data`` as plan bytes the reader may keep: ``bytes`` as they are (immutable), an
    :class:`InPlace` view as it is, any other C-contiguous buffer of 1-byte items (bytearray,
    memoryview, numpy uint8 array, ...) copied once into private 64-byte aligned memory, so the
    module can be imported from it without another copy and the caller may reuse its buffer.

    NOTE: callers' mutable buffers are copied because the restored module would otherwise keep
    reading them: a caller refilling its buffer would change (or crash) a live plan.
    """
    if isinstance(data, bytes):
        return data
    if isinstance(data, InPlace):
        return data.view
    try:
        view = memoryview(data)
    except TypeError:
        raise HipdnnError(Status.BAD_PARAM, f"{what} must be a bytes-like buffer (bytes, bytearray, memoryview, a "
                                            f"numpy uint8 array), got {type(data).__name__}") from None
    with view:
        if view.itemsize != 1:
            raise HipdnnError(Status.BAD_PARAM, f"{what} is a buffer of {view.itemsize}-byte items (format "
                                                f"{view.format!r}, shape {list(view.shape)}) from "
                                                f"{type(data).__name__}: pass the plan's bytes (1-byte items, e.g. "
                                                "arr.view(np.uint8) or bytes(...))")
        if not view.c_contiguous:
            raise HipdnnError(Status.BAD_PARAM, f"{what} is a non-contiguous buffer (shape {list(view.shape)}, "
                                                f"strides {list(view.strides or ())}) from {type(data).__name__}: "
                                                "pass contiguous bytes (np.ascontiguousarray or bytes(...))")
        out = aligned_empty(view.nbytes)
        if view.nbytes:
            out[:] = view.cast("B") if view.ndim != 1 or view.format != "B" else view
    return out.toreadonly()


def aligned_empty(n: int, alignment: int = PAYLOAD_ALIGNMENT) -> memoryview:
    """A writable ``memoryview`` of ``n`` bytes whose first byte is ``alignment``-aligned."""
    import numpy as np
    raw = np.empty(n + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return memoryview(raw[start:start + n])


def decode(data, verify_key=None, max_bytes: int | None = None) -> Envelope:
    """Parses and validates envelope bytes; every problem is a HipdnnError.

    Order: size bounds, FlatBuffer bounds, version and layout, required fields, then for
    hipdnn-iree 0.1.0's version 2 the payload digest and (with ``verify_key``) its signature.
    Version 1 carries no digest or signature: the plugin payload does (the IREE engine checks its
    own, ``verify_key`` included). Nothing of the payload is interpreted here. ``data``: bytes, or
    any C-contiguous buffer of 1-byte items (copied once into private aligned memory, then read in
    place: the payload is a view, not a further copy); see :func:`plan_buffer`. ``max_bytes``: the
    plan size limit (a handle's, read when it was made); None reads :func:`max_plan_bytes` now.
    """
    limit = max_plan_bytes() if max_bytes is None else int(max_bytes)
    if data is None:
        raise HipdnnError(Status.BAD_PARAM_NULL_POINTER, "serialized plan is None: pass the plan bytes")
    data = plan_buffer(data, "serialized plan")
    n = len(data)
    if n == 0:
        raise HipdnnError(Status.BAD_PARAM, "serialized plan is empty (0 bytes)")
    if n > limit:
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan is {n} bytes, over the {limit}-byte limit "
                                            "(HIPDNN_IREE_MAX_PLAN_BYTES)")
    try:
        check_table(data, _HEAD, max_vector_len=limit)
    except FlatBufferError as e:
        raise HipdnnError(Status.BAD_PARAM,
                          f"serialized plan is not a SerializedExecutionPlan FlatBuffer ({n} bytes): {e}") from None
    root, _, voffs = _vtable(data)
    version = struct.unpack_from("<I", data, root + voffs[0])[0] if voffs and voffs[0] else 0
    layout = _detect_layout(data, version)
    fields_spec = {LAYOUT_LEGACY_V2: _LEGACY_V2, LAYOUT_ENGINE_CONFIG: _ENGINE_CONFIG}.get(layout, _RFC)
    try:
        check_table(data, fields_spec, max_vector_len=limit)
    except FlatBufferError as e:
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan ({layout} layout, {n} bytes) is damaged: {e}") from None
    payload_slot = 5 if layout == LAYOUT_ENGINE_CONFIG else 4
    uids = slot_vector(data, root, 3)
    if uids is None or uids[1] == 0:
        raise HipdnnError(Status.BAD_PARAM, "serialized plan has no tensor_uids (missing or empty)")
    if uids[1] > MAX_TENSOR_UIDS:
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan lists {uids[1]} tensor_uids (limit {MAX_TENSOR_UIDS})")
    found = slot_vector(data, root, payload_slot)
    if found is None or found[1] == 0:
        raise HipdnnError(Status.BAD_PARAM, "serialized plan has no plugin_payload (missing or empty)")

    def scalar(slot, fmt):
        return struct.unpack_from(fmt, data, root + voffs[slot])[0] if len(voffs) > slot and voffs[slot] else 0

    ws = scalar(2, "<q")
    if ws < 0:
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan has negative workspace_size {ws}")
    start, count = found
    fields = dict(version=version, engine_id=scalar(1, "<q"), workspace_size=ws,
                  tensor_uids=struct.unpack_from(f"<{uids[1]}q", data, uids[0]),
                  plugin_payload=data[start:start + count], layout=layout, payload_offset=start)
    if layout == LAYOUT_FORK_FIELDS and len(voffs) > 5 and voffs[5] and voffs[5] < _table_size(data, root):
        # NOTE: the override-shape forks' bool in slot 5 (a fork with other fields there reads false)
        fields["is_override_shape_enabled"] = data[root + voffs[5]] == 1
    if layout == LAYOUT_LEGACY_V2:
        for i, name in enumerate(_STRINGS):
            s = slot_vector(data, root, 5 + i)
            raw = b"" if s is None else bytes(data[s[0]:s[0] + s[1]])
            if len(raw) > MAX_STRING_BYTES:
                raise HipdnnError(Status.BAD_PARAM, f"serialized plan field {name} is {len(raw)} bytes "
                                                    f"(limit {MAX_STRING_BYTES})")
            fields[name] = raw.decode("utf-8", "replace")
        d = slot_vector(data, root, 11)
        digest = bytes(data[d[0]:d[0] + d[1]])
        if len(digest) != 32:
            raise HipdnnError(Status.BAD_PARAM, f"version-2 plan has a payload_sha256 of {len(digest)} bytes "
                                                "(needs 32): the plan is damaged")
        actual = hashlib.sha256(fields["plugin_payload"]).digest()
        if not hmac.compare_digest(actual, digest):
            raise HipdnnError(Status.BAD_PARAM, f"plugin payload digest mismatch: payload_sha256 says {digest.hex()}, "
                                                f"the payload hashes to {actual.hex()}: the plan is damaged or altered")
        fields["payload_sha256"] = digest
        s = slot_vector(data, root, 12)
        fields["signature"] = b"" if s is None else bytes(data[s[0]:s[0] + s[1]])
    env = Envelope(**fields)
    if verify_key is not None and layout == LAYOUT_LEGACY_V2:
        key = _key(verify_key, "verify_key")
        if not env.signature:
            raise HipdnnError(Status.BAD_PARAM, "plan is unsigned (envelope version 2) but a verify_key was "
                                                "given: refusing it")
        want = hmac.new(key, signed_contents(env), hashlib.sha256).digest()
        if not hmac.compare_digest(want, env.signature):
            raise HipdnnError(Status.BAD_PARAM, "plan signature does not verify with the given verify_key: the plan "
                                                "was signed with another key or altered")
    elif verify_key is not None:
        _key(verify_key, "verify_key")
    return env
