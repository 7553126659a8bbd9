"""Bounds checks for FlatBuffer tables read with the Python runtime (hipdnn_iree.flatbuffers_sdk.verify re-exports them).

The Python ``flatbuffers`` package has no verifier: reading a truncated or
hostile buffer raises ``IndexError``/``struct.error`` from deep inside, or
returns garbage. :func:`check_table` walks a table's vtable and fields and
proves every offset the generated accessors will follow stays in bounds.
"""
from __future__ import annotations

import struct

# field kinds: size in bytes of a scalar, or the element size of a vector
SCALAR, VECTOR = "scalar", "vector"


class FlatBufferError(ValueError):
    pass


def _u32(buf: bytes, pos: int) -> int:
    return struct.unpack_from("<I", buf, pos)[0]


def _u16(buf: bytes, pos: int) -> int:
    return struct.unpack_from("<H", buf, pos)[0]


def check_table(buf: bytes, fields: list[tuple[str, str, int]], max_vector_len: int | None = None,
                table_pos: int | None = None) -> int:
    """Checks the root table of ``buf`` (or the table at ``table_pos``); returns its position.

    ``fields`` lists ``(name, kind, size)`` in slot order: ``kind`` is SCALAR
    (``size`` bytes inline) or VECTOR (``size`` = element size).
    """
    n = len(buf)
    if n < 12:
        raise FlatBufferError(f"{n} bytes is too short for a FlatBuffer table")
    root = _u32(buf, 0) if table_pos is None else table_pos
    if root % 4 or root + 4 > n:
        raise FlatBufferError(f"table offset {root} is outside the {n}-byte buffer")
    soff = struct.unpack_from("<i", buf, root)[0]
    vt = root - soff
    if vt < 0 or vt % 2 or vt + 4 > n:
        raise FlatBufferError(f"vtable offset {vt} is outside the {n}-byte buffer")
    vt_size, tbl_size = _u16(buf, vt), _u16(buf, vt + 2)
    if vt_size < 4 or vt_size % 2 or vt + vt_size > n:
        raise FlatBufferError(f"vtable size {vt_size} is invalid")
    if tbl_size < 4 or root + tbl_size > n:
        raise FlatBufferError(f"table size {tbl_size} runs past the {n}-byte buffer")
    for i, (name, kind, size) in enumerate(fields):
        slot = 4 + 2 * i
        if slot + 2 > vt_size:
            continue
        voff = _u16(buf, vt + slot)
        if voff == 0:
            continue
        inline = 4 if kind == VECTOR else size
        if voff < 4 or voff + inline > tbl_size:
            raise FlatBufferError(f"field '{name}' lies outside its table")
        if kind == VECTOR:
            pos = root + voff
            vec = pos + _u32(buf, pos)
            if vec % 4 or vec + 4 > n:
                raise FlatBufferError(f"vector '{name}' starts outside the buffer")
            count = _u32(buf, vec)
            if max_vector_len is not None and count > max_vector_len:
                raise FlatBufferError(f"vector '{name}' claims {count} elements (limit {max_vector_len})")
            if vec + 4 + count * size > n:
                raise FlatBufferError(f"vector '{name}' ({count} x {size} bytes) runs past the {n}-byte buffer")
    return root


def slot_vector(buf, table_pos: int, slot: int) -> tuple[int, int] | None:
    """(start, count) of the vector in field ``slot`` of a table :func:`check_table` accepted."""
    vt = table_pos - struct.unpack_from("<i", buf, table_pos)[0]
    if 4 + 2 * slot + 2 > _u16(buf, vt):
        return None
    voff = _u16(buf, vt + 4 + 2 * slot)
    if voff == 0:
        return None
    pos = table_pos + voff
    vec = pos + _u32(buf, pos)
    return vec + 4, _u32(buf, vec)


def table_vector(buf, table_pos: int, slot: int) -> list[int]:
    """Positions of the tables in a vector of tables (bounds-checked offsets only)."""
    found = slot_vector(buf, table_pos, slot)
    if found is None:
        return []
    start, count = found
    out = []
    for i in range(count):
        el = start + 4 * i
        if el + 4 > len(buf):
            raise FlatBufferError("vector of tables runs past the buffer")
        out.append(el + _u32(buf, el))
    return out
