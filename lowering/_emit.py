"""Small MLIR text builder for linalg-on-tensors.

Keeps SSA names unique, formats tensor types and wraps the two shapes every
lowering needs: an elementwise ``linalg.generic`` with broadcasting, and
layout changes (transpose/broadcast) between physical and logical order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from graph_ir.desc import GraphError
from graph_ir.dtypes import ELEMENT_TYPES, MINIFLOAT_FORMATS

FLOAT_TYPES = ("f16", "bf16", "f32", "f64")
_FLOAT_WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
_INT_WIDTH = {"i1": 1, "i8": 8, "i32": 32, "i64": 64}


def element_type(data_type: int, what: str = "tensor") -> str:
    """The element type lowerings compute a tensor's values in: its MLIR type, ``f32`` for the
    8- and 4-bit float types (stored as ``i8`` codes: :func:`storage_type`, lowering/_minifloat.py)."""
    if data_type in MINIFLOAT_FORMATS:
        return "f32"
    return storage_type(data_type, what)


def storage_type(data_type: int, what: str = "tensor") -> str:
    """The element type of a tensor's buffer at the module boundary."""
    try:
        return ELEMENT_TYPES[data_type][0]
    except KeyError:
        raise GraphError(f"{what}: data type {data_type} has no MLIR element type", "unsupported") from None


class Sym:
    """A dim whose size is chosen at execute time (graph_ir/dynamic.py): prints as ``?`` in types and
    as its ``index`` SSA value (``ssa``) in operand lists; equal to another Sym of the same ``name``."""

    __slots__ = ("name", "ssa")

    def __init__(self, name: str, ssa: str):
        self.name, self.ssa = name, ssa

    def __eq__(self, other):
        return isinstance(other, Sym) and other.name == self.name

    def __hash__(self):
        return hash(("Sym", self.name))

    def __str__(self):
        return self.ssa

    def __repr__(self):
        return f"Sym({self.name!r})"


def is_static(shape) -> bool:
    return not any(isinstance(d, Sym) for d in shape)


def dyn_operands(shape) -> str:
    """The SSA sizes of ``shape``'s dynamic dims, comma separated (what ``tensor.empty`` takes)."""
    return ", ".join(d.ssa for d in shape if isinstance(d, Sym))


def tensor_type(shape: Sequence[int], elem: str) -> str:
    return f"tensor<{''.join('?x' if isinstance(d, Sym) else f'{d}x' for d in shape)}{elem}>"


def float_literal(value: float, elem: str) -> str:
    if math.isnan(value):
        return {"f16": "0x7E00", "bf16": "0x7FC0", "f32": "0x7FC00000", "f64": "0x7FF8000000000000"}[elem]
    if math.isinf(value):
        pos = value > 0
        return {"f16": ("0x7C00", "0xFC00"), "bf16": ("0x7F80", "0xFF80"),
                "f32": ("0x7F800000", "0xFF800000"),
                "f64": ("0x7FF0000000000000", "0xFFF0000000000000")}[elem][0 if pos else 1]
    text = repr(float(value))  # repr gives an exact round-trip literal ...
    mantissa, e, exponent = text.partition("e")
    # NOTE: ... but MLIR needs a '.' before an exponent: '1e-05' must be '1.0e-05'.
    return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text


@dataclass(frozen=True)
class Value:
    """An SSA tensor value with its logical shape and element type."""

    ssa: str
    shape: tuple[int, ...]
    elem: str

    @property
    def type(self) -> str:
        return tensor_type(self.shape, self.elem)


class Emitter:
    def __init__(self):
        self.lines: list[str] = []
        self._count = 0
        self._indent = 1

    # -- basics -------------------------------------------------------------
    def fresh(self, hint: str = "v") -> str:
        self._count += 1
        return f"%{hint}{self._count}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self._indent + line)

    def op(self, text: str, hint: str = "v") -> str:
        name = self.fresh(hint)
        self.emit(f"{name} = {text}")
        return name

    def const(self, value: float, elem: str) -> str:
        if elem in FLOAT_TYPES:
            return self.op(f"arith.constant {float_literal(value, elem)} : {elem}", "cst")
        if elem == "i1":
            return self.op(f"arith.constant {'true' if value else 'false'}", "cst")
        return self.op(f"arith.constant {int(value)} : {elem}", "cst")

    def cast(self, ssa: str, src: str, dst: str, unsigned: bool = False) -> str:
        """Scalar conversion between element types (inside a region)."""
        if src == dst:
            return ssa
        sf, df = src in FLOAT_TYPES, dst in FLOAT_TYPES
        if sf and df:
            if src in ("f16", "bf16") and dst in ("f16", "bf16"):
                ssa = self.op(f"arith.extf {ssa} : {src} to f32")
                src = "f32"
            opname = "arith.extf" if _FLOAT_WIDTH[dst] > _FLOAT_WIDTH[src] else "arith.truncf"
            return self.op(f"{opname} {ssa} : {src} to {dst}")
        if sf and not df:
            if dst == "i1":
                zero = self.const(0.0, src)
                return self.op(f"arith.cmpf une, {ssa}, {zero} : {src}")
            return self.op(f"arith.{'fptoui' if unsigned else 'fptosi'} {ssa} : {src} to {dst}")
        if not sf and df:
            return self.op(f"arith.{'uitofp' if unsigned or src == 'i1' else 'sitofp'} {ssa} : {src} to {dst}")
        if _INT_WIDTH[dst] > _INT_WIDTH[src]:
            return self.op(f"arith.{'extui' if unsigned or src == 'i1' else 'extsi'} {ssa} : {src} to {dst}")
        if dst == "i1":
            zero = self.const(0, src)
            return self.op(f"arith.cmpi ne, {ssa}, {zero} : {src}")
        return self.op(f"arith.trunci {ssa} : {src} to {dst}")

    def empty(self, shape, elem) -> str:
        return self.op(f"tensor.empty({dyn_operands(shape)}) : {tensor_type(shape, elem)}", "empty")

    def filled(self, shape, elem, value: float) -> str:
        c = self.const(value, elem)
        e = self.empty(shape, elem)
        return self.op(f"linalg.fill ins({c} : {elem}) outs({e} : {tensor_type(shape, elem)}) "
                       f"-> {tensor_type(shape, elem)}", "fill")

    # -- structured ops -----------------------------------------------------
    def generic(self, inputs: Sequence[tuple[Value, str]], out_shape, out_elem: str,
                iterators: Sequence[str], out_map: str,
                body: Callable[[list[str]], str], init: str | None = None) -> Value:
        """``linalg.generic``; ``inputs`` pairs values with affine maps; ``body`` gets the
        block arguments (inputs then the output) and returns the yielded SSA name."""
        out_t = tensor_type(out_shape, out_elem)
        if init is None:
            init = self.empty(out_shape, out_elem)
        maps = ", ".join([m for _, m in inputs] + [out_map])
        its = ", ".join(f'"{i}"' for i in iterators)
        ins = ", ".join(v.ssa for v, _ in inputs)
        ins_t = ", ".join(v.type for v, _ in inputs)
        name = self.fresh("g")
        ins_clause = f"ins({ins} : {ins_t}) " if inputs else ""
        self.emit(f"{name} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}} "
                  f"{ins_clause}outs({init} : {out_t}) {{")
        args = [self.fresh("a") for _ in range(len(inputs) + 1)]
        sig = ", ".join(f"{a}: {t}" for a, t in zip(args, [v.elem for v, _ in inputs] + [out_elem]))
        self.emit(f"^bb0({sig}):")
        self._indent += 1
        result = body(args)
        self.emit(f"linalg.yield {result} : {out_elem}")
        self._indent -= 1
        self.emit(f"}} -> {out_t}")
        return Value(name, tuple(out_shape), out_elem)

    def generic_multi(self, inputs: Sequence[tuple[Value, str]], out_shape, out_elems: Sequence[str],
                      iterators: Sequence[str], out_map: str, body: Callable[[list[str]], list[str]],
                      inits: Sequence[str]) -> list[Value]:
        """``linalg.generic`` with several results of one shape and map (e.g. two sums of one
        reduction); ``body`` gets the block arguments (inputs, then the outputs) and returns the
        yielded SSA names, one per output."""
        out_ts = [tensor_type(out_shape, e) for e in out_elems]
        maps = ", ".join([m for _, m in inputs] + [out_map] * len(out_elems))
        its = ", ".join(f'"{i}"' for i in iterators)
        ins = ", ".join(v.ssa for v, _ in inputs)
        ins_t = ", ".join(v.type for v, _ in inputs)
        name = self.fresh("g")
        self.emit(f"{name}:{len(out_elems)} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}} "
                  f"ins({ins} : {ins_t}) outs({', '.join(inits)} : {', '.join(out_ts)}) {{")
        args = [self.fresh("a") for _ in range(len(inputs) + len(out_elems))]
        sig = ", ".join(f"{a}: {t}" for a, t in zip(args, [v.elem for v, _ in inputs] + list(out_elems)))
        self.emit(f"^bb0({sig}):")
        self._indent += 1
        results = body(args)
        self.emit(f"linalg.yield {', '.join(results)} : {', '.join(out_elems)}")
        self._indent -= 1
        self.emit(f"}} -> ({', '.join(out_ts)})")
        return [Value(f"{name}#{i}", tuple(out_shape), e) for i, e in enumerate(out_elems)]

    def scatter(self, updates: Value, indices: str, into: str, unique: bool,
                combine: Callable[[str, str], str]) -> Value:
        """``iree_linalg_ext.scatter`` of the rows of ``updates`` (``[R, ...]``) to the rows ``indices``
        (``tensor<Rx1xi32>``) of ``into`` (same type); ``combine(new, old)`` emits the element written.
        ``unique``: no two indices equal (IREE may then write the rows in parallel)."""
        name = self.fresh("scatter")
        self.emit(f"{name} = iree_linalg_ext.scatter dimension_map = [0] unique_indices({str(unique).lower()}) "
                  f"ins({updates.ssa}, {indices} : {updates.type}, tensor<{updates.shape[0]}x1xi32>) "
                  f"outs({into} : {updates.type}) {{")
        new, old = self.fresh("a"), self.fresh("a")
        self.emit(f"^bb0({new}: {updates.elem}, {old}: {updates.elem}):")
        self._indent += 1
        self.emit(f"iree_linalg_ext.yield {combine(new, old)} : {updates.elem}")
        self._indent -= 1
        self.emit(f"}} -> {updates.type}")
        return Value(name, updates.shape, updates.elem)

    def dispatch_region(self, body: Callable[[], Value]) -> Value:
        """``flow.dispatch.region`` holding the ops ``body`` emits (it returns the region's result).

        IREE makes one dispatch of the region's ops whatever its fusion heuristics would do with them
        alone; they are tiled and fused from the region's root when the dispatch is compiled. Operands
        (reshapes of arguments and the like) belong before the region."""
        name, start = self.fresh("region"), len(self.lines)
        return self.wrap_region(start, body(), name)

    def wrap_region(self, start: int, v: Value, name: str | None = None) -> Value:
        """The lines emitted since line ``start`` put into a ``flow.dispatch.region`` (SSA ``name``, a fresh
        one by default) returning ``v`` (see :meth:`dispatch_region`); no other value defined by those
        lines may be used after them."""
        ind = "  " * self._indent
        name = name or self.fresh("region")
        dims = dyn_operands(v.shape)
        self.lines[start:] = ([f"{ind}{name} = flow.dispatch.region -> ({v.type}{'{' + dims + '}' if dims else ''}) {{"]
                              + ["  " + line for line in self.lines[start:]]
                              + [f"{ind}  flow.return {v.ssa} : {v.type}", f"{ind}}}"])
        return Value(name, v.shape, v.elem)

    def elementwise(self, inputs: Sequence[Value], out_shape, out_elem: str,
                    body: Callable[[list[str]], str]) -> Value:
        """Elementwise op over ``out_shape`` with right-aligned (PyTorch) broadcasting."""
        rank = len(out_shape)
        dims = [f"d{i}" for i in range(rank)]
        domain = f"({', '.join(dims)})"
        pairs = []
        for v in inputs:
            off = rank - len(v.shape)
            if off < 0:
                raise GraphError(f"operand of shape {list(v.shape)} has higher rank than result {list(out_shape)}")
            exprs = []
            for i, d in enumerate(v.shape):
                if d == out_shape[off + i]:
                    exprs.append(dims[off + i])
                elif d == 1:
                    exprs.append("0")
                else:
                    raise GraphError(f"shape {list(v.shape)} does not broadcast to {list(out_shape)}")
            pairs.append((v, f"affine_map<{domain} -> ({', '.join(exprs)})>"))
        ident = f"affine_map<{domain} -> ({', '.join(dims)})>"
        return self.generic(pairs, out_shape, out_elem, ["parallel"] * rank, ident, body)

    def convert(self, v: Value, elem: str, unsigned: bool = False) -> Value:
        if v.elem == elem:
            return v
        return self.elementwise([v], v.shape, elem, lambda a: self.cast(a[0], v.elem, elem, unsigned))

    def transpose(self, v: Value, perm: Sequence[int]) -> Value:
        """``result.shape[i] = v.shape[perm[i]]``."""
        perm = tuple(perm)
        if perm == tuple(range(len(perm))):
            return v
        shape = tuple(v.shape[p] for p in perm)
        init = self.empty(shape, v.elem)
        name = self.op(f"linalg.transpose ins({v.ssa} : {v.type}) outs({init} : {tensor_type(shape, v.elem)}) "
                       f"permutation = [{', '.join(map(str, perm))}]", "t")
        return Value(name, shape, v.elem)

    def broadcast(self, v: Value, shape: Sequence[int], added: Sequence[int]) -> Value:
        """Adds the axes ``added`` (positions in ``shape``) to ``v``."""
        if not added:
            return v
        init = self.empty(shape, v.elem)
        name = self.op(f"linalg.broadcast ins({v.ssa} : {v.type}) outs({init} : {tensor_type(shape, v.elem)}) "
                       f"dimensions = [{', '.join(map(str, added))}]", "b")
        return Value(name, tuple(shape), v.elem)

    def zero_pad(self, v: Value, low: Sequence[int], high: Sequence[int], shape: Sequence[int]) -> Value:
        """``tensor.pad`` of ``v`` with zeros: ``low``/``high`` elements per axis, giving ``shape``."""
        zero = self.const(0.0, v.elem)
        name = self.fresh("pad")
        self.emit(f"{name} = tensor.pad {v.ssa} low[{', '.join(map(str, low))}] high[{', '.join(map(str, high))}] {{")
        args = ", ".join(f"{self.fresh('i')}: index" for _ in v.shape)
        self.emit(f"^bb0({args}):")
        self.emit(f"  tensor.yield {zero} : {v.elem}")
        self.emit(f"}} : {v.type} to {tensor_type(shape, v.elem)}")
        return Value(name, tuple(shape), v.elem)

    def reshape(self, v: Value, shape: Sequence[int]) -> Value:
        """Reshape between shapes that differ only by size-1 axes."""
        shape = tuple(shape)
        if shape == v.shape:
            return v
        src, dst = list(v.shape), list(shape)
        coll = len(src) > len(dst)
        small, big = (dst, src) if coll else (src, dst)
        groups = _unit_groups(small, big)
        if groups is None:
            raise GraphError(f"cannot reshape {src} to {dst}")
        reassoc = "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]"
        if coll:
            name = self.op(f"tensor.collapse_shape {v.ssa} {reassoc} : {v.type} into {tensor_type(shape, v.elem)}", "r")
        else:
            name = self.op(f"tensor.expand_shape {v.ssa} {reassoc} output_shape [{', '.join(map(str, shape))}] "
                           f": {v.type} into {tensor_type(shape, v.elem)}", "r")
        return Value(name, shape, v.elem)


def _unit_groups(small: list[int], big: list[int]):
    """Groups of ``big``'s axes, one per axis of ``small``, where the extra axes are size 1."""
    if not small:
        return [] if all(d == 1 for d in big) else None
    groups, j = [], 0
    for i, d in enumerate(small):
        g = []
        while j < len(big) and big[j] == 1 and d != 1:
            g.append(j)
            j += 1
        if j >= len(big) or big[j] != d:
            return None
        g.append(j)
        j += 1
        groups.append(g)
    while j < len(big):
        if big[j] != 1:
            return None
        groups[-1].append(j)
        j += 1
    return groups


def split_axis(em: "Emitter", v: Value, axis: int, outer: int, inner: int) -> Value:
    """``tensor.expand_shape`` of axis ``axis`` (size ``outer * inner``) into ``[outer, inner]``."""
    shape = v.shape[:axis] + (outer, inner) + v.shape[axis + 1:]
    groups, j = [], 0
    for i in range(len(v.shape)):
        groups.append([j, j + 1] if i == axis else [j])
        j += 2 if i == axis else 1
    reassoc = "[" + ", ".join("[" + ", ".join(map(str, grp)) + "]" for grp in groups) + "]"
    name = em.op(f"tensor.expand_shape {v.ssa} {reassoc} output_shape [{', '.join(map(str, shape))}] "
                 f": {v.type} into {tensor_type(shape, v.elem)}", "r")
    return Value(name, shape, v.elem)
