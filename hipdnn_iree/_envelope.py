"""The hipDNN envelope of a serialized compiled plan (``schemas/execution_plan.fbs``).

Envelope versions (separate from the IREE engine's FUSPLAN payload version):
  1 (RFC 0009): version, engine_id, workspace_size, tensor_uids, plugin_payload.
"""
from __future__ import annotations

from dataclasses import dataclass

import flatbuffers

from hipdnn_iree._fbs import execution_plan_generated as E
from hipdnn_iree._fbverify import SCALAR, VECTOR, FlatBufferError, check_table
from hipdnn_iree._status import HipdnnError, Status

ENVELOPE_VERSION = 1          # what this writer produces
SUPPORTED_VERSIONS = (1,)     # what this reader accepts
MAX_ENVELOPE_BYTES = 1 << 31  # 2 GiB: FlatBuffers cannot address more

_FIELDS = [
    ("version", SCALAR, 4),
    ("engine_id", SCALAR, 8),
    ("workspace_size", SCALAR, 8),
    ("tensor_uids", VECTOR, 8),
    ("plugin_payload", VECTOR, 1),
]


@dataclass(frozen=True)
class Envelope:
    version: int
    engine_id: int
    workspace_size: int
    tensor_uids: tuple[int, ...]
    plugin_payload: bytes


def encode(env: Envelope) -> bytes:
    b = flatbuffers.Builder(len(env.plugin_payload) + 256)
    payload = b.CreateByteVector(bytes(env.plugin_payload))
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
    b.Finish(E.SerializedExecutionPlanEnd(b))
    return bytes(b.Output())


def decode(data) -> Envelope:
    """Parses and validates envelope bytes; every problem is a HipdnnError."""
    if data is None:
        raise HipdnnError(Status.BAD_PARAM_NULL_POINTER, "serialized plan is None: pass the plan bytes")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan must be bytes-like, got {type(data).__name__}")
    data = bytes(data)
    if not data:
        raise HipdnnError(Status.BAD_PARAM, "serialized plan is empty (0 bytes)")
    if len(data) > MAX_ENVELOPE_BYTES:
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan is {len(data)} bytes, over the {MAX_ENVELOPE_BYTES}-byte limit")
    try:
        check_table(data, _FIELDS)
    except FlatBufferError as e:
        raise HipdnnError(Status.BAD_PARAM,
                          f"serialized plan is not a SerializedExecutionPlan FlatBuffer ({len(data)} bytes): {e}") from None
    p = E.SerializedExecutionPlan.GetRootAs(data, 0)
    version = p.Version()
    if version not in SUPPORTED_VERSIONS:
        raise HipdnnError(Status.NOT_SUPPORTED,
                          f"serialized plan has envelope version {version}; this reader supports "
                          f"{', '.join(map(str, SUPPORTED_VERSIONS))}")
    if p.TensorUidsIsNone() or p.TensorUidsLength() == 0:
        raise HipdnnError(Status.BAD_PARAM, "serialized plan has no tensor_uids (missing or empty)")
    if p.PluginPayloadIsNone() or p.PluginPayloadLength() == 0:
        raise HipdnnError(Status.BAD_PARAM, "serialized plan has no plugin_payload (missing or empty)")
    ws = p.WorkspaceSize()
    if ws < 0:
        raise HipdnnError(Status.BAD_PARAM, f"serialized plan has negative workspace_size {ws}")
    uids = tuple(int(u) for u in p.TensorUidsAsNumpy())
    payload = p.PluginPayloadAsNumpy().tobytes()
    return Envelope(version, p.EngineId(), ws, uids, payload)
