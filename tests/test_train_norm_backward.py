"""The norm training passes: rmsnorm's TRAINING phase (inv_rms, optional bias), layernorm_backward and
rmsnorm_backward (hipDNN's RMSNORM, LAYERNORM_BACKWARD and RMSNORM_BACKWARD nodes).

Each op on the IREE engine (plan serialized and restored) against the numpy reference and against
torch autograd in float64 on random data, over io types (FLOAT compute), per-token and per-sample
scales, channels-last layouts, saved and recomputed statistics; a forward+backward graph reading
the forward's statistics as virtual tensors; one dynamic-shape plan serving other batch sizes;
plans of kinds 1 and 3; CUDA compiles; and the errors a bad graph gets.
"""
import numpy as np
import pytest

import hipdnn_iree as hd
from harness import assert_close, compare_engines, empty_like_tensor, random_array, run_engines

F, H, B = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16
S = hd.Status
EPS = 1e-5
TRAIN = hd.NormFwdPhase.TRAINING


def channels_last(dims):
    order = [0] + list(range(2, len(dims))) + [1]
    strides, acc = [0] * len(dims), 1
    for a in reversed(order):
        strides[a] = acc
        acc *= dims[a]
    return strides


def f64(a):
    return np.asarray(a).astype(np.float64)


def scale_dims(dims, per_token):
    """[1, .., 1, E] normalizes the last axis; [1, *dims[1:]] every axis after the batch axis."""
    return [1] * (len(dims) - 1) + [dims[-1]] if per_token else [1] + list(dims[1:])


def stat_dims(dims, per_token):
    return list(dims[:-1]) + [1] if per_token else [dims[0]] + [1] * (len(dims) - 1)


def norm_axes(dims, per_token):
    return (len(dims) - 1,) if per_token else tuple(range(1, len(dims)))


def _err(status, fn, *words):
    with pytest.raises(hd.HipdnnError) as info:
        fn()
    assert info.value.status == status, str(info.value)
    for w in words:
        assert w in str(info.value), f"{w!r} not in: {info.value}"
    return info.value


def _outs(g):
    return {t.get_uid(): t for t in g._tensors}


# ---------------------------------------------------------------------------
# torch (float64) references
# ---------------------------------------------------------------------------

def torch_rmsnorm(torch, x, scale, bias=None, dy=None, per_token=True, eps=EPS):
    """y, inv_rms and (with dy) dx, dscale, dbias of y = x * rsqrt(mean(x^2) + eps) * scale + bias."""
    dims = list(np.shape(x))
    ax = norm_axes(dims, per_token)
    xt = torch.tensor(f64(x), requires_grad=True)
    w = torch.tensor(f64(scale), requires_grad=True)
    b = torch.tensor(f64(bias), requires_grad=True) if bias is not None else None
    inv = torch.rsqrt((xt * xt).mean(dim=ax, keepdim=True) + eps)
    y = xt * inv * w + (b if b is not None else 0.0)
    out = {"y": y.detach().numpy(), "inv_rms": inv.detach().numpy()}
    if dy is not None:
        y.backward(torch.tensor(f64(dy)))
        out.update(dx=xt.grad.numpy(), dscale=w.grad.numpy(), dbias=b.grad.numpy() if b is not None else None)
    return out


def torch_layernorm(torch, x, scale, bias, dy, per_token=True, eps=EPS):
    dims = list(np.shape(x))
    ax = norm_axes(dims, per_token)
    xt = torch.tensor(f64(x), requires_grad=True)
    w, b = torch.tensor(f64(scale), requires_grad=True), torch.tensor(f64(bias), requires_grad=True)
    mean = xt.mean(dim=ax, keepdim=True)
    inv = torch.rsqrt(((xt - mean) ** 2).mean(dim=ax, keepdim=True) + eps)
    y = (xt - mean) * inv * w + b
    y.backward(torch.tensor(f64(dy)))
    return {"y": y.detach().numpy(), "mean": mean.detach().numpy(), "inv_variance": inv.detach().numpy(),
            "dx": xt.grad.numpy(), "dscale": w.grad.numpy(), "dbias": b.grad.numpy()}


def saved_layernorm_stats(x, per_token, eps=EPS):
    ax = norm_axes(list(np.shape(x)), per_token)
    m = f64(x).mean(axis=ax, keepdims=True)
    inv = 1.0 / np.sqrt(((f64(x) - m) ** 2).mean(axis=ax, keepdims=True) + eps)
    return m.astype(np.float32), inv.astype(np.float32)


# ---------------------------------------------------------------------------
# rmsnorm TRAINING (y, inv_rms), with and without bias
# ---------------------------------------------------------------------------

# dims, io type, per-token scale, channels-last, bias
RMS_FWD = [([2, 5, 16], F, True, False, False), ([3, 4, 32], H, True, False, True), ([2, 7, 24], B, True, False, True),
           ([2, 3, 4, 5], F, False, True, True), ([4, 8, 3, 3], H, False, True, False)]


def rms_forward_graph(dims, dt, per_token, nhwc, bias, dynamic=False):
    """x 1, scale 2 (bias 3) -> y 10, inv_rms 11."""
    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        x = g.tensor(name="X", uid=1, dim=dims, stride=channels_last(dims) if nhwc else None)
        s = g.tensor(name="scale", uid=2, dim=scale_dims(dims, per_token))
        b = g.tensor(name="bias", uid=3, dim=scale_dims(dims, per_token)) if bias else None
        y, inv = g.rmsnorm(x, s, epsilon=EPS, forward_phase=TRAIN, bias=b, name="rms")
        if dynamic:
            g.set_override_shape_enabled(True)
        return g, {10: y.set_output(True).set_uid(10), 11: inv.set_output(True).set_uid(11)}
    return build


@pytest.mark.parametrize("dims,dt,per_token,nhwc,bias", RMS_FWD,
                         ids=[f"{d.name}-{'x'.join(map(str, x))}{'-token' if p else '-sample'}{'-nhwc' if c else ''}"
                              f"{'-bias' if b else ''}" for x, d, p, c, b in RMS_FWD])
def test_rmsnorm_training_forward(cpu, rng, dims, dt, per_token, nhwc, bias):
    torch = pytest.importorskip("torch")
    sd = scale_dims(dims, per_token)
    ins = {1: random_array(dims, dt, rng, strides=channels_last(dims) if nhwc else None),
           2: random_array(sd, dt, rng, 0.5, 1.5)}
    if bias:
        ins[3] = random_array(sd, dt, rng)
    saved = {u: a.copy() for u, a in ins.items()}
    got, _, g = compare_engines(rms_forward_graph(dims, dt, per_token, nhwc, bias), ins, cpu)
    for u, a in saved.items():
        np.testing.assert_array_equal(ins[u], a)
    outs = _outs(g)
    assert outs[11].get_data_type() == F and list(outs[11].get_dim()) == stat_dims(dims, per_token)
    assert outs[10].get_data_type() == dt
    if nhwc:
        assert outs[10].get_stride() == channels_last(dims)
    want = torch_rmsnorm(torch, ins[1], ins[2], ins.get(3), per_token=per_token)
    assert_close(got[10], want["y"], dt, what="y vs torch")
    assert_close(got[11], want["inv_rms"], F, what="inv_rms vs torch")


# ---------------------------------------------------------------------------
# layernorm_backward
# ---------------------------------------------------------------------------

# dims, io type, per-token scale, channels-last, saved statistics
LN_BWD = [([2, 5, 16], F, True, False, True), ([3, 4, 32], H, True, False, True), ([2, 7, 24], B, True, False, False),
          ([2, 3, 4, 5], F, False, True, True), ([4, 8, 3, 3], H, False, True, False), ([3, 6, 10], F, False, False, False)]


def ln_backward_graph(dims, dt, per_token, nhwc, saved, dynamic=False):
    """dy 1, x 2, scale 3 (mean 4, inv_variance 5, FLOAT) -> dx 10, dscale 11, dbias 12."""
    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        st = channels_last(dims) if nhwc else None
        dy, x = g.tensor(name="DY", uid=1, dim=dims, stride=st), g.tensor(name="X", uid=2, dim=dims, stride=st)
        s = g.tensor(name="scale", uid=3, dim=scale_dims(dims, per_token))
        if saved:
            m = g.tensor(name="mean", uid=4, dim=stat_dims(dims, per_token), data_type=F)
            v = g.tensor(name="inv_var", uid=5, dim=stat_dims(dims, per_token), data_type=F)
            outs = g.layernorm_backward(dy, x, s, m, v, name="lnb")
        else:
            outs = g.layernorm_backward(dy, x, s, None, None, epsilon=EPS, name="lnb")
        if dynamic:
            g.set_override_shape_enabled(True)
        return g, {u: t.set_output(True).set_uid(u) for u, t in zip((10, 11, 12), outs)}
    return build


def ln_backward_inputs(dims, dt, per_token, nhwc, saved, rng):
    st = channels_last(dims) if nhwc else None
    x = random_array(dims, dt, rng, strides=st)
    ins = {1: random_array(dims, dt, rng, strides=st), 2: x, 3: random_array(scale_dims(dims, per_token), dt, rng, 0.5, 1.5)}
    if saved:
        ins[4], ins[5] = saved_layernorm_stats(x, per_token)
    return ins


@pytest.mark.parametrize("dims,dt,per_token,nhwc,saved", LN_BWD,
                         ids=[f"{d.name}-{'x'.join(map(str, x))}{'-token' if p else '-sample'}{'-nhwc' if c else ''}"
                              f"{'-saved' if s else '-recompute'}" for x, d, p, c, s in LN_BWD])
def test_layernorm_backward(cpu, rng, dims, dt, per_token, nhwc, saved):
    torch = pytest.importorskip("torch")
    ins = ln_backward_inputs(dims, dt, per_token, nhwc, saved, rng)
    kept = {u: a.copy() for u, a in ins.items()}
    got, _, g = compare_engines(ln_backward_graph(dims, dt, per_token, nhwc, saved), ins, cpu)
    for u, a in kept.items():
        np.testing.assert_array_equal(ins[u], a)
    outs = _outs(g)
    assert outs[10].get_data_type() == dt and list(outs[11].get_dim()) == scale_dims(dims, per_token)
    if nhwc:
        assert outs[10].get_stride() == channels_last(dims)
    want = torch_layernorm(torch, ins[2], ins[3], np.zeros(scale_dims(dims, per_token)), ins[1], per_token)
    for u, k in ((10, "dx"), (11, "dscale"), (12, "dbias")):
        # sums of several rounded terms: a few output ulps
        assert_close(got[u], want[k], outs[u].get_data_type(), 2.0, what=f"{k} vs torch")


# ---------------------------------------------------------------------------
# rmsnorm_backward
# ---------------------------------------------------------------------------

# dims, io type, per-token scale, channels-last, dbias
RMS_BWD = [([2, 5, 16], F, True, False, False), ([3, 4, 32], H, True, False, True), ([2, 7, 24], B, True, False, True),
           ([2, 3, 4, 5], F, False, True, True), ([4, 8, 3, 3], H, False, True, False)]


def rms_backward_graph(dims, dt, per_token, nhwc, dbias, dynamic=False):
    """dy 1, x 2, scale 3, inv_rms 4 (FLOAT) -> dx 10, dscale 11 (dbias 12)."""
    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        st = channels_last(dims) if nhwc else None
        dy, x = g.tensor(name="DY", uid=1, dim=dims, stride=st), g.tensor(name="X", uid=2, dim=dims, stride=st)
        s = g.tensor(name="scale", uid=3, dim=scale_dims(dims, per_token))
        r = g.tensor(name="inv_rms", uid=4, dim=stat_dims(dims, per_token), data_type=F)
        dx, ds, db = g.rmsnorm_backward(dy, x, s, r, has_dbias=dbias, name="rmsb")
        assert (db is None) == (not dbias)
        outs = {10: dx, 11: ds}
        if dbias:
            outs[12] = db
        if dynamic:
            g.set_override_shape_enabled(True)
        return g, {u: t.set_output(True).set_uid(u) for u, t in outs.items()}
    return build


def rms_backward_inputs(dims, dt, per_token, nhwc, rng):
    st = channels_last(dims) if nhwc else None
    x = random_array(dims, dt, rng, strides=st)
    ax = norm_axes(dims, per_token)
    inv = (1.0 / np.sqrt((f64(x) ** 2).mean(axis=ax, keepdims=True) + EPS)).astype(np.float32)
    return {1: random_array(dims, dt, rng, strides=st), 2: x,
            3: random_array(scale_dims(dims, per_token), dt, rng, 0.5, 1.5), 4: inv}


@pytest.mark.parametrize("dims,dt,per_token,nhwc,dbias", RMS_BWD,
                         ids=[f"{d.name}-{'x'.join(map(str, x))}{'-token' if p else '-sample'}{'-nhwc' if c else ''}"
                              f"{'-dbias' if b else ''}" for x, d, p, c, b in RMS_BWD])
def test_rmsnorm_backward(cpu, rng, dims, dt, per_token, nhwc, dbias):
    torch = pytest.importorskip("torch")
    ins = rms_backward_inputs(dims, dt, per_token, nhwc, rng)
    got, _, g = compare_engines(rms_backward_graph(dims, dt, per_token, nhwc, dbias), ins, cpu)
    outs = _outs(g)
    if nhwc:
        assert outs[10].get_stride() == channels_last(dims)
    bias = np.zeros(scale_dims(dims, per_token)) if dbias else None
    want = torch_rmsnorm(torch, ins[2], ins[3], bias, dy=ins[1], per_token=per_token)
    assert set(got) == ({10, 11, 12} if dbias else {10, 11})
    for u, k in ((10, "dx"), (11, "dscale"), (12, "dbias")):
        if u in got:
            assert_close(got[u], want[k], outs[u].get_data_type(), 2.0, what=f"{k} vs torch")


# ---------------------------------------------------------------------------
# forward + backward in one graph, the statistics virtual
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [F, H], ids=["FLOAT", "HALF"])
def test_pre_norm_step_forward_then_backward_from_its_statistics(cpu, rng, dt):
    """One graph: layernorm TRAINING and rmsnorm TRAINING (with bias) on the same x, each backward
    reading its forward's statistics (virtual tensors)."""
    torch = pytest.importorskip("torch")
    dims = [2, 6, 32]
    sd = scale_dims(dims, True)

    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        x, dy = g.tensor(name="X", uid=1, dim=dims), g.tensor(name="DY", uid=2, dim=dims)
        ls, lb = g.tensor(name="ln_s", uid=3, dim=sd), g.tensor(name="ln_b", uid=4, dim=sd)
        rs, rb = g.tensor(name="rms_s", uid=5, dim=sd), g.tensor(name="rms_b", uid=6, dim=sd)
        y, mean, inv = g.layernorm(x, ls, lb, epsilon=EPS, forward_phase=TRAIN)
        ry, rinv = g.rmsnorm(x, rs, epsilon=EPS, forward_phase=TRAIN, bias=rb)
        dx, ds, db = g.layernorm_backward(dy, x, ls, mean, inv)
        rdx, rds, rdb = g.rmsnorm_backward(dy, x, rs, rinv, has_dbias=True)
        outs = {10: y, 11: ry, 20: dx, 21: ds, 22: db, 30: rdx, 31: rds, 32: rdb}
        return g, {u: t.set_output(True).set_uid(u) for u, t in outs.items()}

    ins = {1: random_array(dims, dt, rng), 2: random_array(dims, dt, rng), 3: random_array(sd, dt, rng, 0.5, 1.5),
           4: random_array(sd, dt, rng), 5: random_array(sd, dt, rng, 0.5, 1.5), 6: random_array(sd, dt, rng)}
    got, _, g = compare_engines(build, ins, cpu, scale=2.0)
    outs = _outs(g)
    ln = torch_layernorm(torch, ins[1], ins[3], ins[4], ins[2])
    rms = torch_rmsnorm(torch, ins[1], ins[5], ins[6], dy=ins[2])
    want = {10: ln["y"], 20: ln["dx"], 21: ln["dscale"], 22: ln["dbias"],
            11: rms["y"], 30: rms["dx"], 31: rms["dscale"], 32: rms["dbias"]}
    for u, w in want.items():
        assert_close(got[u], w, outs[u].get_data_type(), 2.0, what=f"uid {u} vs torch")


# ---------------------------------------------------------------------------
# dynamic shapes: one plan, other batch and token counts
# ---------------------------------------------------------------------------

def test_backward_plans_serve_other_batch_and_token_counts(cpu, rng):
    """As the forward norms: the normalized axis stays fixed, the others vary."""
    torch = pytest.importorskip("torch")
    from graph_ir.dynamic import analyze
    built = [2, 4, 16]
    for build, kind in ((ln_backward_graph(built, F, True, False, True, dynamic=True), "ln"),
                        (rms_backward_graph(built, F, True, False, True, dynamic=True), "rms"),
                        (rms_forward_graph(built, F, True, False, True, dynamic=True), "rmsfwd")):
        g, outs = build()
        g.build(cpu)
        assert analyze(g._desc).varying()[1] == [0, 1], kind
        r = hd.Graph.from_compiled_plan(cpu, g.serialize_compiled_plan())
        for dims in ([1, 1, 16], [3, 7, 16]):
            sd = scale_dims(dims, True)
            if kind == "ln":
                ins = ln_backward_inputs(dims, F, True, False, True, rng)
                want = torch_layernorm(torch, ins[2], ins[3], np.zeros(sd), ins[1])
                pairs = ((10, "dx"), (11, "dscale"), (12, "dbias"))
            elif kind == "rms":
                ins = rms_backward_inputs(dims, F, True, False, rng)
                want = torch_rmsnorm(torch, ins[2], ins[3], np.zeros(sd), dy=ins[1])
                pairs = ((10, "dx"), (11, "dscale"), (12, "dbias"))
            else:
                ins = {1: random_array(dims, F, rng), 2: random_array(sd, F, rng, 0.5, 1.5), 3: random_array(sd, F, rng)}
                want = torch_rmsnorm(torch, ins[1], ins[2], ins[3])
                pairs = ((10, "y"), (11, "inv_rms"))
            got = {10: np.full(dims, np.nan, np.float32)}
            if kind == "rmsfwd":
                got[11] = np.full(stat_dims(dims, True), np.nan, np.float32)
            else:
                got[11], got[12] = np.full(sd, np.nan, np.float32), np.full(sd, np.nan, np.float32)
            r.execute(cpu, {**ins, **got})
            for u, k in pairs:
                assert_close(got[u], want[k], F, 2.0, what=f"{kind} {k} at dims {dims}")


# ---------------------------------------------------------------------------
# plans of kind 1 (hipDNN graph payload) and kind 3 (multi-target); CUDA compiles
# ---------------------------------------------------------------------------

def _run_plan(handle, r, ins, outs_like):
    got = {u: empty_like_tensor(t) for u, t in outs_like.items()}
    r.execute(handle, {**ins, **got})
    return got


def test_kind1_plan_of_a_norm_backward_restores_by_compiling(cpu, rng):
    from hipdnn_iree.backend import envelope as _envelope
    from hipdnn_iree.plugin_sdk.engine_ids import FUSILLI_ENGINE_ID
    dims = [2, 3, 4, 5]
    build = ln_backward_graph(dims, F, False, True, True)
    g, outs = build()
    g.build(cpu)
    data = g.serialize_compiled_plan(payload="hipdnn_graph")
    assert _envelope.decode(data).engine_id == FUSILLI_ENGINE_ID
    nocache = hd.create_handle(cache=False)
    r = hd.Graph.from_compiled_plan(nocache, data)
    ins = ln_backward_inputs(dims, F, False, True, True, rng)
    got = _run_plan(nocache, r, ins, outs)
    _, want, _ = run_engines(build, ins, cpu, roundtrip=False)
    for u in outs:
        assert_close(got[u], want[u], F, what=f"uid {u}")


def test_kind3_plan_cpu_and_cuda_runs_its_cpu_module(rng):
    from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
    from hipdnn_iree.plugins.iree_linalg import multitarget as _multitarget
    from hipdnn_iree.backend import envelope as _envelope
    dims = [3, 4, 32]
    h = hd.create_handle(device="local-task", target=[f"llvm-cpu:{_multitarget.cpu_level()}", "cuda:sm_80"])
    build = rms_backward_graph(dims, H, True, False, True)
    g, outs = build()
    g.build(h)
    data = g.serialize_compiled_plan()
    fp = _fusplan.unpack(_envelope.decode(data).plugin_payload)
    assert fp.payload_kind == _fusplan.KIND_MULTI_TARGET and len(fp.entries) == 2
    cpu = hd.create_handle()
    r = hd.Graph.from_compiled_plan(cpu, data)
    ins = rms_backward_inputs(dims, H, True, False, rng)
    got = _run_plan(cpu, r, ins, outs)
    _, want, _ = run_engines(build, ins, cpu, roundtrip=False)
    for u, t in outs.items():
        assert_close(got[u], want[u], t.get_data_type(), 2.0, what=f"uid {u}")


def test_compiles_for_cuda():
    h = hd.create_handle(device=None, target="cuda:sm_80")
    for g, _ in (rms_forward_graph([8, 128, 256], H, True, False, True)(),
                 ln_backward_graph([8, 128, 256], B, True, False, True)(),
                 ln_backward_graph([4, 8, 6, 6], H, False, True, False)(),
                 rms_backward_graph([8, 128, 256], H, True, False, True)()):
        g.build(h)
        assert b"cuda-nvptx-fb" in g.serialize_compiled_plan()


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------

def _bwd_graph(kind, stat=(2, 4, 1), scale=(1, 1, 16), **kw):
    g = hd.Graph(io_data_type=F)
    dy, x = g.tensor(name="DY", uid=1, dim=[2, 4, 16]), g.tensor(name="X", uid=2, dim=[2, 4, 16])
    s = g.tensor(name="scale", uid=3, dim=list(scale))
    a = g.tensor(name="stat_a", uid=4, dim=list(stat), data_type=F)
    b = g.tensor(name="stat_b", uid=5, dim=[2, 4, 1], data_type=F)
    if kind == "ln":
        outs = g.layernorm_backward(dy, x, s, a, b, name="lnb", **kw)
    else:
        outs = g.rmsnorm_backward(dy, x, s, a, name="rmsb", **kw)
    for t in outs:
        if t is not None:
            t.set_output(True)
    return g


def test_wrong_statistics_or_scale_dims_are_bad_param_naming_the_field():
    _err(S.BAD_PARAM, lambda: _bwd_graph("ln", stat=(2, 1, 1)).validate(), "'lnb'", "mean", "[2, 1, 1]")
    _err(S.BAD_PARAM, lambda: _bwd_graph("rms", stat=(2, 4, 16)).validate(), "'rmsb'", "inv_rms", "[2, 4, 16]")
    _err(S.BAD_PARAM, lambda: _bwd_graph("ln", scale=(1, 1, 8)).validate(), "'lnb'", "scale", "[1, 1, 8]")


def test_bad_flags_and_missing_epsilon_are_bad_param():
    _err(S.BAD_PARAM, lambda: _bwd_graph("rms", has_dbias=1), "rmsnorm_backward", "has_dbias")
    g = hd.Graph(io_data_type=F)
    dy, x = g.tensor(name="DY", uid=1, dim=[2, 16]), g.tensor(name="X", uid=2, dim=[2, 16])
    s, m = g.tensor(name="scale", uid=3, dim=[1, 16]), g.tensor(name="m", uid=4, dim=[2, 1], data_type=F)

    def recompute_without_epsilon():
        for t in g.layernorm_backward(dy, x, s, None, None, name="lnb"):
            t.set_output(True)
        g.validate()
    _err(S.BAD_PARAM, recompute_without_epsilon, "lnb", "epsilon")
    g2 = hd.Graph(io_data_type=F)
    x2 = g2.tensor(name="X", uid=1, dim=[2, 16])
    _err(S.BAD_PARAM, lambda: g2.rmsnorm(x2, g2.tensor(name="s", uid=2, dim=[1, 16]), forward_phase="sideways"),
         "forward_phase")


def test_a_bad_graph_leaves_the_callers_buffers_as_they_were(cpu, rng):
    """A variant pack with a wrong-shaped dx buffer: BAD_PARAM naming uid 10; no buffer is written."""
    dims = [2, 4, 16]
    g, outs = rms_backward_graph(dims, F, True, False, False)()
    g.build(cpu)
    ins = rms_backward_inputs(dims, F, True, False, rng)
    dx = np.full([2, 4, 8], 7.0, np.float32)
    ds = np.full([1, 1, 16], 7.0, np.float32)
    _err(S.BAD_PARAM, lambda: g.execute(cpu, {**ins, 10: dx, 11: ds}), "10")
    assert (dx == 7.0).all() and (ds == 7.0).all()
