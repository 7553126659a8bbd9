"""cuDNN's F8_128x4 scale layout (``tensor_reordering.F8_128x4``), as byte positions.

A block-scale factor matrix ``[rows, cols]`` (rows: the non-block axis, e.g. M of A's scales;
cols: the blocks along the contraction, innermost in memory) is padded to multiples of 128 rows
and 4 columns and cut into 128 x 4 tiles, stored one after the other in row-major tile order,
512 bytes each. Inside a tile, element ``(r, c)`` with ``r = 32 * i + j`` lies at byte
``16 * j + 4 * i + c``: the four 32-row quarters of a tile interleave in 4-byte groups.
Leading (batch) axes repeat the padded matrix.

hipDNN's graph schema has no field for a tensor reordering, so graphs keep their scales in the
plain layout and this module moves bytes between the two (hd.to_f8_128x4 / hd.from_f8_128x4;
the cuDNN facade applies it to tensors declared with ``reordering_type=F8_128x4``).
"""
from __future__ import annotations

import functools

import numpy as np

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status


def f8_128x4_bytes(rows: int, cols: int) -> int:
    """Bytes of one ``[rows, cols]`` matrix in the F8_128x4 layout (padding included)."""
    return -(-rows // 128) * 128 * (-(-cols // 4) * 4)


@functools.lru_cache(maxsize=64)
def f8_128x4_positions(rows: int, cols: int) -> np.ndarray:
    """``[rows, cols]`` int64: where each element of the plain matrix lies in the blocked bytes.

    Example:
        >>> p = f8_128x4_positions(128, 4)
        >>> int(p[0, 1]), int(p[1, 0]), int(p[32, 0]), int(p[127, 3])
        (1, 16, 4, 511)
    """
    r = np.arange(rows, dtype=np.int64)[:, None]
    c = np.arange(cols, dtype=np.int64)[None, :]
    tiles_per_row = -(-cols // 4)
    tile = (r // 128) * tiles_per_row + c // 4
    inner = r % 128
    pos = tile * 512 + (inner % 32) * 16 + (inner // 32) * 4 + c % 4
    pos.setflags(write=False)
    return pos


@functools.lru_cache(maxsize=64)
def f8_128x4_index(batch: int, rows: int, cols: int) -> np.ndarray:
    """Flat int64 ``[batch * rows * cols]``: the byte of each element of ``batch`` plain row-major
    ``[rows, cols]`` matrices in their F8_128x4 bytes (one padded matrix after the other)."""
    one = f8_128x4_bytes(rows, cols)
    idx = (np.arange(batch, dtype=np.int64)[:, None, None] * one + f8_128x4_positions(rows, cols)[None]).reshape(-1)
    idx.setflags(write=False)
    return idx


def _matrix_shape(a: np.ndarray, what: str):
    if a.ndim < 2 or a.dtype.itemsize != 1:
        raise HipdnnError(Status.BAD_PARAM, f"{what}: expected a [..., rows, cols] array of a 1-byte type (FP8 "
                                            f"scales), got {a.dtype} of shape {list(a.shape)}")
    return a.shape[:-2], a.shape[-2], a.shape[-1]


def to_f8_128x4(scales) -> np.ndarray:
    """Plain ``[..., rows, cols]`` scale factors (cols innermost) -> the F8_128x4 bytes, flat, one
    padded matrix per leading index (padding zero), in the input's dtype.

    Example:
        >>> import numpy as np, hipdnn_iree as hd
        >>> s = np.arange(8, dtype=np.uint8).reshape(2, 4)
        >>> b = hd.to_f8_128x4(s)
        >>> b.shape, b[:4].tolist(), b[16:20].tolist()
        ((512,), [0, 1, 2, 3], [4, 5, 6, 7])
    """
    a = np.ascontiguousarray(scales)
    lead, rows, cols = _matrix_shape(a, "to_f8_128x4")
    batch = int(np.prod(lead, dtype=np.int64))
    out = np.zeros(batch * f8_128x4_bytes(rows, cols), np.uint8)
    out[f8_128x4_index(batch, rows, cols)] = a.view(np.uint8).reshape(-1)
    return out.view(a.dtype)


def from_f8_128x4(blocked, rows: int, cols: int, lead: tuple = ()) -> np.ndarray:
    """The inverse of :func:`to_f8_128x4`: F8_128x4 bytes -> plain ``[*lead, rows, cols]``."""
    b = np.ascontiguousarray(blocked).reshape(-1)
    if b.dtype.itemsize != 1:
        raise HipdnnError(Status.BAD_PARAM, f"from_f8_128x4: expected a 1-byte type, got {b.dtype}")
    batch = int(np.prod(lead, dtype=np.int64))
    n = f8_128x4_bytes(rows, cols)
    if b.size < batch * n:
        raise HipdnnError(Status.BAD_PARAM, f"from_f8_128x4: {b.size} bytes, but {batch} matrix(es) of [{rows}, "
                                            f"{cols}] take {batch * n} in the F8_128x4 layout")
    return b.view(np.uint8)[f8_128x4_index(batch, rows, cols)].reshape(*lead, rows, cols).view(b.dtype)
