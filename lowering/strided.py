"""Reading and writing strided (non-dense) tensors: views into a larger buffer.

A strided tensor is bound as the 1-D run of its ``span`` elements (``layout.phys_shape``). Its
elements are a leading slice of the dense ``layout.host`` shape (see ``graph_ir/layout.py``), so:

- read: pad the run to the host's size (the tail past the last element is never read), expand it
  to the host shape, take the slice, and drop the trailing unit axis;
- write: the same slice inserted into the caller's run, so every element of the run that is not
  the tensor's keeps its value (an output slot in a bigger buffer: the rest stays as it was).

A ``gather`` layout (an input whose strides overlap, or are not multiples of each other: it has no
host shape) is read by a ``linalg.generic`` over ``lay.slice_shape`` whose body computes the linear
index ``sum(i_a * stride_a)`` and reads that element of the run with ``tensor.extract``. Such layouts are
never written (``physical_layout(..., output=True)`` refuses them).

Example:
    >>> from graph_ir.layout import physical_layout
    >>> lay = physical_layout((2, 3, 5, 4), (180, 4, 36, 1))    # Q of a packed [2, 5, 3, 3, 4] QKV
    >>> lay.host, lay.span
    ((2, 5, 9, 4, 1), 336)
"""
from __future__ import annotations

from lowering._emit import Emitter, Value, tensor_type
from graph_ir.desc import GraphError
from graph_ir.layout import Layout


def _ints(xs) -> str:
    return ", ".join(str(int(x)) for x in xs)


def _host(em: Emitter, run: Value, lay: Layout) -> Value:
    """The run of ``span`` elements padded and expanded to the host shape."""
    size = 1
    for d in lay.host:
        size *= d
    v = run
    if size > lay.span:
        v = em.zero_pad(run, [0], [size - lay.span], (size,))
    reassoc = "[[" + _ints(range(len(lay.host))) + "]]"
    name = em.op(f"tensor.expand_shape {v.ssa} {reassoc} output_shape [{_ints(lay.host)}] "
                 f": {v.type} into {tensor_type(lay.host, v.elem)}", "host")
    return Value(name, lay.host, v.elem)


def _slice_sizes(lay: Layout) -> tuple[int, ...]:
    return tuple(lay.dims[a] for a in lay.order if lay.dims[a] > 1) + (1,)


def _gather(em: Emitter, run: Value, lay: Layout) -> Value:
    """``lay.slice_shape`` read element by element from the run at ``sum(index * stride)``."""
    shape = lay.slice_shape
    strides = [lay.strides[a] for a in lay.order]

    def body(args):
        terms = []
        for j, (d, s) in enumerate(zip(shape, strides)):
            if d == 1 or s == 0:
                continue
            i = em.op(f"linalg.index {j} : index", "i")
            if s != 1:
                c = em.op(f"arith.constant {int(s)} : index", "c")
                i = em.op(f"arith.muli {i}, {c} : index", "m")
            terms.append(i)
        if not terms:
            terms.append(em.op("arith.constant 0 : index", "c"))
        lin = terms[0]
        for t in terms[1:]:
            lin = em.op(f"arith.addi {lin}, {t} : index", "l")
        return em.op(f"tensor.extract {run.ssa}[{lin}] : {run.type}", "x")

    ident = ", ".join(f"d{i}" for i in range(len(shape)))
    return em.generic([], shape, run.elem, ["parallel"] * len(shape), f"affine_map<({ident}) -> ({ident})>", body)


def read(em: Emitter, run: Value, lay: Layout) -> Value:
    """The tensor's kept axes in memory order (``lay.slice_shape``) from its 1-D run."""
    if lay.gather:
        return _gather(em, run, lay)
    host = _host(em, run, lay)
    sizes = _slice_sizes(lay)
    zeros, ones = _ints([0] * len(sizes)), _ints([1] * len(sizes))
    name = em.op(f"tensor.extract_slice {host.ssa}[{zeros}] [{_ints(sizes)}] [{ones}] "
                 f": {host.type} to {tensor_type(sizes, host.elem)}", "view")
    v = Value(name, sizes, host.elem)
    return em.reshape(em.reshape(v, sizes[:-1]), lay.slice_shape)


def write(em: Emitter, run: Value, value: Value, lay: Layout) -> Value:
    """The caller's 1-D run with ``value`` (``lay.slice_shape``) written into the tensor's elements."""
    if lay.gather:
        raise GraphError(f"a tensor with dims {list(lay.dims)} and strides {list(lay.strides)} is written, but "
                            "its elements alias (or its strides are not multiples): outputs may not alias")
    sizes = _slice_sizes(lay)
    v = em.reshape(em.reshape(value, sizes[:-1]), sizes)
    host = _host(em, run, lay)
    zeros, ones = _ints([0] * len(sizes)), _ints([1] * len(sizes))
    name = em.op(f"tensor.insert_slice {v.ssa} into {host.ssa}[{zeros}] [{_ints(sizes)}] [{ones}] "
                 f": {v.type} into {host.type}", "put")
    size = 1
    for d in lay.host:
        size *= d
    reassoc = "[[" + _ints(range(len(lay.host))) + "]]"
    flat = em.op(f"tensor.collapse_shape {name} {reassoc} : {host.type} into {tensor_type((size,), v.elem)}", "flat")
    if size == lay.span:
        return Value(flat, (size,), v.elem)
    out = em.op(f"tensor.extract_slice {flat}[0] [{lay.span}] [1] : {tensor_type((size,), v.elem)} "
                f"to {tensor_type((lay.span,), v.elem)}", "run")
    return Value(out, (lay.span,), v.elem)
