"""The invalid-graph / bad-call corpus whose (status, message) pairs are goldens (tests/goldens/errors.json).

Each case is a function making exactly one bad call through the public API (``hipdnn_iree`` and the
cuDNN facade); :func:`outcome` runs it and returns ``[status name, message]`` (``str(e)`` of the
``hd.HipdnnError``), ``["NO_ERROR", ""]`` when the call is accepted, or ``["RAISED <type>", text]``
for any other exception. Execute cases use a CPU plan restored from ``tests/data/plan_v2_cpu.plan``
(the IREE runtime, no compiler), so the whole corpus runs in a second or two.
"""
from __future__ import annotations

import os

import numpy as np

import hipdnn_iree as hd

F, PM, S = hd.DataType.FLOAT, hd.PointwiseMode, hd.Status
DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
_STATE: dict = {}


def _handle():
    if "h" not in _STATE:
        _STATE["h"] = hd.create_handle()
    return _STATE["h"]


def _plan_bytes() -> bytes:
    if "plan" not in _STATE:
        _STATE["plan"] = hd.load_plan(os.path.join(DATA, "plan_v2_cpu.plan"))
    return _STATE["plan"]


def _restored():
    if "r" not in _STATE:
        _STATE["r"] = hd.Graph.from_compiled_plan(_handle(), _plan_bytes())
    return _STATE["r"]


def _pack(**change):
    """A good variant pack of the corpus plan (X [2,6,16], W [1,16,12] strided, bias [1,1,12] -> Y [2,6,12])."""
    w = np.zeros((1, 12, 16), np.float32).transpose(0, 2, 1)
    p = {1: np.zeros((2, 6, 16), np.float32), 2: w, 3: np.zeros((1, 1, 12), np.float32),
         4: np.zeros((2, 6, 12), np.float32)}
    for k, v in change.items():
        uid = int(k[1:])
        if v is _DROP:
            p.pop(uid)
        else:
            p[uid] = v
    return p


_DROP = object()


def _exec(pack, handle=None):
    return lambda: _restored().execute(_handle() if handle is None else handle, pack() if callable(pack) else pack)


def _mm(a_dim=(2, 3), b_dim=(3, 2), a_kw=None, out_dim=None):
    g = hd.Graph(name="bad", io_data_type=F)
    a = g.tensor(name="a", uid=1, dim=list(a_dim), **(a_kw or {}))
    b = g.tensor(name="b", uid=2, dim=list(b_dim))
    c = g.matmul(a, b).set_output(True).set_uid(3)
    if out_dim is not None:
        c.set_dim(out_dim)
    return g


def _validate(build):
    def run():
        g = build()
        g.validate()
        g.to_hipdnn_graph()
    return run


def _x(g, dim=(2, 4, 8, 8), uid=1, **kw):
    return g.tensor(name="x", uid=uid, dim=list(dim), **kw)


def _graph_with(fn):
    """A validate() of a one-op graph ``fn(g)`` builds (its returned tensor marked the output)."""
    def build():
        g = hd.Graph(name="bad", io_data_type=F)
        out = fn(g)
        if isinstance(out, tuple):
            out = out[0]
        out.set_output(True)
        return g
    return _validate(build)


def _configured():
    g = _mm()
    g.validate().build_operation_graph(_handle())
    return g


def _plans():
    g = _configured().create_execution_plans()
    return g


def _corrupt(i: int):
    def run():
        b = bytearray(_plan_bytes())
        b[i % len(b)] ^= 0x5A
        hd.Graph.from_compiled_plan(_handle(), bytes(b))
    return run


def _cudnn_graph():
    import hipdnn_iree.cudnn as cudnn
    return cudnn, cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)


def _cudnn_bad_dims():
    cudnn, g = _cudnn_graph()
    a = g.tensor(name="A", dim=[2, 3, 4], stride=[12, 4, 1])
    b = g.tensor(name="B", dim=[2, 5, 4], stride=[20, 4, 1])
    g.matmul(A=a, B=b).set_output(True)
    g.validate()


CASES = {
    # -- bad dims / strides -------------------------------------------------------------------------
    "dims/negative": _validate(lambda: _mm(a_dim=(2, -3))),
    "dims/zero": _validate(lambda: _mm(a_dim=(0, 3))),
    "dims/strides_rank": _validate(lambda: _mm(a_kw={"stride": [3]})),
    "dims/past_int64": _validate(lambda: _mm(a_dim=(2**63, 3))),
    "dims/stride_past_int64": _validate(lambda: _mm(a_kw={"stride": [2**64, 1]})),
    "dims/matmul_inner": _validate(lambda: _mm(b_dim=(4, 2))),
    "dims/matmul_rank1": _validate(lambda: _mm(a_dim=(3,), b_dim=(3, 2))),
    "dims/output_mismatch": _validate(lambda: _mm(b_dim=(3, 4), out_dim=[2, 5])),
    "dims/rank0": _validate(lambda: _mm(a_dim=())),
    "dims/pointwise_broadcast": _graph_with(lambda g: g.pointwise(_x(g, (2, 3)), g.tensor(uid=2, dim=[4, 3]),
                                                                   mode=PM.ADD)),
    "dims/output_stride0": _graph_with(lambda g: g.pointwise(_x(g, (2, 3), stride=[0, 1]), mode=PM.NEG)
                                       .set_stride([0, 1])),
    "dims/conv_kernel_too_wide": _graph_with(lambda g: g.conv_fprop(_x(g, (1, 2, 3, 3)),
                                                                     g.tensor(uid=2, dim=[2, 2, 5, 5]))),
    "dims/conv_groups": _graph_with(lambda g: g.conv_fprop(_x(g, (1, 6, 8, 8)), g.tensor(uid=2, dim=[4, 4, 3, 3]))),
    "dims/conv_negative_padding": _graph_with(lambda g: g.conv_fprop(_x(g, (1, 2, 8, 8)),
                                                                      g.tensor(uid=2, dim=[2, 2, 3, 3]), padding=[-1, 0])),
    "dims/conv_stride0": _graph_with(lambda g: g.conv_fprop(_x(g, (1, 2, 8, 8)),
                                                             g.tensor(uid=2, dim=[2, 2, 3, 3]), stride=[0, 1])),
    "dims/conv_dgrad_unset": _graph_with(lambda g: g.conv_dgrad(_x(g, (1, 2, 8, 8)), g.tensor(uid=2, dim=[2, 2, 3, 3]))),
    "dims/reduction_bad_out": _graph_with(lambda g: g.reduction(_x(g, (2, 3, 4)), mode=hd.ReductionMode.ADD)
                                          .set_dim([2, 2, 1])),
    "dims/batchnorm_stats": _graph_with(lambda g: g.batchnorm_inference(
        _x(g), *[g.tensor(uid=2 + i, dim=[1, 3, 1, 1]) for i in range(4)])),
    "dims/layernorm_scale_ones": _graph_with(lambda g: g.layernorm(_x(g, (2, 3, 8)), g.tensor(uid=2, dim=[1, 1, 1]),
                                                                    g.tensor(uid=3, dim=[1, 1, 1]))),
    "dims/sdpa_gqa": _graph_with(lambda g: g.sdpa(_x(g, (1, 3, 4, 8)), g.tensor(uid=2, dim=[1, 2, 4, 8]),
                                                  g.tensor(uid=3, dim=[1, 2, 4, 8]))),
    "dims/sdpa_rank": _graph_with(lambda g: g.sdpa(_x(g, (3, 4, 8)), g.tensor(uid=2, dim=[3, 4, 8]),
                                                   g.tensor(uid=3, dim=[3, 4, 8]))),
    # -- dtype mismatches ---------------------------------------------------------------------------
    "dtype/graph_io_string": lambda: hd.Graph(io_data_type="float"),
    "dtype/tensor_not_set": _validate(lambda: _no_dtype()),
    "dtype/tensor_bad": lambda: hd.Graph().tensor(name="t", uid=1, dim=[2], data_type=12345),
    "dtype/sdpa_int_mask": _graph_with(lambda g: g.sdpa(_x(g, (1, 2, 4, 8)), g.tensor(uid=2, dim=[1, 2, 4, 8]),
                                                        g.tensor(uid=3, dim=[1, 2, 4, 8]),
                                                        mask=g.tensor(uid=5, dim=[4, 4], data_type=hd.DataType.INT32))),
    "dtype/sdpa_int_compute": _graph_with(lambda g: g.sdpa(_x(g, (1, 2, 4, 8)), g.tensor(uid=2, dim=[1, 2, 4, 8]),
                                                           g.tensor(uid=3, dim=[1, 2, 4, 8]),
                                                           compute_data_type=hd.DataType.INT32)),
    "dtype/matmul_compute_bad": lambda: _mm().matmul(*_two(), compute_data_type="f32"),
    # -- missing tensors ----------------------------------------------------------------------------
    "missing/no_operations": lambda: hd.Graph().validate(),
    "missing/no_output_lowering": lambda: _no_output_mlir(),
    "missing/duplicate_uid": _validate(lambda: _mm_dup()),
    "missing/pointwise_one_input": _graph_with(lambda g: g.pointwise(_x(g, (2,)), mode=PM.ADD)),
    "missing/other_graph_tensor": lambda: _other_graph(),
    "missing/operand_not_tensor": lambda: _mm().pointwise(_two()[0], "nope", mode=PM.ADD),
    "missing/get_op_graph_bytes_early": lambda: _mm().get_op_graph_bytes(),
    "missing/execute_unbuilt": lambda: hd.Graph().execute(_handle(), {}),
    # -- unsupported op kinds / attributes ----------------------------------------------------------
    "unsupported/pointwise_mode_number": lambda: _mm().pointwise(_two()[0], mode=12345),
    "unsupported/softplus_threshold": _graph_with(lambda g: g.pointwise(_x(g, (2, 3)), mode=PM.SOFTPLUS_FWD,
                                                                        threshold=20.0)),
    "unsupported/conv_padding_and_pre": lambda: _conv_both_paddings(),
    "unsupported/sdpa_bad_scale": _graph_with(lambda g: g.sdpa(_x(g, (1, 2, 4, 8)), g.tensor(uid=2, dim=[1, 2, 4, 8]),
                                                               g.tensor(uid=3, dim=[1, 2, 4, 8]), attn_scale=-1.0)),
    "unsupported/sdpa_causal_not_bool": _graph_with(lambda g: g.sdpa(_x(g, (1, 2, 4, 8)),
                                                                     g.tensor(uid=2, dim=[1, 2, 4, 8]),
                                                                     g.tensor(uid=3, dim=[1, 2, 4, 8]), is_causal=1)),
    "unsupported/layernorm_phase": _graph_with(lambda g: g.layernorm(_x(g, (2, 3, 8)), g.tensor(uid=2, dim=[1, 1, 8]),
                                                                      g.tensor(uid=3, dim=[1, 1, 8]), forward_phase=99)),
    "unsupported/layernorm_negative_eps": _graph_with(lambda g: g.layernorm(
        _x(g, (2, 3, 8)), g.tensor(uid=2, dim=[1, 1, 8]), g.tensor(uid=3, dim=[1, 1, 8]), epsilon=-1.0)),
    "unsupported/reduction_not_set": _graph_with(lambda g: g.reduction(_x(g, (2, 3)), mode=hd.ReductionMode.NOT_SET)
                                                 .set_dim([2, 1])),
    "unsupported/hipdnn_graph_garbage": lambda: hd.Graph.from_hipdnn_graph(b"\x00" * 7),
    "unsupported/hipdnn_graph_truncated": lambda: hd.Graph.from_hipdnn_graph(_mm().to_hipdnn_graph()[:40]),
    "unsupported/json_garbage": lambda: hd.Graph.from_json("{not json"),
    "unsupported/json_wrong_shape": lambda: hd.Graph.from_json({"nodes": 5}),
    "unsupported/cudnn_io_type": lambda: _cudnn_graph()[0].pygraph(io_data_type="nope"),
    "unsupported/cudnn_execute_unbuilt": lambda: _cudnn_graph()[1].execute({}, None),
    "unsupported/cudnn_matmul_dims": _cudnn_bad_dims,
    "unsupported/target_tpu": lambda: hd.create_handle(target="tpu:v5"),
    "unsupported/device_vulkan": lambda: hd.create_handle(device="vulkan://7"),
    "unsupported/rocm_no_arch": lambda: hd.create_handle(device=None, target="rocm"),
    "unsupported/get_mlir_bad_target": lambda: _mm().get_mlir("tpu:v5"),
    # -- bad plan bytes -----------------------------------------------------------------------------
    "plan/empty": lambda: hd.Graph.from_compiled_plan(_handle(), b""),
    "plan/none": lambda: hd.Graph.from_compiled_plan(_handle(), None),
    "plan/garbage": lambda: hd.Graph.from_compiled_plan(_handle(), b"not a plan at all, just bytes"),
    "plan/truncated_half": lambda: hd.Graph.from_compiled_plan(_handle(), _plan_bytes()[: len(_plan_bytes()) // 2]),
    "plan/truncated_header": lambda: hd.Graph.from_compiled_plan(_handle(), _plan_bytes()[:16]),
    "plan/flip_byte_0": _corrupt(0),
    "plan/flip_byte_8": _corrupt(8),
    "plan/flip_byte_12": _corrupt(12),
    "plan/flip_byte_20": _corrupt(20),
    "plan/flip_byte_30": _corrupt(30),
    "plan/flip_byte_64": _corrupt(64),
    "plan/flip_byte_100": _corrupt(100),
    "plan/flip_byte_128": _corrupt(128),
    "plan/flip_byte_5000": _corrupt(5000),
    "plan/not_bytes": lambda: hd.Graph.from_compiled_plan(_handle(), 12345),
    "plan/load_missing_file": lambda: hd.load_plan("no/such/dir/missing.plan"),
    "plan/serialize_unbuilt": lambda: _mm().serialize_compiled_plan(),
    # -- wrong variant packs at execute (CPU) -------------------------------------------------------
    "execute/missing_uid": _exec(lambda: _pack(u2=_DROP)),
    "execute/unknown_uid": _exec(lambda: _pack(u99=np.zeros(3, np.float32))),
    "execute/wrong_shape": _exec(lambda: _pack(u1=np.zeros((2, 6, 17), np.float32))),
    "execute/wrong_dtype": _exec(lambda: _pack(u1=np.zeros((2, 6, 16), np.float64))),
    "execute/strides_disagree": _exec(lambda: _pack(u2=np.zeros((1, 16, 12), np.float32))),
    "execute/flat_buffer": _exec(lambda: _pack(u4=np.zeros(144, np.float32))),
    "execute/list_not_array": _exec(lambda: _pack(u3=[[[0.0] * 12]])),
    "execute/none_buffer": _exec(lambda: _pack(u1=None)),
    "execute/read_only_output": _exec(lambda: _pack(u4=_read_only((2, 6, 12)))),
    "execute/pack_not_dict": _exec([1, 2, 3]),
    "execute/pack_none": lambda: _restored().execute(_handle(), None),
    "execute/handle_none": lambda: _restored().execute(None, _pack()),
    "execute/handle_not_handle": lambda: _restored().execute("cpu", _pack()),
    "execute/bad_workspace": lambda: _restored().execute(_handle(), _pack(), workspace="ws"),
    # -- bad engine configs / knobs -----------------------------------------------------------------
    "engine/unknown_knob": lambda: _configured().create_execution_plan("IREE_LINALG", {"NO_SUCH_KNOB": 1}),
    "engine/bad_knob_value": lambda: _configured().create_execution_plan("IREE_LINALG", {"SDPA_FORM": "SIDEWAYS"}),
    "engine/bool_knob_value": lambda: _configured().create_execution_plan("IREE_LINALG", {"SDPA_FORM": True}),
    "engine/unknown_engine": lambda: _configured().create_execution_plan("NO_SUCH_ENGINE", {}),
    "engine/knobs_not_dict": lambda: _configured().create_execution_plan("IREE_LINALG", ["SDPA_FORM"]),
    "engine/bad_heur_mode": lambda: _configured().create_execution_plans(heur_modes=["Z"]),
    "engine/config_index_early": lambda: _configured().get_engine_config_at_index(0),
    "engine/config_index_out_of_range": lambda: _plans().get_engine_config_at_index(5),
    "engine/plan_before_graph": lambda: _mm().create_execution_plans(),
    "engine/check_support_early": lambda: _mm().check_support(),
    "engine/preferred_bad_type": lambda: _mm().set_preferred_engine_id_ext(1.5),
    "engine/knobs_unknown_engine": lambda: _configured().get_knobs_for_engine("NOPE"),
    "engine/build_bad_handle": lambda: _mm().build("not a handle"),
}


def _two():
    g = hd.Graph(io_data_type=F)
    return g.tensor(uid=1, dim=[2, 3]), g.tensor(uid=2, dim=[3, 2])


def _no_dtype():
    g = hd.Graph()
    a = g.tensor(uid=1, dim=[2, 3], stride=[3, 1], data_type=hd.DataType.NOT_SET)
    g.matmul(a, g.tensor(uid=2, dim=[3, 2], data_type=F)).set_output(True).set_uid(3)
    return g


def _no_output_mlir():
    g = hd.Graph(io_data_type=F)
    g.matmul(g.tensor(uid=1, dim=[2, 3]), g.tensor(uid=2, dim=[3, 2]))
    g.get_mlir()


def _mm_dup():
    g = hd.Graph(io_data_type=F)
    g.matmul(g.tensor(uid=1, dim=[2, 3]), g.tensor(uid=1, dim=[3, 2])).set_output(True).set_uid(3)
    return g


def _other_graph():
    g1, g2 = hd.Graph(io_data_type=F), hd.Graph(io_data_type=F)
    a = g1.tensor(uid=1, dim=[2, 3])
    g2.matmul(a, g2.tensor(uid=2, dim=[3, 2])).set_output(True).set_uid(3)
    g2.validate()


def _conv_both_paddings():
    g = hd.Graph(io_data_type=F)
    g.conv_fprop(_x(g, (1, 2, 8, 8)), g.tensor(uid=2, dim=[2, 2, 3, 3]), padding=[1, 1], pre_padding=[1, 1])


def _read_only(shape):
    a = np.zeros(shape, np.float32)
    a.setflags(write=False)
    return a


def outcome(fn) -> list:
    """``[status name, message]`` of the one bad call ``fn`` makes."""
    try:
        fn()
    except hd.HipdnnError as e:
        return [e.status.name, str(e)]
    except Exception as e:  # noqa: BLE001 - recorded, so a change of type shows
        return [f"RAISED {type(e).__name__}", str(e)]
    return ["NO_ERROR", ""]
