"""The opt-in self-check (hipdnn_iree/backend/selfcheck.py): the first execution of each plan is compared
with NUMPY_REFERENCE on the same inputs.

The deliberately wrong engine is a real subclass of the IREE plugin that compiles, with IREE, a
module whose bias add was turned into a subtraction: real IREE code that gives wrong numbers.
"""
import os

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import REPO, empty_like_tensor, random_array, raises
from hipdnn_iree.backend import selfcheck as _selfcheck
from hipdnn_iree.plugins.iree_linalg.compile import compile_mlir
from hipdnn_iree.plugins.iree_linalg import IreeLinalgPlugin
from hipdnn_iree.plugins.numpy_reference import NumpyReferencePlugin

S = hd.Status
P = hd.PointwiseMode
CORPUS_V2 = os.path.join(REPO, "tests", "data", "plan_v2_cpu.plan")


class SkewedIreePlugin(IreeLinalgPlugin):
    """IREE_LINALG, except that its first ``arith.addf`` of the lowered MLIR is a subtraction."""

    def create_execution_context(self, engine_id, op_graph, engine_config=None, session=None, dynamic=None,
                                 defer_load=False):
        ctx = super().create_execution_context(engine_id, op_graph, engine_config, session=session, dynamic=dynamic,
                                               defer_load=True)
        assert "arith.addf" in ctx.mlir
        wrong = ctx.mlir.replace("arith.addf", "arith.subf", 1)
        ctx.vmfb = compile_mlir(wrong, ctx.target).vmfb
        ctx.mlir, ctx.vm_module = wrong, None
        if not defer_load:
            session.load(ctx)
        return ctx


def skewed_handle(**kw):
    return hd.create_handle(engine_plugins=[SkewedIreePlugin(), NumpyReferencePlugin()], cache=False, **kw)


def build_mlp(dt=hd.DataType.FLOAT):
    g = hd.Graph(name="mlp", io_data_type=dt, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[2, 16, 32])
    w = g.tensor(name="w", uid=2, dim=[1, 32, 24])
    b = g.tensor(name="bias", uid=3, dim=[1, 1, 24])
    y = g.pointwise(g.pointwise(g.matmul(x, w), b, mode=P.ADD), mode=P.RELU_FWD)
    y.set_output(True).set_uid(4)
    return g, y


def pack_for(y, rng, dt=hd.DataType.FLOAT):
    return {1: random_array([2, 16, 32], dt, rng), 2: random_array([1, 32, 24], dt, rng),
            3: random_array([1, 1, 24], dt, rng, 0.5, 1.0), 4: empty_like_tensor(y)}


def reference(g_build, pack):
    g, y = g_build()
    g.set_preferred_engine_id_ext("NUMPY_REFERENCE")
    g.build(hd.create_handle())
    out = empty_like_tensor(y)
    g.execute(hd.create_handle(), {**{u: v for u, v in pack.items() if u != 4}, 4: out})
    return out


def test_wrong_engine_is_caught_with_figures_and_target(rng):
    h = skewed_handle(self_check=True)
    g, y = build_mlp()
    g.build(h)
    pack = pack_for(y, rng)
    e = raises(S.EXECUTION_FAILED, g.execute, h, pack)
    msg = str(e)
    for part in ("self-check failed", "IREE_LINALG", "target 'llvm-cpu:host'", "output uid 4", "max |err|",
                 "max |ref|", "rel err", "(bound 0.002)", "elements off"):
        assert part in msg, msg
    # the verdict sticks: the next execution raises before running
    pack[4][...] = -7.0
    raises(S.EXECUTION_FAILED, g.execute, h, pack, match="self-check failed")
    assert (pack[4] == -7.0).all()


def test_the_wrong_engine_is_really_wrong_and_runs_unchecked(rng):
    h = skewed_handle(self_check=False)
    g, y = build_mlp()
    g.build(h)
    pack = pack_for(y, rng)
    g.execute(h, pack)
    g.execute(h, pack)
    want = reference(build_mlp, pack)
    assert np.abs(pack[4] - want).max() > 0.1 * np.abs(want).max()


@pytest.mark.parametrize("dt", [hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16], ids=lambda d: d.name)
def test_correct_engine_passes_once(rng, monkeypatch, dt):
    calls = []
    real = _selfcheck.compare
    monkeypatch.setattr(_selfcheck, "compare", lambda *a: calls.append(1) or real(*a))
    h = hd.create_handle(self_check=True, cache=False)
    g, y = build_mlp(dt)
    g.build(h)
    pack = pack_for(y, rng, dt)
    g.execute(h, pack)
    g.execute(h, pack)
    assert calls == [1] and g.get_execution_plan().self_checked
    want = reference(lambda: build_mlp(dt), pack)
    tol = {hd.DataType.FLOAT: 1e-5, hd.DataType.HALF: 2e-3, hd.DataType.BFLOAT16: 2e-2}[dt]
    assert np.abs(pack[4].astype(np.float64) - want.astype(np.float64)).max() <= tol * np.abs(want.astype(np.float64)).max()


def test_restored_plan_carries_its_graph_and_is_checked(rng):
    g, y = build_mlp()
    g.build(skewed_handle())
    data = g.serialize_compiled_plan()          # the wrong module, restored by the normal plugin
    h = hd.create_handle(self_check=True)
    r = hd.Graph.from_compiled_plan(h, data)
    assert r.get_execution_plan().context.op_graph == g.get_op_graph_bytes()
    raises(S.EXECUTION_FAILED, r.execute, h, pack_for(y, rng), match="disagrees with NUMPY_REFERENCE")
    g2, y2 = build_mlp()
    g2.build(hd.create_handle(cache=False))
    r2 = hd.Graph.from_compiled_plan(h, g2.serialize_compiled_plan())
    pack = pack_for(y2, rng)
    r2.execute(h, pack)
    assert r2.get_execution_plan().self_checked


def test_restored_plan_without_graph_is_not_supported_when_checking():
    h = hd.create_handle(self_check=True)
    r = hd.Graph.from_compiled_plan(h, hd.load_plan(CORPUS_V2))
    d = np.load(CORPUS_V2[:-len(".plan")] + ".npz")
    y = np.full((2, 6, 12), np.nan, np.float32)
    pack = {1: d["x"], 2: d["w_memory"].transpose(0, 2, 1), 3: d["b"], 4: y}
    raises(S.NOT_SUPPORTED, r.execute, h, pack, match="does not carry its op graph")
    assert np.isnan(y).all()                    # refused before anything ran
    plain = hd.create_handle(self_check=False)
    hd.Graph.from_compiled_plan(plain, hd.load_plan(CORPUS_V2)).execute(plain, pack)
    np.testing.assert_allclose(y, d["y"], rtol=1e-4, atol=1e-4)


def test_environment_variable_and_explicit_setting(monkeypatch):
    monkeypatch.setenv(_selfcheck.ENV, "1")
    assert hd.create_handle(device=None, target="cuda:sm_80").self_check
    assert not hd.create_handle(device=None, target="cuda:sm_80", self_check=False).self_check
    monkeypatch.setenv(_selfcheck.ENV, "0")
    assert not hd.create_handle(device=None, target="cuda:sm_80").self_check
    monkeypatch.delenv(_selfcheck.ENV)
    assert not hd.create_handle(device=None, target="cuda:sm_80").self_check
    raises(S.BAD_PARAM, hd.create_handle, None, "cuda:sm_80", None, None, "yes")


def test_environment_variable_catches_the_wrong_engine(monkeypatch, rng):
    monkeypatch.setenv(_selfcheck.ENV, "1")
    h = skewed_handle()
    g, y = build_mlp()
    g.build(h)
    raises(S.EXECUTION_FAILED, g.execute, h, pack_for(y, rng))


def test_reference_engine_plans_are_not_checked(rng, monkeypatch):
    monkeypatch.setattr(_selfcheck, "compare", lambda *a: pytest.fail("the reference checked against itself"))
    h = hd.create_handle(self_check=True)
    g, y = build_mlp()
    g.set_preferred_engine_id_ext("NUMPY_REFERENCE")
    g.build(h)
    g.execute(h, pack_for(y, rng))


def test_torch_buffers(rng):
    torch = pytest.importorskip("torch")
    h = skewed_handle(self_check=True)
    g, y = build_mlp()
    g.build(h)
    pack = {u: torch.from_numpy(np.ascontiguousarray(v)) for u, v in pack_for(y, rng).items()}
    raises(S.EXECUTION_FAILED, g.execute, h, pack, match="output uid 4")
    h = hd.create_handle(self_check=True, cache=False)
    g, y = build_mlp(hd.DataType.BFLOAT16)
    g.build(h)
    pack = {u: torch.from_numpy(np.ascontiguousarray(v).astype(np.float32)).to(torch.bfloat16)
            for u, v in pack_for(y, rng).items()}
    g.execute(h, pack)
    assert g.get_execution_plan().self_checked


def test_nan_where_the_reference_is_finite_fails():
    from hipdnn_iree.plugin_sdk.buffers import BoundTensor
    from graph_ir.desc import decode_graph
    g, y = build_mlp()
    g.build_operation_graph(hd.create_handle())
    graph = decode_graph(g.get_op_graph_bytes())
    tensors = [BoundTensor(t.uid, t.name, "output" if t.uid == 4 else "input", t.data_type, t.dims, t.strides)
               for t in graph.bound_tensors()]
    rng = np.random.default_rng(1)
    pack = pack_for(y, rng)
    from hipdnn_iree.plugins.numpy_reference import evaluate
    ref = evaluate(graph, {u: pack[u] for u in (1, 2, 3)})[4]
    pack[4][...] = ref
    t4 = next(t for t in tensors if t.uid == 4)
    assert _selfcheck.compare_arrays(t4, pack[4], ref) is None
    pack[4][0, 0, 0] = np.nan
    bad = _selfcheck.compare_arrays(t4, pack[4], ref)
    assert "1 non-finite where the reference is finite" in bad
