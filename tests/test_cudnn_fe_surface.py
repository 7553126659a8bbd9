"""The cuDNN FE surface cuDNN FE's own tests use: training norms composed from
pointwise and reduction nodes, checked against torch autograd in float64 on random data; the
module attributes, plan-list methods, graph_cache, deviceless compiles, pass-by-value host
scalars, raw pointers and in-place outputs; and benchmarks/cudnn_fe_tests.py on a small folder
laid out as cuDNN FE's test/python is."""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hipdnn_iree as hd

torch = pytest.importorskip("torch")
import hipdnn_iree.cudnn as cudnn  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
F = cudnn.data_type.FLOAT


@pytest.fixture(scope="module")
def handle():
    return cudnn.create_handle(device="cpu")


def _graph(handle, io=cudnn.data_type.FLOAT):
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=F, compute_data_type=F, handle=handle)


def _run(g, pack):
    g.build([cudnn.heur_mode.A])
    g.execute(pack, None)


def _close(got, want, tol=1e-4):
    got, want = got.double(), want.double()
    err = (got - want).abs().max().item()
    scale = max(want.abs().max().item(), 1.0)
    assert err <= tol * scale, f"max error {err} (scale {scale})"


def _gen(seed=0):
    g = torch.Generator().manual_seed(seed)
    return lambda *shape: torch.randn(*shape, generator=g)


# -- training norms ------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_batchnorm_training_and_running_stats(handle, layout):
    r = _gen(1)
    n, c, h, w = 3, 5, 4, 6
    x = 2 * r(n, c, h, w) + 0.5
    if layout == "nhwc":
        x = x.to(memory_format=torch.channels_last)
    scale, bias, rm, rv = r(1, c, 1, 1), r(1, c, 1, 1), r(1, c, 1, 1), r(1, c, 1, 1).abs() + 0.5
    eps, mom = 1e-3, 0.2
    g = _graph(handle)
    X, S, B, RM, RV = (g.tensor_like(t) for t in (x, scale, bias, rm, rv))
    E_, M_ = g.tensor_like(torch.full((1, 1, 1, 1), eps)), g.tensor_like(torch.full((1, 1, 1, 1), mom))
    assert E_.get_is_pass_by_value() and M_.get_is_pass_by_value()      # host scalars: pass-by-value
    y, mean, inv, nrm, nrv = g.batchnorm(input=X, scale=S, bias=B, in_running_mean=RM, in_running_var=RV,
                                         epsilon=E_, momentum=M_, name="BN")
    for t in (y, mean, inv, nrm, nrv):
        t.set_output(True).set_data_type(F)
    outs = {t: torch.full(list(t.get_dim()), float("nan")) for t in (mean, inv)}
    outs[y] = torch.empty_like(x)
    rm_io, rv_io = rm.clone(), rv.clone()           # in place, as cuDNN's test binds them
    _run(g, {X: x, S: scale, B: bias, RM: rm_io, RV: rv_io, E_: torch.full((1, 1, 1, 1), eps),
             M_: torch.full((1, 1, 1, 1), mom), nrm: rm_io, nrv: rv_io, **outs})
    xd = x.double()
    m = xd.mean((0, 2, 3), keepdim=True)
    var = xd.var((0, 2, 3), unbiased=False, keepdim=True)
    want_y = (xd - m) / torch.sqrt(var + eps) * scale.double() + bias.double()
    _close(outs[y], want_y)
    _close(outs[mean], m)
    _close(outs[inv], 1 / torch.sqrt(var + eps))
    cnt = n * h * w
    _close(rm_io, (1 - mom) * rm.double() + mom * m)
    _close(rv_io, (1 - mom) * rv.double() + mom * var * cnt / (cnt - 1))


def _autograd(fn, *inputs):
    leaves = [t.double().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    return out, leaves


@pytest.mark.parametrize("recompute", [False, True])
def test_batchnorm_backward(handle, recompute):
    r = _gen(2)
    n, c, h, w = 2, 4, 5, 3
    x, dy, scale = r(n, c, h, w), r(n, c, h, w), r(1, c, 1, 1)
    eps = 1e-5
    y, (xd, sd) = _autograd(lambda a, s: torch.nn.functional.batch_norm(a, None, None, s.reshape(-1), None, True,
                                                                        0.0, eps), x, scale)
    y.backward(dy.double())
    m = x.double().mean((0, 2, 3), keepdim=True)
    inv = 1 / torch.sqrt(x.double().var((0, 2, 3), unbiased=False, keepdim=True) + eps)
    g = _graph(handle)
    DY, X, S = g.tensor_like(dy), g.tensor_like(x), g.tensor_like(scale)
    if recompute:
        dx, ds, db = g.batchnorm_backward(grad=DY, input=X, scale=S, epsilon=eps)
        pack = {}
    else:
        M, I = g.tensor_like(m.float()), g.tensor_like(inv.float())
        dx, ds, db = g.batchnorm_backward(grad=DY, input=X, scale=S, mean=M, inv_variance=I)
        pack = {M: m.float(), I: inv.float()}
    for t in (dx, ds, db):
        t.set_output(True).set_data_type(F)
    o = {dx: torch.empty_like(x), ds: torch.empty_like(scale), db: torch.empty_like(scale)}
    _run(g, {DY: dy, X: x, S: scale, **pack, **o})
    _close(o[dx], xd.grad)
    _close(o[ds], sd.grad)
    _close(o[db], dy.double().sum((0, 2, 3), keepdim=True))


def test_layernorm_backward(handle):
    r = _gen(3)
    b, s, e = 2, 3, 16
    x, dy, scale, bias = 3 * r(b, s, e), r(b, s, e), r(1, 1, e), r(1, 1, e)
    eps = 1e-3
    y, (xd, sd, bd) = _autograd(lambda a, w, bb: torch.nn.functional.layer_norm(a, [e], w.reshape(-1), bb.reshape(-1),
                                                                                eps), x, scale, bias)
    y.backward(dy.double())
    m = x.double().mean(-1, keepdim=True)
    inv = 1 / torch.sqrt(x.double().var(-1, unbiased=False, keepdim=True) + eps)
    g = _graph(handle)
    DY, X, S, M, I = (g.tensor_like(t) for t in (dy, x, scale, m.float(), inv.float()))
    dx, ds, db = g.layernorm_backward(grad=DY, input=X, scale=S, mean=M, inv_variance=I, name="DLN")
    assert dx.get_name() == "DLN::DX"
    for t in (dx, ds, db):
        t.set_output(True).set_data_type(F)
    o = {dx: torch.empty_like(x), ds: torch.empty_like(scale), db: torch.empty_like(bias)}
    _run(g, {DY: dy, X: x, S: scale, M: m.float(), I: inv.float(), **o})
    _close(o[dx], xd.grad)
    _close(o[ds], sd.grad)
    _close(o[db], bd.grad)


@pytest.mark.parametrize("has_dbias", [True, False])
def test_rmsnorm_training_and_backward(handle, has_dbias):
    r = _gen(4)
    n, c = 6, 12
    x, dy, scale, bias = r(n, c, 1, 1), r(n, c, 1, 1), r(1, c, 1, 1), r(1, c, 1, 1)
    eps = 1e-3

    def fwd(a, w, bb):
        inv = torch.rsqrt((a * a).mean((1, 2, 3), keepdim=True) + eps)
        return a * inv * w + (bb if has_dbias else 0)
    y, (xd, sd, bd) = _autograd(fwd, x, scale, bias)
    y.backward(dy.double())
    inv = torch.rsqrt((x.double() ** 2).mean((1, 2, 3), keepdim=True) + eps)
    g = _graph(handle)
    DY, X, S, I = (g.tensor_like(t) for t in (dy, x, scale, inv.float()))
    dx, ds, db = g.rmsnorm_backward(grad=DY, input=X, scale=S, inv_variance=I, has_dbias=has_dbias)
    assert (db is None) == (not has_dbias)
    outs = [t for t in (dx, ds, db) if t is not None]
    for t in outs:
        t.set_output(True).set_data_type(F)
    o = {t: torch.empty(list(t.get_dim())) for t in outs}
    _run(g, {DY: dy, X: x, S: scale, I: inv.float(), **o})
    _close(o[dx], xd.grad)
    _close(o[ds], sd.grad)
    if has_dbias:
        _close(o[db], bd.grad)


def test_instancenorm_forward_and_backward(handle):
    r = _gen(5)
    n, c, h, w = 2, 3, 4, 5
    x, dy, scale, bias = (r(n, c, h, w) * 2 + 1).to(memory_format=torch.channels_last), r(n, c, h, w), \
        r(1, c, 1, 1), r(1, c, 1, 1)
    eps = 1e-5
    y, (xd, sd, bd) = _autograd(lambda a, s_, b_: torch.nn.functional.instance_norm(
        a, weight=s_.reshape(-1), bias=b_.reshape(-1), eps=eps), x, scale, bias)
    y.backward(dy.double())
    g = _graph(handle)
    X, S, B = g.tensor_like(x), g.tensor_like(scale), g.tensor_like(bias)
    Y, M, I = g.instancenorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=X, scale=S, bias=B,
                             epsilon=eps)
    for t in (Y, M, I):
        t.set_output(True).set_data_type(F)
    o = {Y: torch.empty_like(x), M: torch.empty(n, c, 1, 1), I: torch.empty(n, c, 1, 1)}
    _run(g, {X: x, S: scale, B: bias, **o})
    _close(o[Y], y.detach())
    m = x.double().mean((2, 3), keepdim=True)
    inv = 1 / torch.sqrt(x.double().var((2, 3), unbiased=False, keepdim=True) + eps)
    _close(o[M], m)
    _close(o[I], inv)
    gb = _graph(handle)
    DY, X2, S2, M2, I2 = (gb.tensor_like(t) for t in (dy, x, scale, o[M], o[I]))
    dx, ds, db = gb.instancenorm_backward(grad=DY, input=X2, scale=S2, mean=M2, inv_variance=I2)
    for t in (dx, ds, db):
        t.set_output(True).set_data_type(F)
    ob = {dx: torch.empty_like(x), ds: torch.empty_like(scale), db: torch.empty_like(bias)}
    _run(gb, {DY: dy, X2: x, S2: scale, M2: o[M], I2: o[I], **ob})
    _close(ob[dx], xd.grad)
    _close(ob[ds], sd.grad)
    _close(ob[db], bd.grad)


def test_genstats_after_conv_with_inferred_dims(handle):
    """genstats of a conv output whose dims are inferred (not set by the caller)."""
    r = _gen(6)
    x, w = r(2, 4, 6, 6).to(memory_format=torch.channels_last), r(8, 4, 3, 3).to(memory_format=torch.channels_last)
    g = _graph(handle)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(image=X, weight=W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    Y.set_output(True)
    SUM, SQ = g.genstats(input=Y, name="gs")
    for t in (SUM, SQ):
        t.set_output(True).set_data_type(F)
    want = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    o = {Y: torch.empty_like(want.float()).to(memory_format=torch.channels_last), SUM: torch.empty(8),
         SQ: torch.empty(8)}
    _run(g, {X: x, W: w, **o})
    _close(o[Y], want)
    _close(o[SUM], want.sum((0, 2, 3)))
    _close(o[SQ], (want ** 2).sum((0, 2, 3)))


# -- module and graph surface -------------------------------------------------------------------
def test_versions_and_identity():
    assert cudnn.backend_version_string() == "9.11.0" and cudnn.backend_version() == 91100
    assert cudnn.engine_version_string().startswith("hipdnn-iree ")
    assert cudnn.__version__ == "1.32.0"


def test_plan_list_methods(handle):
    g = _graph(handle)
    A, B = g.tensor(name="A", dim=[1, 8, 16]), g.tensor(name="B", dim=[1, 16, 4])
    C = g.matmul(A=A, B=B)
    C.set_output(True)
    g.validate().build_operation_graph()
    n = g.get_engine_count()
    assert n >= 1
    knobs = g.get_knobs_for_engine(0)
    assert {k.type.name for k in knobs} >= {"OPT_LEVEL"}
    for k in knobs:
        assert k.min_value == 0 and k.max_value == len(k.choices) - 1 and k.stride == 1
    cfg = next((k for k in knobs if k.type == cudnn.knob_type.KERNEL_CFG), None)
    count = 0 if cfg is None else cfg.max_value + 1
    for i in range(count):
        g.create_execution_plan(0, {cudnn.knob_type.KERNEL_CFG: i})
    if count == 0:
        g.create_execution_plan(0)
    assert g.get_execution_plan_count() == max(count, 1)
    with pytest.raises(RuntimeError):                      # cuDNN FE code catches RuntimeError
        g.create_execution_plan(0, {cudnn.knob_type.KERNEL_CFG: 10**6})
    with pytest.raises(hd.HipdnnError) as e:
        g.get_knobs_for_engine(n + 5)
    assert e.value.status == hd.Status.BAD_PARAM
    assert cudnn.behavior_note.RUNTIME_COMPILATION in g.get_behavior_notes_for_plan_at_index(0)
    assert g.get_plan_name_at_index(0).startswith("IREE_LINALG")
    g.check_support().build_plans()
    assert cudnn.behavior_note.RUNTIME_COMPILATION in g.get_behavior_notes()
    assert g.query_tensor_attributes_of_uid(C.get_uid()) is C
    a, b = torch.randn(1, 8, 16), torch.randn(1, 16, 4)
    c = torch.empty(1, 8, 4)
    g.execute({A: a, B: b, C: c}, None)
    _close(c, a.double() @ b.double())


def test_key_follows_content(handle):
    def make(k):
        g = _graph(handle)
        A, B = g.tensor(name="A", dim=[2, 8, k]), g.tensor(name="B", dim=[2, k, 4])
        g.matmul(A=A, B=B).set_output(True)
        return g
    assert make(16).key() == make(16).key() != make(32).key()


def test_deselect_engines_leaves_no_plan(handle):
    g = _graph(handle)
    A = g.tensor(name="A", dim=[4, 4])
    g.relu(A).set_output(True)
    g.validate().build_operation_graph()
    g.deselect_engines(["IREE_LINALG", "FUSILLI_ENGINE", "NUMPY_REFERENCE", "eng0"])
    g.create_execution_plans([cudnn.heur_mode.A])
    with pytest.raises(cudnn.cudnnGraphNotSupportedError):
        g.check_support()


def test_graph_cache_builds_once(handle):
    made = []

    @cudnn.jit(heur_modes=[cudnn.heur_mode.A])
    @cudnn.graph_cache(key_fn=lambda h, x: (tuple(x.shape), x.dtype))
    def make(h, x):
        made.append(1)
        with cudnn.graph(h, io_data_type=F) as (g, _):
            X = g.tensor_like(x)
            Y = g.relu(X)
            Y.set_output(True)
        return g, [X, Y]
    g1, u1 = make(handle, torch.randn(3, 4))
    g2, u2 = make(handle, torch.randn(3, 4))
    g3, _ = make(handle, torch.randn(5, 4))
    assert g1 is g2 and u1 == u2 and g3 is not g1 and len(made) == 2
    x, y = torch.randn(3, 4), torch.empty(3, 4)
    g1.execute({u1[0]: x, u1[1]: y}, None)
    assert torch.equal(y, x.clamp_min(0))


def test_deviceless_compile_then_restore(handle, tmp_path):
    props = cudnn.create_device_properties(0)
    again = cudnn.create_device_properties(props.serialize())
    assert again.serialize() == props.serialize()
    with pytest.raises(hd.HipdnnError):
        cudnn.create_device_properties("{not json")
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F, device_property=again)
    X = g.tensor(name="X", dim=[2, 3, 5, 5], stride=[75, 1, 15, 3])
    W = g.tensor(name="W", dim=[4, 3, 3, 3], stride=[27, 1, 9, 3])
    Y = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    Y.set_output(True)
    g.build([cudnn.heur_mode.A])
    data = g.serialize()
    r = cudnn.pygraph()
    r.deserialize(handle, data)
    x = torch.randn(2, 3, 5, 5).to(memory_format=torch.channels_last)
    w = torch.randn(4, 3, 3, 3).to(memory_format=torch.channels_last)
    y = torch.empty(2, 4, 5, 5).to(memory_format=torch.channels_last)
    r.execute({X.get_uid(): x, W.get_uid(): w, Y.get_uid(): y}, None, handle=handle)
    _close(y, torch.nn.functional.conv2d(x.double(), w.double(), padding=1))


def test_raw_host_pointers_and_reinterpreted_dtype(handle):
    g = _graph(handle)
    A = g.tensor(name="A", dim=[4, 6])
    Y = g.add(A, A)
    Y.set_output(True)
    a = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    y = np.zeros((4, 6), np.float32)
    g.build([cudnn.heur_mode.A])
    # a bare integer is refused on a CPU handle, a real address included (tests/test_cudnn_raw_pointers.py)
    with pytest.raises(hd.HipdnnError) as e:
        g.execute({A: a.ctypes.data, Y: y}, None)
    assert e.value.status == hd.Status.BAD_PARAM and f"uid {A.get_uid()}" in str(e.value) and (y == 0).all()
    g.execute({A: a, Y: y}, None)
    np.testing.assert_array_equal(y, 2 * a)
    # a buffer of another type of the same size is read as the tensor's type (cuDNN binds addresses)
    y2 = np.zeros((4, 6), np.float32)
    with pytest.warns(RuntimeWarning, match="read as float32"):
        g.execute({A: a.view(np.int32), Y: y2}, None)
    np.testing.assert_array_equal(y2, 2 * a)
    with pytest.raises(hd.HipdnnError) as e:                 # another size stays refused, nothing written
        g.execute({A: a.astype(np.float64), Y: (y3 := np.full((4, 6), 7, np.float32))}, None)
    assert e.value.status == hd.Status.BAD_PARAM and (y3 == 7).all()
    assert ctypes.sizeof(ctypes.c_void_p) == 8


def test_errors_are_runtime_errors_with_status(handle):
    g = _graph(handle)
    with pytest.raises(RuntimeError) as e:
        g.tensor(name="X", dim=None)
    assert isinstance(e.value, hd.HipdnnError) and e.value.status == hd.Status.BAD_PARAM


# -- the runner -----------------------------------------------------------------------------------
def test_runner_writes_the_table(tmp_path):
    """benchmarks/cudnn_fe_tests.py on a folder laid out as cuDNN FE's test/python: a passing, a
    failing and a skipped L0 test, and a test outside L0 (deselected by the folder's pytest.ini)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    L0: level 0\naddopts = -m L0\n")
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import pytest, cudnn
        @pytest.fixture(scope="session")
        def cudnn_handle():
            return cudnn.create_handle(device="cpu")
    """))
    (tmp_path / "test_small.py").write_text(textwrap.dedent("""
        import cudnn, pytest, numpy as np
        from looseversion import LooseVersion

        @pytest.mark.L0
        def test_relu(cudnn_handle):
            g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, handle=cudnn_handle)
            X = g.tensor(name="X", dim=[2, 3])
            Y = g.relu(X)
            Y.set_output(True)
            g.build([cudnn.heur_mode.A])
            x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
            y = np.zeros_like(x)
            g.execute({X: x, Y: y}, None)
            assert (y == np.maximum(x, 0)).all()

        @pytest.mark.L0
        def test_wrong():
            assert cudnn.backend_version() == 1

        @pytest.mark.L0
        @pytest.mark.skipif(LooseVersion(cudnn.backend_version_string()) < "99.0", reason="too new")
        def test_skipped():
            pass

        def test_not_l0():
            raise AssertionError("deselected")
    """))
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cudnn_fe_tests.py"), str(tmp_path),
                           "--files", "test_small.py", "--json", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr      # one test fails
    res = json.loads(out.read_text())["results"][0]
    assert (res["passed"], res["failed"], res["error"], res["skipped"]) == (1, 1, 0, 1), res
    assert "test_wrong" in res["first_failure"]
    assert "| test_small | 1 | 1 | 0 | 1 |" in proc.stdout
    # --shard I/N: two processes share the file's three L0 tests, each test in exactly one of them
    seen = []
    for shard in ("1/2", "2/2"):
        part = tmp_path / f"shard{shard[0]}.json"
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cudnn_fe_tests.py"), str(tmp_path), "--files",
                        "test_small.py", "--shard", shard, "--json", str(part)], capture_output=True, text=True,
                       timeout=600)
        got = json.loads(part.read_text())
        assert got["meta"]["shard"] == shard
        seen.append(sorted(t["test"] for t in got["results"][0]["tests"]))
    assert [len(x) for x in seen] == [2, 1], seen
    assert sorted(seen[0] + seen[1]) == ["test_relu", "test_skipped", "test_wrong"], seen


def test_kernel_cache_never_serves_another_types_plan(handle):
    """One kernel cache, matmuls of one shape in HALF, BFLOAT16 and HALF again: two modules, the
    third graph served the first's, each result right for its own type."""
    kc = cudnn.create_kernel_cache()
    for dt, want_modules in ((torch.float16, 1), (torch.bfloat16, 2), (torch.float16, 2)):
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=F, compute_data_type=F,
                          handle=handle, kernel_cache=kc)
        a, b = torch.randn(2, 8, 16).to(dt), torch.randn(2, 16, 4).to(dt)
        A, B = g.tensor_like(a), g.tensor_like(b)
        C = g.matmul(A, B)
        C.set_output(True).set_data_type(dt)
        g.build([cudnn.heur_mode.A])
        c = torch.zeros(2, 8, 4, dtype=dt)
        g.execute({A: a, B: b, C: c}, None)
        assert len(kc) == want_modules
        _close(c, a.double() @ b.double(), tol=1e-2)
