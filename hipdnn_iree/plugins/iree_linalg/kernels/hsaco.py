"""Reads an AMD GPU code object (HSACO, ELF) the way the HIP runtime sees it: no dependencies, no Triton.

:func:`read_hsaco` returns what a generated ROCm kernel is checked against before it is embedded
(``triton_rocm.py``) and what the tests read back from a compiled module: the code object's target
(``amdhsa.target`` of the ``NT_AMDGPU_METADATA`` note, a MessagePack map, and the ELF header's
``EF_AMDGPU_MACH``), each kernel's metadata (LDS = group segment, scratch = private segment, kernarg
layout, wavefront size, largest workgroup) and its 64-byte kernel descriptor (the ``<name>.kd``
symbol the runtime loads: group segment size at byte 0, private at 4, kernarg size at 8), plus any
symbol in ``SHN_AMDGPU_LDS`` (LDS the runtime must allocate at launch: dynamic LDS, which IREE's HIP
driver never provides).

Example:
    >>> _unpack(bytes.fromhex("82a161c2a162930102a3616263"))
    {'a': False, 'b': [1, 2, 'abc']}
"""
from __future__ import annotations

import struct

NT_AMDGPU_METADATA = 32
SHN_AMDGPU_LDS = 0xFF00
EM_AMDGPU = 224
# EF_AMDGPU_MACH (e_flags & 0xff) of the archs the generator targets (LLVM's AMDGPUUsage table)
MACH = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx950": 0x4F}


def _unpack(data: bytes):
    """One MessagePack value (the subset the AMDGPU metadata note uses)."""
    val, end = _mp(data, 0)
    if end != len(data):
        raise ValueError(f"trailing bytes after the MessagePack value ({len(data) - end})")
    return val


def _mp(d: bytes, i: int):   # noqa: C901  (one branch per MessagePack type)
    b = d[i]
    i += 1
    if b <= 0x7F:
        return b, i
    if b >= 0xE0:
        return b - 0x100, i
    if 0x80 <= b <= 0x8F:
        return _map(d, i, b & 0x0F)
    if 0x90 <= b <= 0x9F:
        return _arr(d, i, b & 0x0F)
    if 0xA0 <= b <= 0xBF:
        n = b & 0x1F
        return d[i:i + n].decode(), i + n
    if b == 0xC0:
        return None, i
    if b in (0xC2, 0xC3):
        return b == 0xC3, i
    fixed = {0xCC: "B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: "b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
             0xCA: ">f", 0xCB: ">d"}
    if b in fixed:
        (v,) = struct.unpack_from(fixed[b], d, i)
        return v, i + struct.calcsize(fixed[b])
    sized = {0xD9: ("B", "str"), 0xDA: (">H", "str"), 0xDB: (">I", "str"), 0xC4: ("B", "bin"),
             0xC5: (">H", "bin"), 0xC6: (">I", "bin"), 0xDC: (">H", "arr"), 0xDD: (">I", "arr"),
             0xDE: (">H", "map"), 0xDF: (">I", "map")}
    if b not in sized:
        raise ValueError(f"unsupported MessagePack type byte 0x{b:02x}")
    fmt, kind = sized[b]
    (n,) = struct.unpack_from(fmt, d, i)
    i += struct.calcsize(fmt)
    if kind == "str":
        return d[i:i + n].decode(), i + n
    if kind == "bin":
        return bytes(d[i:i + n]), i + n
    return (_arr if kind == "arr" else _map)(d, i, n)


def _arr(d: bytes, i: int, n: int):
    out = []
    for _ in range(n):
        v, i = _mp(d, i)
        out.append(v)
    return out, i


def _map(d: bytes, i: int, n: int):
    out = {}
    for _ in range(n):
        k, i = _mp(d, i)
        v, i = _mp(d, i)
        out[k] = v
    return out, i


def read_hsaco(image: bytes) -> dict:
    """``{"target", "mach", "metadata", "kernels": {name: {...the note's fields without the dot,
    "descriptor": {"group_segment_fixed_size", "private_segment_fixed_size", "kernarg_size"}}},
    "lds_symbols": [...]}`` of a 64-bit little-endian AMDGPU ELF code object.

    Raises:
        ValueError: not such a code object, or no AMDGPU metadata note.
    """
    try:
        return _read(bytes(image))
    except (struct.error, IndexError, KeyError, UnicodeDecodeError, TypeError, AttributeError, OverflowError,
            MemoryError, RecursionError) as e:
        raise ValueError(f"malformed AMDGPU code object: {type(e).__name__}: {e}") from None


def _read(d: bytes) -> dict:
    if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF image")
    e_machine, = struct.unpack_from("<H", d, 18)
    if e_machine != EM_AMDGPU:
        raise ValueError(f"ELF machine {e_machine}, not AMDGPU ({EM_AMDGPU})")
    e_flags, = struct.unpack_from("<I", d, 48)
    e_shoff, = struct.unpack_from("<Q", d, 40)
    e_shentsize, e_shnum = struct.unpack_from("<HH", d, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", d, e_shoff + j * e_shentsize) for j in range(e_shnum)]
    # (name, type, flags, addr, offset, size, link, info, align, entsize)
    meta = None
    symbols = []
    for s in sections:
        typ, off, size = s[1], s[4], s[5]
        if typ == 7:   # SHT_NOTE
            at = off
            while at + 12 <= off + size:
                namesz, descsz, ntype = struct.unpack_from("<III", d, at)
                name = d[at + 12:at + 12 + namesz].rstrip(b"\0")
                desc_at = at + 12 + ((namesz + 3) & ~3)
                if ntype == NT_AMDGPU_METADATA and name == b"AMDGPU":
                    meta = _unpack(d[desc_at:desc_at + descsz])
                at = desc_at + ((descsz + 3) & ~3)
        elif typ in (2, 11):   # SHT_SYMTAB, SHT_DYNSYM
            strtab = sections[s[6]]
            for j in range(size // 24):
                st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", d, off + j * 24)
                end = d.index(b"\0", strtab[4] + st_name)
                symbols.append((d[strtab[4] + st_name:end].decode(), st_shndx, st_value, st_size))
    if meta is None:
        raise ValueError("no NT_AMDGPU_METADATA note")

    def file_offset(vaddr: int) -> int:
        for s in sections:
            if s[1] != 8 and s[3] <= vaddr < s[3] + s[5]:   # not SHT_NOBITS
                return s[4] + vaddr - s[3]
        raise ValueError(f"address 0x{vaddr:x} is in no section")

    kernels = {}
    for k in meta.get("amdhsa.kernels", []):
        info = {key.lstrip("."): v for key, v in k.items()}
        info["args"] = [{key.lstrip("."): v for key, v in a.items()} for a in info.get("args", [])]
        kd = [x for x in symbols if x[0] == info.get("symbol") and x[1] not in (0, SHN_AMDGPU_LDS)]
        if kd:
            at = file_offset(kd[0][2])
            g, p, ka = struct.unpack_from("<III", d, at)
            info["descriptor"] = {"group_segment_fixed_size": g, "private_segment_fixed_size": p, "kernarg_size": ka}
        kernels[info["name"]] = info
    return {"target": meta.get("amdhsa.target", ""), "mach": e_flags & 0xFF, "metadata": meta, "kernels": kernels,
            "lds_symbols": sorted({x[0] for x in symbols if x[1] == SHN_AMDGPU_LDS})}
