"""Opt-in self-check: the first execution of each plan is compared with the NUMPY_REFERENCE engine.

Turn it on per handle (``hd.create_handle(..., self_check=True)``) or for every handle of a process
(``HIPDNN_IREE_SELF_CHECK=1``; an explicit ``self_check=False`` wins over the variable). It is meant
for a new target, a new IREE release or a new kind of graph: PyTorch's accuracy minifier compares a
compiled graph with eager mode on the same inputs, and this compares a compiled plan with the
float64 numpy oracle on the caller's own inputs.

What happens on the first ``execute`` of a plan (built or restored):

1. the plan runs as usual (outputs land in the caller's buffers);
2. every input and output buffer is copied to the host (numpy, torch CPU/CUDA, CuPy, JAX, anything
   ``np.from_dlpack`` reads), the graph is evaluated by the reference from the same inputs, and each
   output is compared: ``max |got - ref| / max |ref|`` must stay within :data:`RTOL` of its data type
   (non-float outputs: at most :data:`MISMATCH_FRACTION` of the elements may differ), and the plan
   may not give NaN/inf where the reference is finite;
3. a mismatch raises ``HipdnnError(EXECUTION_FAILED)`` naming each output, its error figures, the
   plan's target and engine. The verdict sticks: later executions of a failed plan raise the same
   error before running; a plan that passed is not checked again.

The reference needs the op graph. Built plans have it; plans written by this release carry it in
their module's reflection (``hipdnn_iree.graph``, base64 of the graph FlatBuffer), so restored plans
have it too. A restored plan without it, or with the pre-0.3 graph format (written by an older
release; told apart by the ``HDI1`` file identifier of graphs this release writes), raises ``NOT_SUPPORTED``
on its first execution when the self-check is on, before anything runs: re-save it with this
release, or turn the self-check off for that handle.

Cost: one reference evaluation (numpy, float64) plus a host copy of every buffer, on the first
execution only; docs/known_issues.md has the measured figures.
"""
from __future__ import annotations

import numpy as np

from hipdnn_iree.backend.handle import SELF_CHECK_ENV as ENV, engine_name  # noqa: F401  (ENV: the tests' name)
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

# Bound on max |got - ref| / max |ref| per output data type (names of hd.DataType); the reference
# rounds once from float64, the engines compute in the compute type (f32 unless set).
RTOL = {"FLOAT": 2e-3, "HALF": 2e-2, "BFLOAT16": 6e-2, "DOUBLE": 1e-9}
MISMATCH_FRACTION = 1e-3   # non-float outputs (comparisons can flip at rounding ties)


def to_host(obj) -> np.ndarray:
    """A numpy copy (or view) of a variant-pack buffer with its logical dims."""
    if isinstance(obj, np.ndarray):
        return obj
    mod = type(obj).__module__.split(".", 1)[0]
    try:
        if mod == "torch":
            t = obj.detach()
            name = str(t.dtype).rsplit(".", 1)[-1]
            if name == "bfloat16":
                import ml_dtypes
                return t.float().cpu().numpy().astype(ml_dtypes.bfloat16)
            if name.startswith(("float8_", "float4_")):      # numpy has no such dtypes: the codes
                from hipdnn_iree.plugin_sdk.buffers import _host_from_dlpack
                return _host_from_dlpack(t.cpu())
            return t.cpu().numpy()
        if mod == "cupy":
            return obj.get()
        if mod in ("jax", "jaxlib"):
            return np.asarray(obj)
        return np.from_dlpack(obj)
    except Exception as e:
        raise HipdnnError(Status.NOT_SUPPORTED, f"self-check cannot copy a {type(obj).__name__} buffer to the host: "
                                                f"{type(e).__name__}: {e}") from None


def graph_of(plan):
    """The decoded op graph of a plan, or None (restored from a plan that does not carry it)."""
    data = getattr(plan, "op_graph", None) or getattr(plan.context, "op_graph", None)
    if not data:
        return None
    from graph_ir.desc import decode_graph, is_project_graph
    if not is_project_graph(data):
        # NOTE: releases before 0.3 wrote the graph in this project's own old schema, which the
        # hipDNN schema would misread (dims and strides swap slots): refuse it, never guess.
        raise HipdnnError(Status.NOT_SUPPORTED,
                          "self-check: this restored plan carries its op graph in the graph format of hipdnn-iree "
                          "< 0.3, which this release does not read; re-save the plan with this release or create "
                          "the handle with self_check=False")
    return decode_graph(data)


def before_execute(plan) -> None:
    """Raises the sticky verdict of a failed plan, or NOT_SUPPORTED when there is nothing to check against."""
    if plan.self_check_error is not None:
        raise HipdnnError(Status.EXECUTION_FAILED, plan.self_check_error)
    if graph_of(plan) is None:
        raise HipdnnError(Status.NOT_SUPPORTED,
                          "self-check is on but this restored plan does not carry its op graph (written by an older "
                          "hipdnn-iree); re-save it with this release or create the handle with self_check=False")


def compare(plan, variant_pack) -> list[str]:
    """Runs the plan's graph on the reference engine (through the plugin contract) with the pack's
    inputs; returns one line per output that disagrees with what the plan wrote."""
    from hipdnn_iree.backend.engines import REFERENCE_ENGINE
    from hipdnn_iree.plugin_sdk.buffers import logical_from_dense, numpy_dtype
    from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
    from graph_ir.layout import physical_layout
    tensors = getattr(plan.context, "tensors", None)
    rm = plan.handle.resource_manager
    ref = rm.reference_plugin()
    if ref is None:
        raise HipdnnError(Status.NOT_SUPPORTED, f"self-check needs the {REFERENCE_ENGINE} engine, which is not "
                                                "installed")
    data = getattr(plan, "op_graph", None) or getattr(plan.context, "op_graph", None)
    pack, outs = {}, {}
    for t in tensors:
        if t.role == "input":
            pack[t.uid] = np.asarray(to_host(variant_pack[t.uid]))
        else:
            shape = physical_layout(t.dims, t.strides, t.name).phys_shape
            pack[t.uid] = outs[t.uid] = np.zeros(shape, numpy_dtype(t.data_type))
    eid = engine_id_from_name(REFERENCE_ENGINE)
    try:
        ctx = rm.call(ref, "create_execution_context", eid, data)
        try:
            rm.call(ref, "execute_op_graph", ctx, pack, None)
        finally:
            rm.call(ref, "destroy_execution_context", ctx)
    except HipdnnError as e:
        raise HipdnnError(Status.EXECUTION_FAILED, f"self-check: the reference failed: {e}") from None
    bad = []
    for t in tensors:
        if t.role != "output":
            continue
        got = np.asarray(to_host(variant_pack[t.uid]))
        if got.shape != tuple(t.dims):
            got = logical_from_dense(t, got)
        why = compare_arrays(t, got, np.asarray(logical_from_dense(t, outs[t.uid])))
        if why:
            bad.append(why)
    return bad


def compare_arrays(t, got: np.ndarray, ref: np.ndarray, what: str = "") -> str | None:
    """None when output ``t``'s values ``got`` agree with ``ref`` within RTOL (per data type), else
    one line saying by how much they differ (also autotune's check of candidates against plan 0)."""
    from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
    from hipdnn_iree.plugin_sdk.types import DataType
    name = DataType(t.data_type).name
    floating = np.issubdtype(numpy_dtype(t.data_type), np.floating) or name == "BFLOAT16"
    if not floating:
        frac = float(np.mean(got != ref)) if ref.size else 0.0
        if frac > MISMATCH_FRACTION:
            return (f"output uid {t.uid} '{t.name}' ({name}): {frac:.2%} of {ref.size} elements differ{what} "
                    f"(bound {MISMATCH_FRACTION:.1e})")
        return None
    g64, r64 = got.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(r64)
    new_nonfinite = int(np.count_nonzero(finite & ~np.isfinite(g64)))
    scale = float(np.abs(r64[finite]).max()) if finite.any() else 0.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(g64 - r64)[finite & np.isfinite(g64)]
    err = float(diff.max()) if diff.size else 0.0
    rel = err / max(scale, 1e-30) if scale > 0 else err
    bound = RTOL.get(name, 2e-3)
    if new_nonfinite or rel > bound:
        off = int(np.count_nonzero(diff > bound * max(scale, 1e-30)))
        return (f"output uid {t.uid} '{t.name}' ({name}): max |err| {err:.4g}, max |ref| {scale:.4g}, "
                f"rel err {rel:.3g} (bound {bound:g}), {off} of {ref.size} elements off, "
                f"{new_nonfinite} non-finite where the reference is finite{what}")
    return None


def after_execute(plan, variant_pack) -> None:
    """Runs the comparison once; raises EXECUTION_FAILED (and remembers it) on a mismatch."""
    plan.self_checked = True
    graph_of(plan)   # NOTE: refuses graphs in the pre-0.3 format before anything runs
    bad = compare(plan, variant_pack)
    if bad:
        target = getattr(getattr(plan.context, "target", None), "__str__", lambda: "?")()
        plan.self_check_error = (f"self-check failed: the plan (engine {engine_name(plan.handle, plan.engine_id)}, "
                                 f"target '{target}') disagrees with NUMPY_REFERENCE on its first execution: "
                                 + "; ".join(bad))
        raise HipdnnError(Status.EXECUTION_FAILED, plan.self_check_error)
