"""Engine configs, knobs, the lowering policy in the compile cache key, sessions, autotuning and the
tuning database, on the CPU with the real IREE compiler and runtime."""
import ast
import json
import os
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import random_array
from hipdnn_iree import backend
from hipdnn_iree.plugins.iree_linalg import IreeLinalgPlugin
from hipdnn_iree.plugins.iree_linalg.compile import compile_mlir
from hipdnn_iree.plugins.numpy_reference import NumpyReferencePlugin

REPO = pathlib.Path(__file__).resolve().parents[1]
S = hd.Status
F = hd.DataType.FLOAT
FUSED = "iree_linalg_ext.attention"


def raises(status, fn, *a, match=None, **kw):
    with pytest.raises(hd.HipdnnError) as e:
        fn(*a, **kw)
    assert e.value.status == status, (e.value.status, str(e.value))
    if match:
        assert match in str(e.value), str(e.value)
    return e.value


def sdpa_graph(dims=(1, 2, 16, 8)):
    g = hd.Graph(name="att", io_data_type=F)
    q, k, v = (g.tensor(name=n, uid=u, dim=list(dims)) for n, u in (("q", 1), ("k", 2), ("v", 3)))
    g.sdpa(q, k, v, is_causal=True).set_output(True).set_uid(4)
    return g


def mlp_graph():
    g = hd.Graph(name="mlp", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[1, 16, 32])
    w = g.tensor(name="w", uid=2, dim=[1, 32, 24])
    b = g.tensor(name="b", uid=3, dim=[1, 1, 24])
    y = g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD)
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(4)
    return g


def mlp_pack(rng):
    x, w, b = random_array([1, 16, 32], rng=rng), random_array([1, 32, 24], rng=rng), random_array([1, 1, 24], rng=rng)
    out = np.zeros((1, 16, 24), np.float32)
    return {1: x, 2: w, 3: b, 4: out}, np.maximum(x.astype(np.float64) @ w + b, 0)


def sdpa_ref(q, k, v):
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhij,bhje->bhie", w / w.sum(-1, keepdims=True), v.astype(np.float64))


def test_knobs_are_listed_with_choices_and_defaults():
    h = hd.create_handle(cache=False)
    g = mlp_graph().build(h)
    knobs = {k.name: k for k in g.get_knobs_for_engine("IREE_LINALG")}
    assert {"SDPA_FORM", "CONV_LAYOUT", "DATA_TILING", "IM2COL", "OPT_LEVEL"} <= set(knobs)
    for k in knobs.values():
        assert isinstance(k, hd.Knob) and k.default in k.choices and k.name.isupper()
    assert g.get_knobs_for_engine(hd.engine_id_from_name("IREE_LINALG")) == list(knobs.values())
    assert g.get_knobs_for_engine("NUMPY_REFERENCE") == []


def test_unknown_knob_or_value_is_bad_param_naming_the_choices():
    h = hd.create_handle(cache=False)
    g = mlp_graph().validate().build_operation_graph(h)
    raises(S.BAD_PARAM, g.create_execution_plan, "IREE_LINALG", {"NO_SUCH_KNOB": 1}, match="SDPA_FORM")
    raises(S.BAD_PARAM, g.create_execution_plan, "IREE_LINALG", {"SDPA_FORM": "SIDEWAYS"}, match="COMPOSED")
    raises(S.BAD_PARAM, g.create_execution_plan, "IREE_LINALG", {"SDPA_FORM": True})
    raises(S.BAD_PARAM, g.create_execution_plan, "NO_SUCH_ENGINE", {})
    raises(S.BAD_PARAM, g.create_execution_plans, heur_modes=["Z"])
    raises(S.NOT_INITIALIZED, g.get_engine_config_at_index, 0)
    g.create_execution_plans()
    raises(S.BAD_PARAM, g.get_engine_config_at_index, 5)


@pytest.mark.parametrize("knob,value", [("SDPA_FORM", "FUSED"), ("DATA_TILING", "ON"), ("OPT_LEVEL", "O1"),
                                        ("IM2COL", "ON"), ("CONV_LAYOUT", "CHANNELS_FIRST")])
def test_a_knob_change_never_gets_a_module_built_under_other_settings(tmp_path, rng, knob, value):
    """Default build, knob build, default again, all through one cache folder: the knob build is a
    different module (a cache miss, its own entry) unless the knob means nothing for the graph, and
    the default build after it is the default module again."""
    h = hd.create_handle(cache=str(tmp_path))
    conv = knob in ("IM2COL", "CONV_LAYOUT")
    if conv:
        def make():
            g = hd.Graph(name="conv", io_data_type=F)
            x = g.tensor(name="x", uid=1, dim=[2, 4, 9, 9])
            w = g.tensor(name="w", uid=2, dim=[8, 4, 3, 3])
            g.conv_fprop(x, w, padding=[1, 1]).set_output(True).set_uid(3)
            return g
    else:
        make = sdpa_graph
    g0 = make().build(h)
    mlir0 = g0.get_execution_plan().context.mlir
    n0 = len(list(tmp_path.glob("*.vmfb*")) or os.listdir(tmp_path))
    g1 = make().validate().build_operation_graph(h)
    g1.create_execution_plan("IREE_LINALG", {knob: value}).check_support().build_plans()
    ctx1 = g1.get_execution_plan().context
    assert g1.get_engine_config_at_index(0).knobs == {knob: value}
    assert len(os.listdir(tmp_path)) > n0, "the knob build was served from the cache"
    assert (ctx1.mlir, ctx1.compile_flags) != (mlir0, g0.get_execution_plan().context.compile_flags)
    if knob == "SDPA_FORM":
        assert FUSED in ctx1.mlir and FUSED not in mlir0
    g2 = make().build(h)
    assert g2.get_execution_plan().context.mlir == mlir0
    assert g2.get_execution_plan().context.vmfb == g0.get_execution_plan().context.vmfb
    # numbers: every variant computes the same thing
    if not conv:
        q, k, v = (random_array([1, 2, 16, 8], rng=rng) for _ in range(3))
        for gg in (g0, g1):
            o = np.zeros((1, 2, 16, 8), np.float32)
            gg.execute(h, {1: q, 2: k, 3: v, 4: o})
            np.testing.assert_allclose(o, sdpa_ref(q, k, v), rtol=2e-4, atol=2e-5)


def test_lowering_reads_no_environment(monkeypatch):
    """The old switch HIPDNN_IREE_SDPA_FUSED_ON_CPU is gone: the SDPA_FORM knob chooses."""
    from lowering import lower
    h = hd.create_handle(device=None, target="llvm-cpu:host", cache=False)
    data = sdpa_graph().validate().build_operation_graph(h).get_op_graph_bytes()
    before = lower(data, target="llvm-cpu:host").mlir
    monkeypatch.setenv("HIPDNN_IREE_SDPA_FUSED_ON_CPU", "1")
    assert lower(data, target="llvm-cpu:host").mlir == before
    src = "\n".join(p.read_text() for d in ("lowering", "graph_ir") for p in (REPO / d).rglob("*.py"))
    assert "os.environ" not in src and "getenv" not in src


def test_one_plugin_object_serves_handles_of_different_targets():
    p = IreeLinalgPlugin()
    ref = NumpyReferencePlugin()
    cpu = hd.create_handle(engine_plugins=[p, ref], cache=False)
    amd = hd.create_handle(device=None, target="rocm:gfx942", engine_plugins=[p, ref], cache=False)
    g_cpu = mlp_graph().build(cpu)
    g_amd = mlp_graph().build(amd)
    g_cpu2 = mlp_graph().build(cpu)
    assert str(g_cpu.get_execution_plan().context.target) == "llvm-cpu:host"
    assert str(g_amd.get_execution_plan().context.target) == "rocm:gfx942"
    assert str(g_cpu2.get_execution_plan().context.target) == "llvm-cpu:host"
    assert vars(p) == {}, "the plugin object keeps state"


def test_heuristic_modes_give_their_configs(rng):
    h = hd.create_handle(cache=False)
    g = sdpa_graph().validate().build_operation_graph(h)
    g.create_execution_plans(heur_modes=[hd.HeurMode.A, hd.HeurMode.B, hd.HeurMode.FALLBACK])
    configs = [g.get_engine_config_at_index(i) for i in range(g.get_execution_plan_count())]
    iree = [c.knobs for c in configs if c.engine_name == "IREE_LINALG"]
    assert iree[0] == {} and {"SDPA_FORM": "FUSED"} in iree
    assert {"DATA_TILING": "OFF", "IM2COL": "OFF", "SDPA_FORM": "COMPOSED"} in iree
    assert configs[-1].engine_name == "NUMPY_REFERENCE"
    g.check_support().build_plans(hd.BuildPlanPolicy.ALL)
    q, k, v = (random_array([1, 2, 16, 8], rng=rng) for _ in range(3))
    for i in range(g.get_execution_plan_count()):
        o = np.zeros((1, 2, 16, 8), np.float32)
        g.execute_plan_at_index(h, {1: q, 2: k, 3: v, 4: o}, None, i)
        np.testing.assert_allclose(o, sdpa_ref(q, k, v), rtol=2e-4, atol=2e-5, err_msg=str(configs[i]))


class WrongWhenO3(IreeLinalgPlugin):
    """The real IREE engine, except that plans built with OPT_LEVEL=O3 subtract where they should add
    (a real, IREE-compiled wrong module: what a miscompile looks like to autotune)."""

    def create_execution_context(self, engine_id, op_graph, engine_config=None, session=None, dynamic=None,
                                 defer_load=False):
        ctx = super().create_execution_context(engine_id, op_graph, engine_config, session=session, dynamic=dynamic,
                                               defer_load=True)
        if (getattr(engine_config, "knobs", None) or {}).get("OPT_LEVEL") == "O3":
            wrong = ctx.mlir.replace("arith.addf", "arith.subf", 1)
            ctx.vmfb = compile_mlir(wrong, ctx.target).vmfb
            ctx.vm_module, ctx.mlir = None, wrong
        if not defer_load:
            session.load(ctx)
        return ctx


def test_autotune_drops_a_disagreeing_plan_and_stores_its_choice(tmp_path, rng):
    h = hd.create_handle(engine_plugins=[WrongWhenO3(), NumpyReferencePlugin()], cache=str(tmp_path))
    g = mlp_graph().build(h)
    pack, ref = mlp_pack(rng)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        timings = g.autotune(h, pack)
    o3 = [i for i in range(g.get_execution_plan_count()) if g.get_engine_config_at_index(i).knobs.get("OPT_LEVEL") == "O3"]
    assert o3 and o3[0] not in [i for i, _ in timings], "the wrong plan was timed as a candidate"
    assert any(f"plan {o3[0]}" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert len(timings) >= 2 and all(t > 0 for _, t in timings)
    best = timings[0][0]
    assert g.get_selected_plan_index() == best
    np.testing.assert_allclose(pack[4], ref, rtol=1e-4, atol=1e-4)   # the selected plan's outputs
    db = json.loads((tmp_path / "tuning.json").read_text())
    entry = next(iter(db["entries"].values()))
    assert entry["knobs"] == g.get_engine_config_at_index(best).knobs and entry["target"] == "llvm-cpu:host"
    # a later build of the same graph on this device takes the tuned config without timing
    g2 = mlp_graph().build(h)
    assert g2.get_engine_config_at_index(0).knobs == entry["knobs"]
    assert g2.get_execution_plan().get_attribute(backend.Attribute.EXECUTION_PLAN_ENGINE_CONFIG).knobs == entry["knobs"]


RESTORE = """
import sys, numpy as np, hipdnn_iree as hd
from hipdnn_iree import backend
h = hd.create_handle(cache=False)
r = hd.Graph.from_compiled_plan(h, open(sys.argv[1], "rb").read())
cfg = r.get_execution_plan().get_attribute(backend.Attribute.EXECUTION_PLAN_ENGINE_CONFIG)
assert r.get_engine_config_at_index(0) is cfg
rng = np.random.default_rng(7)
q, k, v = (rng.standard_normal((1, 2, 16, 8)).astype(np.float32) for _ in range(3))
o = np.zeros((1, 2, 16, 8), np.float32)
r.execute(h, {1: q, 2: k, 3: v, 4: o})
np.save(sys.argv[2], o)
print(cfg.engine_name, sorted(cfg.knobs.items()))
"""


def test_tuned_plan_restores_with_its_engine_config_in_a_fresh_process(tmp_path, rng):
    h = hd.create_handle(cache=str(tmp_path / "cache"))
    g = sdpa_graph().validate().build_operation_graph(h)
    g.create_execution_plan("IREE_LINALG", {"SDPA_FORM": "FUSED", "OPT_LEVEL": "O3"}).check_support().build_plans()
    plan = tmp_path / "att.plan"
    hd.save_plan(plan, g.serialize_compiled_plan())
    out = subprocess.run([sys.executable, "-c", RESTORE, str(plan), str(tmp_path / "o.npy")], capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "IREE_LINALG [('OPT_LEVEL', 'O3'), ('SDPA_FORM', 'FUSED')]"
    r7 = np.random.default_rng(7)
    q, k, v = (r7.standard_normal((1, 2, 16, 8)).astype(np.float32) for _ in range(3))
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), sdpa_ref(q, k, v), rtol=2e-4, atol=2e-5)


def test_serialize_runs_the_plugin_serializer_once(rng):
    calls = []

    class Counting(IreeLinalgPlugin):
        def serialize_execution_context(self, ctx, engine_config=None, plan_info=None):
            calls.append(1)
            return super().serialize_execution_context(ctx, engine_config, plan_info)

    h = hd.create_handle(engine_plugins=[Counting(), NumpyReferencePlugin()], cache=False)
    g = mlp_graph().build(h)
    data = g.serialize_compiled_plan()
    assert len(calls) == 1 and len(data) > 100


def test_backend_and_frontend_import_no_engine_package():
    bad = []
    for folder in ("backend", "frontend"):
        for path in (REPO / "hipdnn_iree" / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                bad += [f"{path.relative_to(REPO)}: {n}" for n in names if n.startswith("hipdnn_iree.plugins")]
    assert not bad, bad
