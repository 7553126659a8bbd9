"""Physical layout of a tensor described by logical dims and element strides.

Logical dims are channels-first; strides (in elements) say where each element
lives. A dense buffer's axes, ordered by decreasing stride, form a row-major
array (``phys_shape``). Axes of size > 1 with stride 0 are broadcast axes
(inputs only): they take no memory.

A strided (non-dense) tensor -- a view into a larger buffer, such as Q of a
packed ``[B, S, 3, H, D]`` QKV buffer or a slot of a bigger output -- is bound
as the 1-D run of ``span`` elements from its first to its last element
(``phys_shape == (span,)``). When its axes, ordered by decreasing stride, do
not alias (each stride at least the extent of the axes inside it) and each
stride is a multiple of the next smaller one, the tensor is a strided slice of
the dense ``host`` shape (memory order), which is how the lowering reads and
writes it.

Other strided layouts -- strides that overlap (several logical elements at one
address, e.g. a sliding window or cuDNN FE's ``as_strided(B, (B, K, N),
(N*K, 1, N))``) or that are not multiples of each other -- are legal for a
tensor that is only read (an input): such a layout has ``gather`` set, is
bound as the same 1-D run of ``span`` elements, and the lowering reads it with
a gather at the computed linear index (``lowering/strided.py``). A tensor that
is written (``physical_layout(..., output=True)``) may not have one: its
elements would alias.

Example:
    >>> physical_layout((1, 128, 256), (32768, 1, 128)).phys_shape
    (1, 256, 128)
"""
from __future__ import annotations

from dataclasses import dataclass

from graph_ir.desc import GraphError


@dataclass(frozen=True)
class Layout:
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    order: tuple[int, ...]        # logical axes in memory order (outermost first), no broadcast axes
    bcast_axes: tuple[int, ...]   # logical axes with stride 0 and size > 1
    # strided (non-dense) layouts only: the dense shape, in memory order plus a trailing axis of the
    # innermost stride, of which the tensor's kept axes are the leading slice; None when dense
    host: tuple[int, ...] | None = None
    span: int = 0                 # strided layouts: elements from the first to the last one
    # inputs only: strides that overlap or are not multiples of each other (no ``host`` shape);
    # read element by element from the run at sum(index * stride)
    gather: bool = False

    @property
    def is_dense(self) -> bool:
        return self.host is None and not self.gather

    @property
    def phys_shape(self) -> tuple[int, ...]:
        if not self.is_dense:
            return (self.span,)
        return tuple(self.dims[a] for a in self.order)

    @property
    def slice_shape(self) -> tuple[int, ...]:
        """The kept axes in memory order (what a dense layout's ``phys_shape`` is)."""
        return tuple(self.dims[a] for a in self.order)

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.phys_shape:
            n *= d
        return n


def packed_strides(dims) -> tuple[int, ...]:
    """Row-major packed strides for ``dims``."""
    strides, acc = [], 1
    for d in reversed(dims):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


def physical_layout(dims, strides, what: str = "tensor", output: bool = False) -> Layout:
    """Derives the memory order of a tensor: dense, strided (a slice of a dense ``host``) or, for
    a tensor that is only read, a ``gather`` layout (strides that alias or are not multiples).
    ``output``: the tensor is written; an aliasing or gather layout raises GraphError."""
    dims, strides = tuple(int(d) for d in dims), tuple(int(s) for s in strides)
    if len(dims) != len(strides):
        raise GraphError(f"{what}: {len(dims)} dims but {len(strides)} strides")
    if any(d <= 0 for d in dims):
        raise GraphError(f"{what}: dims {list(dims)} must all be positive")
    if any(s < 0 for s in strides):
        raise GraphError(f"{what}: strides {list(strides)} must be non-negative")
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
    dense = True
    for a in reversed(order):
        if dims[a] > 1 and strides[a] != expected:
            dense = False
            break
        expected *= dims[a]
    if dense:
        return Layout(dims, strides, order, bcast)
    return _strided(dims, strides, order, bcast, [a for a in order if dims[a] > 1], what, output)


def _gather(dims, strides, order, bcast) -> Layout:
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    return Layout(tuple(dims), tuple(strides), order, bcast, span=span, gather=True)


def _strided(dims, strides, order, bcast, nonunit, what, output=False) -> Layout:
    """A non-dense layout: derives its dense host shape, or (inputs) a gather layout when it has
    none; an output whose elements alias, or that has no host shape, raises GraphError."""
    # innermost first: each stride must cover the axes inside it, and be a multiple of the next one
    inner_extent, host_rev = 1, []
    for i in range(len(nonunit) - 1, -1, -1):
        a = nonunit[i]
        s = strides[a]
        if s < inner_extent:
            if not output:
                return _gather(dims, strides, order, bcast)
            raise GraphError(
                f"output {what}: strides {list(strides)} for dims {list(dims)} overlap (axis {a} has stride {s}, "
                f"but the axes inside it span {inner_extent} elements): an output's elements may not alias "
                "(several at one address) or interleave this way; only inputs, which are only read, may")
        if i == len(nonunit) - 1:
            host_rev.append(s)                       # the trailing axis: the innermost stride
        else:
            inner = strides[nonunit[i + 1]]
            if s % inner:
                if not output:
                    return _gather(dims, strides, order, bcast)
                raise GraphError(
                    f"output {what}: strides {list(strides)} for dims {list(dims)}: axis {a}'s stride {s} is not a "
                    f"multiple of the next smaller stride {inner}; such views are not supported (make each "
                    "stride a multiple of the one inside it, as views into a larger dense buffer are; inputs may "
                    "have such strides)")
            host_rev.append(s // inner)
        inner_extent = (dims[a] - 1) * s + inner_extent
    span = inner_extent
    outer = nonunit[0]
    host_rev.append(-(-span // strides[outer]))   # rows of the outermost stride needed to cover the span
    # host: [rows, ratio_1, ..., ratio_k, innermost stride]; the tensor is host[:d0, :d1, ..., :dk, 0]
    host = tuple(reversed(host_rev))
    return Layout(tuple(dims), tuple(strides), order, bcast, host=host, span=span)

