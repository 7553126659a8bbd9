"""The ``NUMPY_REFERENCE`` engine: evaluates the graph with numpy (the oracle).

It has no serialization hooks, so serializing its plans raises NOT_SUPPORTED.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hipdnn_iree.plugin_sdk.buffers import BoundTensor, bind_variant_pack, logical_from_dense, numpy_dtype, store_logical
from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
from hipdnn_iree.plugin_sdk.errors import to_hipdnn
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.version import __version__
from hipdnn_iree.plugins.numpy_reference.registry import REFERENCES, import_op_modules
from graph_ir.desc import GraphDesc, GraphError, decode_graph
from graph_ir._fbs.graph_generated import DataType as D

ENGINE_NAME = "NUMPY_REFERENCE"
ENGINE_ID = engine_id_from_name(ENGINE_NAME)


@dataclass
class ReferenceContext:
    graph: GraphDesc
    tensors: list[BoundTensor]
    shape_spec: object = None      # dynamic builds: graph_ir.dynamic.ShapeSpec
    override: bool = False         # execute takes other shapes (it just runs at them)


def bound_tensors(g: GraphDesc) -> list[BoundTensor]:
    outs = g.output_uids()
    return [BoundTensor(t.uid, t.name, "output" if t.uid in outs else "input", t.data_type, t.dims, t.strides)
            for t in g.bound_tensors()]


class RefEnv(dict):
    """Tensor values by uid, as the op references see them; ``dims(uid)`` gives any tensor's
    declared logical dims (outputs included: some ops' output dims cannot be derived).

    At override shapes (``built``: the graph as built) a virtual tensor's dims are not declared:
    they follow from its producer's inputs as they did in the built graph (an axis that was the
    input's stays the input's; an axis of 1 where the input's was larger stays 1)."""

    def __init__(self, values: dict, graph: GraphDesc, built: GraphDesc | None = None):
        super().__init__(values)
        self.graph = graph
        self.built = built

    def dims(self, uid: int) -> tuple[int, ...]:
        d = self.graph.tensor(uid).dims
        if d is not None:
            return tuple(d)
        node = next(n for n in self.graph.nodes if uid in n.attrs.outputs())
        ins = [u for u in node.attrs.inputs() if u in self]
        shapes = [np.shape(self[u]) for u in ins]
        want = tuple(self.built.tensor(uid).dims)
        out = list(want)
        for u, shape in zip(ins, shapes):
            was = tuple(self.built.tensor(u).dims)
            if len(was) != len(want):
                continue
            for a, (w, o) in enumerate(zip(was, want)):
                if w == o and w != 1:
                    out[a] = shape[a]
        return tuple(out)


def at_dims(g: GraphDesc, dims: dict) -> GraphDesc:
    """``g`` with the bound tensors at ``dims`` (uid -> dims; packed in their memory order) and its
    virtual tensors' dims unknown (empty: the references take them from their values)."""
    from dataclasses import replace
    from graph_ir.layout import physical_layout
    tensors = []
    for t in g.tensors:
        if t.uid in dims and tuple(dims[t.uid]) != tuple(t.dims):
            order = physical_layout(t.dims, t.strides).order
            strides, acc = [0] * len(t.dims), 1
            for a in reversed(order):
                strides[a] = acc
                acc *= max(int(dims[t.uid][a]), 1)
            t = replace(t, dims=tuple(dims[t.uid]), strides=tuple(strides))
        elif t.is_virtual:
            t = replace(t, dims=None)
        tensors.append(t)
    return replace(g, tensors=tuple(tensors))


SATURATING = {D.FP8_E4M3: 448.0, D.FP8_E5M2: 57344.0, D.FP4_E2M1: 6.0}


def evaluate(g: GraphDesc, inputs: dict[int, np.ndarray], built: GraphDesc | None = None) -> dict[int, np.ndarray]:
    """Runs the graph on logical input arrays; returns every tensor's value, rounded to its type.
    A tensor whose dims are None (a virtual tensor of a graph run at override shapes) keeps the
    shape of its value."""
    env = RefEnv(inputs, g, built)
    for t in g.tensors:
        if t.is_scalar:
            env[t.uid] = np.asarray(t.scalar_value, dtype=numpy_dtype(t.data_type))
    for node in g.nodes:
        results = REFERENCES[node.kind](node, env)
        for uid, val in results.items():
            t = g.tensor(uid)
            if t.dims is not None and np.asarray(val).shape != tuple(t.dims):
                val = np.broadcast_to(np.asarray(val), t.dims)
            with np.errstate(all="ignore"):
                if t.data_type in SATURATING:
                    # NOTE: conversions to the FP8/FP4 types saturate (lowering/_minifloat.py), NaN kept
                    val = np.clip(np.asarray(val, np.float64), -SATURATING[t.data_type], SATURATING[t.data_type])
                    if t.data_type == D.FP4_E2M1:     # no NaN in E2M1: +-6 (the NaN's sign)
                        val = np.where(np.isnan(val), np.copysign(6.0, val), val)
                env[uid] = np.asarray(val).astype(numpy_dtype(t.data_type))
    return env


class NumpyReferencePlugin:
    name = "hipdnn_iree.numpy_reference"
    version = __version__
    # the contract's optional groups (plugin_sdk/contract.py): dynamic builds and override shapes
    capabilities = frozenset({"dynamic_shapes"})
    engine_names = {ENGINE_ID: ENGINE_NAME}

    def get_all_engine_ids(self) -> list[int]:
        return [ENGINE_ID]

    def get_applicable_engine_ids(self, op_graph: bytes) -> list[int]:
        try:
            g = decode_graph(op_graph)
        except GraphError:
            return []
        from graph_ir.desc import unsupported_reason
        ok = all(n.kind in REFERENCES for n in g.nodes) and unsupported_reason(g, tuple(REFERENCES)) is None
        return [ENGINE_ID] if ok else []

    def get_workspace_size(self, engine_id: int, op_graph: bytes) -> int:
        return 0

    def create_execution_context(self, engine_id: int, op_graph: bytes, engine_config=None,
                                 dynamic=None) -> ReferenceContext:
        try:
            g = decode_graph(op_graph)
        except GraphError as e:
            raise to_hipdnn(e, "graph") from None
        ctx = ReferenceContext(g, bound_tensors(g))
        for t in ctx.tensors:
            if t.role == "output":     # NOTE: inputs may alias (read through their strides); outputs may not
                try:
                    t.layout
                except GraphError as e:
                    raise to_hipdnn(e, "graph", "NUMPY_REFERENCE: ") from None
        if dynamic:
            from graph_ir.dynamic import ShapeSpec
            try:
                ctx.shape_spec = ShapeSpec.from_json(dynamic["shape_spec"])
            except GraphError as e:
                raise to_hipdnn(e, "graph", "NUMPY_REFERENCE: unreadable shape spec: ") from None
            except (KeyError, TypeError) as e:
                raise HipdnnError(Status.BAD_PARAM, f"NUMPY_REFERENCE: unreadable shape spec: {e}") from None
            ctx.override = bool(dynamic.get("override"))
        return ctx

    def destroy_execution_context(self, ctx) -> None:
        pass

    def execute_op_graph(self, ctx: ReferenceContext, variant_pack: dict, workspace=None, overrides=None) -> None:
        tensors, graph = ctx.tensors, ctx.graph
        if ctx.override:   # NOTE: the reference just runs at the call's shapes, checked by the spec
            from hipdnn_iree.plugin_sdk.shapes import carve_pack, resolve_tensors
            tensors = resolve_tensors(ctx.shape_spec, ctx.tensors, variant_pack, overrides)
            variant_pack = carve_pack(tensors, variant_pack, overrides)
            if any(t.dims != c.dims for t, c in zip(tensors, ctx.tensors)):
                graph = at_dims(ctx.graph, {t.uid: t.dims for t in tensors})
        ins, outs = bind_variant_pack(tensors, variant_pack)
        by_uid = {t.uid: t for t in tensors}
        logical = {u: logical_from_dense(by_uid[u], v) for u, v in ins.items()}
        try:
            env = evaluate(graph, logical, ctx.graph)
        except HipdnnError:
            raise
        except Exception as e:
            raise HipdnnError(Status.EXECUTION_FAILED, f"NUMPY_REFERENCE failed: {type(e).__name__}: {e}") from None
        for u, view in outs.items():
            store_logical(by_uid[u], view, env[u])
