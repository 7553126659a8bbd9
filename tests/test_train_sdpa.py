"""sdpa statistics (generate_stats) and sdpa_backward: the IREE plan (serialized and restored) against
the float64 numpy reference and torch autograd in float64 (causal, boolean and float masks, GQA,
BSHD strides, f32/f16/bf16 io with f32 compute, scale given and unset), fully masked rows, one
module for every shape, kind-1 and kind-3 plans, CUDA compiles and refusals."""
import json
import math

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import assert_close, empty_like_tensor, lowered_mlir, raises, random_array, run_engines
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan

F, H, BF, BOOL = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16, hd.DataType.BOOLEAN
S = hd.Status
Q, K, V, DO, M, O, ST, DQ, DK, DV = 1, 2, 3, 4, 5, 10, 11, 12, 13, 14


def _bshd(dims):
    b, h, s, d = dims
    return [s * h * d, d, h * d, 1]


def _train_graph(dt=F, hq=4, hk=2, sq=5, skv=6, d=8, dv=4, causal=False, mask=None, scale=None, bshd=False,
                 hv=None):
    """q, k, v, do (, mask) -> sdpa(generate_stats) -> o, stats; sdpa_backward -> dq, dk, dv.
    ``mask``: None, ("bool", dims) or ("float", dims)."""
    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        st = _bshd if bshd else (lambda x: None)
        qd, kd, vd, od = [2, hq, sq, d], [2, hk, skv, d], [2, hk if hv is None else hv, skv, dv], [2, hq, sq, dv]
        q = g.tensor(name="Q", uid=Q, dim=qd, stride=st(qd))
        k = g.tensor(name="K", uid=K, dim=kd, stride=st(kd))
        v = g.tensor(name="V", uid=V, dim=vd, stride=st(vd))
        do = g.tensor(name="dO", uid=DO, dim=od)
        m = None
        if mask is not None:
            m = g.tensor(name="M", uid=M, dim=mask[1], data_type=BOOL if mask[0] == "bool" else dt)
        o, stats = g.sdpa(q, k, v, attn_scale=scale, is_causal=causal, mask=m, generate_stats=True)
        dq, dk, dvt = g.sdpa_backward(q, k, v, o, do, stats, attn_scale=scale, is_causal=causal, mask=m)
        outs = {O: o, ST: stats, DQ: dq, DK: dk, DV: dvt}
        for u, t in outs.items():
            t.set_output(True).set_uid(u)
        return g, outs
    return build


def _inputs(rng, build, mask=None, dt=F):
    g, _ = build()
    g.validate()
    out = {t.get_uid(): random_array(t.get_dim(), dt, rng, low=-2.0, high=2.0, strides=t.get_stride())
           for t in g._tensors if t.get_uid() in (Q, K, V, DO)}
    if mask is not None:
        if mask[0] == "bool":
            m = rng.random(mask[1]) < 0.7
        else:
            m = rng.standard_normal(mask[1]).astype(np.float32)
            m[..., -1] = -np.inf       # a float mask that drops a key
        out[M] = m if mask[0] == "bool" else m.astype(next(iter(out.values())).dtype)
    return out


def _torch_ref(ins, scale, causal, hq, hk):
    """o, stats, dq, dk, dv by torch autograd in float64 (explicit softmax, GQA by repeat_interleave;
    v's head count read from its array, so it may differ from k's)."""
    torch = pytest.importorskip("torch")
    q, k, v = (torch.tensor(np.asarray(ins[u], np.float64), requires_grad=True) for u in (Q, K, V))
    do = torch.tensor(np.asarray(ins[DO], np.float64))
    g, gv = hq // hk, hq // v.shape[1]
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.repeat_interleave(g, 1).transpose(-1, -2) * sc
    if M in ins:
        m = torch.tensor(np.asarray(ins[M]) if ins[M].dtype == np.bool_ else np.asarray(ins[M], np.float64))
        s = s.masked_fill(~m, -math.inf) if m.dtype == torch.bool else s + m
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    lse = torch.logsumexp(s, -1, keepdim=True)
    o = torch.softmax(s, -1) @ v.repeat_interleave(gv, 1)
    o.backward(do)
    return {O: o.detach().numpy(), ST: lse.detach().numpy(), DQ: q.grad.numpy(), DK: k.grad.numpy(),
            DV: v.grad.numpy()}


CASES = {
    "f32_causal_gqa_default_scale": dict(dt=F, causal=True),
    "f32_bshd_scale": dict(dt=F, hq=2, hk=2, scale=0.3, bshd=True),
    "f16_bool_mask": dict(dt=H, hq=2, hk=2, mask=("bool", [2, 1, 5, 6]), scale=0.5),
    "bf16_float_mask_gqa_causal": dict(dt=BF, causal=True, mask=("float", [5, 6])),
    "f32_float_mask_gqa_sq_gt_skv": dict(dt=F, sq=7, skv=4, causal=True, mask=("float", [2, 4, 7, 4])),
    # k and v with different head counts (cuDNN allows it): lcm 2 here, and lcm 6 of 2 and 3
    "f32_hk1_hv2_causal": dict(dt=F, hq=4, hk=1, hv=2, causal=True),
    "f16_hk2_hv3": dict(dt=H, hq=6, hk=2, hv=3, mask=("bool", [2, 1, 5, 6])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_stats_and_backward_match_reference_and_torch(cpu, rng, case):
    kw = CASES[case]
    mask = kw.get("mask")
    build = _train_graph(**kw)
    ins = _inputs(rng, build, mask, kw["dt"])
    got, want, g = run_engines(build, ins, cpu)      # the IREE plan serialized and restored
    ref = _torch_ref(ins, kw.get("scale"), kw.get("causal", False), kw.get("hq", 4), kw.get("hk", 2))
    types = {t.get_uid(): t.get_data_type() for t in g._tensors}
    assert types[ST] == F
    for u in got:
        assert np.isfinite(got[u]).all(), (case, u)
        assert_close(got[u], want[u], types[u], what=f"{case} uid {u} vs reference")
        # the reference (float64 from the rounded inputs, then rounded) is torch's to the output type
        assert_close(want[u], ref[u], types[u], scale=2.0, what=f"{case} uid {u}: reference vs torch")
        assert_close(got[u], ref[u], types[u], scale=2.0, what=f"{case} uid {u} vs torch")
    if kw.get("bshd"):
        outs = {t.get_uid(): t for t in g._tensors}
        assert outs[DQ].get_stride() == _bshd(outs[Q].get_dim())
        assert outs[DK].get_stride() == _bshd(outs[K].get_dim())
        assert outs[DV].get_stride() == _bshd(outs[V].get_dim())
        assert outs[O].get_stride() == _bshd(outs[O].get_dim())


def test_fully_masked_rows_give_zero_output_minus_inf_stats_and_nan_free_gradients(cpu, rng):
    mask = ("bool", [2, 1, 5, 6])
    build = _train_graph(hq=2, hk=2, mask=mask)
    ins = _inputs(rng, build, mask)
    ins[M][:, :, 2, :] = False             # query 2 sees no key
    got, want, _ = run_engines(build, ins, cpu)
    assert np.all(got[O][:, :, 2] == 0) and np.all(np.isneginf(got[ST][:, :, 2]))
    assert np.all(got[DQ][:, :, 2] == 0)
    for u in (O, DQ, DK, DV):
        assert np.isfinite(got[u]).all(), u
        assert_close(got[u], want[u], F, what=f"uid {u}")
    assert np.array_equal(np.isneginf(got[ST]), np.isneginf(want[ST]))
    # dk and dv get nothing from that row: torch without it gives the same
    keep = [i for i in range(5) if i != 2]
    sub = {Q: ins[Q][:, :, keep], K: ins[K], V: ins[V], DO: ins[DO][:, :, keep], M: ins[M][:, :, keep]}
    ref = _torch_ref(sub, None, False, 2, 2)
    assert_close(got[DK], ref[DK], F, scale=2.0, what="dk")
    assert_close(got[DV], ref[DV], F, scale=2.0, what="dv")


def test_backward_alone_from_torch_statistics(cpu, rng):
    """sdpa_backward fed o and stats computed elsewhere (torch) gives torch's gradients."""
    def build():
        g = hd.Graph(io_data_type=F)
        q = g.tensor(name="Q", uid=Q, dim=[1, 4, 6, 8])
        k, v = (g.tensor(name=n, uid=u, dim=[1, 2, 6, 8]) for n, u in (("K", K), ("V", V)))
        o, do = (g.tensor(name=n, uid=u, dim=[1, 4, 6, 8]) for n, u in (("O", O), ("dO", DO)))
        st = g.tensor(name="stats", uid=ST, dim=[1, 4, 6, 1])
        outs = dict(zip((DQ, DK, DV), g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.2, is_causal=True)))
        for u, t in outs.items():
            t.set_output(True).set_uid(u)
        return g, outs
    ins = {u: rng.standard_normal(s).astype(np.float32) for u, s in ((Q, (1, 4, 6, 8)), (K, (1, 2, 6, 8)),
                                                                      (V, (1, 2, 6, 8)), (DO, (1, 4, 6, 8)))}
    ref = _torch_ref(ins, 0.2, True, 4, 2)
    ins[O], ins[ST] = ref[O].astype(np.float32), ref[ST].astype(np.float32)
    got, want, _ = run_engines(build, ins, cpu)
    for u in (DQ, DK, DV):
        assert_close(got[u], ref[u], F, what=f"uid {u} vs torch")
        assert_close(got[u], want[u], F, what=f"uid {u} vs reference")


def _sdpa_train_dyn(B, Sq, Skv):
    g = hd.Graph(name="att_train", io_data_type=F)
    q = g.tensor(name="q", uid=1, dim=[B, 4, Sq, 8])
    k = g.tensor(name="k", uid=2, dim=[B, 2, Skv, 8])
    v = g.tensor(name="v", uid=3, dim=[B, 2, Skv, 8])
    do = g.tensor(name="do", uid=4, dim=[B, 4, Sq, 8])
    o, st = g.sdpa(q, k, v, is_causal=True, generate_stats=True)
    for t, u in zip((o, st, *g.sdpa_backward(q, k, v, o, do, st, is_causal=True)), (5, 6, 7, 8, 9)):
        t.set_output(True).set_uid(u)
    return g


def test_one_module_every_shape(cpu, rng, monkeypatch):
    import test_dynamic_lowering as tdl
    from graph_ir import decode_graph
    from graph_ir.dynamic import analyze
    g = _sdpa_train_dyn(2, 4, 6)
    g.validate().build_operation_graph(cpu)
    spec = analyze(decode_graph(g.get_op_graph_bytes()))
    assert set(spec.varying()) >= {1, 2, 6, 9}
    monkeypatch.setitem(tdl.CASES, "sdpa_train", (_sdpa_train_dyn, (2, 4, 6), [(1, 1, 1), (3, 5, 7), (2, 4, 6)]))
    tdl._run_case(cpu, rng, "sdpa_train")


def _run_plan(handle, r, ins, want):
    outs = {u: np.full(w.shape, np.nan, np.float32) for u, w in want.items()}
    r.execute(handle, {**ins, **outs})
    for u in outs:
        assert_close(outs[u], want[u], F, what=f"uid {u}")


def test_kind1_plan_restores_by_compiling_and_runs(cpu, rng):
    build = _train_graph(causal=True)
    ins = _inputs(rng, build)
    got, want, g = run_engines(build, ins, cpu)
    data = g.serialize_compiled_plan(payload="hipdnn_graph")
    env = _envelope.decode(data)
    assert _fusplan.unpack(env.plugin_payload).payload_kind == 1
    nocache = hd.create_handle(cache=False)
    _run_plan(nocache, hd.Graph.from_compiled_plan(nocache, data), ins, want)


def test_kind3_plan_for_cuda_and_the_cpu_runs_on_the_cpu(rng):
    build = _train_graph(mask=("bool", [2, 1, 5, 6]))
    ins = _inputs(rng, build, ("bool", [2, 1, 5, 6]))
    h = hd.create_handle(device="local-task", target=["cuda:sm_80", "llvm-cpu:x86-64"])
    g, _ = build()
    g.build(h)
    data = g.serialize_compiled_plan()
    fp = _fusplan.unpack(_envelope.decode(data).plugin_payload)
    assert fp.payload_kind == _fusplan.KIND_MULTI_TARGET and [e.target for e in fp.entries] == \
        ["cuda:sm_80", "llvm-cpu:x86-64"]
    r, routs = build()
    r.set_preferred_engine_id_ext("NUMPY_REFERENCE").build(h)
    want = {u: empty_like_tensor(t) for u, t in routs.items()}
    r.execute(h, {**ins, **want})
    cpu = hd.create_handle()
    _run_plan(cpu, hd.Graph.from_compiled_plan(cpu, data), ins, want)


@pytest.mark.parametrize("dt", [H, BF])
def test_compiles_for_cuda_and_stats_take_the_composition(dt):
    h = hd.create_handle(device=None, target="cuda:sm_80")
    g, _ = _train_graph(dt=dt, causal=True, mask=("bool", [2, 1, 5, 6]))()
    g.build(h)
    assert "iree_linalg_ext.attention" not in lowered_mlir(g, h, target="cuda:sm_80")


def _bwd_graph(o_dims=(1, 2, 4, 8), do_dims=(1, 2, 4, 8), stats_dims=(1, 2, 4, 1)):
    g = hd.Graph(io_data_type=F)
    q, k, v = (g.tensor(name=n, uid=u, dim=[1, 2, 4, 8]) for n, u in (("Q", 1), ("K", 2), ("V", 3)))
    o = g.tensor(name="O", uid=4, dim=list(o_dims))
    do = g.tensor(name="dO", uid=5, dim=list(do_dims))
    st = g.tensor(name="stats", uid=6, dim=list(stats_dims))
    for t, u in zip(g.sdpa_backward(q, k, v, o, do, st), (7, 8, 9)):
        t.set_output(True).set_uid(u)
    return g


@pytest.mark.parametrize("kw, field", [
    (dict(stats_dims=(1, 2, 4, 2)), "stats_uid"),
    (dict(stats_dims=(1, 2, 1, 1)), "stats_uid"),
    (dict(do_dims=(1, 2, 4, 4)), "do_uid"),
    (dict(o_dims=(1, 2, 3, 8)), "o_uid"),
])
def test_bad_dims_are_bad_param_naming_the_field(kw, field):
    raises(S.BAD_PARAM, _bwd_graph(**kw).validate, match=field)


def test_bad_arguments_at_the_call():
    g = hd.Graph(io_data_type=F)
    q = g.tensor(name="Q", uid=1, dim=[1, 2, 4, 8])
    raises(S.BAD_PARAM, lambda: g.sdpa(q, q, q, generate_stats=1), match="generate_stats")
    raises(S.BAD_PARAM, lambda: g.sdpa_backward(q, q, q, q, q, q, attn_scale=float("nan")), match="attn_scale")
    raises(S.BAD_PARAM, lambda: g.sdpa_backward(q, q, q, q, q, q, is_causal=1), match="is_causal")


@pytest.mark.parametrize("field, value", [("dropout_probability", 0.1), ("padding_mask", True),
                                          ("causal_mask_bottom_right", True)])
def test_unhonoured_fields_of_a_hipdnn_graph_are_not_supported_at_build(cpu, field, value):
    doc = json.loads(_bwd_graph().to_json())
    doc["nodes"][0]["attrs"][field] = value
    g = hd.Graph.from_json(json.dumps(doc))
    raises(S.NOT_SUPPORTED, g.build, cpu, match=field)


def test_a_failed_execute_leaves_the_callers_buffers_unchanged(cpu, rng):
    build = _train_graph()
    g, outs = build()
    g.build(cpu)
    ins = _inputs(rng, build)
    copies = {u: a.copy() for u, a in ins.items()}
    bufs = {u: empty_like_tensor(t) for u, t in outs.items()}
    bad = dict(ins)
    bad[DO] = ins[DO][:, :, :4]                 # do of the wrong dims
    raises(S.BAD_PARAM, g.execute, cpu, {**bad, **bufs})
    assert all(np.isnan(b).all() for b in bufs.values())
    assert all(np.array_equal(ins[u], copies[u]) for u in ins)
