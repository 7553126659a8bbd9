"""``hd.Graph``: build an op graph, run the lifecycle, execute, (de)serialize plans."""
from __future__ import annotations

import math
import numbers

from hipdnn_iree import backend as _backend
from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
from hipdnn_iree.backend.handle import Handle
from hipdnn_iree.frontend.ops.registry import check_frontend, infer
from hipdnn_iree.frontend.ops.conv import ConvOps
from hipdnn_iree.frontend.ops.custom_op import CustomOps
from hipdnn_iree.frontend.ops.norm import NormOps
from hipdnn_iree.frontend.ops.batchnorm_train import BatchnormTrainOps
from hipdnn_iree.frontend.ops.block_scale import BlockScaleOps
from hipdnn_iree.frontend.ops.norm_backward import NormBackwardOps
from hipdnn_iree.frontend.ops.moe import MoeOps
from hipdnn_iree.frontend.ops.resample import ResampleOps
from hipdnn_iree.frontend.ops.sdpa import SdpaOps
from hipdnn_iree.frontend.plans import PlanOps, PlanSlot
from hipdnn_iree.frontend.fleet import FleetOps
from hipdnn_iree.plugin_sdk.errors import to_hipdnn
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.frontend.node import _Node
from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.plugin_sdk.types import DataType, NormFwdPhase, PointwiseMode, ReductionMode, as_enum
from graph_ir.desc import (ABSENT, ATTRS_BY_KIND, GraphDesc, GraphError, NodeDesc, OpKind, TensorDesc,
                               encode_graph)
from graph_ir.layout import packed_strides, physical_layout
from graph_ir.opdef import OPS

# NOTE: no target can address more: x86-64 user space is 2**47 bytes, and GPU virtual address
# spaces (49 bits) dwarf any device's memory. Larger tensors are refused at validate().
MAX_TENSOR_BYTES = 2**47


class Graph(PlanOps, FleetOps, ConvOps, BatchnormTrainOps, NormBackwardOps, NormOps, SdpaOps, ResampleOps, BlockScaleOps, MoeOps, CustomOps):
    """An operation graph and, once built, its execution plan.

    Example:
        >>> import numpy as np, hipdnn_iree as hd                  # doctest: +SKIP
        >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
        >>> a = g.tensor(name="A", uid=1, dim=[4, 8]); b = g.tensor(name="B", uid=2, dim=[8, 5])
        >>> g.matmul(a, b).set_output(True).set_uid(3)
        >>> handle = hd.create_handle(); g.build(handle)
        >>> c = np.empty((4, 5), np.float32)
        >>> g.execute(handle, {1: np.ones((4, 8), np.float32), 2: np.ones((8, 5), np.float32), 3: c})
    """

    def __init__(self, name: str = "graph", io_data_type=DataType.NOT_SET,
                 intermediate_data_type=DataType.NOT_SET, compute_data_type=DataType.NOT_SET):
        self.name = str(name)
        self.io_data_type = as_enum(DataType, io_data_type, f"graph '{self.name}': io_data_type")
        self.intermediate_data_type = as_enum(DataType, intermediate_data_type,
                                              f"graph '{self.name}': intermediate_data_type")
        self.compute_data_type = as_enum(DataType, compute_data_type, f"graph '{self.name}': compute_data_type")
        self._tensors: list[TensorAttributes] = []
        self._nodes: list[_Node] = []
        self._restored = False
        self._dynamic = False          # compile with symbolic dims (set_dynamic_shape_enabled)
        self._override = False         # execute at other shapes (set_override_shape_enabled)
        self._kernel_cache = None      # hd.KernelCache shared by same-topology graphs
        self._reset_build()

    def _reset_build(self):
        self._validated = False
        self._desc: GraphDesc | None = None
        self._op_graph: bytes | None = None
        self._handle: Handle | None = None
        self._candidates: list[int] | None = None
        self._supported = False
        self._plans: list[PlanSlot] | None = None                  # one per engine config (frontend/plans.py)
        self._selected = 0
        self._plan: _backend.ExecutionPlanDescriptor | None = None   # the selected plan, once built
        self._preferred: int | None = getattr(self, "_preferred", None)
        self._shape_spec = None                                    # graph_ir.dynamic.ShapeSpec once analyzed

    # -- state guards --------------------------------------------------------------
    def _check_mutable(self):
        if self._restored:
            raise HipdnnError(Status.NOT_SUPPORTED, "this graph was restored from a compiled plan: it holds only "
                                                    "the plan and cannot be modified or rebuilt")
        if self._plan is not None or self._validated:
            self._reset_build()

    def _check_not_restored(self, what: str):
        if self._restored:
            raise HipdnnError(Status.NOT_SUPPORTED, f"{what}() is not available: this graph was restored from a "
                                                    "compiled plan and has no source graph")

    # -- tensors -----------------------------------------------------------------------
    def tensor(self, name=None, uid=None, dim=None, stride=None, data_type=DataType.NOT_SET,
               is_virtual=False, value=None) -> TensorAttributes:
        """A graph input (or, with ``value=``, a scalar constant baked into the plan)."""
        self._check_mutable()
        if value is not None:
            if not isinstance(value, numbers.Real):
                raise HipdnnError(Status.BAD_PARAM, f"scalar tensor '{name}': value must be a number, got {value!r}")
            t = TensorAttributes(self, name=name or f"scalar_{len(self._tensors)}", uid=uid, dim=[], stride=[],
                                 data_type=data_type if data_type != DataType.NOT_SET else DataType.FLOAT,
                                 is_virtual=False, value=float(value))
        else:
            t = TensorAttributes(self, name=name or f"tensor_{len(self._tensors)}", uid=uid, dim=dim,
                                 stride=stride, data_type=data_type, is_virtual=is_virtual)
        self._tensors.append(t)
        return t

    def _operand(self, x, what: str, op: str) -> TensorAttributes | None:
        self._check_operand(x, what, op)
        if isinstance(x, numbers.Real):
            return self.tensor(name=f"{op}_{what}_const", value=float(x))
        return x

    def _check_operand(self, x, what: str, op: str) -> None:
        if x is None or isinstance(x, numbers.Real) and not isinstance(x, bool):
            return
        if not isinstance(x, TensorAttributes):
            raise HipdnnError(Status.BAD_PARAM, f"{op}: {what} must be a TensorAttributes or a number, "
                                                f"got {type(x).__name__}")
        if x._graph is not self:
            raise HipdnnError(Status.BAD_PARAM, f"{op}: {what} '{x.get_name()}' belongs to another graph")

    def _virtual(self, name: str) -> TensorAttributes:
        t = TensorAttributes(self, name=name, is_virtual=True)
        self._tensors.append(t)
        return t

    def _add_node(self, kind: OpKind, name, compute_data_type, inputs: dict, outputs: list[str], params=None):
        self._check_mutable()
        name = name or f"{kind.name.lower()}_{len(self._nodes)}"
        if compute_data_type is not None:   # NOTE: checked before any tensor is added to the graph
            compute_data_type = as_enum(DataType, compute_data_type, f"{kind.name.lower()} '{name}': compute_data_type")
        for f, x in inputs.items():
            self._check_operand(x, f.removesuffix("_uid"), name)
        ins = {f: self._operand(x, f.removesuffix("_uid"), name) for f, x in inputs.items()}
        outs = {f: self._virtual(f"{name}::{f.removesuffix('_uid')}") for f in outputs}
        self._nodes.append(_Node(kind, name, compute_data_type, {**ins, **outs}, params or {}))
        return [outs[f] for f in outputs]

    # -- ops ---------------------------------------------------------------------------
    def matmul(self, a, b, compute_data_type=None, name=None) -> TensorAttributes:
        """``C = A @ B`` over the last two dims; batch dims broadcast; transposes via strides."""
        return self._add_node(OpKind.MATMUL, name, compute_data_type, {"a_uid": a, "b_uid": b}, ["c_uid"])[0]

    def pointwise(self, a, b=None, c=None, mode=None, alpha=None, beta=None, threshold=None,
                  compute_data_type=None, name=None, relu_lower_clip=None, relu_upper_clip=None,
                  relu_lower_clip_slope=None, axis=None) -> TensorAttributes:
        """Elementwise ``mode`` on 1-3 inputs with PyTorch-style broadcasting.

        ``alpha`` is ELU's alpha (hipDNN ``elu_alpha``), ``beta`` swish's or softplus's beta
        (``swish_beta`` / ``softplus_beta``); ReLU takes ``relu_lower_clip`` (default 0),
        ``relu_upper_clip`` (+inf) and ``relu_lower_clip_slope`` (0: leaky ReLU when set);
        GEN_INDEX takes ``axis``. hipDNN's schema has no softplus threshold: ``threshold`` other
        than None is NOT_SUPPORTED (softplus is x above beta * x > 20, as PyTorch's default).
        """
        try:
            mode = PointwiseMode(mode)
        except (ValueError, TypeError):
            raise HipdnnError(Status.BAD_PARAM, f"pointwise: mode must be an hd.PointwiseMode, got {mode!r}") from None
        if threshold is not None:
            _opt_float(threshold)
            raise HipdnnError(Status.NOT_SUPPORTED, "pointwise: threshold is not supported: hipDNN's graph schema has "
                                                    "no softplus threshold (softplus returns x where beta * x > 20)")
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, numbers.Integral)
                                 or not -2**63 <= axis < 2**63):
            raise HipdnnError(Status.BAD_PARAM, f"pointwise: axis must be an int64 (GEN_INDEX's axis), got {axis!r}")
        # NOTE: NaN means "unset" in the node's fields, so a NaN argument is refused, not stored; the
        # ReLU clips may be open-ended (-inf lower, +inf upper), every other parameter is finite.
        params = {"operation": int(mode), "elu_alpha": _opt_float(alpha, "alpha"),
                  "swish_beta": _opt_float(beta, "beta") if mode in (PointwiseMode.SWISH_FWD, PointwiseMode.SWISH_BWD)
                  else math.nan,
                  "softplus_beta": _opt_float(beta, "beta") if mode not in (PointwiseMode.SWISH_FWD,
                                                                            PointwiseMode.SWISH_BWD) else math.nan,
                  "relu_lower_clip": _opt_float(relu_lower_clip, "relu_lower_clip", -math.inf),
                  "relu_upper_clip": _opt_float(relu_upper_clip, "relu_upper_clip", math.inf),
                  "relu_lower_clip_slope": _opt_float(relu_lower_clip_slope, "relu_lower_clip_slope"),
                  "axis": None if axis is None else int(axis)}
        return self._add_node(OpKind.POINTWISE, name, compute_data_type,
                              {"in_0_uid": a, "in_1_uid": b, "in_2_uid": c}, ["out_0_uid"], params)[0]

    # -- dynamic and override shapes (API.md, "Dynamic and override shapes") --------------
    def set_dynamic_shape_enabled(self, enabled: bool = True):
        """Compile with symbolic dims for the dims that may vary (docs/dynamic_shapes.md): one
        module serves every batch size and sequence length. The plan itself still executes at
        the graph's own dims unless override shapes are enabled too."""
        self._check_mutable()
        enabled = _flag(enabled, "set_dynamic_shape_enabled")
        if not enabled and self._override:
            raise HipdnnError(Status.BAD_PARAM, "set_dynamic_shape_enabled(False): override shapes are enabled and "
                                                "need dynamic shapes; call set_override_shape_enabled(False) first")
        if not enabled and self._kernel_cache is not None:
            raise HipdnnError(Status.BAD_PARAM, "set_dynamic_shape_enabled(False): a kernel cache is set and needs "
                                                "dynamic shapes; call set_kernel_cache(None) first")
        self._dynamic = enabled
        return self

    def set_override_shape_enabled(self, enabled: bool = True):
        """Let ``execute`` take shapes other than the built ones (``override_uids=`` /
        ``override_shapes=`` / ``override_strides=``, or each buffer's own shape). Implies
        dynamic shapes. The plan serializes with the envelope's ``is_override_shape_enabled``."""
        self._check_mutable()
        enabled = _flag(enabled, "set_override_shape_enabled")
        self._override = enabled
        if enabled:
            self._dynamic = True
        return self

    def set_kernel_cache(self, kernel_cache):
        """Share compiled modules with other graphs of this topology (``hd.KernelCache``); None
        removes it. Implies dynamic shapes (the cached module must serve every shape)."""
        from hipdnn_iree.frontend.kernel_cache import KernelCache
        self._check_mutable()
        if kernel_cache is not None and not isinstance(kernel_cache, KernelCache):
            raise HipdnnError(Status.BAD_PARAM, f"set_kernel_cache: expected an hd.KernelCache or None, got "
                                                f"{type(kernel_cache).__name__}")
        self._kernel_cache = kernel_cache
        if kernel_cache is not None:
            self._dynamic = True
        return self

    def is_dynamic_shape_enabled(self) -> bool:
        return self._dynamic

    def is_override_shape_enabled(self) -> bool:
        if self._restored and self._plan is not None:
            return bool(getattr(self._plan, "override_enabled", False))
        return self._override

    def _dynamic_request(self):
        """What a dynamic build hands the engine: the ShapeSpec (canonical JSON), whether the plan
        takes override shapes, the kernel cache. None for a static build."""
        if not self._dynamic:
            return None
        if self._shape_spec is None:
            from graph_ir.dynamic import analyze
            try:
                self._shape_spec = analyze(self._desc)
            except GraphError as e:
                raise to_hipdnn(e, "graph", f"graph '{self.name}': dynamic shapes: ") from None
        return {"shape_spec": self._shape_spec.to_json(), "override": self._override,
                "kernel_cache": self._kernel_cache}

    # -- lifecycle ---------------------------------------------------------------------
    def validate(self):
        """Checks the graph, assigns UIDs to unnamed tensors and infers dims/strides/types."""
        self._check_not_restored("validate")
        if not self._nodes:
            raise HipdnnError(Status.BAD_PARAM, f"graph '{self.name}' has no operations")
        used = {}
        for t in self._tensors:
            if t._uid is not None:
                if t._uid in used and used[t._uid] is not t:
                    raise HipdnnError(Status.BAD_PARAM, f"uid {t._uid} is used by tensors '{used[t._uid].get_name()}' "
                                                        f"and '{t.get_name()}'")
                used[t._uid] = t
        next_uid = max([u for u in used] + [0]) + 1
        for t in self._tensors:
            if t._uid is None:
                t._uid, next_uid = next_uid, next_uid + 1
        for t in self._tensors:          # strides inferred by an earlier validate follow today's inputs
            if t._stride_inferred:
                t._stride, t._stride_inferred = None, False
        produced = {}
        for n in self._nodes:
            for f in _ports(n, outputs=True):
                t = n.tensors.get(f)
                if t is not None:
                    produced[id(t)] = n
        for t in self._tensors:
            if id(t) not in produced and not t.is_scalar():
                if t._is_virtual:
                    raise HipdnnError(Status.BAD_PARAM, f"tensor '{t.get_name()}' is virtual but no op produces it")
                if t._dim is None:
                    raise HipdnnError(Status.BAD_PARAM, f"input tensor '{t.get_name()}' (uid {t._uid}) has no dims")
                if t._data_type == DataType.NOT_SET:
                    if self.io_data_type == DataType.NOT_SET:
                        raise HipdnnError(Status.BAD_PARAM, f"input tensor '{t.get_name()}' has no data type and "
                                                            "the graph has no io_data_type")
                    t._data_type = self.io_data_type
                self._check_layout(t, is_output=False)
        # nodes in insertion order must be topological: inputs known before use
        known = {t._uid: tuple(t._dim) for t in self._tensors if id(t) not in produced and t._dim is not None}
        for t in self._tensors:
            if t.is_scalar():
                known[t._uid] = ()
        for n in self._nodes:
            desc = self._node_desc(n)
            for f in _ports(n, outputs=False):
                t = n.tensors.get(f)
                if t is not None and t._uid not in known:
                    raise HipdnnError(Status.BAD_PARAM, f"{n.kind.name.lower()} '{n.name}': input {f} "
                                                        f"'{t.get_name()}' is used before it is produced")
            # NOTE: outputs whose dims the caller set are visible too, so ops that cannot infer
            # an output (conv_dgrad's dx, conv_wgrad's dw, reduction) can still check them.
            preset = {t._uid: tuple(t._dim) for f in _ports(n, outputs=True)
                      if (t := n.tensors.get(f)) is not None and t._dim is not None}
            inferred = infer(desc, lambda u: known[u] if u in known else preset[u])
            for f in _ports(n, outputs=True):
                t = n.tensors.get(f)
                if t is None:
                    continue
                dims = inferred.get(t._uid)
                if t._dim is None:
                    if dims is None:
                        raise HipdnnError(Status.BAD_PARAM, f"{n.kind.name.lower()} '{n.name}': set the dims of "
                                                            f"output '{t.get_name()}' (they cannot be inferred)")
                    t._dim = list(dims)
                elif dims is not None and tuple(t._dim) != tuple(dims):
                    raise HipdnnError(Status.BAD_PARAM, f"{n.kind.name.lower()} '{n.name}': output "
                                                        f"'{t.get_name()}' has dims {t._dim} but the op gives "
                                                        f"{list(dims)}")
                if t._data_type == DataType.NOT_SET:
                    t._data_type = self._default_out_type(n, t)
                if t._stride is None:
                    t._stride, t._stride_inferred = _inferred_strides(n, f, t._dim, t._layout_hint), True
                self._check_layout(t, is_output=not t._is_virtual)
                known[t._uid] = tuple(t._dim)
        self._desc = self._graph_desc()
        self._validated = True
        return self

    def _drop_plans_of(self, engine_ids) -> None:
        """Leaves the plans of ``engine_ids`` out of the plan list (cuDNN's deselect_engines)."""
        if self._plans:
            self._plans = [p for p in self._plans if p.config.engine_id not in set(engine_ids)]

    def _dims_now(self, t: TensorAttributes) -> list[int]:
        """``t``'s dims, inferred now when unset (as validate infers them): the facade composes ops
        whose shapes follow an op output's. Only ``t``'s dims are kept: the uids, types and dims
        validate gives the other tensors are put back, and the graph stays unvalidated."""
        if t._dim is not None:
            return list(t._dim)
        saved = [(x, x._uid, x._dim, x._data_type) for x in self._tensors]
        try:
            self.validate()
            dims = list(t._dim)
        finally:
            for x, uid, d, dt in saved:
                x._uid, x._dim, x._data_type = uid, d, dt
            self._reset_build()
        t._dim = dims
        return dims

    def _default_out_type(self, n: _Node, t: TensorAttributes) -> DataType:
        fixed = OPS[n.kind].output_type
        if fixed is not None and fixed(n.params) is not None:
            return DataType(fixed(n.params))
        if t._is_virtual:
            return self.intermediate_data_type if self.intermediate_data_type != DataType.NOT_SET else DataType.FLOAT
        if self.io_data_type != DataType.NOT_SET:
            return self.io_data_type
        first = next((x for f, x in n.tensors.items() if x is not None and f in _ports(n, outputs=False)), None)
        return first._data_type if first is not None else DataType.FLOAT

    def _check_layout(self, t: TensorAttributes, is_output: bool):
        what = f"tensor '{t.get_name()}' (uid {t._uid})"
        if len(t._dim) == 0:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: rank-0 tensors (dims []) are not supported; use dims [1] "
                                                "for a one-element tensor, or g.tensor(value=...) for a constant")
        if t._stride is None:
            t._stride = list(packed_strides(t._dim))
        try:
            lay = physical_layout(t._dim, t._stride, what, output=is_output)
        except GraphError as e:
            raise to_hipdnn(e, "graph") from None
        itemsize = numpy_itemsize(t._data_type)
        span = 1 + sum((d - 1) * s for d, s in zip(t._dim, t._stride))
        if span * itemsize > MAX_TENSOR_BYTES:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: dims {t._dim} with strides {t._stride} span "
                                                f"{span * itemsize} bytes of {t._data_type.name}, over the "
                                                f"{MAX_TENSOR_BYTES}-byte (2**47) limit of what a target can address")
        if is_output and lay.bcast_axes:
            raise HipdnnError(Status.BAD_PARAM, f"output tensor '{t.get_name()}': stride 0 on axes "
                                                f"{list(lay.bcast_axes)} is only allowed on inputs")

    def _node_desc(self, n: _Node) -> NodeDesc:
        cls = ATTRS_BY_KIND[n.kind]
        kwargs = dict(n.params)
        for f, t in n.tensors.items():
            field, entry, _ = f.partition("[")
            if entry:   # an entry of a tensor-list field (_ports), in order
                kwargs[field] = (*kwargs.get(field, ()), t._uid)
            else:
                kwargs[f] = ABSENT if t is None else t._uid
        return NodeDesc(n.name, int(n.compute_data_type), cls(**kwargs))

    def _graph_desc(self) -> GraphDesc:
        tensors = tuple(TensorDesc(t._uid, t.get_name(), int(t._data_type), tuple(t._dim or ()),
                                   tuple(t._stride or ()), bool(t._is_virtual), t.is_scalar(),
                                   float(t._value) if t.is_scalar() else 0.0)
                        for t in self._tensors)
        return GraphDesc(self.name, int(self.io_data_type), int(self.intermediate_data_type),
                         int(self.compute_data_type), tensors, tuple(self._node_desc(n) for n in self._nodes))

    def build_operation_graph(self, handle):
        """Serializes the graph to FlatBuffer bytes for the backend (validating first if needed)."""
        self._check_not_restored("build_operation_graph")
        _check_handle(handle)
        if not self._validated:
            self.validate()
        self._op_graph = encode_graph(self._desc)
        self._handle = handle
        return self

    def build(self, handle):
        """``validate``, ``build_operation_graph``, ``create_execution_plans``, ``check_support``, ``build_plans``."""
        return (self.validate().build_operation_graph(handle).create_execution_plans()
                .check_support().build_plans())

    def set_preferred_engine_id_ext(self, engine):
        """Prefers an engine by id or UPPER_CASE name (e.g. ``"NUMPY_REFERENCE"``)."""
        self._check_not_restored("set_preferred_engine_id_ext")
        label = engine
        if isinstance(engine, str):
            engine = engine_id_from_name(engine)
        if isinstance(engine, bool) or not isinstance(engine, int):
            raise HipdnnError(Status.BAD_PARAM, f"engine must be an id or a name, got {engine!r}")
        if not -2**63 <= engine < 2**63:
            raise HipdnnError(Status.BAD_PARAM, f"engine id {engine} is out of range: engine ids are int64 "
                                                "(FNV-1a 64 of the engine name, as hd.engine_id_from_name gives)")
        self._preferred = int(engine)
        self._preferred_label = f"'{label}' (id {engine})" if isinstance(label, str) else f"id {engine}"
        self._candidates, self._supported, self._plan, self._plans = None, False, None, None
        return self

    # -- plan queries & execution --------------------------------------------------------
    def _require_plan(self, what: str):
        if self._plan is None:
            raise HipdnnError(Status.NOT_INITIALIZED, f"{what}: the graph has no built plan; call build(handle) "
                                                      "(or deserialize_compiled_plan) first")
        return self._plan

    def get_workspace_size(self) -> int:
        return self._require_plan("get_workspace_size").get_attribute(_backend.Attribute.EXECUTION_PLAN_WORKSPACE_SIZE)

    def get_execution_plan_engine_id(self) -> int:
        return self._require_plan("get_execution_plan_engine_id").engine_id

    def get_execution_plan(self) -> _backend.ExecutionPlanDescriptor:
        return self._require_plan("get_execution_plan")

    def execute(self, handle, variant_pack, workspace=None, override_uids=None, override_shapes=None,
                override_strides=None) -> None:
        """Runs the selected plan; outputs are written into the caller's buffers.

        An override-shape plan (``set_override_shape_enabled``) runs at the shapes given for
        ``override_uids`` (``override_shapes``, and optionally ``override_strides``: packed in the
        plan's memory order) and at each other buffer's own shape; without them, at every
        buffer's own shape. A shape the plan cannot take is BAD_PARAM naming the uid, the dim and
        what the plan allows; outputs are then untouched.
        """
        plan = self._require_plan("execute")
        overrides = _overrides(plan, override_uids, override_shapes, override_strides)
        self._execute(plan, handle, variant_pack, workspace, overrides)

    def _require_handle(self, what: str):
        if self._handle is None:
            raise HipdnnError(Status.NOT_INITIALIZED, f"{what}: call build_operation_graph(handle) (or build) first")
        return self._handle

    def _execute(self, plan, handle, variant_pack, workspace, overrides=None) -> None:
        _check_handle(handle)
        if handle is not plan.handle and (handle.device != plan.handle.device):
            raise HipdnnError(Status.BAD_PARAM_STREAM_MISMATCH,
                              f"plan was built for device {plan.handle.device!r} but execute got a handle for "
                              f"{handle.device!r}")
        plan.execute(variant_pack, workspace, overrides=overrides)

    # -- compiled-plan serialization (RFC 0009) ------------------------------------------
    def serialize_compiled_plan(self, signing_key=None, _envelope_version=None, *, payload="compiled") -> bytes:
        """The compiled plan as bytes: envelope + plugin payload (for IREE: FUSPLAN + .vmfb).

        Args:
            signing_key: optional bytes/str; adds an HMAC-SHA256 signature that
                ``deserialize_compiled_plan(..., verify_key=)`` checks.
            payload: ``"compiled"`` (default): the compiled module (FUSPLAN kind 2, or 3 for several
                targets), engine id ``IREE_LINALG``; restores without the compiler.
                ``"hipdnn_graph"``: the plan as hipDNN's fusilli-provider writes it: envelope engine id
                ``FUSILLI_ENGINE``, FUSPLAN 1.0 kind 1 holding the graph's hipDNN FlatBuffer. hipDNN's
                fusilli-provider restores it (on AMD GPUs), and so does this project's IREE engine, by
                compiling it (the IREE compiler is then needed; ``hipdnn-iree upgrade`` turns it into a
                compiled plan). It cannot be signed (format 1.0 has no metadata).

        Example:
            >>> data = g.serialize_compiled_plan(payload="hipdnn_graph")   # doctest: +SKIP
        """
        plan = self._require_plan("serialize_compiled_plan")
        if _envelope_version is not None:  # NOTE: only the frozen-corpus script writes old versions
            return _backend.serialize_execution_plan(plan, signing_key, _envelope_version)
        # NOTE: the envelope's bytes as encoded (hipDNN's two-call pattern, get_serialized_execution_plan,
        # would copy them twice more: into a caller buffer and back to bytes)
        return _backend.serialize_execution_plan(plan, signing_key, payload=payload)

    def to_compiled_plan_binary(self, signing_key=None) -> bytes:
        return self.serialize_compiled_plan(signing_key)

    def deserialize_compiled_plan(self, handle, data, verify_key=None) -> "Graph":
        """Restores a compiled plan into this (empty) graph; no compilation happens.

        ``data``: bytes, or any C-contiguous buffer of 1-byte items (bytearray, memoryview, a numpy
        uint8 array), copied once so the caller may reuse it. With ``verify_key`` the plan must
        carry a valid signature made with that key.
        """
        _check_handle(handle)
        if self._nodes or self._tensors:
            raise HipdnnError(Status.BAD_PARAM, "deserialize_compiled_plan needs an empty Graph: this one already "
                                                "has tensors or operations")
        plan = _backend.create_and_deserialize_execution_plan(handle, data, verify_key)
        self._reset_build()
        self._plan, self._handle, self._restored = plan, handle, True
        config = plan.engine_config or _backend.EngineConfig(plan.engine_id, _engine_name_of(handle, plan.engine_id))
        self._plans, self._selected, self._supported = [PlanSlot(config, plan)], 0, True
        return self

    def from_compiled_plan_binary(self, handle, data, verify_key=None) -> "Graph":
        return self.deserialize_compiled_plan(handle, data, verify_key)

    @classmethod
    def from_compiled_plan(cls, handle, data, verify_key=None) -> "Graph":
        return cls().deserialize_compiled_plan(handle, data, verify_key)

    @classmethod
    def from_compiled_plan_file(cls, handle, path, verify_key=None, *, mmap: bool = False) -> "Graph":
        """Restores a plan straight from a plan file.

        Default: the file is read once into private 64-byte aligned memory and the IREE module is
        imported from that copy without another one; the restored plan does not depend on the file
        afterwards (it may be rewritten, truncated or deleted). Reads are bounded as in
        ``hd.load_plan``.

        ``mmap=True`` maps the file instead and imports the module from the mapping: no copy, a
        large plan restores faster and costs no memory of its own. It requires that the file is
        not truncated or rewritten in place while the restored plan is alive: the mapping follows
        the file, so that kills the process with SIGBUS or changes the code it runs. Replacing the
        file by rename (``hd.save_plan``, ``mv``) is safe.

        Example:
            >>> r = hd.Graph.from_compiled_plan_file(handle, "mlp.plan")   # doctest: +SKIP
        """
        from hipdnn_iree.backend.planfile import map_plan, read_plan_private
        _check_handle(handle)
        if not isinstance(mmap, bool):
            raise HipdnnError(Status.BAD_PARAM, f"from_compiled_plan_file: mmap must be True or False, got {mmap!r}")
        data = map_plan(path) if mmap else read_plan_private(path)
        return cls().deserialize_compiled_plan(handle, data, verify_key)

    def get_compiled_plan_tensor_uids(self) -> list[int]:
        return self._require_plan("get_compiled_plan_tensor_uids").get_attribute(
            _backend.Attribute.EXECUTION_PLAN_TENSOR_UIDS_EXT)

    def get_compiled_plan_tensors(self) -> list:
        """For each bound UID: role, dims, strides and data type, read from the plan alone.

        Lets a caller allocate buffers for a plan they did not build. Returns a list of
        :class:`hd.PlanTensor`, sorted by uid.
        """
        return self._require_plan("get_compiled_plan_tensors").get_attribute(
            _backend.Attribute.EXECUTION_PLAN_TENSORS_EXT)

    def get_mlir(self, target: str | None = None) -> str:
        """The MLIR (linalg on tensors) the IREE engine compiles for this graph and ``target``
        (default ``llvm-cpu:host``), every knob AUTO; validates first. No device needed."""
        from hipdnn_iree.frontend.mlir_view import graph_mlir
        return graph_mlir(self, target)

    def release(self) -> None:
        """Releases the plan's engine resources now (instead of at garbage collection)."""
        if self._plan is not None:
            self._plan.release()
            self._plan = None

    @property
    def is_restored(self) -> bool:
        return self._restored

    def get_op_graph_bytes(self) -> bytes:
        """The serialized operation graph (``schemas/graph.fbs``) after build_operation_graph."""
        if self._op_graph is None:
            raise HipdnnError(Status.NOT_INITIALIZED, "call build_operation_graph(handle) first")
        return self._op_graph

    # -- JSON (format: hipdnn_iree/frontend/graph_json.py) -----------------------------------------
    def to_json(self, indent: int | None = 2) -> str:
        """The graph, validated first when needed, as JSON text (``hipdnn-iree compile`` reads it).

        Example:
            >>> g2 = hd.Graph.from_json(g.to_json())                # doctest: +SKIP
        """
        from hipdnn_iree.frontend.graph_json import graph_to_json
        return graph_to_json(self, indent)

    @classmethod
    def from_json(cls, text) -> "Graph":
        """A buildable graph from :meth:`to_json` text (str, bytes or the parsed dict)."""
        from hipdnn_iree.frontend.graph_json import graph_from_json
        return graph_from_json(text, cls)

    def to_hipdnn_graph(self) -> bytes:
        """The graph (validated first when needed) as hipDNN graph FlatBuffer bytes
        (``schemas/graph.fbs``, wire-compatible with hipDNN's schema; docs/graph_schema.md).

        Example:
            >>> g2 = hd.Graph.from_hipdnn_graph(g.to_hipdnn_graph())   # doctest: +SKIP
        """
        self._check_not_restored("to_hipdnn_graph")
        if not self._validated:
            self.validate()
        return encode_graph(self._desc)

    @classmethod
    def from_hipdnn_graph(cls, data) -> "Graph":
        """A validated, buildable graph from hipDNN graph FlatBuffer bytes (from hipDNN's
        frontend, a FUSPLAN kind-1 plan or :meth:`to_hipdnn_graph`).

        Malformed or hostile bytes are BAD_PARAM naming the problem; a node type from a newer
        hipDNN, and tensor features this project cannot carry (ragged tensors, runtime
        pass-by-value scalars, execute-time shape overrides) are NOT_SUPPORTED. Node types it
        parses but does not lower are refused later, by ``check_support``, naming each node.
        """
        from hipdnn_iree.frontend.graph_json import graph_from_desc
        from graph_ir.desc import decode_graph
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise HipdnnError(Status.BAD_PARAM, f"from_hipdnn_graph: expected bytes, got {type(data).__name__}")
        try:
            desc = decode_graph(data)
        except GraphError as e:
            raise to_hipdnn(e, "graph", "from_hipdnn_graph: ") from None
        lost = [f"tensor '{t.name}' (uid {t.uid}): {what}" for t in desc.tensors for what, on in (
            ("is_runtime_pass_by_value", t.is_runtime_pass_by_value),
            ("ragged_offset_tensor_uid", t.ragged_offset_tensor_uid is not None)) if on]
        if desc.is_override_shape_enabled:
            lost.append("is_override_shape_enabled")
        if lost:
            raise HipdnnError(Status.NOT_SUPPORTED, "from_hipdnn_graph: not supported by hipdnn-iree: " + "; ".join(lost))
        g = graph_from_desc(desc, cls)
        g.validate()
        return g


def _ports(n: _Node, outputs: bool) -> list[str]:
    """The keys of ``n.tensors`` that are the node's outputs (or inputs), in operand order: its
    single-tensor fields, then the entries ``field[i]`` of its tensor-list fields (CUSTOM_OP's)."""
    cls = ATTRS_BY_KIND[n.kind]
    fields, lists = (cls._OUT, cls._OUT_LISTS) if outputs else (cls._IN, cls._IN_LISTS)
    if not lists:
        return list(fields)
    return [*fields, *(k for k in n.tensors if k.partition("[")[0] in lists)]


def _flag(v, what: str) -> bool:
    if not isinstance(v, bool):
        raise HipdnnError(Status.BAD_PARAM, f"{what}: expected True or False, got {v!r}")
    return v


def _int_list(v, what: str) -> tuple[int, ...]:
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise HipdnnError(Status.BAD_PARAM, f"{what} must be a list of ints, got {v!r}")
    out = []
    for x in v:
        if isinstance(x, bool) or not isinstance(x, numbers.Integral) or not -2**63 <= x < 2**63:
            raise HipdnnError(Status.BAD_PARAM, f"{what} must be a list of int64s, got {list(v)!r}")
        out.append(int(x))
    return tuple(out)


def _overrides(plan, uids, shapes, strides):
    """execute's override arguments as {uid: (dims, strides or None)}; None when none are given."""
    if uids is None and shapes is None and strides is None:
        return None
    if not getattr(plan, "override_enabled", False):
        raise HipdnnError(Status.BAD_PARAM, "execute: override_uids/override_shapes/override_strides given, but the "
                                            "plan was not built with override shapes enabled (call "
                                            "g.set_override_shape_enabled(True) before build)")
    if uids is None or shapes is None:
        raise HipdnnError(Status.BAD_PARAM, "execute: override_uids and override_shapes go together (one shape per uid)")
    uids = _int_list(uids, "override_uids")
    if isinstance(shapes, (str, bytes)) or not hasattr(shapes, "__len__") or len(shapes) != len(uids):
        raise HipdnnError(Status.BAD_PARAM, f"execute: override_shapes must hold one shape per override uid "
                                            f"({len(uids)}), got {shapes!r}")
    if strides is not None and (isinstance(strides, (str, bytes)) or not hasattr(strides, "__len__")
                                or len(strides) != len(uids)):
        raise HipdnnError(Status.BAD_PARAM, f"execute: override_strides must hold one stride list per override uid "
                                            f"({len(uids)}), got {strides!r}")
    bound = set(plan.tensor_uids)
    out = {}
    for i, u in enumerate(uids):
        if u not in bound:
            raise HipdnnError(Status.BAD_PARAM, f"execute: override uid {u} is not a tensor the plan binds "
                                                f"(uids {sorted(bound)})")
        if u in out:
            raise HipdnnError(Status.BAD_PARAM, f"execute: override uid {u} is given twice")
        dims = _int_list(shapes[i], f"override_shapes[{i}] (uid {u})")
        st = None if strides is None else _int_list(strides[i], f"override_strides[{i}] (uid {u})")
        if st is not None and len(st) != len(dims):
            raise HipdnnError(Status.BAD_PARAM, f"execute: uid {u}: override strides {list(st)} and shape "
                                                f"{list(dims)} differ in rank")
        out[u] = (dims, st)
    return out


def numpy_itemsize(data_type) -> int:
    from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
    try:
        return numpy_dtype(int(data_type)).itemsize
    except (KeyError, HipdnnError):
        return 1


def _inferred_strides(n: _Node, out_field: str, dims, hint=None) -> list[int]:
    """Strides for an output the caller left unset, virtual or not: packed, in the stride order of
    the op's input of the same rank (channels-last in, channels-last out: conv, pointwise, norms,
    reductions, sdpa); row-major packed otherwise (matmul). ``hint == "channels_last"`` (the
    cuDNN facade's conv and reduction outputs) packs rank >= 3 outputs channels-last instead."""
    if hint == "channels_last" and len(dims) >= 3:
        return _strides_in_order(dims, [0, *range(2, len(dims)), 1])
    if hint == "like_input" and n.kind == OpKind.POINTWISE:
        # cuDNN FE's pointwise rule (node/pointwise.h): the strides of the first input whose dims
        # equal the output's, copied as they are (gaps included: an output written in place into
        # a view of a wider buffer, as test_apply_rope.py does); inputs with stride 0 or
        # overlapping axes are passed over (an output may not alias itself)
        for in_f in ("in_0_uid", "in_1_uid", "in_2_uid"):
            ref = n.tensors.get(in_f)
            if ref is None or ref.is_scalar() or ref._stride is None or list(ref._dim) != list(dims):
                continue
            try:
                lay = physical_layout(ref._dim, ref._stride, output=True)
            except GraphError:
                continue
            if not lay.bcast_axes:
                return list(ref._stride)
    if n.kind == OpKind.BLOCK_SCALE_QUANTIZE and n.params.get("transpose"):
        return _transposed_quantize_strides(n, dims)
    for out_f, in_f in OPS[n.kind].stride_order_from:
        ref = n.tensors.get(in_f)
        if out_f != out_field or ref is None or ref.is_scalar() or ref._stride is None:
            continue
        if len(ref._dim) != len(dims) or (n.kind == OpKind.POINTWISE and list(ref._dim) != list(dims)):
            continue
        try:
            lay = physical_layout(ref._dim, ref._stride)
        except GraphError:
            continue
        if lay.bcast_axes:
            continue
        return _strides_in_order(dims, lay.order)
    return list(packed_strides(dims))


def _transposed_quantize_strides(n: _Node, dims) -> list[int]:
    """block_scale_quantize(transpose=True): y's and scale's block axis packed innermost (cuDNN's
    rule: x's axes from the innermost out, rotated so the block axis comes first)."""
    x = n.tensors.get("x_uid")
    rank = len(dims)
    xs = x._stride if x is not None and x._stride is not None and len(x._stride) == rank else packed_strides(dims)
    xd = x._dim if x is not None and x._dim is not None and len(x._dim) == rank else dims
    # innermost first; equal strides put the size-1 axis outside
    inner = sorted(range(rank), key=lambda a: (xs[a], 0 if xd[a] != 1 else 1, -a))
    axis = n.params.get("axis", rank - 1) % rank if rank else 0
    k = inner.index(axis)
    inner = inner[k:] + inner[:k]
    return _strides_in_order(dims, list(reversed(inner)))


def _strides_in_order(dims, order) -> list[int]:
    """Packed strides for ``dims`` with the axes laid out in ``order`` (outermost first)."""
    strides, acc = [0] * len(dims), 1
    for a in reversed(order):
        strides[a] = acc
        acc *= max(int(dims[a]), 1)
    return strides


def _engine_name_of(handle, engine_id: int) -> str:
    return handle.resource_manager.engine_name(engine_id)


def _check_handle(handle):
    if handle is None:
        raise HipdnnError(Status.BAD_PARAM_NULL_POINTER, "handle is None: create one with hd.create_handle()")
    if not isinstance(handle, Handle):
        raise HipdnnError(Status.BAD_PARAM, f"expected a handle from hd.create_handle(), got {type(handle).__name__}")


def _opt_float(v, field: str = "threshold", infinity: float | None = None) -> float:
    """``v`` as a float (None: NaN, meaning unset); finite, or the one ``infinity`` allowed."""
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise HipdnnError(Status.BAD_PARAM, f"pointwise: {field} must be a number, got {v!r}")
    f = float(v)
    if not math.isfinite(f) and f != infinity:
        allowed = "" if infinity is None else f" or {infinity}"
        raise HipdnnError(Status.BAD_PARAM, f"pointwise: {field} is {f}: it must be a finite number{allowed} "
                                            f"(or None for the default)")
    return f


check_frontend(Graph)   # every supported OpDef's frontend_method is a Graph method (graph_ir/opdef.py)
