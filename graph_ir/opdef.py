"""One definition per op kind: :class:`OpDef`, and the registry :data:`OPS` every layer reads.

Each op kind this project lowers has one module, ``graph_ir/ops/<kind>.py``, that defines and
registers its OpDef: the attributes class (``graph_ir.desc``), shape and stride inference, the
dynamic-shape rule, the ``hd.Graph`` and ``cudnn.pygraph`` method names and the traits the engine
knobs read. hipDNN's node types this project parses but does not lower get OpDefs from one table
(``graph_ir/ops/_parse_only.py``, ``supported=False``). The layers above check themselves against
the registry at import (:func:`check_complete`): the MLIR emitters (``lowering/ops``), the numpy
reference engine and ``hd.Graph`` each fail loudly, naming the op, when a supported op lacks its
piece.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from graph_ir.desc import ATTRS_BY_KIND, LOWERED_KINDS, OpKind

# The traits an OpDef may carry (what the engine's knob rules ask about a graph instead of op kinds).
TRAITS = frozenset({
    "elementwise",     # one output element per broadcast input element (pointwise)
    "contraction",     # a (B,) M, N, K matrix product node (matmul)
    "conv",            # any convolution (fprop, dgrad, wgrad)
    "conv_fprop", "conv_dgrad", "conv_wgrad",
    "reduction",       # reduces axes to size 1 (reduction)
    "normalization",   # batchnorm, layernorm, rmsnorm
    "dequantize",      # block-scale dequantization (the DEQUANT_MATMUL knob's concern)
    "attention",       # scaled dot-product attention
    "gather",          # a contraction reading an operand at indices computed from tensor values (moe)
})


@dataclass(frozen=True)
class OpDef:
    """Everything the project knows about one op kind, in one place.

    ``infer(node, dims)``: checks the node against the known dims (``dims(uid)``; outputs whose dims
    the caller set are visible, unknown ones raise KeyError) and returns ``{output uid: dims}`` for
    the outputs it can infer; raises :class:`graph_ir.desc.GraphError` naming the field and value.
    ``dynamic(facts, node)``: the op's rule in ``graph_ir.dynamic.analyze`` (required when
    ``supported``). ``frontend_method``: the ``hd.Graph`` method that adds the node;
    ``facade_methods``: the ``cudnn.pygraph`` methods that add it. ``supported=False``: a hipDNN node
    type that parses and is refused by name.
    """

    kind: OpKind
    attrs: type
    infer: Callable
    dynamic: Callable | None = None
    frontend_method: str | None = None
    facade_methods: tuple[str, ...] = ()
    traits: frozenset = frozenset()
    supported: bool = True
    # (output field, input field) pairs: an output whose strides the caller left unset takes the
    # first such input's stride order (hd.Graph's validate); matmul's outputs stay row-major
    stride_order_from: tuple = ()
    # params -> the data type (schema value) every output of the node has whatever the graph's io
    # type (compare and logical pointwise modes: BOOLEAN), or None: the frontend's defaults apply
    output_type: Callable | None = None

    def __post_init__(self):
        name = self.kind.name
        if getattr(self.attrs, "KIND", None) != self.kind:
            raise TypeError(f"OpDef {name}: attrs {self.attrs.__name__} is the attributes class of "
                            f"{getattr(self.attrs, 'KIND', None)!r}")
        if not isinstance(self.traits, frozenset) or not self.traits <= TRAITS:
            raise TypeError(f"OpDef {name}: traits {sorted(self.traits)} must be a frozenset of {sorted(TRAITS)}")
        if self.supported and (self.dynamic is None or not self.frontend_method):
            raise TypeError(f"OpDef {name}: a supported op needs a dynamic-shape rule and a frontend method")
        if not isinstance(self.facade_methods, tuple):
            raise TypeError(f"OpDef {name}: facade_methods must be a tuple of method names")


OPS: dict[OpKind, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    """Adds ``opdef`` to :data:`OPS`; a second OpDef for one kind is refused."""
    if opdef.kind in OPS:
        raise RuntimeError(f"duplicate OpDef for {opdef.kind.name}")
    OPS[opdef.kind] = opdef
    return opdef


def supported() -> tuple[OpDef, ...]:
    """The OpDefs of the op kinds this project lowers, in registration order."""
    return tuple(d for d in OPS.values() if d.supported)


def check_complete(what: str, have: Mapping[OpKind, object]) -> None:
    """Raises RuntimeError naming every supported op kind that ``have`` (``what``: the layer's table,
    for the message) has no entry for."""
    missing = [d.kind.name for d in supported() if d.kind not in have]
    if missing:
        raise RuntimeError(f"{what}: no entry for the supported op kind(s) {', '.join(missing)} "
                           "(graph_ir/opdef.py: every supported OpDef needs one)")


def traits_of(kinds: Iterable[OpKind]) -> frozenset:
    """The union of the traits of ``kinds``."""
    out: set = set()
    for k in kinds:
        out |= OPS[k].traits
    return frozenset(out)


def check_registry() -> None:
    """The registry covers every hipDNN node type once, with the codec's attributes class, and the
    supported kinds are the codec's ``LOWERED_KINDS`` (run when ``graph_ir.ops`` is imported)."""
    missing = [k.name for k in OpKind if k not in OPS]
    if missing:
        raise RuntimeError(f"graph_ir.opdef.OPS: no OpDef for {', '.join(missing)}")
    for k, d in OPS.items():
        if d.attrs is not ATTRS_BY_KIND[k]:
            raise RuntimeError(f"OpDef {k.name}: attrs {d.attrs.__name__} is not the codec's "
                               f"{ATTRS_BY_KIND[k].__name__}")
    if {d.kind for d in supported()} != set(LOWERED_KINDS):
        raise RuntimeError(f"graph_ir.opdef.OPS: supported kinds {sorted(d.kind.name for d in supported())} "
                           f"differ from graph_ir.desc.LOWERED_KINDS {sorted(k.name for k in LOWERED_KINDS)}")
