"""State shared by the op lowerings while one graph is emitted."""
from __future__ import annotations

import math

from lowering._emit import FLOAT_TYPES, Emitter, Value, element_type, float_literal, tensor_type
from graph_ir._fbs.graph_generated import DataType
from graph_ir.desc import GraphDesc, GraphError, NodeDesc, TensorDesc
from lowering.policy import LoweringPolicy
from lowering._minifloat import E8M0, FORMATS, decode_value, encode_value
from graph_ir.dtypes import MINIFLOAT_FORMATS


class LowerContext:
    def __init__(self, graph: GraphDesc, emitter: Emitter, policy: LoweringPolicy, dyn_dims: dict | None = None,
                 symbol_prefix: str = ""):
        self.graph = graph
        # Module-level functions beside the entry (CUSTOM_OP's registered code, lowering/ops/custom_op.py):
        # their lines, and the symbol given to each distinct one; symbol_prefix keeps the symbols of
        # @main_static's lowering (a second entry of one module) apart from @main's.
        self.functions: list[str] = []
        self.function_symbols: dict = {}
        self.symbol_prefix = symbol_prefix
        # uid -> logical dims with a Sym for each dim chosen at execute time (graph_ir/dynamic.py);
        # None for a static lowering
        self.dyn_dims = dyn_dims
        self.em = emitter
        self.policy = policy   # every form choice (lowering/policy.py); lowerings read nothing else
        self.target = policy.target
        self.values: dict[int, Value] = {}
        self.raw: dict[int, Value] = {}   # minifloat tensors: uid -> their i8 codes (define)
        self.codes: dict = {}  # minifloat inputs: uid -> a function emitting their codes again (lowering/_lower.py)
        # the node being lowered (its position in graph.nodes), and the dequantizations that may share a
        # dispatch region with the matmul lowered next: y uid -> (first emitted line, node position)
        self.node_index = -1
        self.region_marks: dict[int, tuple[int, int]] = {}
        # Results IREE must not move a relayout transpose into (CUDA f16/bf16 matmuls): output
        # relayouts of values made from them sit behind a barrier (lowering/ops/matmul.py).
        self.mma_results: set[int] = set()

    def tensor(self, uid: int) -> TensorDesc:
        return self.graph.tensor(uid)

    def value(self, uid: int) -> Value:
        """The logical value of tensor ``uid`` (scalars become rank-0 constants)."""
        if uid in self.values:
            return self.values[uid]
        t = self.tensor(uid)
        if t.is_scalar:
            elem = element_type(t.data_type, f"scalar '{t.name}'")
            lit = float_literal(t.scalar_value, elem) if elem in FLOAT_TYPES else (
                ("true" if t.scalar_value else "false") if elem == "i1" else str(int(t.scalar_value)))
            ssa = self.em.op(f"arith.constant dense<{lit}> : {tensor_type((), elem)}", "scalar")
            v = Value(ssa, (), elem)
            self.values[uid] = v
            return v
        raise GraphError(f"tensor '{t.name}' (uid {uid}) is used before any node produces it")

    def dims(self, uid: int) -> tuple:
        """The logical dims tensor ``uid`` has in the emitted module (Syms for varying dims)."""
        if self.dyn_dims is not None and uid in self.dyn_dims:
            return self.dyn_dims[uid]
        return tuple(self.tensor(uid).dims)

    def define(self, uid: int, v: Value) -> None:
        """Binds the result of a node to tensor ``uid``, converting to its declared type."""
        t = self.tensor(uid)
        if uid in self.values:
            raise GraphError(f"tensor '{t.name}' (uid {uid}) is produced twice")
        if self.dims(uid) != v.shape:
            raise GraphError(f"tensor '{t.name}' (uid {uid}): declared dims {list(self.dims(uid))} but the "
                                f"producing node gives {list(v.shape)}")
        fmt = MINIFLOAT_FORMATS.get(t.data_type)
        if fmt is not None:
            # codes for the buffer (outputs), their values for the nodes that read the tensor
            raw = encode_value(self.em, v, FORMATS.get(fmt, E8M0))
            self.raw[uid] = raw
            self.values[uid] = decode_value(self.em, raw, FORMATS.get(fmt, E8M0))
            return
        self.values[uid] = self.em.convert(v, element_type(t.data_type, f"tensor '{t.name}'"),
                                           unsigned=t.data_type == DataType.UINT8)

    def decode_input(self, uid: int, v: Value) -> Value:
        """An input's logical value from its buffer's elements (``i8`` codes of a minifloat type
        decoded to f32; any other type as it is)."""
        fmt = MINIFLOAT_FORMATS.get(self.tensor(uid).data_type)
        return v if fmt is None else decode_value(self.em, v, FORMATS.get(fmt, E8M0))

    def stored(self, uid: int) -> Value | None:
        """What an output's buffer receives: the codes of a minifloat tensor, else its value."""
        return self.raw.get(uid, self.values.get(uid))

    def out_elem(self, uid: int) -> str:
        t = self.tensor(uid)
        return element_type(t.data_type, f"tensor '{t.name}'")

    def compute_elem(self, node: NodeDesc, default: str = "f32") -> str:
        """Element type arithmetic runs in: the node's, else the graph's, else ``default``."""
        for dt in (node.compute_data_type, self.graph.compute_data_type):
            if dt != DataType.UNSET:
                return element_type(dt, f"node '{node.name}' compute type")
        return default


def is_nan(x: float) -> bool:
    return isinstance(x, float) and math.isnan(x)
