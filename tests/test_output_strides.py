"""Output strides left unset are inferred in graph order, virtual tensors included, as cuDNN's
frontend infers them: norms, pointwise, reductions and sdpa follow their input's stride order,
conv outputs are channels-last in the facade (cuDNN's default) and follow x in hd.Graph, matmul
is row-major. Every op family in NHWC and NCHW, through the facade and hd.Graph, against torch in
float64; a buffer whose own strides disagree with the tensor's is refused, never written in
another order. Runs on the CPU, and on a CUDA device where one is present (gpu-marked)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import hipdnn_iree as hd  # noqa: E402
import hipdnn_iree.cudnn as cudnn  # noqa: E402
from harness import raises  # noqa: E402

F = torch.nn.functional
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
LAYOUTS = ["nchw", "nhwc"]
TOL = {torch.float32: 2e-4, torch.float16: 2e-2}


@pytest.fixture(scope="module")
def handles():
    made = {}

    def get(device):
        if device not in made:
            made[device] = (cudnn.create_handle(device="cpu") if device == "cpu"
                            else cudnn.create_handle(device="cuda", target="cuda:sm_80"))
        return made[device]
    yield get
    for h in made.values():
        cudnn.destroy_handle(h)


def _gen(rng, device):
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))

    def gen(*shape, layout="nchw", dtype=torch.float32, positive=False):
        t = torch.randn(*shape, generator=g, dtype=torch.float64)
        t = t.abs() + 0.5 if positive else t
        t = t.to(dtype)
        if layout == "nhwc" and len(shape) == 4:
            t = t.contiguous(memory_format=torch.channels_last)
        return t.to(device)
    return gen


def _order(strides, dims):
    """The axes of size > 1, slowest to fastest: what a stride order says about memory."""
    return [a for a in sorted(range(len(dims)), key=lambda a: (-strides[a], a)) if dims[a] > 1]


def _expect_like(ref_strides, dims):
    return _order(ref_strides, dims)


def _facade_graph(handle, dtype):
    io = cudnn.data_type.HALF if dtype == torch.float16 else cudnn.data_type.FLOAT
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                         compute_data_type=cudnn.data_type.FLOAT, handle=handle)


def _run_facade(graph, out, feeds, dims):
    """Builds, binds an output laid out as the graph inferred it, executes; the output tensor."""
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A])
    graph.check_support()
    graph.build_plans()
    y = torch.empty_strided(dims, out.get_stride(), dtype=next(iter(feeds.values())).dtype,
                            device=next(iter(feeds.values())).device)
    graph.execute({**feeds, out: y}, torch.empty(graph.get_workspace_size(), dtype=torch.uint8,
                                                 device=y.device))
    return y


def _check(y, ref, dtype, tf32=False):
    """``tf32``: a facade conv on a CUDA device, which runs FLOAT convolutions with TF32 numerics
    (as cuDNN does; knob F32_CONV_MATH): errors of TF32's 10-bit mantissa, still far below what a
    wrong stride order gives."""
    tol = 1e-2 if tf32 and dtype == torch.float32 and y.is_cuda else TOL[dtype]
    torch.testing.assert_close(y.double().cpu(), ref.double().cpu(), atol=tol, rtol=tol)


def _bn_ref(x, m, iv, s, b):
    return (x.double() - m.double()) * iv.double() * s.double() + b.double()


# ---------------------------------------------------------------------------------------------------
# the facade: cuDNN FE code, output strides left unset everywhere
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["half", "float"])
def test_facade_batchnorm_then_relu(handles, rng, device, layout, dtype):
    """The reported case: relu after batchnorm_inference on channels-last x (silently NCHW before)."""
    gen = _gen(rng, device)
    x = gen(2, 16, 7, 9, layout=layout, dtype=dtype)
    m, s, b = gen(1, 16, 1, 1), gen(1, 16, 1, 1), gen(1, 16, 1, 1)
    iv = gen(1, 16, 1, 1, positive=True)
    g = _facade_graph(handles(device), dtype)
    X, M, IV, S, B = (g.tensor_like(t) for t in (x, m, iv, s, b))
    y = g.relu(input=g.batchnorm_inference(input=X, mean=M, inv_variance=IV, scale=S, bias=B))
    y.set_output(True)
    out = _run_facade(g, y, {X: x, M: m, IV: iv, S: s, B: b}, list(x.shape))
    assert _order(y.get_stride(), x.shape) == _order(x.stride(), x.shape)
    _check(out, torch.relu(_bn_ref(x, m, iv, s, b)), dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_facade_conv_batchnorm_relu_block(handles, rng, device, layout):
    """conv -> bias -> batchnorm -> relu -> reduction: conv's output channels-last (cuDNN), every
    op after it follows, the reduction's output channels-last."""
    gen = _gen(rng, device)
    dtype = torch.float16
    x, w = gen(2, 8, 9, 7, layout=layout, dtype=dtype), gen(16, 8, 3, 3, layout=layout, dtype=dtype)
    bias = gen(1, 16, 1, 1, dtype=dtype)
    m, s, b = gen(1, 16, 1, 1), gen(1, 16, 1, 1), gen(1, 16, 1, 1)
    iv = gen(1, 16, 1, 1, positive=True)
    g = _facade_graph(handles(device), dtype)
    X, W, BIAS, M, IV, S, B = (g.tensor_like(t) for t in (x, w, bias, m, iv, s, b))
    c = g.bias(input=g.conv_fprop(image=X, weight=W, padding=[1, 1], stride=[1, 1], dilation=[1, 1]), bias=BIAS)
    r = g.relu(input=g.batchnorm_inference(input=c, mean=M, inv_variance=IV, scale=S, bias=B))
    r.set_output(True)
    out = _run_facade(g, r, {X: x, W: w, BIAS: bias, M: m, IV: iv, S: s, B: b}, [2, 16, 9, 7])
    assert _order(r.get_stride(), [2, 16, 9, 7]) == [0, 2, 3, 1]          # channels-last, as cuDNN
    conv = F.conv2d(x.double(), w.double(), padding=1) + bias.double()
    _check(out, torch.relu(_bn_ref(conv, m, iv, s, b)), dtype, tf32=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_facade_layernorm_rmsnorm_pointwise_reduction(handles, rng, device, layout):
    """layernorm -> tanh, rmsnorm -> mul: norms and pointwise follow x; sum over H, W after an add."""
    gen = _gen(rng, device)
    x = gen(4, 8, 3, 5, layout=layout)
    s, b = gen(1, 8, 3, 5), gen(1, 8, 3, 5)
    g = _facade_graph(handles(device), torch.float32)
    X, S, B = g.tensor_like(x), g.tensor_like(s), g.tensor_like(b)
    y, _, _ = g.layernorm(norm_forward_phase=cudnn.norm_forward_phase.INFERENCE, input=X, scale=S, bias=B,
                          epsilon=1e-5)
    t = g.tanh(input=y)
    t.set_output(True)
    out = _run_facade(g, t, {X: x, S: s, B: b}, list(x.shape))
    assert _order(t.get_stride(), x.shape) == _order(x.stride(), x.shape)
    ln = F.layer_norm(x.double(), [8, 3, 5], s.double()[0], b.double()[0], 1e-5)
    _check(out, torch.tanh(ln), torch.float32)

    g = _facade_graph(handles(device), torch.float32)
    X, S = g.tensor_like(x), g.tensor_like(s)
    y, _ = g.rmsnorm(norm_forward_phase=cudnn.norm_forward_phase.INFERENCE, input=X, scale=S, epsilon=1e-5)
    z = g.mul(a=y, b=X)
    z.set_output(True)
    out = _run_facade(g, z, {X: x, S: s}, list(x.shape))
    assert _order(z.get_stride(), x.shape) == _order(x.stride(), x.shape)
    xd = x.double()
    rms = xd * torch.rsqrt(xd.pow(2).mean(dim=(1, 2, 3), keepdim=True) + 1e-5) * s.double()
    _check(out, rms * xd, torch.float32)

    g = _facade_graph(handles(device), torch.float32)
    X, B = g.tensor_like(x), g.tensor_like(b)
    r = g.reduction(input=g.add(a=X, b=B), mode=cudnn.reduction_mode.ADD)
    r.set_output(True).set_dim([4, 8, 1, 1])
    out = _run_facade(g, r, {X: x, B: b}, [4, 8, 1, 1])
    _check(out, (x.double() + b.double()).sum(dim=(2, 3), keepdim=True), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_facade_conv_dgrad_wgrad_then_pointwise(handles, rng, device, layout):
    gen = _gen(rng, device)
    dy, w, x = gen(2, 16, 6, 6, layout=layout), gen(16, 8, 3, 3, layout=layout), gen(2, 8, 6, 6, layout=layout)
    g = _facade_graph(handles(device), torch.float32)
    DY, W = g.tensor_like(dy), g.tensor_like(w)
    dx = g.conv_dgrad(loss=DY, filter=W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    dx.set_dim([2, 8, 6, 6])
    r = g.relu(input=dx)
    r.set_output(True)
    out = _run_facade(g, r, {DY: dy, W: w}, [2, 8, 6, 6])
    assert _order(r.get_stride(), [2, 8, 6, 6]) == [0, 2, 3, 1]
    ref = torch.nn.grad.conv2d_input([2, 8, 6, 6], w.double(), dy.double(), padding=1)
    _check(out, torch.relu(ref), torch.float32, tf32=True)

    g = _facade_graph(handles(device), torch.float32)
    X, DY = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(image=X, loss=DY, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    dw.set_dim([16, 8, 3, 3])
    sq = g.mul(a=dw, b=dw)
    sq.set_output(True)
    out = _run_facade(g, sq, {X: x, DY: dy}, [16, 8, 3, 3])
    assert _order(sq.get_stride(), [16, 8, 3, 3]) == [0, 2, 3, 1]
    ref = torch.nn.grad.conv2d_weight(x.double(), [16, 8, 3, 3], dy.double(), padding=1)
    _check(out, ref * ref, torch.float32, tf32=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_facade_sdpa_then_scale_and_matmul_row_major(handles, rng, device, layout):
    """sdpa's output follows q's stride order (a BSHD view of q gives a BSHD o); matmul row-major."""
    gen = _gen(rng, device)

    def qkv(b, h, s, d):
        t = gen(b, s, h, d).transpose(1, 2) if layout == "bshd" else gen(b, h, s, d)
        return t
    q, k, v = qkv(2, 3, 8, 16), qkv(2, 3, 10, 16), qkv(2, 3, 10, 16)
    g = _facade_graph(handles(device), torch.float32)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    o, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=0.25, is_inference=True, use_causal_mask=False)
    z = g.scale(input=o, scale=2.0)
    z.set_output(True)
    out = _run_facade(g, z, {Q: q, K: k, V: v}, list(q.shape))
    assert _order(z.get_stride(), q.shape) == _order(q.stride(), q.shape)
    ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) * 0.25, -1) @ v.double()
    _check(out, 2 * ref, torch.float32)

    a, bm = gen(2, 8, 16), gen(2, 16, 4).transpose(1, 2).contiguous().transpose(1, 2)
    g = _facade_graph(handles(device), torch.float32)
    A, BM = g.tensor_like(a), g.tensor_like(bm)
    r = g.relu(input=g.matmul(A=A, B=BM))
    r.set_output(True)
    out = _run_facade(g, r, {A: a, BM: bm}, [2, 8, 4])
    assert r.get_stride() == [32, 4, 1]
    _check(out, torch.relu(a.double() @ bm.double()), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_facade_refuses_a_buffer_in_another_order(handles, rng, device):
    """A buffer of the tensor's dims whose own strides disagree is refused, naming both; the
    caller's buffer is left as it was (cuDNN would write NHWC elements into NCHW memory)."""
    gen = _gen(rng, device)
    x = gen(2, 16, 7, 9, layout="nhwc")
    g = _facade_graph(handles(device), torch.float32)
    X = g.tensor_like(x)
    y = g.relu(input=g.scale(input=X, scale=3.0))
    y.set_output(True)
    g.build([cudnn.heur_mode.A])
    out = torch.full(list(x.shape), 7.0, device=x.device)               # NCHW, not x's NHWC
    e = raises(hd.Status.BAD_PARAM, g.execute, {X: x, y: out})
    assert str(y.get_stride()) in str(e) and str(list(out.stride())) in str(e), str(e)
    assert bool((out == 7.0).all())
    xin = x.contiguous()                                                 # an NCHW input for an NHWC tensor
    raises(hd.Status.BAD_PARAM, g.execute, {X: xin, y: torch.empty_like(x)}, match=str(list(xin.stride())))


# ---------------------------------------------------------------------------------------------------
# hd.Graph: the same rules (conv follows x), outputs left unset
# ---------------------------------------------------------------------------------------------------
def _hd_handle(device):
    return hd.create_handle() if device == "cpu" else hd.create_handle(device="cuda", target="cuda:sm_80")


_HD_HANDLES = {}


def _hd_run(device, g, out, feeds):
    h = _HD_HANDLES.setdefault(device, _hd_handle(device))
    g.build(h)
    ref = next(iter(feeds.values()))
    y = torch.empty_strided(out.get_dim(), out.get_stride(), dtype=ref.dtype, device=ref.device)
    g.execute(h, {**feeds, out.get_uid(): y})
    return y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_hd_conv_batchnorm_relu_follows_x(rng, device, layout):
    gen = _gen(rng, device)
    x, w = gen(2, 8, 9, 7, layout=layout), gen(16, 8, 3, 3, layout=layout)
    m, s, b = gen(1, 16, 1, 1), gen(1, 16, 1, 1), gen(1, 16, 1, 1)
    iv = gen(1, 16, 1, 1, positive=True)
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    ts = [g.tensor(uid=i + 1, dim=list(t.shape), stride=list(t.stride())) for i, t in enumerate((x, w, m, iv, s, b))]
    c = g.conv_fprop(ts[0], ts[1], padding=[1, 1])
    y = g.pointwise(g.batchnorm_inference(c, *ts[2:]), mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_uid(20)
    out = _hd_run(device, g, y, dict(zip(range(1, 7), (x, w, m, iv, s, b))))
    assert _order(y.get_stride(), [2, 16, 9, 7]) == _order(x.stride(), x.shape)
    conv = F.conv2d(x.double(), w.double(), padding=1)
    _check(out, torch.relu(_bn_ref(conv, m, iv, s, b)), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_hd_norms_reduction_sdpa_follow_their_input(rng, device, layout):
    gen = _gen(rng, device)
    x = gen(4, 8, 3, 5, layout=layout)
    s, b = gen(1, 8, 3, 5), gen(1, 8, 3, 5)
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    X, S, B = (g.tensor(uid=i + 1, dim=list(t.shape), stride=list(t.stride())) for i, t in enumerate((x, s, b)))
    y, _, _ = g.layernorm(X, S, B, epsilon=1e-5)
    r = g.rmsnorm(g.pointwise(y, mode=hd.PointwiseMode.TANH_FWD), S, epsilon=1e-5)
    r.set_output(True).set_uid(10)
    out = _hd_run(device, g, r, {1: x, 2: s, 3: b})
    assert _order(r.get_stride(), x.shape) == _order(x.stride(), x.shape)
    t = torch.tanh(F.layer_norm(x.double(), [8, 3, 5], s.double()[0], b.double()[0], 1e-5))
    _check(out, t * torch.rsqrt(t.pow(2).mean(dim=(1, 2, 3), keepdim=True) + 1e-5) * s.double(), torch.float32)

    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    X = g.tensor(uid=1, dim=list(x.shape), stride=list(x.stride()))
    red = g.reduction(g.pointwise(X, mode=hd.PointwiseMode.EXP), mode=hd.ReductionMode.ADD).set_dim([4, 8, 1, 1])
    red.set_output(True).set_uid(10)
    out = _hd_run(device, g, red, {1: x})
    _check(out, x.double().exp().sum(dim=(2, 3), keepdim=True), torch.float32)

    q = gen(2, 8, 3, 16).transpose(1, 2) if layout == "nhwc" else gen(2, 3, 8, 16)    # BSHD view or BHSD
    k, v = gen(2, 3, 8, 16), gen(2, 3, 8, 16)
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    Q, K, V = (g.tensor(uid=i + 1, dim=list(t.shape), stride=list(t.stride())) for i, t in enumerate((q, k, v)))
    o = g.pointwise(g.sdpa(Q, K, V, attn_scale=0.5), mode=hd.PointwiseMode.NEG)
    o.set_output(True).set_uid(10)
    out = _hd_run(device, g, o, {1: q, 2: k, 3: v})
    assert _order(o.get_stride(), q.shape) == _order(q.stride(), q.shape)
    _check(out, -(torch.softmax(q.double() @ k.double().transpose(-1, -2) * 0.5, -1) @ v.double()), torch.float32)
