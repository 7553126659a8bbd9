"""Dynamic and override shapes through the public API, on the CPU.

One plan per op family, built once with override shapes enabled, executed at three or more sizes
per varying dim (1 and a non-power of two among them) and compared with the NUMPY_REFERENCE engine
run on a static graph built at each of those shapes (an independent path: no ShapeSpec involved).
Then: shapes a plan cannot take, serialize/restore in a fresh process at shapes never built, the
envelope's slot 5 through flatc-generated readers, and a kernel cache whose builds compile nothing.
"""
import json
import os

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import REPO, assert_close, raises, random_array, run_python

S = hd.Status
F = hd.DataType.FLOAT
P = hd.PointwiseMode


# -- op families: build(g, p) -> {uid: dims} of the bound inputs; output uids are 100+ ----------

def _pointwise(g, p):
    n, s = p["N"], p["S"]
    x, y = g.tensor(uid=1, dim=[n, s, 16]), g.tensor(uid=2, dim=[n, s, 16])
    g.pointwise(g.pointwise(x, y, mode=P.ADD), mode=P.RELU_FWD).set_output(True).set_uid(100)
    return {1: [n, s, 16], 2: [n, s, 16]}


def _matmul(g, p):
    n, m = p["N"], p["S"]
    a, b = g.tensor(uid=1, dim=[n, m, 32]), g.tensor(uid=2, dim=[32, 24])
    bias = g.tensor(uid=3, dim=[1, 1, 24])
    g.pointwise(g.matmul(a, b), bias, mode=P.ADD).set_output(True).set_uid(100)
    return {1: [n, m, 32], 2: [32, 24], 3: [1, 1, 24]}


def _reduction(g, p):
    n, s = p["N"], p["S"]
    x = g.tensor(uid=1, dim=[n, s, 16])
    g.reduction(x, mode=hd.ReductionMode.ADD).set_output(True).set_uid(100).set_dim([n, s, 1])
    return {1: [n, s, 16]}


def _batchnorm(g, p):
    n, h = p["N"], p["S"]
    x = g.tensor(uid=1, dim=[n, 8, h, 5])
    stats = [g.tensor(uid=u, dim=[1, 8, 1, 1]) for u in (2, 3, 4, 5)]
    g.batchnorm_inference(x, *stats).set_output(True).set_uid(100)
    return {1: [n, 8, h, 5], **{u: [1, 8, 1, 1] for u in (2, 3, 4, 5)}}


def _layernorm(g, p):
    n, s = p["N"], p["S"]
    x, sc, b = g.tensor(uid=1, dim=[n, s, 32]), g.tensor(uid=2, dim=[1, 1, 32]), g.tensor(uid=3, dim=[1, 1, 32])
    g.layernorm(x, sc, b, epsilon=1e-5)[0].set_output(True).set_uid(100)
    return {1: [n, s, 32], 2: [1, 1, 32], 3: [1, 1, 32]}


def _rmsnorm(g, p):
    n, s = p["N"], p["S"]
    x, sc = g.tensor(uid=1, dim=[n, s, 32]), g.tensor(uid=2, dim=[1, 1, 32])
    g.rmsnorm(x, sc, epsilon=1e-5).set_output(True).set_uid(100)
    return {1: [n, s, 32], 2: [1, 1, 32]}


def _sdpa(g, p):
    b, sq, skv = p["N"], p["S"], p["T"]
    q = g.tensor(uid=1, dim=[b, 2, sq, 16])
    k, v = g.tensor(uid=2, dim=[b, 2, skv, 16]), g.tensor(uid=3, dim=[b, 2, skv, 16])
    out = g.sdpa(q, k, v)
    (out[0] if isinstance(out, tuple) else out).set_output(True).set_uid(100)
    return {1: [b, 2, sq, 16], 2: [b, 2, skv, 16], 3: [b, 2, skv, 16]}


def _conv(g, p):
    n, h, w_ = p["N"], p["S"] + 3, p["T"] + 2     # H and W vary too; stride 2: derived output sizes
    x, w = g.tensor(uid=1, dim=[n, 4, h, w_]), g.tensor(uid=2, dim=[6, 4, 3, 3])
    g.conv_fprop(x, w, padding=[1, 1], stride=[2, 2], dilation=[1, 1]).set_output(True).set_uid(100)
    return {1: [n, 4, h, w_], 2: [6, 4, 3, 3]}


BASE = {"N": 4, "S": 6, "T": 6}
# per varying dim: 1, a non-power of two and one more, the others at their built size
SWEEP = {"N": (1, 3, 7), "S": (1, 5, 13), "T": (1, 7, 12)}
FAMILIES = {  # family -> (builder, the symbols that vary)
    "pointwise": (_pointwise, "NS"), "matmul": (_matmul, "NS"), "reduction": (_reduction, "NS"),
    "batchnorm": (_batchnorm, "NS"), "layernorm": (_layernorm, "NS"), "rmsnorm": (_rmsnorm, "NS"),
    "sdpa": (_sdpa, "NST"), "conv_fprop": (_conv, "NST"),
}


def _cases(symbols):
    out = []
    for sym in symbols:
        out += [{**BASE, sym: v} for v in SWEEP[sym]]
    out.append({**BASE, **{s: SWEEP[s][1] for s in symbols}})   # all at once
    return out


def _graph(builder, p, override=False, engine=None):
    g = hd.Graph(io_data_type=F)
    dims = builder(g, p)
    if override:
        g.set_override_shape_enabled(True)
    if engine:
        g.set_preferred_engine_id_ext(engine)
    return g, dims


def _reference(handle, builder, p, inputs):
    g, _ = _graph(builder, p, engine="NUMPY_REFERENCE")
    g.build(handle)
    out = _output_for(g)
    g.execute(handle, {**inputs, 100: out})
    return out


def _output_for(g):
    t = next(t for t in g.get_compiled_plan_tensors() if t.uid == 100)
    return np.full(t.dims, np.nan, np.float32)


@pytest.fixture(scope="module")
def handle():
    return hd.create_handle(cache=False)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_at_shapes_it_was_not_built_for(family, handle, rng):
    builder, symbols = FAMILIES[family]
    g, _ = _graph(builder, BASE, override=True)
    g.build(handle)
    assert g.is_override_shape_enabled() and g.is_dynamic_shape_enabled()
    for p in _cases(symbols):
        ref_graph, dims = _graph(builder, p)
        inputs = {u: random_array(d, rng=rng) for u, d in dims.items()}
        want = _reference(handle, builder, p, inputs)
        got = np.full(want.shape, np.nan, np.float32)
        g.execute(handle, {**inputs, 100: got})          # each buffer's own shape
        assert_close(got, want, F, what=f"{family} at {p}")


def test_explicit_overrides_and_torch_tensors(handle, rng):
    torch = pytest.importorskip("torch")
    g, _ = _graph(_matmul, BASE, override=True)
    g.build(handle)
    for n, m in ((1, 1), (2, 9), (5, 300)):
        a, b, bias = random_array([n, m, 32], rng=rng), random_array([32, 24], rng=rng), random_array([1, 1, 24], rng=rng)
        want = a.astype(np.float64) @ b + bias
        c = torch.full((n, m, 24), float("nan"))
        g.execute(handle, {1: torch.from_numpy(a), 2: torch.from_numpy(b), 3: torch.from_numpy(bias), 100: c})
        assert_close(c.numpy(), want, F, what=f"torch at {n}x{m}")
        c2 = np.full((n, m, 24), np.nan, np.float32)
        g.execute(handle, {1: a, 2: b, 3: bias, 100: c2}, override_uids=[1, 100],
                  override_shapes=[[n, m, 32], [n, m, 24]], override_strides=[[m * 32, 32, 1], [m * 24, 24, 1]])
        assert_close(c2, want, F, what=f"overrides at {n}x{m}")


def test_buffers_allocated_once_at_the_largest_shape_bind_by_address(handle, rng):
    """cuDNN's pattern: buffers allocated once at the largest shape, the call's shape in the
    override arguments: the first elements of each buffer, in the tensor's memory order."""
    g, _ = _graph(_matmul, BASE, override=True)
    g.build(handle)
    big_a, big_c = np.zeros(16 * 64 * 32, np.float32), np.full(16 * 64 * 24, -7.0, np.float32)
    b, bias = random_array([32, 24], rng=rng), random_array([1, 1, 24], rng=rng)
    for n, m in ((1, 3), (5, 11), (16, 64)):
        a = random_array([n, m, 32], rng=rng)
        big_a[:a.size] = a.reshape(-1)
        g.execute(handle, {1: big_a, 2: b, 3: bias, 100: big_c}, override_uids=[1, 100],
                  override_shapes=[[n, m, 32], [n, m, 24]])
        got = big_c[:n * m * 24].reshape(n, m, 24)
        assert_close(got, a.astype(np.float64) @ b + bias, F, what=f"by address at {n}x{m}")
        assert (big_c[n * m * 24:] == -7.0).all() or n * m == 16 * 64    # past the span: untouched
        big_c[:] = -7.0
    raises(S.BAD_PARAM, lambda: g.execute(handle, {1: big_a, 2: b, 3: bias, 100: big_c}, override_uids=[1, 100],
                                          override_shapes=[[17, 64, 32], [17, 64, 24]]), match="smaller")


def test_shapes_the_plan_cannot_take_are_bad_param_and_outputs_stay_untouched(handle, rng):
    g, _ = _graph(_matmul, BASE, override=True)
    g.build(handle)
    a, b, bias = random_array([3, 5, 32], rng=rng), random_array([32, 24], rng=rng), random_array([1, 1, 24], rng=rng)
    c = np.full((3, 5, 24), np.nan, np.float32)

    def run(**kw):
        pack = {1: a, 2: b, 3: bias, 100: c, **kw.pop("pack", {})}
        g.execute(handle, pack, **kw)

    # a fixed dim (K) changed: names uid, dim and what the plan allows
    e = raises(S.BAD_PARAM, lambda: run(pack={2: random_array([31, 24], rng=rng)}))
    assert "uid 2 dim 0" in str(e) and "fixed at 32" in str(e)
    # the output's batch disagrees with the input's (a shared symbol)
    e = raises(S.BAD_PARAM, lambda: run(pack={100: np.full((4, 5, 24), np.nan, np.float32)}))
    assert "uid 100 dim 0" in str(e) and "any size >= 1" in str(e)
    # size 0, wrong rank, non-packed override strides, unknown uid, override of a fixed dim
    raises(S.BAD_PARAM, lambda: run(override_uids=[1], override_shapes=[[0, 5, 32]]), match="uid 1 dim 0")
    raises(S.BAD_PARAM, lambda: run(override_uids=[1], override_shapes=[[15, 32]]), match="rank")
    raises(S.BAD_PARAM, lambda: run(override_uids=[1], override_shapes=[[3, 5, 32]],
                                    override_strides=[[5 * 64, 64, 1]]), match="strides")
    raises(S.BAD_PARAM, lambda: run(override_uids=[7], override_shapes=[[1]]), match="uid 7")
    raises(S.BAD_PARAM, lambda: run(override_uids=[1], override_shapes=[[3, 5, 32], [1]]), match="one shape")
    assert np.isnan(c).all()
    # a plan built without override shapes takes no overrides
    s, _ = _graph(_matmul, BASE)
    s.build(handle)
    raises(S.BAD_PARAM, lambda: s.execute(handle, {1: a, 2: b, 3: bias, 100: c}, override_uids=[1],
                                          override_shapes=[[3, 5, 32]]), match="override shapes enabled")
    raises(S.BAD_PARAM, lambda: s.execute(handle, {1: a, 2: b, 3: bias, 100: c}))   # not its dims
    assert np.isnan(c).all()


def test_api_argument_checks():
    g = hd.Graph(io_data_type=F)
    raises(S.BAD_PARAM, lambda: g.set_override_shape_enabled(1), match="True or False")
    raises(S.BAD_PARAM, lambda: g.set_kernel_cache({}), match="KernelCache")
    g.set_override_shape_enabled(True)
    assert g.is_dynamic_shape_enabled()          # override implies dynamic
    raises(S.BAD_PARAM, lambda: g.set_dynamic_shape_enabled(False), match="override")
    h = hd.Graph(io_data_type=F).set_kernel_cache(hd.KernelCache())
    assert h.is_dynamic_shape_enabled() and not h.is_override_shape_enabled()


def test_kernel_cache_builds_of_other_shapes_compile_nothing(handle, rng, monkeypatch):
    from hipdnn_iree.plugins.iree_linalg import compile as compile_mod
    calls = []
    real = compile_mod.compile_mlir

    def counting(*args, **kw):
        calls.append(1)
        return real(*args, **kw)
    monkeypatch.setattr(compile_mod, "compile_mlir", counting)
    kc = hd.KernelCache()
    graphs = []
    # NOTE: built at sizes > 1: a graph built at batch 1 cannot tell its batch from a broadcast dim
    for n, m in ((4, 6), (2, 3), (3, 17), (8, 5)):
        g, _ = _graph(_matmul, {"N": n, "S": m})
        g.set_kernel_cache(kc)
        g.build(handle)
        graphs.append((g, n, m))
    assert len(calls) == 1, f"{len(calls)} compiles for one topology at four shapes"
    assert kc.hits == 3 and len(kc) == 1
    for g, n, m in graphs:   # each executes at its own dims
        a, b, bias = random_array([n, m, 32], rng=rng), random_array([32, 24], rng=rng), random_array([1, 1, 24], rng=rng)
        c = np.full((n, m, 24), np.nan, np.float32)
        g.execute(handle, {1: a, 2: b, 3: bias, 100: c})
        assert_close(c, a.astype(np.float64) @ b + bias, F, what=f"kernel-cache plan {n}x{m}")
        assert [t.dims for t in g.get_compiled_plan_tensors() if t.uid == 1] == [(n, m, 32)]
    # a kernel-cache plan serialized and restored keeps its own dims and takes no overrides
    g, n, m = graphs[2]
    r = hd.Graph.from_compiled_plan(handle, g.serialize_compiled_plan())
    assert not r.is_override_shape_enabled()
    assert [t.dims for t in r.get_compiled_plan_tensors() if t.uid == 1] == [(n, m, 32)]
    a, b, bias = random_array([n, m, 32], rng=rng), random_array([32, 24], rng=rng), random_array([1, 1, 24], rng=rng)
    c = np.full((n, m, 24), np.nan, np.float32)
    r.execute(handle, {1: a, 2: b, 3: bias, 100: c})
    assert_close(c, a.astype(np.float64) @ b + bias, F, what="restored kernel-cache plan")
    raises(S.BAD_PARAM, lambda: r.execute(handle, {1: a, 2: b, 3: bias, 100: c}, override_uids=[1],
                                          override_shapes=[[n, m, 32]]), match="override shapes enabled")
    # another topology (K differs) compiles
    g = hd.Graph(io_data_type=F).set_kernel_cache(kc)
    a, b = g.tensor(uid=1, dim=[4, 6, 16]), g.tensor(uid=2, dim=[16, 24])
    g.matmul(a, b).set_output(True).set_uid(100)
    g.build(handle)
    assert len(calls) == 2 and len(kc) == 2


def test_restored_in_a_fresh_process_at_shapes_never_built(handle, tmp_path, rng):
    g, _ = _graph(_layernorm, BASE, override=True)
    g.build(handle)
    path = tmp_path / "ln.plan"
    path.write_bytes(g.serialize_compiled_plan())
    code = f"""
import numpy as np, hipdnn_iree as hd
h = hd.create_handle()
r = hd.Graph.from_compiled_plan_file(h, {str(path)!r})
assert r.is_override_shape_enabled()
rng = np.random.default_rng(5)
sc, b = rng.standard_normal((1, 1, 32)).astype(np.float32), rng.standard_normal((1, 1, 32)).astype(np.float32)
for n, s in ((1, 1), (2, 37), (9, 3)):
    x = rng.standard_normal((n, s, 32)).astype(np.float32)
    y = np.full((n, s, 32), np.nan, np.float32)
    r.execute(h, {{1: x, 2: sc, 3: b, 100: y}})
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * sc + b
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
try:
    r.execute(h, {{1: np.zeros((2, 3, 31), np.float32), 2: sc, 3: b, 100: np.zeros((2, 3, 31), np.float32)}})
except hd.HipdnnError as e:
    assert e.status == hd.Status.BAD_PARAM and "uid 1 dim 2" in str(e), e
else:
    raise AssertionError("a fixed dim changed was accepted")
print("ok")
"""
    p = run_python(code)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-3000:]
    # inspect says which dims vary
    p = run_python(f"import sys; from hipdnn_iree.cli.main import main; sys.exit(main(['inspect', {str(path)!r}]))")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "override shapes: enabled" in p.stdout and "is_override_shape_enabled = true" in p.stdout
    assert "uid 1: dim 0: any size >= 1" in p.stdout and "dim 2: fixed at 32" in p.stdout, p.stdout


def test_envelope_slot_5_as_the_forks_define_it(handle):
    """An override plan sets slot 5 (the forks' `is_override_shape_enabled: bool`), read true by
    the fork's flatc reader; the RFC's reader reads its five fields unchanged; FUSPLAN metadata
    carries the shape spec. A static plan leaves slot 5 out (reads false)."""
    from test_envelope_variants import read_with
    import importlib.util
    import subprocess
    from test_schemas import _flatc
    mods = {}
    for v in ("rfc", "override_flag", "override_alignments"):
        d = os.path.join(str(handle_tmp()), v)
        os.makedirs(d, exist_ok=True)
        subprocess.run([_flatc(), "--python", "--gen-onefile", "-o", d,
                        os.path.join(REPO, "tests", "data", f"hipdnn_envelope_{v}.fbs")], check=True)
        spec = importlib.util.spec_from_file_location(f"ov_{v}", os.path.join(d, f"hipdnn_envelope_{v}_generated.py"))
        mods[v] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[v])
    from hipdnn_iree.backend import envelope as _envelope
    from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
    for override in (True, False):
        g, _ = _graph(_matmul, BASE, override=override)
        g.build(handle)
        data = g.serialize_compiled_plan()
        env = _envelope.decode(data)
        assert env.is_override_shape_enabled is override
        five = {"version": 1, "engine_id": env.engine_id, "workspace_size": 0, "tensor_uids": [1, 2, 3, 100],
                "plugin_payload": bytes(env.plugin_payload)}
        for v, mod in mods.items():
            seen = read_with(mod, data)
            assert {k: seen[k] for k in five} == five, v
            if v != "rfc":
                assert seen["is_override_shape_enabled"] is override, v
        assert env.payload_offset % 64 == 0
        meta = _fusplan.unpack(env.plugin_payload).metadata
        if override:
            spec = json.loads(meta.shape_spec)
            assert spec["tensors"]["1"]["built"] == [4, 6, 32]
        else:
            assert meta.shape_spec == ""      # a static plan


_TMP = []


def handle_tmp():
    import tempfile
    if not _TMP:
        _TMP.append(tempfile.mkdtemp(prefix="ovshape"))
    return _TMP[0]


def test_numpy_reference_engine_takes_overrides(handle, rng):
    g, _ = _graph(_rmsnorm, BASE, override=True, engine="NUMPY_REFERENCE")
    g.build(handle)
    for n, s in ((1, 1), (3, 11)):
        x, sc = random_array([n, s, 32], rng=rng), random_array([1, 1, 32], rng=rng)
        y = np.full((n, s, 32), np.nan, np.float32)
        g.execute(handle, {1: x, 2: sc, 100: y})
        x64 = x.astype(np.float64)
        assert_close(y, x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-5) * sc, F)
    raises(S.BAD_PARAM, lambda: g.execute(handle, {1: x, 2: random_array([1, 1, 31], rng=rng), 100: y}),
           match="uid 2 dim 2")


def test_the_shape_spec_is_part_of_the_compile_cache_key(tmp_path, rng, monkeypatch):
    """Static and dynamic builds of one graph through one compile cache: two modules, never one
    served for the other; a second dynamic build is a cache hit (no compile)."""
    from hipdnn_iree.plugins.iree_linalg import compile as compile_mod
    calls = []
    real = compile_mod.compile_mlir
    monkeypatch.setattr(compile_mod, "compile_mlir", lambda *a, **k: calls.append(1) or real(*a, **k))
    h = hd.create_handle(cache=str(tmp_path))
    s, _ = _graph(_matmul, BASE)
    s.build(h)
    d, _ = _graph(_matmul, BASE, override=True)
    d.build(h)
    d2, _ = _graph(_matmul, BASE, override=True)
    d2.build(h)
    assert len(calls) == 2
    a, b, bias = random_array([2, 3, 32], rng=rng), random_array([32, 24], rng=rng), random_array([1, 1, 24], rng=rng)
    c = np.full((2, 3, 24), np.nan, np.float32)
    d2.execute(h, {1: a, 2: b, 3: bias, 100: c})
    assert_close(c, a.astype(np.float64) @ b + bias, F, what="dynamic plan from the compile cache")
    raises(S.BAD_PARAM, lambda: s.execute(h, {1: a, 2: b, 3: bias, 100: c}))


def test_channels_last_buffers_in_either_form(handle, rng):
    """An NHWC conv (layout in the strides) at other N/H/W: memory-order numpy arrays with and
    without override shapes, and torch channels_last views, against torch."""
    torch = pytest.importorskip("torch")
    c = 4
    g = hd.Graph(io_data_type=F)
    x = g.tensor(uid=1, dim=[2, c, 8, 8], stride=[c * 64, 1, 8 * c, c])
    w = g.tensor(uid=2, dim=[6, c, 3, 3], stride=[9 * c, 1, 3 * c, c])
    g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_output(True).set_uid(3)
    g.set_override_shape_enabled(True)
    g.build(handle)
    for n, h, w_ in ((1, 9, 4), (3, 5, 7)):
        xs, ws = random_array([n, h, w_, c], rng=rng), random_array([6, 3, 3, c], rng=rng)   # memory order
        tx, tw = torch.from_numpy(xs).permute(0, 3, 1, 2), torch.from_numpy(ws).permute(0, 3, 1, 2)
        want = torch.nn.functional.conv2d(tx.double(), tw.double(), padding=1).permute(0, 2, 3, 1).numpy()
        y = np.full((n, h, w_, 6), np.nan, np.float32)
        g.execute(handle, {1: xs, 2: ws, 3: y}, override_uids=[1, 3], override_shapes=[[n, c, h, w_], [n, 6, h, w_]])
        assert_close(y, want, F, what=f"overrides, memory-order arrays at {n}x{h}x{w_}")
        y[:] = np.nan
        g.execute(handle, {1: xs, 2: ws, 3: y})
        assert_close(y, want, F, what=f"memory-order arrays' own shapes at {n}x{h}x{w_}")
        ty = torch.full((n, 6, h, w_), float("nan")).to(memory_format=torch.channels_last)
        g.execute(handle, {1: tx, 2: tw, 3: ty})
        assert_close(ty.permute(0, 2, 3, 1).numpy(), want, F, what=f"torch channels_last at {n}x{h}x{w_}")
