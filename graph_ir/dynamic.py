"""Which dims of a graph may vary at execute time (issue 20: one module for every shape).

:func:`analyze` reads a :class:`GraphDesc` built at one shape and returns a :class:`ShapeSpec`:
for every tensor, each dim is fixed (the built value), a symbol (a size chosen at execute time,
shared by every dim that must be equal to it) or derived from a symbol (a convolution's output
size). ``lowering.lower(..., shape_spec=spec)`` then emits one module whose arguments carry ``?``
for the varying dims; :meth:`ShapeSpec.resolve` checks the shapes of one execute against it.

Rules (per op; dims that must be equal across tensors are unified into one class first):

- batch dims vary (matmul batch dims, conv/batchnorm N, sdpa B, axis 0 of norms);
- sequence/token dims vary: matmul M, sdpa S_q and S_kv, the non-normalized axes of
  layernorm/rmsnorm, the kept axes of reductions, the spatial axes of batchnorm;
- conv N varies; so do H and W of ungrouped 2-D conv_fprop (``conv_spatial``, on by default): the
  output's sizes are derived from the input's (``(H + pad - extent) // stride + 1``); other convs
  (grouped, 1-D, 3-D, dgrad, wgrad) keep H/W fixed; conv_wgrad keeps N fixed only in a graph that
  also has a conv_fprop (IREE 3.13's GPU channels-last pass cannot take its N-contraction dynamic);
- fixed: channels, filter sizes, heads, head dims, matmul K and N, normalized axes, reduced axes,
  and any dim of size 1 that broadcasts against a larger dim (or against a varying one);
- pointwise ops take what the other ops say about their dims; a graph of pointwise ops only
  lets every axis but the last vary (the last is the feature axis), and a per-channel operand
  (``[1, C, 1, 1]``: ones except some axes) fixes the axes it spans and lets the others vary;
- strided (non-dense) bound tensors and stride-0 broadcast axes keep every dim fixed.

A class varies if an op says it varies and none says it is fixed.

Example:
    >>> from graph_ir.dynamic import analyze                     # doctest: +SKIP
    >>> spec = analyze(graph)
    >>> spec.varying()                                           # doctest: +SKIP
    {1: [0, 1], 3: [0, 1]}
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

from graph_ir.desc import GraphDesc, GraphError, OpKind
from graph_ir.layout import physical_layout
from graph_ir.opdef import OPS

SPEC_VERSION = 1

# assertion strengths, strongest first
FIXED, VARY, BPARAM, BTOKEN, PPARAM, PTOKEN = range(6)


@dataclass(frozen=True)
class Step:
    """One convolution step: ``out = (in + pad - extent) // stride + 1``."""

    pad: int       # pre + post padding
    extent: int    # dilation * (kernel - 1) + 1
    stride: int

    def apply(self, v: int) -> int:
        return (v + self.pad - self.extent) // self.stride + 1

    def text(self, inner: str) -> str:
        return f"({inner} + {self.pad} - {self.extent}) // {self.stride} + 1"


@dataclass(frozen=True)
class Derived:
    """A dim that is ``steps`` applied in order to symbol ``of``."""

    of: str
    steps: tuple[Step, ...]

    def value(self, sym_values: dict) -> int:
        v = sym_values[self.of]
        for s in self.steps:
            v = s.apply(v)
        return v

    def text(self) -> str:
        t = self.of
        for s in self.steps:
            t = s.text(t)
        return t


@dataclass
class ShapeSpec:
    """Which dims of which tensors vary. ``dims[uid]``: per axis an int (fixed), a symbol name (str)
    or a :class:`Derived`. ``built[uid]``: the dims the graph was built with. ``bound``: the uids bound
    at execute (the module's arguments). ``symbols``: name -> built value."""

    dims: dict[int, tuple]
    built: dict[int, tuple[int, ...]]
    bound: tuple[int, ...]
    symbols: dict[str, int]
    orders: dict[int, tuple[int, ...]] = field(default_factory=dict)   # bound uid -> memory order

    # -- queries -------------------------------------------------------------
    def varying(self) -> dict[int, list[int]]:
        """uid -> the dim indices that may vary (bound tensors only)."""
        out = {}
        for u in self.bound:
            v = [i for i, d in enumerate(self.dims[u]) if not isinstance(d, int)]
            if v:
                out[u] = v
        return out

    def is_dynamic(self) -> bool:
        return bool(self.varying())

    def carriers(self, sym: str) -> list[int]:
        return [u for u in self.bound if sym in self.dims[u]]

    def allowed(self, uid: int, dim: int) -> str:
        """What the plan allows for dim ``dim`` of tensor ``uid`` (human text)."""
        d = self.dims[uid][dim]
        if isinstance(d, int):
            return f"fixed at {d}"
        if isinstance(d, str):
            others = [u for u in self.carriers(d) if u != uid]
            shared = f", shared with uid{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}" if others else ""
            return f"any size >= 1 (symbol {d}{shared})"
        base = next(((u, i) for u in self.bound for i, e in enumerate(self.dims[u]) if e == d.of), None)
        where = f" from uid {base[0]} dim {base[1]}" if base else ""
        return f"{d.text()}{where}"

    def strides_for(self, uid: int, dims: Sequence[int]) -> tuple[int, ...]:
        """Packed strides for ``dims`` in the built tensor's memory order."""
        dims = tuple(int(d) for d in dims)
        order = self.orders.get(uid, tuple(range(len(dims))))
        strides = [0] * len(dims)
        acc = 1
        for a in reversed(order):
            strides[a] = acc
            acc *= max(dims[a], 1)
        return tuple(strides)

    def pinned(self, names) -> "ShapeSpec":
        """This spec with the symbols ``names`` fixed at their built sizes (dims derived from them too):
        e.g. ``spec.pinned(["W"])`` keeps a conv's width fixed, which IREE's CPU code needs to be fast
        (docs/dynamic_shapes.md)."""
        names = set(names)
        unknown = sorted(names - set(self.symbols))
        if unknown:
            raise GraphError(f"symbols {unknown} are not in this spec (symbols: {sorted(self.symbols)})")
        values = dict(self.symbols)

        def fix(d):
            if isinstance(d, str) and d in names:
                return values[d]
            if isinstance(d, Derived) and d.of in names:
                return d.value(values)
            return d
        dims = {u: tuple(fix(d) for d in ds) for u, ds in self.dims.items()}
        return ShapeSpec(dims, dict(self.built), self.bound, {k: v for k, v in self.symbols.items() if k not in names},
                         dict(self.orders))

    # -- checking an execute's shapes ----------------------------------------
    def resolve(self, shapes: dict) -> dict[int, tuple[int, ...]]:
        """Binds the symbols from ``shapes`` (uid -> dims), checks every given dim, and returns the
        dims of every bound tensor. Raises GraphError naming the uid, dim, value and what is allowed."""
        shapes = {int(u): tuple(int(x) for x in s) for u, s in shapes.items()}
        for u, s in shapes.items():
            if u not in self.dims or u not in self.bound:
                raise GraphError(f"uid {u}: not a tensor bound by this plan (bound uids: {list(self.bound)})")
            if len(s) != len(self.dims[u]):
                raise GraphError(f"uid {u}: {len(s)} dims {list(s)} given, the plan's tensor has rank "
                                    f"{len(self.dims[u])} (built dims {list(self.built[u])})")
        values: dict[str, int] = {}
        where: dict[str, tuple[int, int]] = {}
        for u in self.bound:                      # bind symbols, in uid order
            if u not in shapes:
                continue
            for i, d in enumerate(self.dims[u]):
                if not isinstance(d, str):
                    continue
                got = shapes[u][i]
                if got < 1:
                    raise GraphError(f"uid {u} dim {i}: size {got} given; the plan allows {self.allowed(u, i)}")
                if d in values and values[d] != got:
                    pu, pi = where[d]
                    raise GraphError(f"uid {u} dim {i}: size {got} given, but uid {pu} dim {pi} gives symbol {d} "
                                        f"the size {values[d]}; the plan allows {self.allowed(u, i)}")
                values.setdefault(d, got)
                where.setdefault(d, (u, i))
        for u, s in shapes.items():               # fixed dims first: the clearest message
            for i, d in enumerate(self.dims[u]):
                if isinstance(d, int) and s[i] != d:
                    raise GraphError(f"uid {u} dim {i}: size {s[i]} given; the plan allows {self.allowed(u, i)}")
        missing = [s for s in self.symbols if s not in values and self.carriers(s)]
        if missing:
            s = missing[0]
            u = self.carriers(s)[0]
            raise GraphError(f"symbol {s}: no shape given for any tensor carrying it (uid {u} dim "
                                f"{self.dims[u].index(s)}); pass that tensor's dims")
        out = {}
        for u in self.bound:
            dims = []
            for i, d in enumerate(self.dims[u]):
                if isinstance(d, int):
                    want = d
                elif isinstance(d, str):
                    want = values[d]
                else:
                    want = d.value(values)
                    if want < 1:
                        raise GraphError(f"uid {u} dim {i}: {d.text()} = {want} for the given sizes "
                                            f"({', '.join(f'{k}={v}' for k, v in values.items())}); the "
                                            f"convolution's window does not fit")
                if u in shapes and shapes[u][i] != want:
                    raise GraphError(f"uid {u} dim {i}: size {shapes[u][i]} given; the plan allows "
                                        f"{self.allowed(u, i)}" + (f" (= {want} here)" if not isinstance(d, int) else ""))
                dims.append(want)
            out[u] = tuple(dims)
        return out

    # -- JSON --------------------------------------------------------------
    def to_json(self) -> str:
        def enc(d):
            if isinstance(d, (int, str)):
                return d
            return {"of": d.of, "steps": [[s.pad, s.extent, s.stride] for s in d.steps]}
        doc = {"version": SPEC_VERSION, "symbols": self.symbols, "bound": list(self.bound),
               "tensors": {str(u): {"dims": [enc(d) for d in self.dims[u]], "built": list(self.built[u]),
                                    **({"order": list(self.orders[u])} if u in self.orders else {})}
                           for u in sorted(self.dims)}}
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "ShapeSpec":
        try:
            doc = json.loads(text)
            if doc.get("version") != SPEC_VERSION:
                raise GraphError(f"shape spec version {doc.get('version')!r}: this build reads version "
                                    f"{SPEC_VERSION}", "unsupported")

            def dec(d):
                if isinstance(d, (int, str)):
                    return d
                return Derived(d["of"], tuple(Step(*map(int, s)) for s in d["steps"]))
            dims, built, orders = {}, {}, {}
            for k, t in doc["tensors"].items():
                dims[int(k)] = tuple(dec(d) for d in t["dims"])
                built[int(k)] = tuple(int(x) for x in t["built"])
                if "order" in t:
                    orders[int(k)] = tuple(int(x) for x in t["order"])
            return cls(dims, built, tuple(int(u) for u in doc["bound"]),
                       {str(k): int(v) for k, v in doc["symbols"].items()}, orders)
        except GraphError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise GraphError(f"shape spec JSON is malformed: {e}") from None

    def __eq__(self, other):
        return isinstance(other, ShapeSpec) and self.to_json() == other.to_json()


# ---------------------------------------------------------------------------
# Analysis
# ---------------------------------------------------------------------------


class Facts:
    """Union-find over (uid, axis) keys with strength-tagged vary/fixed assertions; what each op's
    ``OpDef.dynamic`` rule writes into. ``conv_spatial``, ``wgrad_n``: :func:`analyze`'s options."""

    def __init__(self, graph: GraphDesc, conv_spatial: bool = True, wgrad_n: bool = True):
        self.graph = graph
        self.conv_spatial = conv_spatial
        self.wgrad_n = wgrad_n
        self.parent: dict = {}
        self.marks: dict = {}           # key -> list of (strength, label)
        self.derived: list = []         # (out key, in key, Step)
        for t in graph.tensors:
            for i in range(len(t.dims)):
                self.parent[(t.uid, i)] = (t.uid, i)

    def dims(self, uid: int) -> tuple[int, ...]:
        return tuple(self.graph.tensor(uid).dims)

    def find(self, k):
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def mark(self, key, strength: int, label: str = ""):
        self.marks.setdefault(key, []).append((strength, label))

    def same(self, ua: int, ia: int, ub: int, ib: int):
        """Unifies axis ``ia`` of ``ua`` with ``ib`` of ``ub`` when they are equal; a size-1 axis facing
        a larger one broadcasts and stays fixed."""
        da, db = self.dims(ua)[ia], self.dims(ub)[ib]
        if da == db:
            self.union((ua, ia), (ub, ib))
        else:
            for u, i, d in ((ua, ia, da), (ub, ib, db)):
                if d == 1:
                    self.mark((u, i), FIXED)


def right_aligned(f: Facts, op: int, out: int, same_shape_only_ones: bool = True):
    """Pointwise-style: unify ``op``'s axes with ``out``'s, right-aligned. An operand whose dims differ
    from the output's keeps its size-1 axes fixed (they broadcast)."""
    a, o = f.dims(op), f.dims(out)
    off = len(o) - len(a)
    full = a == o
    for i, d in enumerate(a):
        if d == 1 and not full:
            f.mark((op, i), FIXED)
        elif d == o[off + i]:
            f.union((op, i), (out, off + i))
        else:
            f.mark((op, i), FIXED)


def analyze(graph: GraphDesc, conv_spatial: bool = True) -> ShapeSpec:
    """Which dims of ``graph``'s tensors may vary (module docstring). ``conv_spatial``: let the H/W of
    ungrouped 2-D conv_fprop vary too (outputs derived from inputs); False keeps every conv's H/W fixed."""
    f = Facts(graph, conv_spatial, wgrad_n=not any(n.kind == OpKind.CONV_FPROP for n in graph.nodes))
    for node in graph.nodes:
        rule = OPS[node.kind].dynamic
        if rule is None:
            raise GraphError(f"node '{node.name}': op kind {node.kind.name} has no dynamic-shape rule",
                                "unsupported")
        rule(f, node)
    bound = [t.uid for t in graph.bound_tensors()]
    orders = {}
    for t in graph.bound_tensors():
        lay = physical_layout(t.dims, t.strides, f"tensor '{t.name}' (uid {t.uid})")
        if not lay.is_dense or lay.bcast_axes:
            for i in range(len(t.dims)):
                f.mark((t.uid, i), FIXED)     # NOTE: strided views keep their shape (module docstring)
        else:
            orders[t.uid] = tuple(lay.order)
    # classes and their strongest assertions
    classes: dict = {}
    for k in f.parent:
        classes.setdefault(f.find(k), []).append(k)
    strength = {}
    for root, keys in classes.items():
        ms = [m for k in keys for m in f.marks.get(k, [])]
        best = min((s for s, _ in ms), default=None)
        if best is None:
            vary = False
        elif best == FIXED:
            vary = False
        elif best == VARY:
            vary = True
        elif best in (BPARAM, BTOKEN):
            vary = not any(s == BPARAM for s, _ in ms)
        else:
            vary = best == PTOKEN and not any(s == PPARAM for s, _ in ms)
        labels = [lbl for s, lbl in sorted(ms, key=lambda m: m[0]) if lbl and s != FIXED]
        strength[root] = (vary, labels[0] if labels else "D")
    # derived classes: out = step(in); a class derived twice, or derived and marked, stays fixed
    derived_of: dict = {}
    for out, inp, step in f.derived:
        ro, ri = f.find(out), f.find(inp)
        if ro in derived_of and derived_of[ro] != (ri, step):
            derived_of[ro] = None
        else:
            derived_of.setdefault(ro, (ri, step))
    changed = True
    while changed:
        changed = False
        for ro, d in derived_of.items():
            if d is None:
                continue
            ri, _ = d
            marked_fixed = any(s == FIXED for k in classes[ro] for s, _ in f.marks.get(k, []))
            if marked_fixed and strength[ri][0]:
                strength[ri] = (False, strength[ri][1])
                changed = True
    for ro, d in list(derived_of.items()):
        if d is None:
            continue
    # a symbol needs a bound input carrying it directly (the module reads its size there)
    produced = graph.output_uids()
    bound_set = {u for u in bound if u not in produced}
    for root, keys in classes.items():
        if strength[root][0] and not any(k[0] in bound_set for k in keys) and root not in derived_of:
            strength[root] = (False, strength[root][1])
    # name the symbols
    names: dict = {}
    used: dict = {}
    for root in sorted(classes):
        if strength[root][0] and derived_of.get(root) is None:
            label = strength[root][1]
            used[label] = used.get(label, 0) + 1
            names[root] = label if used[label] == 1 else f"{label}{used[label]}"
    # rename clashes: the first of a label keeps it only if no later one exists with a number
    symbols = {}
    for root, n in names.items():
        u, i = root
        symbols[n] = graph.tensor(u).dims[i]

    def dim_of(key):
        root = f.find(key)
        if root in names:
            return names[root]
        d = derived_of.get(root)
        if d is not None:
            chain, ri = [d[1]], d[0]
            while ri not in names and derived_of.get(ri) is not None:
                chain.append(derived_of[ri][1])
                ri = derived_of[ri][0]
            if ri in names:
                return Derived(names[ri], tuple(reversed(chain)))
        return graph.tensor(key[0]).dims[key[1]]

    dims = {t.uid: tuple(dim_of((t.uid, i)) for i in range(len(t.dims))) for t in graph.tensors}
    built = {t.uid: tuple(int(d) for d in t.dims) for t in graph.tensors}
    return ShapeSpec(dims, built, tuple(bound), symbols, orders)
