import subprocess
import sys

import hipdnn_iree as hd


def _fnv1a64(data: bytes) -> int:
    # Independent spelling of FNV-1a 64 (offset basis and prime from the FNV spec), unsigned.
    h = 14695981039346656037
    for byte in data:
        h = ((h ^ byte) * 1099511628211) % 2**64
    return h


def _signed(h: int) -> int:
    return h if h < 2**63 else h - 2**64


def test_reference_matches_published_vectors():
    assert _fnv1a64(b"") == 0xCBF29CE484222325
    assert _fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert _fnv1a64(b"foobar") == 0x85944171F73967E8


def test_engine_id_is_fnv1a64_of_upper_case_name():
    for name in ("IREE_LINALG", "NUMPY_REFERENCE", "a", "foobar"):
        assert hd.engine_id_from_name(name) == _signed(_fnv1a64(name.upper().encode()))
    assert hd.engine_id_from_name("iree_linalg") == hd.engine_id_from_name("IREE_LINALG")


def test_stable_across_processes():
    out = subprocess.run([sys.executable, "-c", "import hipdnn_iree as hd; print(hd.engine_id_from_name('IREE_LINALG'))"],
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == hd.engine_id_from_name("IREE_LINALG")
    assert -2**63 <= int(out) < 2**63


def test_fusilli_engine_id_is_fnv1a_of_hipdnns_name():
    """FNV-1a 64 over the bytes of "FUSILLI_ENGINE" (hipDNN's engineNameToId), recomputed here."""
    from hipdnn_iree.plugin_sdk.engine_ids import FUSILLI_ENGINE_ID, FUSILLI_ENGINE_NAME
    h = 0xCBF29CE484222325
    for ch in b"FUSILLI_ENGINE":
        h = ((h ^ ch) * 0x100000001B3) % (1 << 64)
    assert FUSILLI_ENGINE_NAME == "FUSILLI_ENGINE"
    assert FUSILLI_ENGINE_ID == (h - (1 << 64) if h >= 1 << 63 else h)
