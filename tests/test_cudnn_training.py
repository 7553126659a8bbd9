"""The facade's training ops on hd.Graph's real nodes (batchnorm, batchnorm_backward,
layernorm_backward, rmsnorm TRAINING with bias, rmsnorm_backward, sdpa with Stats, sdpa_backward),
each against torch autograd in float64 on random data (FLOAT buffers on the CPU); SDPA features
this engine lacks refused at validate and the build steps, never at node creation; a None key in a
variant pack; running statistics bound as one buffer in and out."""
from __future__ import annotations

import pytest

import hipdnn_iree as hd

torch = pytest.importorskip("torch")
import hipdnn_iree.cudnn as cudnn  # noqa: E402

F = cudnn.data_type.FLOAT


@pytest.fixture(scope="module")
def handle():
    return cudnn.create_handle(device="cpu")


def _graph(handle):
    return cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F, handle=handle)


def _gen(seed):
    g = torch.Generator().manual_seed(seed)
    return lambda *shape: torch.randn(*shape, generator=g)


def _run(g, pack):
    g.validate().build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    g.execute(pack, None)


def _close(got, want, tol=2e-4):
    got, want = got.double(), want.double()
    err = (got - want).abs().max().item()
    assert err <= tol * max(want.abs().max().item(), 1.0), f"max error {err}"


def _leaf(*ts):
    return [t.double().clone().requires_grad_() for t in ts]


def test_batchnorm_running_stats_share_one_buffer(handle):
    r = _gen(1)
    x, scale, bias = 2 * r(3, 4, 5, 2) + 1, r(1, 4, 1, 1), r(1, 4, 1, 1)
    rm, rv = r(1, 4, 1, 1), r(1, 4, 1, 1).abs() + 0.5
    g = _graph(handle)
    X, S, B, RM, RV = (g.tensor_like(t) for t in (x, scale, bias, rm, rv))
    y, mean, inv, nrm, nrv = g.batchnorm(input=X, scale=S, bias=B, in_running_mean=RM, in_running_var=RV,
                                         epsilon=1e-3, momentum=0.2, name="BN")
    assert y.get_name() == "BN::Y" and mean.get_dim() == [1, 4, 1, 1]
    for t in (y, mean, inv, nrm, nrv):
        t.set_output(True).set_data_type(F)
    rm_io, rv_io = rm.clone(), rv.clone()
    o = {y: torch.empty_like(x), mean: torch.empty(1, 4, 1, 1), inv: torch.empty(1, 4, 1, 1)}
    _run(g, {X: x, S: scale, B: bias, RM: rm_io, RV: rv_io, nrm: rm_io, nrv: rv_io, None: None, **o})
    xd = x.double()
    m, v = xd.mean((0, 2, 3), keepdim=True), xd.var((0, 2, 3), unbiased=False, keepdim=True)
    _close(o[y], (xd - m) / torch.sqrt(v + 1e-3) * scale + bias)
    _close(o[mean], m)
    _close(o[inv], 1 / torch.sqrt(v + 1e-3))
    _close(rm_io, 0.8 * rm.double() + 0.2 * m)
    _close(rv_io, 0.8 * rv.double() + 0.2 * xd.var((0, 2, 3), unbiased=True, keepdim=True))


def test_batchnorm_backward(handle):
    r = _gen(2)
    x, dy, scale = r(2, 4, 3, 3), r(2, 4, 3, 3), r(1, 4, 1, 1)
    xr, sr = _leaf(x, scale)
    torch.nn.functional.batch_norm(xr, None, None, sr.reshape(-1), None, True, 0.0, 1e-5).backward(dy.double())
    m = x.double().mean((0, 2, 3), keepdim=True)
    inv = 1 / torch.sqrt(x.double().var((0, 2, 3), unbiased=False, keepdim=True) + 1e-5)
    g = _graph(handle)
    DY, X, S, M, I = (g.tensor_like(t) for t in (dy, x, scale, m.float(), inv.float()))
    dx, ds, db = g.batchnorm_backward(grad=DY, input=X, scale=S, mean=M, inv_variance=I)
    for t in (dx, ds, db):
        t.set_output(True).set_data_type(F)
    o = {dx: torch.empty_like(x), ds: torch.empty_like(scale), db: torch.empty_like(scale)}
    _run(g, {DY: dy, X: x, S: scale, M: m.float(), I: inv.float(), **o})
    _close(o[dx], xr.grad)
    _close(o[ds], sr.grad)
    _close(o[db], dy.double().sum((0, 2, 3), keepdim=True))


def test_layernorm_backward(handle):
    r = _gen(3)
    x, dy, scale, bias = 3 * r(2, 3, 16), r(2, 3, 16), r(1, 1, 16), r(1, 1, 16)
    xr, sr, br = _leaf(x, scale, bias)
    torch.nn.functional.layer_norm(xr, [16], sr.reshape(-1), br.reshape(-1), 1e-3).backward(dy.double())
    m = x.double().mean(-1, keepdim=True)
    inv = 1 / torch.sqrt(x.double().var(-1, unbiased=False, keepdim=True) + 1e-3)
    g = _graph(handle)
    DY, X, S, M, I = (g.tensor_like(t) for t in (dy, x, scale, m.float(), inv.float()))
    dx, ds, db = g.layernorm_backward(grad=DY, input=X, scale=S, mean=M, inv_variance=I, name="DLN")
    assert dx.get_name() == "DLN::DX"
    for t in (dx, ds, db):
        t.set_output(True).set_data_type(F)
    o = {dx: torch.empty_like(x), ds: torch.empty_like(scale), db: torch.empty_like(bias)}
    _run(g, {DY: dy, X: x, S: scale, M: m.float(), I: inv.float(), **o})
    _close(o[dx], xr.grad)
    _close(o[ds], sr.grad)
    _close(o[db], br.grad)


@pytest.mark.parametrize("has_dbias", [True, False])
def test_rmsnorm_training_with_bias_and_backward(handle, has_dbias):
    r = _gen(4)
    x, dy, scale, bias = r(4, 8, 1, 1), r(4, 8, 1, 1), r(1, 8, 1, 1), r(1, 8, 1, 1)
    eps = 1e-3
    # forward, TRAINING: (Y, inv_variance), the bias added after the scale
    g = _graph(handle)
    X, S = g.tensor_like(x), g.tensor_like(scale)
    B = g.tensor_like(bias) if has_dbias else None
    y, inv = g.rmsnorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=X, scale=S,
                       bias=B if has_dbias else None, epsilon=eps)
    for t in (y, inv):
        t.set_output(True).set_data_type(F)
    assert inv.get_dim() == [4, 1, 1, 1]
    o = {y: torch.empty_like(x), inv: torch.empty(4, 1, 1, 1)}
    _run(g, {X: x, S: scale, B: bias, **o} if has_dbias else {X: x, S: scale, **o})
    xr, sr, br = _leaf(x, scale, bias)
    ref_inv = torch.rsqrt((xr * xr).mean((1, 2, 3), keepdim=True) + eps)
    ref = xr * ref_inv * sr + (br if has_dbias else 0)
    _close(o[y], ref.detach())
    _close(o[inv], ref_inv.detach())
    # backward from the saved inv_variance
    ref.backward(dy.double())
    g = _graph(handle)
    DY, X, S, I = (g.tensor_like(t) for t in (dy, x, scale, o[inv]))
    dx, ds, db = g.rmsnorm_backward(grad=DY, input=X, scale=S, inv_variance=I, has_dbias=has_dbias)
    assert (db is None) == (not has_dbias)
    outs = [t for t in (dx, ds, db) if t is not None]
    for t in outs:
        t.set_output(True).set_data_type(F)
    ob = {t: torch.empty(list(t.get_dim())) for t in outs}
    _run(g, {DY: dy, X: x, S: scale, I: o[inv], **ob})
    _close(ob[dx], xr.grad)
    _close(ob[ds], sr.grad)
    if has_dbias:
        _close(ob[db], br.grad)


def _sdpa_ref(q, k, v, scale, causal):
    rep = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = q @ kk.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ vv, torch.logsumexp(s, -1, keepdim=True)


@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_stats_and_backward_grouped_query(handle, causal):
    """BHSD q with BSHD-strided k/v (two kv heads for four query heads): forward with Stats, then
    the backward graph from the forward's O and Stats, against torch autograd in float64."""
    r = _gen(5 + causal)
    b, hq, hk, s, d = 1, 4, 2, 8, 16
    q = r(b, hq, s, d)
    k = r(b, s, hk, d).permute(0, 2, 1, 3)          # BSHD memory, BHSD dims
    v = r(b, s, hk, d).permute(0, 2, 1, 3)
    do = r(b, hq, s, d)
    scale = 0.25
    g = _graph(handle)
    Q, K, V = (g.tensor_like(t) for t in (q, k, v))
    O, ST = g.sdpa(q=Q, k=K, v=V, attn_scale=scale, generate_stats=True, use_causal_mask=causal, name="sdpa")
    O.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
    ST.set_output(True).set_data_type(F)
    o, st = torch.empty_like(q), torch.empty(b, hq, s, 1)
    _run(g, {Q: q, K: k, V: v, O: o, ST: st})
    qr, kr, vr = _leaf(q, k, v)
    ref_o, ref_st = _sdpa_ref(qr, kr, vr, scale, causal)
    _close(o, ref_o.detach())
    _close(st, ref_st.detach())
    ref_o.backward(do.double())

    g = _graph(handle)
    Q, K, V, O_, DO, ST_ = (g.tensor_like(t) for t in (q, k, v, o, do, st))
    dQ, dK, dV = g.sdpa_backward(q=Q, k=K, v=V, o=O_, dO=DO, stats=ST_, attn_scale=scale, use_causal_mask=causal,
                                 use_deterministic_algorithm=True)
    outs = {}
    for t, like in ((dQ, q), (dK, k), (dV, v)):
        t.set_output(True).set_dim(list(like.shape)).set_stride(list(like.stride()))
        outs[t] = torch.empty_strided(like.shape, like.stride())
    _run(g, {Q: q, K: k, V: v, O_: o, DO: do, ST_: st, **outs})
    _close(outs[dQ], qr.grad)
    _close(outs[dK], kr.grad)
    _close(outs[dV], vr.grad)


def test_sdpa_unset_scale_is_one_as_in_cudnn(handle):
    r = _gen(7)
    q, k, v = r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8)
    g = _graph(handle)
    Q, K, V = (g.tensor_like(t) for t in (q, k, v))
    O, ST = g.sdpa(q=Q, k=K, v=V, is_inference=True)
    assert ST is None
    O.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
    o = torch.empty_like(q)
    _run(g, {Q: q, K: k, V: v, O: o, ST: None})
    _close(o, _sdpa_ref(q.double(), k.double(), v.double(), 1.0, False)[0])


@pytest.mark.parametrize("feature", ["alibi", "band", "dropout", "ragged", "dbias"])
def test_unsupported_sdpa_features_refused_at_validate_and_build(handle, feature):
    """The node is made; validate (where cuDNN FE's test_mhas.py catches the error) and each build
    step refuse it with NOT_SUPPORTED naming the feature."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, handle=handle)
    q = g.tensor(name="Q", dim=[1, 1, 8, 16], stride=[128, 128, 16, 1])
    if feature == "dbias":
        bias = g.tensor(name="B", dim=[1, 1, 8, 8], stride=[64, 64, 8, 1])
        st = g.tensor(name="ST", dim=[1, 1, 8, 1], stride=[8, 8, 1, 1], data_type=F)
        outs = g.sdpa_backward(q=q, k=q, v=q, o=q, dO=q, stats=st, bias=bias,
                               dBias=g.tensor(name="dB", dim=[1, 1, 8, 8], stride=[64, 64, 8, 1]))
        word = "dBias"
    else:
        kw = {"alibi": dict(use_alibi_mask=True), "band": dict(diagonal_band_right_bound=3),
              "dropout": dict(dropout=(0.1, q, q)), "ragged": {}}[feature]
        if feature == "ragged":
            q.set_ragged_offset(g.tensor(name="R", dim=[2, 1, 1, 1], stride=[1, 1, 1, 1],
                                         data_type=cudnn.data_type.INT32))
        outs = g.sdpa(q=q, k=q, v=q, generate_stats=False, **kw)
        word = {"alibi": "ALiBi", "band": "diagonal_band_right_bound", "dropout": "dropout", "ragged": "ragged"}[feature]
    outs[0].set_output(True).set_dim([1, 1, 8, 16]).set_stride([128, 128, 16, 1])
    for step in (g.validate, lambda: g.create_execution_plans([cudnn.heur_mode.A]), g.check_support, g.build_plans):
        with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=word) as e:
            step()
        assert isinstance(e.value, hd.HipdnnError) and e.value.status == hd.Status.NOT_SUPPORTED


def test_plan_list_methods_exist(handle):
    g = _graph(handle)
    X = g.tensor(name="X", dim=[2, 3], stride=[3, 1])
    Y = g.relu(X)
    Y.set_output(True)
    g.validate().build_operation_graph()
    assert g.get_engine_count() >= 1
    assert isinstance(g.get_knobs_for_engine(0), list)
    g.create_execution_plans([cudnn.heur_mode.A]).check_support().build_plans()
    assert g.get_plan_name_at_index(0)
    assert isinstance(g.get_behavior_notes(), list) and isinstance(g.get_behavior_notes_for_plan_at_index(0), list)
    assert g.query_tensor_attributes_of_uid(X.get_uid()) is X
    assert isinstance(g.key(), int)
    assert g.deselect_engines(["eng0"]) is g
