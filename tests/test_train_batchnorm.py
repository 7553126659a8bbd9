"""Batchnorm training, batchnorm_backward and batchnorm_inference with a variance (hipDNN's
BATCHNORM, BATCHNORM_BACKWARD and BATCHNORM_INFERENCE_VARIANCE_EXT nodes).

Each op on the IREE engine (plan serialized and restored) against the numpy reference and against
torch autograd in float64, over io types (FLOAT compute), NCHW and channels-last layouts, with
and without running statistics, saved and recomputed statistics; plans of kinds 1 and 3; a CUDA
compile; a dynamic-shape variance-ext plan; and the errors a bad graph gets.
"""
import numpy as np
import pytest

import hipdnn_iree as hd
from harness import assert_close, compare_engines, empty_like_tensor, random_array, run_engines
from tolerances import tolerance

F, H, B = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16
S = hd.Status
EPS, MOM = 1e-5, 0.1


def channels_last(dims):
    """Strides of a channels-last buffer (memory order N, spatial..., C) for logical dims [N, C, ...]."""
    order = [0] + list(range(2, len(dims))) + [1]
    strides, acc = [0] * len(dims), 1
    for a in reversed(order):
        strides[a] = acc
        acc *= dims[a]
    return strides


def per_channel(dims):
    return [1, dims[1]] + [1] * (len(dims) - 2)


def f64(a):
    return np.asarray(a).astype(np.float64)


def _err(status, fn, *words):
    with pytest.raises(hd.HipdnnError) as info:
        fn()
    assert info.value.status == status, str(info.value)
    for w in words:
        assert w in str(info.value), f"{w!r} not in: {info.value}"
    return info.value


# ---------------------------------------------------------------------------
# graphs
# ---------------------------------------------------------------------------

def forward_graph(dims, dt, nhwc, running, eps=EPS, momentum=MOM):
    """x 1, scale 2, bias 3, running mean/var 4/5 -> y 10, mean 11, inv_variance 12, next running 13/14."""
    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        c = per_channel(dims)
        x = g.tensor(name="X", uid=1, dim=dims, stride=channels_last(dims) if nhwc else None)
        s, b = g.tensor(name="scale", uid=2, dim=c), g.tensor(name="bias", uid=3, dim=c)
        rm = rv = None
        if running:
            rm = g.tensor(name="running_mean", uid=4, dim=c, data_type=F)
            rv = g.tensor(name="running_var", uid=5, dim=c, data_type=F)
        outs = g.batchnorm(x, s, b, epsilon=eps, momentum=momentum, in_running_mean=rm, in_running_var=rv,
                           name="bn")
        want = {}
        for u, t in zip((10, 11, 12, 13, 14), outs):
            assert (t is None) == (u >= 13 and not running)
            if t is not None:
                want[u] = t.set_output(True).set_uid(u)
        return g, want
    return build


def forward_inputs(dims, dt, nhwc, running, rng):
    c = per_channel(dims)
    ins = {1: random_array(dims, dt, rng, strides=channels_last(dims) if nhwc else None),
           2: random_array(c, dt, rng, low=0.5, high=1.5), 3: random_array(c, dt, rng)}
    if running:
        ins[4] = random_array(c, F, rng)
        ins[5] = random_array(c, F, rng, low=0.5, high=2.0)
    return ins


def backward_graph(dims, dt, nhwc, saved):
    """dy 1, x 2, scale 3 (saved mean 4, inv_variance 5, FLOAT) -> dx 10, dscale 11, dbias 12."""
    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        st = channels_last(dims) if nhwc else None
        dy, x = g.tensor(name="DY", uid=1, dim=dims, stride=st), g.tensor(name="X", uid=2, dim=dims, stride=st)
        s = g.tensor(name="scale", uid=3, dim=per_channel(dims))
        if saved:
            m = g.tensor(name="mean", uid=4, dim=per_channel(dims), data_type=F)
            v = g.tensor(name="inv_var", uid=5, dim=per_channel(dims), data_type=F)
            outs = g.batchnorm_backward(dy, x, s, mean=m, inv_variance=v, name="bnb")
        else:
            outs = g.batchnorm_backward(dy, x, s, epsilon=EPS, name="bnb")
        return g, {u: t.set_output(True).set_uid(u) for u, t in zip((10, 11, 12), outs)}
    return build


# ---------------------------------------------------------------------------
# torch (float64) references
# ---------------------------------------------------------------------------

def torch_forward(torch, ins, running, eps=EPS, momentum=MOM):
    x = torch.tensor(f64(ins[1]))
    C = x.shape[1]
    w, b = torch.tensor(f64(ins[2]).reshape(C)), torch.tensor(f64(ins[3]).reshape(C))
    rm = torch.tensor(f64(ins[4]).reshape(C)) if running else None
    rv = torch.tensor(f64(ins[5]).reshape(C)) if running else None
    y, mean, invstd = torch.native_batch_norm(x, w, b, rm, rv, True, momentum, eps)
    shape = [1, C] + [1] * (x.dim() - 2)
    out = {10: y.numpy(), 11: mean.reshape(shape).numpy(), 12: invstd.reshape(shape).numpy()}
    if running:
        out[13], out[14] = rm.reshape(shape).numpy(), rv.reshape(shape).numpy()
    return out


def torch_backward(torch, dy, x, scale, eps=EPS):
    """(dx, dscale, dbias) of training-mode batch_norm through autograd."""
    xt = torch.tensor(f64(x), requires_grad=True)
    C = xt.shape[1]
    w = torch.tensor(f64(scale).reshape(C), requires_grad=True)
    b = torch.zeros(C, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.batch_norm(xt, None, None, w, b, training=True, eps=eps)
    y.backward(torch.tensor(f64(dy)))
    shape = [1, C] + [1] * (xt.dim() - 2)
    return {10: xt.grad.numpy(), 11: w.grad.reshape(shape).numpy(), 12: b.grad.reshape(shape).numpy()}


def _check_torch(got, want, outs, scale=1.0):
    for u, w in want.items():
        assert_close(got[u], w, outs[u].get_data_type(), scale, what=f"uid {u} vs torch")


# ---------------------------------------------------------------------------
# batchnorm (training)
# ---------------------------------------------------------------------------

# dims, io type, channels-last x, running statistics
FORWARD = [([4, 3, 5, 6], F, False, True), ([2, 8, 3, 5], H, True, True), ([3, 6, 4, 4], B, False, False),
           ([4, 5, 3, 3], F, True, False), ([6, 4, 7], H, False, True)]


@pytest.mark.parametrize("dims,dt,nhwc,running", FORWARD,
                         ids=[f"{d.name}-{'x'.join(map(str, x))}{'-nhwc' if c else ''}{'-running' if r else ''}"
                              for x, d, c, r in FORWARD])
def test_batchnorm_forward(cpu, rng, dims, dt, nhwc, running):
    torch = pytest.importorskip("torch")
    ins = forward_inputs(dims, dt, nhwc, running, rng)
    saved = {u: a.copy() for u, a in ins.items()}
    build = forward_graph(dims, dt, nhwc, running)
    got, ref, g = compare_engines(build, ins, cpu)
    for u, a in saved.items():                                   # inputs untouched
        np.testing.assert_array_equal(ins[u], a)
    outs = {t.get_uid(): t for t in g._tensors}
    for u in (11, 12, 13, 14):
        if u in got:
            assert outs[u].get_data_type() == F and list(outs[u].get_dim()) == per_channel(dims)
    assert outs[10].get_data_type() == dt
    if nhwc:
        assert outs[10].get_stride() == channels_last(dims)   # y takes x's (channels-last) stride order
    _check_torch(got, torch_forward(torch, ins, running), outs)


def test_batchnorm_statistics_are_stable_for_a_large_mean(cpu, rng):
    """x = 1000 + small noise (FLOAT io): a one-pass f32 variance, or deviations from the mean rounded
    to f32, would lose most digits."""
    torch = pytest.importorskip("torch")
    dims = [8, 4, 6, 6]
    ins = forward_inputs(dims, F, False, False, rng)
    ins[1] = (1000.0 + 0.01 * random_array(dims, F, rng)).astype(np.float32)
    got, _, g = compare_engines(forward_graph(dims, F, False, False), ins, cpu)
    want = torch_forward(torch, ins, False)
    np.testing.assert_allclose(got[12], want[12], rtol=1e-4)
    np.testing.assert_allclose(got[11], want[11], rtol=1e-7)
    assert_close(got[10], want[10], F, what="y vs torch")


# ---------------------------------------------------------------------------
# batchnorm_backward
# ---------------------------------------------------------------------------

# dims, io type, channels-last, saved statistics
BACKWARD = [([4, 3, 5, 6], F, False, True), ([2, 8, 3, 5], H, True, True), ([3, 6, 4, 4], B, False, False),
            ([4, 5, 3, 3], F, True, False), ([6, 4, 7], H, False, True)]


@pytest.mark.parametrize("dims,dt,nhwc,saved", BACKWARD,
                         ids=[f"{d.name}-{'x'.join(map(str, x))}{'-nhwc' if c else ''}{'-saved' if s else '-recompute'}"
                              for x, d, c, s in BACKWARD])
def test_batchnorm_backward(cpu, rng, dims, dt, nhwc, saved):
    torch = pytest.importorskip("torch")
    st = channels_last(dims) if nhwc else None
    x = random_array(dims, dt, rng, strides=st)
    ins = {1: random_array(dims, dt, rng, strides=st), 2: x, 3: random_array(per_channel(dims), dt, rng, 0.5, 1.5)}
    if saved:
        ax = tuple(i for i in range(len(dims)) if i != 1)
        mean = f64(x).mean(axis=ax, keepdims=True)
        ins[4] = mean.astype(np.float32)
        ins[5] = (1.0 / np.sqrt(((f64(x) - mean) ** 2).mean(axis=ax, keepdims=True) + EPS)).astype(np.float32)
    got, ref, g = compare_engines(backward_graph(dims, dt, nhwc, saved), ins, cpu)
    outs = {t.get_uid(): t for t in g._tensors}
    assert outs[11].get_data_type() == F and outs[12].get_data_type() == F and outs[10].get_data_type() == dt
    if nhwc:
        assert outs[10].get_stride() == channels_last(dims)   # dx takes x's stride order
    # dx sums several rounded terms: a few output ulps
    _check_torch(got, torch_backward(torch, ins[1], x, ins[3]), outs, scale=2.0)


def test_training_step_forward_then_backward_from_its_statistics(cpu, rng):
    """One graph: batchnorm training (with running stats) and batchnorm_backward reading its saved mean and
    inv_variance (virtual tensors), channels-last HALF io."""
    torch = pytest.importorskip("torch")
    dims = [4, 8, 3, 5]
    st = channels_last(dims)

    def build():
        g = hd.Graph(io_data_type=H, compute_data_type=F)
        c = per_channel(dims)
        x = g.tensor(name="X", uid=1, dim=dims, stride=st)
        s, b = g.tensor(name="scale", uid=2, dim=c), g.tensor(name="bias", uid=3, dim=c)
        rm, rv = g.tensor(name="rm", uid=4, dim=c, data_type=F), g.tensor(name="rv", uid=5, dim=c, data_type=F)
        dy = g.tensor(name="DY", uid=6, dim=dims, stride=st)
        y, mean, inv, nrm, nrv = g.batchnorm(x, s, b, epsilon=EPS, momentum=MOM, in_running_mean=rm, in_running_var=rv)
        dx, ds, db = g.batchnorm_backward(dy, x, s, mean=mean, inv_variance=inv)
        outs = {10: y, 13: nrm, 14: nrv, 20: dx, 21: ds, 22: db}
        return g, {u: t.set_output(True).set_uid(u) for u, t in outs.items()}

    ins = forward_inputs(dims, H, True, True, rng)
    ins[6] = random_array(dims, H, rng, strides=st)
    got, _, g = compare_engines(build, ins, cpu, scale=2.0)
    outs = {t.get_uid(): t for t in g._tensors}
    fw = torch_forward(torch, ins, True)
    bw = torch_backward(torch, ins[6], ins[1], ins[2])
    _check_torch(got, {10: fw[10], 13: fw[13], 14: fw[14], 20: bw[10], 21: bw[11], 22: bw[12]}, outs, scale=2.0)


# ---------------------------------------------------------------------------
# batchnorm_inference with variance= (BATCHNORM_INFERENCE_VARIANCE_EXT)
# ---------------------------------------------------------------------------

VARIANCE = [([2, 3, 4, 5], F, False), ([2, 8, 3, 5], H, True), ([4, 6, 10], B, False)]


def variance_graph(dims, dt, nhwc, eps=1e-3, dynamic=False):
    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        x = g.tensor(name="X", uid=1, dim=dims, stride=channels_last(dims) if nhwc else None)
        m, v, s, b = (g.tensor(name=n, uid=u, dim=per_channel(dims)) for n, u in
                      (("mean", 2), ("var", 3), ("scale", 4), ("bias", 5)))
        y = g.batchnorm_inference(x, m, scale=s, bias=b, variance=v, epsilon=eps, name="bnv")
        if dynamic:
            g.set_override_shape_enabled(True)
        return g, {6: y.set_output(True).set_uid(6)}
    return build


def variance_inputs(dims, dt, nhwc, rng):
    c = per_channel(dims)
    return {1: random_array(dims, dt, rng, strides=channels_last(dims) if nhwc else None),
            2: random_array(c, dt, rng), 3: random_array(c, dt, rng, low=0.2, high=2.0),
            4: random_array(c, dt, rng, low=0.5, high=1.5), 5: random_array(c, dt, rng)}


@pytest.mark.parametrize("dims,dt,nhwc", VARIANCE,
                         ids=[f"{d.name}-{'x'.join(map(str, x))}{'-nhwc' if c else ''}" for x, d, c in VARIANCE])
def test_batchnorm_inference_variance_ext(cpu, rng, dims, dt, nhwc):
    torch = pytest.importorskip("torch")
    ins = variance_inputs(dims, dt, nhwc, rng)
    got, _, g = compare_engines(variance_graph(dims, dt, nhwc), ins, cpu)
    y = g._tensors[[t.get_uid() for t in g._tensors].index(6)]
    if nhwc:
        assert y.get_stride() == channels_last(dims)
    C = dims[1]
    want = torch.nn.functional.batch_norm(torch.tensor(f64(ins[1])), torch.tensor(f64(ins[2]).reshape(C)),
                                          torch.tensor(f64(ins[3]).reshape(C)), torch.tensor(f64(ins[4]).reshape(C)),
                                          torch.tensor(f64(ins[5]).reshape(C)), training=False, eps=1e-3)
    assert_close(got[6], want.numpy(), dt, what="y vs torch")
    from graph_ir.desc import OpKind
    assert g._desc.nodes[0].kind == OpKind.BATCHNORM_INFERENCE_VARIANCE_EXT


def test_variance_ext_one_plan_serves_other_batch_and_spatial_sizes(cpu, rng):
    """As batchnorm_inference: N and the spatial axes vary, the channels stay fixed."""
    from graph_ir.dynamic import analyze
    built = [2, 3, 4, 4]
    g, outs = variance_graph(built, F, False, dynamic=True)()
    g.build(cpu)
    spec = analyze(g._desc)
    assert spec.varying()[1] == [0, 2, 3]
    r = hd.Graph.from_compiled_plan(cpu, g.serialize_compiled_plan())
    for dims in ([1, 3, 1, 1], [3, 3, 5, 7]):
        ins = variance_inputs(dims, F, False, rng)
        y = np.full(dims, np.nan, np.float32)
        r.execute(cpu, {**ins, 6: y})
        want = (f64(ins[1]) - ins[2]) / np.sqrt(f64(ins[3]) + 1e-3) * ins[4] + ins[5]
        assert_close(y, want, F, what=f"dims {dims}")


# ---------------------------------------------------------------------------
# plans of kind 1 (hipDNN graph payload) and kind 3 (multi-target); a CUDA compile
# ---------------------------------------------------------------------------

def _run_plan(handle, r, ins, outs_like):
    got = {u: empty_like_tensor(t) for u, t in outs_like.items()}
    r.execute(handle, {**ins, **got})
    return got


def test_kind1_plan_of_a_training_step_restores_by_compiling(cpu, rng):
    from hipdnn_iree.backend import envelope as _envelope
    from hipdnn_iree.plugin_sdk.engine_ids import FUSILLI_ENGINE_ID
    dims = [2, 4, 3, 3]
    build = forward_graph(dims, F, True, True)
    g, outs = build()
    g.build(cpu)
    data = g.serialize_compiled_plan(payload="hipdnn_graph")
    assert _envelope.decode(data).engine_id == FUSILLI_ENGINE_ID
    nocache = hd.create_handle(cache=False)
    r = hd.Graph.from_compiled_plan(nocache, data)
    ins = forward_inputs(dims, F, True, True, rng)
    got = _run_plan(nocache, r, ins, outs)
    _, want, _ = run_engines(build, ins, cpu, roundtrip=False)
    for u in outs:
        assert_close(got[u], want[u], F, what=f"uid {u}")


def test_kind3_plan_cpu_and_cuda_runs_its_cpu_module(rng):
    from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
    from hipdnn_iree.plugins.iree_linalg import multitarget as _multitarget
    from hipdnn_iree.backend import envelope as _envelope
    dims = [3, 4, 5]
    h = hd.create_handle(device="local-task", target=[f"llvm-cpu:{_multitarget.cpu_level()}", "cuda:sm_80"])
    build = backward_graph(dims, H, False, False)
    g, outs = build()
    g.build(h)
    data = g.serialize_compiled_plan()
    fp = _fusplan.unpack(_envelope.decode(data).plugin_payload)
    assert fp.payload_kind == _fusplan.KIND_MULTI_TARGET and len(fp.entries) == 2
    cpu = hd.create_handle()
    r = hd.Graph.from_compiled_plan(cpu, data)
    ins = {1: random_array(dims, H, rng), 2: random_array(dims, H, rng), 3: random_array([1, 4, 1], H, rng, 0.5, 1.5)}
    got = _run_plan(cpu, r, ins, outs)
    _, want, _ = run_engines(build, ins, cpu, roundtrip=False)
    for u, t in outs.items():
        assert_close(got[u], want[u], t.get_data_type(), 2.0, what=f"uid {u}")


def test_compiles_for_cuda():
    h = hd.create_handle(device=None, target="cuda:sm_80")
    for g, _ in (forward_graph([4, 8, 6, 6], H, True, True)(), backward_graph([4, 8, 6, 6], H, True, False)(),
                 backward_graph([4, 8, 6], B, False, True)(), variance_graph([4, 8, 6, 6], H, True)()):
        g.build(h)
        assert b"cuda-nvptx-fb" in g.serialize_compiled_plan()


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------

def _fw(**kw):
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="X", uid=1, dim=[2, 3, 4, 4])
    s = g.tensor(name="scale", uid=2, dim=kw.pop("scale_dims", [1, 3, 1, 1]))
    b = g.tensor(name="bias", uid=3, dim=[1, 3, 1, 1])
    rm = g.tensor(name="rm", uid=4, dim=kw.pop("rm_dims", [1, 3, 1, 1])) if kw.pop("rm", False) else None
    rv = g.tensor(name="rv", uid=5, dim=[1, 3, 1, 1]) if kw.pop("rv", False) else None
    peers = [g.tensor(name="peer", uid=6, dim=[1, 3, 1, 1])] if kw.pop("peer", False) else None
    outs = g.batchnorm(x, s, b, in_running_mean=rm, in_running_var=rv, peer_stats=peers, name="bn", **kw)
    for t in outs:
        if t is not None:
            t.set_output(True)
    return g


def test_wrong_statistics_dims_are_bad_param_naming_the_field(cpu):
    _err(S.BAD_PARAM, lambda: _fw(scale_dims=[1, 4, 1, 1]).validate(), "batchnorm 'bn'", "scale", "[1, 4, 1, 1]",
         "[1, 3, 1, 1]")
    _err(S.BAD_PARAM, lambda: _fw(rm=True, rv=True, rm_dims=[3]).validate(), "prev_running_mean", "[3]")

    def bwd():
        g = hd.Graph(io_data_type=F)
        dy, x = g.tensor(name="DY", uid=1, dim=[2, 3, 4]), g.tensor(name="X", uid=2, dim=[2, 3, 4])
        s = g.tensor(name="scale", uid=3, dim=[1, 3, 1])
        m, v = g.tensor(name="m", uid=4, dim=[1, 3, 1]), g.tensor(name="v", uid=5, dim=[3, 1, 1])
        for t in g.batchnorm_backward(dy, x, s, mean=m, inv_variance=v, name="bnb"):
            t.set_output(True)
        g.validate()
    _err(S.BAD_PARAM, bwd, "batchnorm_backward 'bnb'", "inv_variance", "[3, 1, 1]")

    def ext():
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="X", uid=1, dim=[2, 3, 4])
        m, v, s, b = (g.tensor(name=n, uid=u, dim=d) for n, u, d in
                      (("m", 2, [1, 3, 1]), ("v", 3, [1, 2, 1]), ("s", 4, [1, 3, 1]), ("b", 5, [1, 3, 1])))
        g.batchnorm_inference(x, m, scale=s, bias=b, variance=v, epsilon=1e-5, name="bnv").set_output(True)
        g.validate()
    _err(S.BAD_PARAM, ext, "'bnv'", "variance", "[1, 2, 1]")


def test_one_running_input_only_is_bad_param():
    _err(S.BAD_PARAM, lambda: _fw(rm=True), "batchnorm 'bn'", "in_running_var")
    _err(S.BAD_PARAM, lambda: _fw(rv=True), "batchnorm 'bn'", "in_running_mean")
    _err(S.BAD_PARAM, lambda: _fw(rm=True, rv=True, momentum=float("nan")), "momentum")
    _err(S.BAD_PARAM, lambda: _fw(epsilon=-1.0), "epsilon", "-1.0")


def test_recompute_without_epsilon_and_half_the_saved_statistics_are_bad_param():
    g = hd.Graph(io_data_type=F)
    dy, x = g.tensor(name="DY", uid=1, dim=[2, 3, 4]), g.tensor(name="X", uid=2, dim=[2, 3, 4])
    s, m = g.tensor(name="scale", uid=3, dim=[1, 3, 1]), g.tensor(name="m", uid=4, dim=[1, 3, 1])
    _err(S.BAD_PARAM, lambda: g.batchnorm_backward(dy, x, s, name="bnb"), "batchnorm_backward 'bnb'", "epsilon")
    _err(S.BAD_PARAM, lambda: g.batchnorm_backward(dy, x, s, mean=m, name="bnb"), "inv_variance")
    _err(S.BAD_PARAM, lambda: g.batchnorm_backward(dy, x, s, inv_variance=m, name="bnb"), "mean")
    v = g.tensor(name="v", uid=5, dim=[1, 3, 1])
    _err(S.BAD_PARAM, lambda: g.batchnorm_inference(x, m, scale=s, bias=s, variance=v, name="bi"), "epsilon")
    _err(S.BAD_PARAM, lambda: g.batchnorm_inference(x, m, v, s, s, variance=v, epsilon=1e-5), "inv_variance",
         "variance")
    _err(S.BAD_PARAM, lambda: g.batchnorm_inference(x, m, scale=s, bias=s), "inv_variance")
    assert not g._nodes                       # nothing was added by the refused calls


def test_peer_stats_is_not_supported_at_build_never_at_node_creation(cpu, rng):
    g = _fw(peer=True)                                     # node creation accepts it
    g.validate()
    assert g._desc.nodes[0].attrs.peer_stats_uids == (6,)
    _err(S.NOT_SUPPORTED, lambda: g.build(cpu), "peer_stats")
    g2 = hd.Graph(io_data_type=F)
    dy, x = g2.tensor(name="DY", uid=1, dim=[2, 3, 4]), g2.tensor(name="X", uid=2, dim=[2, 3, 4])
    s, p = g2.tensor(name="scale", uid=3, dim=[1, 3, 1]), g2.tensor(name="peer", dim=[1, 3, 1])
    for t in g2.batchnorm_backward(dy, x, s, epsilon=1e-5, peer_stats=[p]):
        t.set_output(True)
    _err(S.NOT_SUPPORTED, lambda: g2.build(cpu), "peer_stats")


def test_a_failed_execute_leaves_the_callers_buffers_unchanged(cpu, rng):
    dims = [2, 3, 4, 4]
    g, outs = forward_graph(dims, F, False, False)()
    g.build(cpu)
    ins = forward_inputs(dims, F, False, False, rng)
    saved = {u: a.copy() for u, a in ins.items()}
    bufs = {u: empty_like_tensor(t, fill=7.0) for u, t in outs.items()}
    bufs[11] = np.full([1, 4, 1, 1], 7.0, np.float32)         # wrong dims for mean
    with pytest.raises(hd.HipdnnError) as info:
        g.execute(cpu, {**ins, **bufs})
    assert info.value.status == S.BAD_PARAM
    for u, a in saved.items():
        np.testing.assert_array_equal(ins[u], a)
    for u in (10, 12):
        assert np.all(bufs[u] == 7.0)
