"""FUSPLAN: the IREE engine's plugin payload header (FORMATS.md, layer 2).

Payload format versions (separate from the envelope version):
  1.0 (2026-11-29): 20-byte header; payload_kind 2 = IREE VM FlatBuffer module.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"FUSPLAN\0"
FORMAT_MAJOR = 1
FORMAT_MINOR = 0
HEADER_SIZE = 20
KIND_GRAPH_FLATBUFFER = 1   # reserved (fusilli's original sample); not read here
KIND_IREE_VMFB = 2
_HEADER = struct.Struct("<8sHHII")


class FusplanError(ValueError):
    """The payload is not one this reader accepts; the backend reports PLUGIN_ERROR."""


@dataclass(frozen=True)
class Fusplan:
    format_major: int
    format_minor: int
    payload_kind: int
    body: bytes


def pack(body: bytes, kind: int = KIND_IREE_VMFB) -> bytes:
    return _HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, kind, HEADER_SIZE) + bytes(body)


def unpack(payload: bytes) -> Fusplan:
    payload = bytes(payload)
    if len(payload) < HEADER_SIZE:
        raise FusplanError(f"FUSPLAN payload is {len(payload)} bytes, shorter than the {HEADER_SIZE}-byte header")
    magic, major, minor, kind, header_size = _HEADER.unpack_from(payload, 0)
    if magic != MAGIC:
        raise FusplanError(f"FUSPLAN payload has magic {magic!r}, expected {MAGIC!r}")
    if major != FORMAT_MAJOR:
        raise FusplanError(f"FUSPLAN format major version {major} is not supported (this reader: {FORMAT_MAJOR})")
    if kind != KIND_IREE_VMFB:
        what = "a graph FlatBuffer (kind 1, reserved: needs recompiling)" if kind == KIND_GRAPH_FLATBUFFER else f"kind {kind}"
        raise FusplanError(f"FUSPLAN payload_kind {kind} is not supported: {what}; this reader loads "
                           f"kind {KIND_IREE_VMFB} (IREE .vmfb)")
    if header_size < HEADER_SIZE or header_size >= len(payload):
        raise FusplanError(f"FUSPLAN header_size {header_size} is invalid for a {len(payload)}-byte payload "
                           f"(needs {HEADER_SIZE} <= header_size < payload size)")
    return Fusplan(major, minor, kind, payload[header_size:])
