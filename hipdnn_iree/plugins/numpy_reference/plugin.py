"""The ``NUMPY_REFERENCE`` engine: evaluates the graph with numpy (the oracle).

It has no serialization hooks, so serializing its plans raises NOT_SUPPORTED.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hipdnn_iree.plugin_sdk.buffers import BoundTensor, bind_variant_pack, logical_from_dense, numpy_dtype, store_logical
from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.version import __version__
from hipdnn_iree.plugins.numpy_reference import conv, norm, pointwise, sdpa  # noqa: F401  (register)
from hipdnn_iree.plugins.numpy_reference.registry import REFERENCES
from lowering.graph_ir import GraphDesc, LoweringError, decode_graph

ENGINE_NAME = "NUMPY_REFERENCE"
ENGINE_ID = engine_id_from_name(ENGINE_NAME)


@dataclass
class ReferenceContext:
    graph: GraphDesc
    tensors: list[BoundTensor]


def bound_tensors(g: GraphDesc) -> list[BoundTensor]:
    outs = g.output_uids()
    return [BoundTensor(t.uid, t.name, "output" if t.uid in outs else "input", t.data_type, t.dims, t.strides)
            for t in g.bound_tensors()]


class RefEnv(dict):
    """Tensor values by uid, as the op references see them; ``dims(uid)`` gives any tensor's
    declared logical dims (outputs included: some ops' output dims cannot be derived)."""

    def __init__(self, values: dict, graph: GraphDesc):
        super().__init__(values)
        self.graph = graph

    def dims(self, uid: int) -> tuple[int, ...]:
        return tuple(self.graph.tensor(uid).dims)


def evaluate(g: GraphDesc, inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Runs the graph on logical input arrays; returns every tensor's value, rounded to its type."""
    env = RefEnv(inputs, g)
    for t in g.tensors:
        if t.is_scalar:
            env[t.uid] = np.asarray(t.scalar_value, dtype=numpy_dtype(t.data_type))
    for node in g.nodes:
        results = REFERENCES[node.kind](node, env)
        for uid, val in results.items():
            t = g.tensor(uid)
            val = np.broadcast_to(np.asarray(val), t.dims) if np.asarray(val).shape != tuple(t.dims) else val
            with np.errstate(all="ignore"):
                env[uid] = np.asarray(val).astype(numpy_dtype(t.data_type))
    return env


class NumpyReferencePlugin:
    name = "hipdnn_iree.numpy_reference"
    version = __version__

    def bind(self, device_uri, target) -> None:
        pass

    engine_names = {ENGINE_ID: ENGINE_NAME}

    def get_all_engine_ids(self) -> list[int]:
        return [ENGINE_ID]

    def get_applicable_engine_ids(self, op_graph: bytes) -> list[int]:
        try:
            g = decode_graph(op_graph)
        except LoweringError:
            return []
        from lowering.graph_ir import unsupported_reason
        ok = all(n.kind in REFERENCES for n in g.nodes) and unsupported_reason(g, tuple(REFERENCES)) is None
        return [ENGINE_ID] if ok else []

    def get_workspace_size(self, engine_id: int, op_graph: bytes) -> int:
        return 0

    def create_execution_context(self, engine_id: int, op_graph: bytes, engine_config=None) -> ReferenceContext:
        try:
            g = decode_graph(op_graph)
        except LoweringError as e:
            raise HipdnnError(Status.BAD_PARAM, str(e)) from None
        return ReferenceContext(g, bound_tensors(g))

    def destroy_execution_context(self, ctx) -> None:
        pass

    def execute_op_graph(self, ctx: ReferenceContext, variant_pack: dict, workspace=None) -> None:
        ins, outs = bind_variant_pack(ctx.tensors, variant_pack)
        by_uid = {t.uid: t for t in ctx.tensors}
        logical = {u: logical_from_dense(by_uid[u], v) for u, v in ins.items()}
        try:
            env = evaluate(ctx.graph, logical)
        except HipdnnError:
            raise
        except Exception as e:
            raise HipdnnError(Status.EXECUTION_FAILED, f"NUMPY_REFERENCE failed: {type(e).__name__}: {e}") from None
        for u, view in outs.items():
            store_logical(by_uid[u], view, env[u])
