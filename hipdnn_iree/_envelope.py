"""The hipDNN envelope of a serialized compiled plan (``schemas/execution_plan.fbs``).

Envelope versions (a separate axis from the IREE engine's FUSPLAN payload version):
  1 (RFC 0009, 2026-11-29): version, engine_id, workspace_size, tensor_uids, plugin_payload.
  2 (2026-11-29): appends plugin_name, plugin_version, producer_version, compiler_version,
     target_device, target_arch, payload_sha256 (required) and signature (optional HMAC-SHA256).

Readers accept every version above; others are rejected with NOT_SUPPORTED. In version 2 the
payload digest is checked before any payload byte is interpreted.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import struct
from dataclasses import dataclass

import flatbuffers

from hipdnn_iree._fbs import execution_plan_generated as E
from hipdnn_iree._fbverify import SCALAR, VECTOR, FlatBufferError, check_table
from hipdnn_iree._status import HipdnnError, Status

ENVELOPE_VERSION = 2          # what this writer produces
SUPPORTED_VERSIONS = (1, 2)   # what this reader accepts
# Size bounds, checked before anything is copied or allocated from the bytes.
MAX_ENVELOPE_BYTES = int(os.environ.get("HIPDNN_IREE_MAX_PLAN_BYTES", 1 << 30))   # 1 GiB
MAX_TENSOR_UIDS = 1 << 16
MAX_STRING_BYTES = 4096
_SIG_DOMAIN = b"hipdnn-iree signed plan v1\0"

_FIELDS = [
    ("version", SCALAR, 4),
    ("engine_id", SCALAR, 8),
    ("workspace_size", SCALAR, 8),
    ("tensor_uids", VECTOR, 8),
    ("plugin_payload", VECTOR, 1),
    # version 2
    ("plugin_name", VECTOR, 1),
    ("plugin_version", VECTOR, 1),
    ("producer_version", VECTOR, 1),
    ("compiler_version", VECTOR, 1),
    ("target_device", VECTOR, 1),
    ("target_arch", VECTOR, 1),
    ("payload_sha256", VECTOR, 1),
    ("signature", VECTOR, 1),
]
_STRINGS = ("plugin_name", "plugin_version", "producer_version", "compiler_version", "target_device", "target_arch")


@dataclass(frozen=True)
class Envelope:
    version: int
    engine_id: int
    workspace_size: int
    tensor_uids: tuple[int, ...]
    plugin_payload: bytes
    plugin_name: str = ""
    plugin_version: str = ""
    producer_version: str = ""
    compiler_version: str = ""
    target_device: str = ""
    target_arch: str = ""
    payload_sha256: bytes = b""
    signature: bytes = b""


def signed_contents(env: Envelope) -> bytes:
    """The bytes an HMAC signature covers: every field but the signature, length-prefixed.

    The payload is covered through its SHA-256 (itself checked against the payload).
    """
    parts = [_SIG_DOMAIN, struct.pack("<Iqq", env.version, env.engine_id, env.workspace_size),
             struct.pack(f"<I{len(env.tensor_uids)}q", len(env.tensor_uids), *env.tensor_uids)]
    for name in _STRINGS:
        raw = getattr(env, name).encode("utf-8")
        parts.append(struct.pack("<I", len(raw)) + raw)
    parts.append(struct.pack("<I", len(env.payload_sha256)) + env.payload_sha256)
    return b"".join(parts)


def _key(key, what: str) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)) and len(key) > 0:
        return bytes(key)
    raise HipdnnError(Status.BAD_PARAM, f"{what} must be non-empty bytes or str, got {type(key).__name__}")


def encode(env: Envelope, signing_key=None, fill_digest: bool = True) -> bytes:
    """Serializes ``env``; version 2 fills in the payload digest and, with a key, the signature.

    ``fill_digest=False`` writes ``env.payload_sha256`` as given (tests of damaged plans).
    """
    if env.version >= 2 and fill_digest:
        env = Envelope(**{**env.__dict__, "payload_sha256": hashlib.sha256(env.plugin_payload).digest()})
        if signing_key is not None:
            sig = hmac.new(_key(signing_key, "signing_key"), signed_contents(env), hashlib.sha256).digest()
            env = Envelope(**{**env.__dict__, "signature": sig})
    elif signing_key is not None:
        raise HipdnnError(Status.NOT_SUPPORTED, "envelope version 1 has no signature field: sign version 2 plans")
    b = flatbuffers.Builder(len(env.plugin_payload) + 512)
    payload = b.CreateByteVector(bytes(env.plugin_payload))
    v2 = {}
    if env.version >= 2:
        for name in _STRINGS:
            v2[name] = b.CreateString(getattr(env, name))
        if env.payload_sha256:
            v2["payload_sha256"] = b.CreateByteVector(env.payload_sha256)
        if env.signature:
            v2["signature"] = b.CreateByteVector(env.signature)
    b.StartVector(8, len(env.tensor_uids), 8)
    for u in reversed(env.tensor_uids):
        b.PrependInt64(int(u))
    uids = b.EndVector()
    E.SerializedExecutionPlanStart(b)
    E.SerializedExecutionPlanAddVersion(b, env.version)
    E.SerializedExecutionPlanAddEngineId(b, env.engine_id)
    E.SerializedExecutionPlanAddWorkspaceSize(b, env.workspace_size)
    E.SerializedExecutionPlanAddTensorUids(b, uids)
    E.SerializedExecutionPlanAddPluginPayload(b, payload)
    for name, off in v2.items():
        getattr(E, "SerializedExecutionPlanAdd" + "".join(p.capitalize() for p in name.split("_")))(b, off)
    b.Finish(E.SerializedExecutionPlanEnd(b))
    return bytes(b.Output())


def decode(data, verify_key=None) -> Envelope:
    """Parses and validates envelope bytes; every problem is a HipdnnError.

    Order: size bounds, FlatBuffer bounds, version, required fields, payload digest (v2),
    signature (when ``verify_key`` is given). Nothing of the payload is interpreted here.
    """
    if data is None:
        raise HipdnnError(Status.BAD_PARAM_NULL_POINTER, "serialized plan is None: pass the plan bytes")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan must be bytes-like, got {type(data).__name__}")
    n = memoryview(data).nbytes
    if n == 0:
        raise HipdnnError(Status.BAD_PARAM, "serialized plan is empty (0 bytes)")
    if n > MAX_ENVELOPE_BYTES:
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan is {n} bytes, over the {MAX_ENVELOPE_BYTES}-byte limit "
                                            "(HIPDNN_IREE_MAX_PLAN_BYTES)")
    data = bytes(data)
    try:
        check_table(data, _FIELDS, max_vector_len=MAX_ENVELOPE_BYTES)
    except FlatBufferError as e:
        raise HipdnnError(Status.BAD_PARAM,
                          f"serialized plan is not a SerializedExecutionPlan FlatBuffer ({n} bytes): {e}") from None
    p = E.SerializedExecutionPlan.GetRootAs(data, 0)
    version = p.Version()
    if version not in SUPPORTED_VERSIONS:
        raise HipdnnError(Status.NOT_SUPPORTED,
                          f"serialized plan has envelope version {version}; this reader (hipdnn-iree) supports "
                          f"versions {', '.join(map(str, SUPPORTED_VERSIONS))}")
    if p.TensorUidsIsNone() or p.TensorUidsLength() == 0:
        raise HipdnnError(Status.BAD_PARAM, "serialized plan has no tensor_uids (missing or empty)")
    if p.TensorUidsLength() > MAX_TENSOR_UIDS:
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan lists {p.TensorUidsLength()} tensor_uids "
                                            f"(limit {MAX_TENSOR_UIDS})")
    if p.PluginPayloadIsNone() or p.PluginPayloadLength() == 0:
        raise HipdnnError(Status.BAD_PARAM, "serialized plan has no plugin_payload (missing or empty)")
    ws = p.WorkspaceSize()
    if ws < 0:
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan has negative workspace_size {ws}")
    fields = dict(version=version, engine_id=p.EngineId(), workspace_size=ws,
                  tensor_uids=tuple(int(u) for u in p.TensorUidsAsNumpy()),
                  plugin_payload=p.PluginPayloadAsNumpy().tobytes())
    if version >= 2:
        for name in _STRINGS:
            raw = getattr(p, "".join(x.capitalize() for x in name.split("_")))()
            raw = raw or b""
            if len(raw) > MAX_STRING_BYTES:
                raise HipdnnError(Status.BAD_PARAM, f"serialized plan field {name} is {len(raw)} bytes "
                                                    f"(limit {MAX_STRING_BYTES})")
            fields[name] = raw.decode("utf-8", "replace")
        digest = p.PayloadSha256AsNumpy().tobytes() if not p.PayloadSha256IsNone() else b""
        if len(digest) != 32:
            raise HipdnnError(Status.BAD_PARAM, f"version-2 plan has a payload_sha256 of {len(digest)} bytes "
                                                "(needs 32): the plan is damaged")
        actual = hashlib.sha256(fields["plugin_payload"]).digest()
        if not hmac.compare_digest(actual, digest):
            raise HipdnnError(Status.BAD_PARAM, f"plugin payload digest mismatch: payload_sha256 says {digest.hex()}, "
                                                f"the payload hashes to {actual.hex()}: the plan is damaged or altered")
        fields["payload_sha256"] = digest
        fields["signature"] = p.SignatureAsNumpy().tobytes() if not p.SignatureIsNone() else b""
    env = Envelope(**fields)
    if verify_key is not None:
        key = _key(verify_key, "verify_key")
        if not env.signature:
            raise HipdnnError(Status.BAD_PARAM, f"plan is unsigned (envelope version {version}) but a verify_key was "
                                                "given: refusing it")
        want = hmac.new(key, signed_contents(env), hashlib.sha256).digest()
        if not hmac.compare_digest(want, env.signature):
            raise HipdnnError(Status.BAD_PARAM, "plan signature does not verify with the given verify_key: the plan "
                                                "was signed with another key or altered")
    return env
