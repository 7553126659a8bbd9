"""Engine IDs: FNV-1a 64 of the UPPER_CASE engine name (hipDNN RFC 0003), as int64."""
from __future__ import annotations

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


def engine_id_from_name(name: str) -> int:
    """Stable across processes and machines.

    Example:
        >>> engine_id_from_name("a") == engine_id_from_name("A")
        True
    """
    if not isinstance(name, str):
        from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
        raise HipdnnError(Status.BAD_PARAM, f"engine name must be a str (e.g. 'IREE_LINALG'), got {name!r}")
    h = _FNV_OFFSET
    for byte in name.upper().encode("utf-8"):
        h ^= byte
        h = (h * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h - (1 << 64) if h >= (1 << 63) else h


# hipDNN's fusilli-provider: its plans (FUSPLAN kind 1) name this engine. hipDNN hashes the name's
# bytes as written (FNV-1a 64, no case folding); the name is upper case, so the value is the same.
FUSILLI_ENGINE_NAME = "FUSILLI_ENGINE"
FUSILLI_ENGINE_ID = engine_id_from_name(FUSILLI_ENGINE_NAME)
