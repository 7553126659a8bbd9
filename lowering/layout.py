"""Physical layout of a tensor described by logical dims and element strides.

Logical dims are channels-first; strides (in elements) say where each element
lives. A buffer is dense: its axes, ordered by decreasing stride, form a
row-major array (``phys_shape``). Axes of size > 1 with stride 0 are
broadcast axes (inputs only): they take no memory.

Example:
    >>> physical_layout((1, 128, 256), (32768, 1, 128)).phys_shape
    (1, 256, 128)
"""
from __future__ import annotations

from dataclasses import dataclass

from lowering.graph_ir import LoweringError


@dataclass(frozen=True)
class Layout:
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    order: tuple[int, ...]        # logical axes in memory order (outermost first), no broadcast axes
    bcast_axes: tuple[int, ...]   # logical axes with stride 0 and size > 1

    @property
    def phys_shape(self) -> tuple[int, ...]:
        return tuple(self.dims[a] for a in self.order)

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.phys_shape:
            n *= d
        return n

    @property
    def is_identity(self) -> bool:
        return not self.bcast_axes and self.order == tuple(range(len(self.dims)))


def packed_strides(dims) -> tuple[int, ...]:
    """Row-major packed strides for ``dims``."""
    strides, acc = [], 1
    for d in reversed(dims):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


def physical_layout(dims, strides, what: str = "tensor") -> Layout:
    """Derives the dense memory order of a tensor; raises LoweringError if not dense."""
    dims, strides = tuple(int(d) for d in dims), tuple(int(s) for s in strides)
    if len(dims) != len(strides):
        raise LoweringError(f"{what}: {len(dims)} dims but {len(strides)} strides")
    if any(d <= 0 for d in dims):
        raise LoweringError(f"{what}: dims {list(dims)} must all be positive")
    if any(s < 0 for s in strides):
        raise LoweringError(f"{what}: strides {list(strides)} must be non-negative")
    bcast = tuple(a for a in range(len(dims)) if strides[a] == 0 and dims[a] > 1)
    kept = [a for a in range(len(dims)) if a not in bcast]
    # Non-unit axes sort by stride; a size-1 axis (whose stride is arbitrary) follows the
    # non-unit axis before it in logical order, leading size-1 axes go first.
    # NOTE: the position of a size-1 axis never changes the memory image.
    nonunit = sorted((a for a in kept if dims[a] > 1), key=lambda a: (-strides[a], a))
    order_list = [a for a in kept if dims[a] == 1 and not any(dims[b] > 1 for b in kept if b < a)]
    for a in nonunit:
        order_list.append(a)
        b = a + 1
        while b < len(dims) and dims[b] == 1:
            if b in kept:
                order_list.append(b)
            b += 1
    order = tuple(order_list)
    expected = 1
    for a in reversed(order):
        if dims[a] > 1 and strides[a] != expected:
            raise LoweringError(
                f"{what}: strides {list(strides)} for dims {list(dims)} are not a dense "
                f"permutation (axis {a} has stride {strides[a]}, a dense layout needs {expected}); "
                "padded or overlapping layouts are not supported")
        expected *= dims[a]
    return Layout(dims, strides, order, bcast)

