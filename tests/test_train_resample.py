"""Pooling (resample / resample_backward, hipDNN's RESAMPLE_FWD / RESAMPLE_BWD): the IREE engine
against the numpy reference through a serialized and restored plan, and against torch in float64
(max pooling's index and its ties, average pooling with and without padding, 2-D and 3-D); io
types, NCHW/NHWC, overlapping and gapped windows, asymmetric padding; kind-1 and kind-3 plans; a
dynamic batch; CUDA compile-only builds; attribute validation."""
import numpy as np
import pytest

import hipdnn_iree as hd
from harness import compare_engines, empty_like_tensor, raises, random_array
from hipdnn_iree.plugins.numpy_reference.resample import pool_backward, pool_forward

F, H, B = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16
S = hd.Status
MAX, AVG_EX, AVG_IN = (hd.ResampleMode.MAXPOOL, hd.ResampleMode.AVGPOOL_EXCLUDE_PADDING,
                       hd.ResampleMode.AVGPOOL_INCLUDE_PADDING)


def _strides(dims, channels_last: bool):
    """Packed strides; channels_last: N, spatial..., C outermost to innermost."""
    order = [0, *range(2, len(dims)), 1] if channels_last else list(range(len(dims)))
    st, acc = [0] * len(dims), 1
    for a in reversed(order):
        st[a] = acc
        acc *= dims[a]
    return st


def _out_dims(x, window, stride, pre, post):
    return [x[0], x[1], *((s + a + b - w) // st + 1 for s, w, st, a, b in zip(x[2:], window, stride, pre, post))]


def _coarse(shape, dt, rng, strides=None):
    """Random values on a grid of 0.5 in [-2, 2]: windows often hold equal maxima (ties)."""
    a = random_array(shape, dt, rng, strides=strides)
    a[...] = (np.round(rng.uniform(-2, 2, size=shape) * 2) / 2).astype(a.dtype)
    return a


def _build(x_dims, mode, window, stride, pre, post, dt=F, nhwc=False, via_x=False):
    """A graph with the forward (y: uid 2, index: uid 3 for MAXPOOL) and the backward (dx: uid 5)
    of one pooling; x is uid 1, dy uid 4. ``via_x``: the backward gets x (the frontend adds the
    forward with index) instead of the index."""
    y_dims = _out_dims(x_dims, window, stride, pre, post)

    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        x = g.tensor(name="X", uid=1, dim=x_dims, stride=_strides(x_dims, nhwc))
        dy = g.tensor(name="dY", uid=4, dim=y_dims, stride=_strides(y_dims, nhwc))
        outs = {}
        if mode == MAX:
            y, idx = g.resample(x, mode, window, stride, pre, post, generate_index=True, name="pool")
            outs[3] = idx.set_output(True).set_uid(3)
        else:
            y = g.resample(x, mode, window, stride, pre, post, name="pool")
        outs[2] = y.set_output(True).set_uid(2)
        if via_x or mode != MAX:
            dx = g.resample_backward(dy, mode, window, stride, pre, post, x=x, name="pool_bwd")
        else:
            dx = g.resample_backward(dy, mode, window, stride, pre, post, index=idx, name="pool_bwd")
            dx.set_dim(x_dims)
        outs[5] = dx.set_output(True).set_uid(5)
        return g, outs

    return build, y_dims


def _inputs(x_dims, y_dims, dt, nhwc, rng):
    return {1: _coarse(x_dims, dt, rng, _strides(x_dims, nhwc)),
            4: random_array(y_dims, dt, rng, strides=_strides(y_dims, nhwc))}


# id, x dims, window, stride, pre, post
GEOMETRIES = [
    ("2d-3x3-s2-p1", [2, 3, 9, 8], [3, 3], [2, 2], [1, 1], [1, 1]),          # overlapping, padded
    ("2d-2x2-s3", [1, 4, 8, 7], [2, 2], [3, 3], [0, 0], [0, 0]),              # gaps between windows
    ("2d-asym", [2, 2, 7, 9], [3, 2], [1, 2], [2, 0], [0, 1]),                # asymmetric padding
    ("3d-2x3x2-p", [1, 2, 5, 6, 5], [2, 3, 2], [2, 1, 2], [1, 1, 0], [0, 1, 1]),
    ("1d-4-s2", [2, 3, 11], [4], [2], [1], [2]),
    ("2d-9x9-s2-p1", [1, 2, 10, 11], [9, 9], [2, 2], [1, 1], [1, 0]),       # 81 offsets: the reduction form
]


@pytest.mark.parametrize("geo", GEOMETRIES, ids=[g[0] for g in GEOMETRIES])
@pytest.mark.parametrize("mode", [MAX, AVG_EX, AVG_IN], ids=lambda m: m.name)
def test_pool_vs_reference(cpu, rng, mode, geo):
    _, xd, w, s, pre, post = geo
    build, yd = _build(xd, mode, w, s, pre, post)
    compare_engines(build, _inputs(xd, yd, F, False, rng), cpu)


@pytest.mark.parametrize("dt", [F, H, B], ids=lambda d: d.name)
@pytest.mark.parametrize("mode", [MAX, AVG_EX, AVG_IN], ids=lambda m: m.name)
def test_pool_io_types_nhwc(cpu, rng, mode, dt):
    """HALF/BFLOAT16/FLOAT io with FLOAT compute, channels-last x and dy (outputs follow)."""
    xd, w, s, pre, post = [2, 5, 8, 9], [3, 3], [2, 2], [1, 1], [1, 1]
    build, yd = _build(xd, mode, w, s, pre, post, dt=dt, nhwc=True)
    got, _, g = compare_engines(build, _inputs(xd, yd, dt, True, rng), cpu)
    for u in got:
        t = next(t for t in g._tensors if t.get_uid() == u)
        assert t.get_stride() == _strides(t.get_dim(), True), (u, t.get_stride())


def test_max_backward_from_x(cpu, rng):
    """resample_backward(x=...) adds the forward with index itself (RESAMPLE_BWD has no x field)."""
    xd = [2, 3, 8, 8]
    build, yd = _build(xd, MAX, [3, 3], [2, 2], [1, 1], [1, 1], nhwc=True, via_x=True)
    g, _ = build()
    g.validate()
    kinds = [n.kind.name for n in g._nodes]
    assert kinds == ["RESAMPLE_FWD", "RESAMPLE_FWD", "RESAMPLE_BWD"], kinds
    compare_engines(build, _inputs(xd, yd, F, True, rng), cpu)


# -- against torch (float64) --------------------------------------------------------------------
def _torch_case(torch, x, mode, window, stride, pad, dy):
    """torch's y, index within the window (MAXPOOL) and dx for symmetric padding ``pad``."""
    rank = x.ndim - 2
    F_ = torch.nn.functional
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    if mode == MAX:
        fn = {2: F_.max_pool2d, 3: F_.max_pool3d}[rank]
        yt, it = fn(xt, window, stride, pad, return_indices=True)
    else:
        fn = {2: F_.avg_pool2d, 3: F_.avg_pool3d}[rank]
        yt, it = fn(xt, window, stride, pad, count_include_pad=mode == AVG_IN), None
    yt.backward(torch.tensor(dy, dtype=torch.float64))
    idx = None
    if it is not None:      # torch: flat position in the input plane -> position inside the window
        flat = it.numpy()
        coords = np.unravel_index(flat, x.shape[2:])
        out = yt.shape[2:]
        grids = np.meshgrid(*(np.arange(o) for o in out), indexing="ij")
        idx = np.zeros(flat.shape, np.int64)
        for a in range(rank):
            k = coords[a] - (grids[a] * stride[a] - pad[a])
            idx = idx * window[a] + k
    return yt.detach().numpy(), idx, xt.grad.numpy()


TORCH_CASES = [
    ("2d-3x3-s2-p1", [2, 3, 9, 8], [3, 3], [2, 2], [1, 1]),
    ("2d-3x2-s1-p1", [1, 2, 6, 7], [3, 2], [1, 1], [1, 1]),
    ("2d-2x2-s3", [1, 3, 8, 8], [2, 2], [3, 3], [0, 0]),
    ("3d-3x3x3-s2-p1", [1, 2, 5, 6, 7], [3, 3, 3], [2, 2, 2], [1, 1, 1]),
]


@pytest.mark.parametrize("case", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
@pytest.mark.parametrize("mode", [MAX, AVG_EX, AVG_IN], ids=lambda m: m.name)
def test_pool_vs_torch(cpu, rng, mode, case):
    torch = pytest.importorskip("torch")
    _, xd, w, s, pad = case
    nhwc = xd[2] % 2 == 0
    build, yd = _build(xd, mode, w, s, pad, pad, nhwc=nhwc)
    inputs = _inputs(xd, yd, F, nhwc, rng)
    g, outs = build()
    g.build(cpu)
    got = {u: empty_like_tensor(t) for u, t in outs.items()}
    g.execute(cpu, {**inputs, **got})
    y, idx, dx = _torch_case(torch, inputs[1], mode, w, s, pad, inputs[4])
    np.testing.assert_allclose(got[2], y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[5], dx, rtol=1e-5, atol=1e-5)
    if mode == MAX:
        np.testing.assert_array_equal(got[3], idx)
        # the grid of 0.5 makes ties: some windows have their maximum more than once
        assert _tied_windows(inputs[1], w, s, pad) > 0


def _tied_windows(x, window, stride, pad):
    from hipdnn_iree.plugins.numpy_reference.resample import windows
    win, inside = windows(x, window, stride, pad, pad)
    win = np.where(inside, win, -np.inf)
    m = win.max(axis=-1, keepdims=True)
    return int(((win == m).sum(-1) > 1).sum())


def test_reference_ties_go_to_the_first_maximum():
    x = np.array([[[[1.0, 3.0, 3.0], [3.0, 0.0, 3.0], [2.0, 3.0, 1.0]]]])
    y, idx = pool_forward(x, 1, (3, 3), (1, 1), (0, 0), (0, 0))
    assert y.item() == 3.0 and idx.item() == 1
    y, idx = pool_forward(x, 1, (2, 2), (1, 1), (1, 1), (0, 0))     # first window: only x[0, 0] inside
    assert y[0, 0, 0, 0] == 1.0 and idx[0, 0, 0, 0] == 3
    dx = pool_backward(np.ones((1, 1, 1, 1)), (1, 1, 3, 3), 1, (3, 3), (1, 1), (0, 0), (0, 0), index=np.array([[[[1]]]]))
    assert dx.sum() == 1.0 and dx[0, 0, 0, 1] == 1.0


def test_engine_ties_and_nan(cpu):
    """Equal maxima: the first in row-major window order; a NaN wins its window (as torch)."""
    x = np.array([[[[1, 3, 3, 0], [3, 0, 3, 5], [2, 3, 1, 5], [0, np.nan, 1, 2]]]], np.float32)

    def build():
        g = hd.Graph(io_data_type=F)
        xt = g.tensor(name="X", uid=1, dim=[1, 1, 4, 4])
        y, i = g.resample(xt, MAX, [3, 3], [1, 1], [0, 0], [0, 0], generate_index=True)
        return g, {2: y.set_output(True).set_uid(2), 3: i.set_output(True).set_uid(3)}

    got, want, _ = compare_engines(build, {1: x}, cpu)
    np.testing.assert_array_equal(got[3][0, 0], [[1, 5], [7, 6]])
    assert got[2][0, 0, 0, 0] == 3 and got[2][0, 0, 0, 1] == 5 and np.isnan(got[2][0, 0, 1]).all()


# -- plans, dynamic shapes, GPU compiles ---------------------------------------------------------
def test_kind1_plan_restores_and_runs(rng):
    nocache = hd.create_handle(cache=False)
    xd = [2, 3, 8, 8]
    build, yd = _build(xd, MAX, [3, 3], [2, 2], [1, 1], [1, 1], nhwc=True)
    g, outs = build()
    g.build(nocache)
    data = g.serialize_compiled_plan(payload="hipdnn_graph")
    r = hd.Graph.from_compiled_plan(nocache, data)           # compiles the hipDNN graph
    inputs = _inputs(xd, yd, F, True, rng)
    got = {u: empty_like_tensor(t) for u, t in outs.items()}
    r.execute(nocache, {**inputs, **got})
    ref, routs = build()
    ref.set_preferred_engine_id_ext("NUMPY_REFERENCE")
    ref.build(nocache)
    want = {u: empty_like_tensor(t) for u, t in routs.items()}
    ref.execute(nocache, {**inputs, **want})
    for u in got:
        np.testing.assert_allclose(np.asarray(got[u], np.float64), np.asarray(want[u], np.float64), 1e-5, 1e-5)


def test_kind3_plan_cpu_module_runs(cpu, rng):
    from hipdnn_iree.plugins.iree_linalg import multitarget
    level = multitarget.cpu_level()
    h = hd.create_handle(device=None, target=["cuda:sm_80", f"llvm-cpu:{level}"])
    xd = [2, 4, 7, 7]
    build, yd = _build(xd, AVG_EX, [3, 3], [2, 2], [1, 1], [1, 1], nhwc=True)
    g, outs = build()
    g.build(h)
    r = hd.Graph.from_compiled_plan(cpu, g.serialize_compiled_plan())
    inputs = _inputs(xd, yd, F, True, rng)
    got = {u: empty_like_tensor(t) for u, t in outs.items()}
    r.execute(cpu, {**inputs, **got})
    y = pool_forward(inputs[1], 2, (3, 3), (2, 2), (1, 1), (1, 1))[0]
    dx = pool_backward(inputs[4], xd, 2, (3, 3), (2, 2), (1, 1), (1, 1))
    np.testing.assert_allclose(got[2], y, 1e-5, 1e-5)
    np.testing.assert_allclose(got[5], dx, 1e-5, 1e-5)


@pytest.mark.parametrize("mode", [MAX, AVG_EX], ids=lambda m: m.name)
def test_dynamic_batch(cpu, rng, mode):
    """One plan (override shapes) runs at batch sizes it was not built for."""
    w, s, p = [3, 3], [2, 2], [1, 1]
    build, _ = _build([2, 3, 9, 8], mode, w, s, p, p, nhwc=True)
    g, _ = build()
    g.set_override_shape_enabled(True)
    g.build(cpu)
    assert g.is_dynamic_shape_enabled()
    for n in (1, 4):
        xd = [n, 3, 9, 8]
        b2, yd = _build(xd, mode, w, s, p, p, nhwc=True)
        inputs = _inputs(xd, yd, F, True, rng)
        ref, routs = b2()
        ref.set_preferred_engine_id_ext("NUMPY_REFERENCE")
        ref.build(cpu)
        want = {u: empty_like_tensor(t) for u, t in routs.items()}
        ref.execute(cpu, {**inputs, **want})
        got = {u: empty_like_tensor(t) for u, t in routs.items()}
        g.execute(cpu, {**inputs, **got})
        for u in got:
            np.testing.assert_allclose(np.asarray(got[u], np.float64), np.asarray(want[u], np.float64), 1e-5, 1e-5,
                                       err_msg=f"N={n} uid {u}")


@pytest.mark.parametrize("target", ["cuda:sm_80"])
@pytest.mark.parametrize("mode", [MAX, AVG_EX, AVG_IN], ids=lambda m: m.name)
def test_gpu_compile(target, mode):
    """Forward + backward compile for CUDA (compile only), static and with a dynamic batch."""
    h = hd.create_handle(device=None, target=target)
    build, _ = _build([4, 16, 14, 14], mode, [3, 3], [2, 2], [1, 1], [1, 1], dt=H, nhwc=True)
    for dynamic in (False, True):
        g, _ = build()
        g.set_dynamic_shape_enabled(dynamic)
        g.build(h)


# -- validation ----------------------------------------------------------------------------------
def _bad(fn, match, status=S.BAD_PARAM):
    def run():
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="X", uid=1, dim=[1, 2, 6, 6])
        fn(g, x)
        g.validate()
    raises(status, run, match=match)


@pytest.mark.parametrize("kw, match", [
    (dict(window=[0, 2]), "window"),
    (dict(window=[2, 2], stride=[1, 0]), "stride"),
    (dict(window=[2, 2], pre_padding=[-1, 0]), "pre_padding"),
    (dict(window=[2, 2], post_padding=[0, 2]), "post_padding"),
    (dict(window=[3, 3], pre_padding=[3, 0]), "pre_padding"),
    (dict(window=[7, 2]), "window"),                       # output size < 1
    (dict(window=[2, 2, 2]), "window"),                    # one entry per spatial axis
    (dict(window=[2, 2], stride=[1]), "stride"),
])
def test_bad_attributes(kw, match):
    _bad(lambda g, x: g.resample(x, MAX, **kw), match)


def test_bad_modes_and_index():
    _bad(lambda g, x: g.resample(x, hd.ResampleMode.NOT_SET, [2, 2]), "mode")
    _bad(lambda g, x: g.resample(x, 7, [2, 2]), "mode")
    _bad(lambda g, x: g.resample(x, AVG_IN, [2, 2], generate_index=True), "generate_index")
    _bad(lambda g, x: g.resample_backward(g.tensor(name="dY", dim=[1, 2, 3, 3]), MAX, [2, 2]), "index")
    _bad(lambda g, x: g.resample_backward(g.tensor(name="dY", dim=[1, 2, 3, 3]), AVG_IN, [2, 2],
                                          index=g.tensor(name="I", dim=[1, 2, 3, 3], data_type=hd.DataType.INT32)),
         "index")

    def wrong_dx(g, x):          # dx dims that do not pool to dy's dims
        g.resample_backward(g.tensor(name="dY", dim=[1, 2, 3, 3]), AVG_IN, [2, 2]).set_dim([1, 2, 8, 8]) \
            .set_output(True)
    _bad(wrong_dx, "dx_uid")

    def unset_dx(g, x):
        g.resample_backward(g.tensor(name="dY", dim=[1, 2, 3, 3]), AVG_IN, [2, 2]).set_output(True)
    _bad(unset_dx, "set the dims")


def test_bad_execute_leaves_buffers(cpu, rng):
    """A wrong-shaped buffer at execute: BAD_PARAM, and the caller's outputs are not written."""
    xd = [1, 2, 6, 6]
    build, yd = _build(xd, MAX, [2, 2], [2, 2], [0, 0], [0, 0])
    g, outs = build()
    g.build(cpu)
    inputs = _inputs(xd, yd, F, False, rng)
    got = {u: empty_like_tensor(t) for u, t in outs.items()}
    before = {u: np.array(a, copy=True) for u, a in got.items()}
    x_before = np.array(inputs[1], copy=True)
    raises(S.BAD_PARAM, g.execute, cpu, {**inputs, 4: np.zeros([1, 2, 2, 3], np.float32), **got})
    for u in got:
        np.testing.assert_array_equal(got[u], before[u])
    np.testing.assert_array_equal(inputs[1], x_before)


def test_index_is_int32_with_y_dims():
    g = hd.Graph(io_data_type=H)
    x = g.tensor(name="X", dim=[1, 2, 6, 6])
    assert isinstance(g.resample(x, MAX, [3, 2], [3, 2]), hd.TensorAttributes)    # no index unless asked
    y, i = g.resample(x, MAX, [3, 2], [3, 2], generate_index=True)
    y.set_output(True)
    i.set_output(True)
    g.validate()
    assert i.get_data_type() == hd.DataType.INT32 and i.get_dim() == [1, 2, 2, 3]
    assert y.get_data_type() == H
