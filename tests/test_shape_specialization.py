"""Shape specialization of override-shape plans, on the CPU.

An override-shape plan (knob SHAPE_SPECIALIZE, AUTO = on for them) carries one module with two
public functions: the dynamic ``main`` and ``main_static``, the static lowering at the build shape.
A call whose bound tensors all have their built dims and strides runs ``main_static``; every other
shape runs ``main``. Which one ran is read from the loaded module's per-function call counts
(``LoadedModule.calls``), not from timing. Numbers are compared with the NUMPY_REFERENCE engine run
on a static graph built at each shape (no ShapeSpec involved), or with numpy.
"""

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import assert_close, raises, random_array, run_python
from test_override_shapes import _conv as _conv_nst, _sdpa as _sdpa_nst   # the same graphs, symbols by name

S = hd.Status
F = hd.DataType.FLOAT
P = hd.PointwiseMode


# -- graphs: build(g, p) -> {uid: dims} of the bound inputs; the output is uid 100 --------------

def _matmul(g, p):
    n, m = p
    a, b, bias = g.tensor(uid=1, dim=[n, m, 32]), g.tensor(uid=2, dim=[32, 24]), g.tensor(uid=3, dim=[1, 1, 24])
    g.pointwise(g.matmul(a, b), bias, mode=P.ADD).set_output(True).set_uid(100)
    return {1: [n, m, 32], 2: [32, 24], 3: [1, 1, 24]}


def _sdpa(g, p):
    b, sq, skv = p
    return _sdpa_nst(g, {"N": b, "S": sq, "T": skv})


def _conv(g, p):
    n, h, w_ = p                                  # N, H and W vary; stride 2: derived output sizes
    return _conv_nst(g, {"N": n, "S": h - 3, "T": w_ - 2})


# family -> (builder, build shape, other shapes (a 1 and a non-power of two among them))
FAMILIES = {
    "matmul": (_matmul, (4, 6), [(1, 5), (3, 13), (4, 7)]),
    "sdpa": (_sdpa, (3, 6, 7), [(1, 5, 9), (2, 1, 3), (3, 6, 8)]),
    "conv_nhw": (_conv, (2, 9, 8), [(1, 5, 11), (3, 12, 7), (2, 9, 9)]),
}


def _graph(builder, p, override=True, engine=None):
    g = hd.Graph(io_data_type=F)
    dims = builder(g, p)
    g.set_override_shape_enabled(override)
    if engine:
        g.set_preferred_engine_id_ext(engine)
    return g, dims


def _build(g, handle, knobs=None):
    if knobs is None:
        g.build(handle)
    else:
        g.validate().build_operation_graph(handle)
        g.create_execution_plan("IREE_LINALG", knobs).check_support().build_plans()
    return g


def _calls(g) -> dict:
    return dict(g.get_execution_plan().context.module.calls)


def _ran(g, before: dict) -> list:
    """The functions the calls since ``before`` ran."""
    after = _calls(g)
    return sorted(k for k in after if after[k] != before.get(k, 0))


def _run_matmul(g, handle, p, rng, what=""):
    """Executes the matmul family's plan ``g`` at ``p`` on random inputs, checks the output against
    numpy (x @ w + bias) and returns the module functions the call ran."""
    _, dims = _graph(FAMILIES["matmul"][0], p)
    inputs = {u: random_array(d, rng=rng) for u, d in dims.items()}
    c = np.full((*p, 24), np.nan, np.float32)
    before = _calls(g)
    g.execute(handle, {**inputs, 100: c})
    ran = _ran(g, before)
    assert_close(c, inputs[1].astype(np.float64) @ inputs[2] + inputs[3], F, what=what)
    return ran


def _reference(handle, builder, p, inputs):
    r, _ = _graph(builder, p, override=False, engine="NUMPY_REFERENCE")
    r.build(handle)
    t = next(t for t in r.get_compiled_plan_tensors() if t.uid == 100)
    out = np.full(t.dims, np.nan, np.float32)
    r.execute(handle, {**inputs, 100: out})
    return out


@pytest.fixture(scope="module")
def handle():
    return hd.create_handle(cache=False)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_static_code_at_the_build_shape_dynamic_code_elsewhere(family, handle, rng):
    builder, built, others = FAMILIES[family]
    g, _ = _graph(builder, built)
    _build(g, handle)
    ctx = g.get_execution_plan().context
    assert ctx.specialization[0] == "main_static"
    assert "func.func @main_static(" in ctx.mlir and "func.func @main(" in ctx.mlir
    # build shape first and last, the others between: the choice is made per call
    for p in [built, *others, built]:
        _, dims = _graph(builder, p)
        inputs = {u: random_array(d, rng=rng) for u, d in dims.items()}
        want = _reference(handle, builder, p, inputs)
        got = np.full(want.shape, np.nan, np.float32)
        before = _calls(g)
        g.execute(handle, {**inputs, 100: got})
        assert _ran(g, before) == (["main_static"] if p == built else ["main"]), (family, p)
        assert_close(got, want, F, what=f"{family} at {p}")
    # the build shape given through override arguments (buffers allocated larger, bound by address)
    _, dims = _graph(builder, built)
    inputs = {u: random_array(d, rng=rng) for u, d in dims.items()}
    want = _reference(handle, builder, built, inputs)
    big_in = np.zeros(inputs[1].size + 100, np.float32)
    big_in[:inputs[1].size] = inputs[1].reshape(-1)
    big_out = np.full(want.size + 50, -3.0, np.float32)
    before = _calls(g)
    g.execute(handle, {**inputs, 1: big_in, 100: big_out}, override_uids=[1, 100],
              override_shapes=[list(dims[1]), list(want.shape)])
    assert _ran(g, before) == ["main_static"]
    assert_close(big_out[:want.size].reshape(want.shape), want, F, what=f"{family} by address")
    assert (big_out[want.size:] == -3.0).all()


def test_channels_last_strides_pick_the_static_code_only_at_the_built_layout(handle, rng):
    """An NHWC-strided conv: memory-order arrays at the build shape match the built strides (static
    code); at other N/H/W the dynamic code runs; both against torch."""
    torch = pytest.importorskip("torch")
    c = 4
    g = hd.Graph(io_data_type=F)
    x = g.tensor(uid=1, dim=[2, c, 8, 6], stride=[c * 48, 1, 6 * c, c])
    w = g.tensor(uid=2, dim=[5, c, 3, 3], stride=[9 * c, 1, 3 * c, c])
    g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_output(True).set_uid(3)
    g.set_override_shape_enabled(True)
    g.build(handle)
    for n, h, w_ in ((2, 8, 6), (3, 5, 7), (2, 8, 6)):
        xs, ws = random_array([n, h, w_, c], rng=rng), random_array([5, 3, 3, c], rng=rng)   # memory order
        tx, tw = torch.from_numpy(xs).permute(0, 3, 1, 2), torch.from_numpy(ws).permute(0, 3, 1, 2)
        want = torch.nn.functional.conv2d(tx.double(), tw.double(), padding=1).permute(0, 2, 3, 1).numpy()
        y = np.full((n, h, w_, 5), np.nan, np.float32)
        before = _calls(g)
        g.execute(handle, {1: xs, 2: ws, 3: y})
        assert _ran(g, before) == (["main_static"] if (n, h, w_) == (2, 8, 6) else ["main"])
        assert_close(y, want, F, what=f"NHWC conv at {n}x{h}x{w_}")


def test_restored_in_a_fresh_process_runs_both_kinds_of_shape(handle, tmp_path):
    builder, built, _ = FAMILIES["matmul"]
    g, _ = _graph(builder, built)
    _build(g, handle)
    path = tmp_path / "mm.plan"
    path.write_bytes(g.serialize_compiled_plan())
    code = f"""
import numpy as np, hipdnn_iree as hd
h = hd.create_handle()
r = hd.Graph.from_compiled_plan_file(h, {str(path)!r})
assert r.is_override_shape_enabled()
mod = r.get_execution_plan().context.module
rng = np.random.default_rng(11)
b, bias = rng.standard_normal((32, 24)).astype(np.float32), rng.standard_normal((1, 1, 24)).astype(np.float32)
for n, m in ((4, 6), (1, 1), (5, 9), (4, 6)):
    a = rng.standard_normal((n, m, 32)).astype(np.float32)
    c = np.full((n, m, 24), np.nan, np.float32)
    before = dict(mod.calls)
    r.execute(h, {{1: a, 2: b, 3: bias, 100: c}})
    ran = sorted(k for k in mod.calls if mod.calls[k] != before.get(k, 0))
    assert ran == (["main_static"] if (n, m) == (4, 6) else ["main"]), (n, m, ran)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b + bias, rtol=1e-4, atol=1e-4)
print("ok", mod.calls["main_static"], mod.calls["main"])
"""
    p = run_python(code)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok 2 2"), p.stderr[-3000:]
    # inspect says which function serves which dims
    p = run_python(f"import sys; from hipdnn_iree.cli.main import main; sys.exit(main(['inspect', {str(path)!r}]))")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "'main_static'" in p.stdout and "shape specialization" in p.stdout, p.stdout
    assert "uid 1 [4, 6, 32]" in p.stdout, p.stdout


def test_knob_off_gives_the_single_function_module(handle, rng):
    """SHAPE_SPECIALIZE=OFF: the dynamic lowering exactly as before (one function, no
    specializations in the ABI); a static build ignores the knob (its MLIR unchanged)."""
    from graph_ir import decode_graph
    from lowering._lower import lower_graph
    from graph_ir.dynamic import analyze
    from lowering.policy import LoweringPolicy
    builder, built, others = FAMILIES["matmul"]
    g, _ = _graph(builder, built)
    _build(g, handle, {"SHAPE_SPECIALIZE": "OFF"})
    ctx = g.get_execution_plan().context
    desc = decode_graph(g.get_op_graph_bytes())
    pol = LoweringPolicy.for_target("llvm-cpu:host")
    old = lower_graph(desc, "llvm-cpu:host", verify=False, graph_bytes=g.get_op_graph_bytes(), policy=pol,
                      shape_spec=analyze(desc))
    assert ctx.mlir == old.mlir and "main_static" not in ctx.mlir
    assert ctx.specialization is None and "specializations" not in ctx.abi
    assert g.get_execution_plan().get_attribute(hd.backend.Attribute.EXECUTION_PLAN_ENGINE_CONFIG).knobs == \
        {"SHAPE_SPECIALIZE": "OFF"}
    for p in (built, others[0]):
        assert _run_matmul(g, handle, p, rng, what=f"knob OFF at {p}") == ["main"]
    # a static build with the knob ON: the static module, byte for byte
    s, _ = _graph(builder, built, override=False)
    _build(s, handle, {"SHAPE_SPECIALIZE": "ON"})
    sctx = s.get_execution_plan().context
    assert sctx.mlir == lower_graph(desc, "llvm-cpu:host", verify=False, graph_bytes=s.get_op_graph_bytes(),
                                    policy=pol).mlir
    assert sctx.specialization is None


def test_knob_on_specializes_a_dynamic_plan_without_override_shapes(handle, rng):
    """A kernel-cache (dynamic, not override) build: AUTO leaves it single-function; ON specializes
    it, and its executions (always at its own dims) run the static code. The knob shows in
    EXECUTION_PLAN_ENGINE_CONFIG, built and restored."""
    builder, built, _ = FAMILIES["matmul"]
    for knobs, want in ((None, None), ({"SHAPE_SPECIALIZE": "ON"}, "main_static")):
        g = hd.Graph(io_data_type=F)
        builder(g, built)
        g.set_dynamic_shape_enabled(True)
        _build(g, handle, knobs)
        plan = g.get_execution_plan()
        assert (plan.context.specialization or (None,))[0] == want
        assert _run_matmul(g, handle, built, rng) == [want or "main"]
        r = hd.Graph.from_compiled_plan(handle, g.serialize_compiled_plan())
        cfg = r.get_execution_plan().get_attribute(hd.backend.Attribute.EXECUTION_PLAN_ENGINE_CONFIG)
        assert cfg.knobs == (knobs or {})
        assert (r.get_execution_plan().context.specialization or (None,))[0] == want


def test_the_knob_and_the_specialization_are_in_the_cache_keys(tmp_path, rng, monkeypatch):
    """One compile cache folder: specialized and unspecialized builds of one override graph are two
    modules; a second specialized build is a hit that is still specialized. One kernel cache: ON
    and OFF builds of one topology are two entries."""
    from hipdnn_iree.plugins.iree_linalg import compile as compile_mod
    calls = []
    real = compile_mod.compile_mlir
    monkeypatch.setattr(compile_mod, "compile_mlir", lambda *a, **k: calls.append(1) or real(*a, **k))
    builder, built, _ = FAMILIES["matmul"]
    h = hd.create_handle(cache=str(tmp_path))
    on, _ = _graph(builder, built)
    _build(on, h)
    off, _ = _graph(builder, built)
    _build(off, h, {"SHAPE_SPECIALIZE": "OFF"})
    assert len(calls) == 2
    again, _ = _graph(builder, built)
    _build(again, h, {"SHAPE_SPECIALIZE": "ON"})     # ON resolves like AUTO here: the same key
    assert len(calls) == 2
    assert again.get_execution_plan().context.specialization is not None
    assert off.get_execution_plan().context.specialization is None
    assert _run_matmul(again, h, built, rng, what="cache-hit specialized plan") == ["main_static"]
    kc = hd.KernelCache()
    for knobs in (None, {"SHAPE_SPECIALIZE": "OFF"}, None):
        g, _ = _graph(builder, built)
        g.set_kernel_cache(kc)
        _build(g, h, knobs)
    assert len(kc) == 2 and kc.hits == 1


def test_kernel_cache_hits_keep_the_first_graphs_specialization(handle, rng, monkeypatch):
    """Same topology built at two shapes through a kernel cache: one compile; the module's static
    code serves the FIRST graph's shape in both plans, every other shape (the second graph's own
    included) runs the dynamic code, and all are right."""
    from hipdnn_iree.plugins.iree_linalg import compile as compile_mod
    calls = []
    real = compile_mod.compile_mlir
    monkeypatch.setattr(compile_mod, "compile_mlir", lambda *a, **k: calls.append(1) or real(*a, **k))
    builder, _, _ = FAMILIES["matmul"]
    kc = hd.KernelCache()
    first, _ = _graph(builder, (4, 6))
    first.set_kernel_cache(kc)
    _build(first, handle)
    second, _ = _graph(builder, (2, 3))
    second.set_kernel_cache(kc)
    _build(second, handle)
    assert len(calls) == 1 and kc.hits == 1
    for g in (first, second):
        assert g.get_execution_plan().context.specialization[1][1][0] == (4, 6, 32)
        for p in ((4, 6), (2, 3), (1, 9)):
            ran = _run_matmul(g, handle, p, rng, what=f"kernel cache at {p}")
            assert ran == (["main_static"] if p == (4, 6) else ["main"]), p
    assert [t.dims for t in second.get_compiled_plan_tensors() if t.uid == 1] == [(2, 3, 32)]


def test_multi_target_plan_and_kind1_restore(tmp_path, rng):
    """A kind-3 plan (llvm-cpu + cuda:sm_80): every module is specialized; restored on the CPU, it
    runs both kinds of shape. The hipDNN-graph payload (kind 1) of a specialized plan restores as a
    static plan of its graph and runs."""
    from hipdnn_iree.backend import envelope as _envelope
    from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
    from hipdnn_iree.plugins.iree_linalg.runtime import instance, rt
    builder, built, others = FAMILIES["matmul"]
    h = hd.create_handle(device="local-task", target=["llvm-cpu:host", "cuda:sm_80"], cache=False)
    g, _ = _graph(builder, built)
    _build(g, h)
    data = g.serialize_compiled_plan()
    fp = _fusplan.unpack(_envelope.decode(data).plugin_payload)
    assert fp.payload_kind == _fusplan.KIND_MULTI_TARGET and len(fp.entries) == 2
    for e in fp.entries:
        names = list(rt().VmModule.copy_buffer(instance(), bytes(fp.module(e))).function_names)
        assert {"main", "main_static"} <= set(names), (e.target, names)
    cpu = hd.create_handle()
    r = hd.Graph.from_compiled_plan(cpu, data)
    for p in (built, others[1]):
        assert _run_matmul(r, cpu, p, rng, what=f"kind 3 at {p}") == (["main_static"] if p == built else ["main"])
    k1 = hd.Graph.from_compiled_plan(cpu, g.serialize_compiled_plan(payload="hipdnn_graph"))
    _run_matmul(k1, cpu, built, rng, what="kind 1")


def test_a_module_without_the_function_its_abi_names_is_refused(handle):
    """Malformed specializations in the ABI, or a module that lacks the function its ABI names:
    PLUGIN_ERROR (the latter at restore, from real plan bytes)."""
    from hipdnn_iree.plugins.iree_linalg import payload as _payload
    from hipdnn_iree.plugins.iree_linalg.compile import compile_mlir
    from hipdnn_iree.plugins.iree_linalg.context import IreeExecutionContext, specialization_of
    from hipdnn_iree.plugins.iree_linalg.session import IreeSession
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    from graph_ir import decode_graph
    from lowering._lower import lower_graph
    from graph_ir.dynamic import analyze
    assert specialization_of({"specializations": [{"entry": "f", "tensors": [[1, [2], [1]]]}]}) == \
        ("f", {1: ((2,), (1,))})
    raises(S.PLUGIN_ERROR, specialization_of, {"specializations": [{"entry": "f"}]}, match="specializations")
    raises(S.PLUGIN_ERROR, specialization_of, {"specializations": [{"entry": "f", "tensors": [[1, 2]]}]})
    builder, built, _ = FAMILIES["matmul"]
    g, _ = _graph(builder, built)
    g.build(handle)
    ctx = g.get_execution_plan().context
    desc = decode_graph(g.get_op_graph_bytes())
    spec = analyze(desc)
    lo = lower_graph(desc, "llvm-cpu:host", verify=False, graph_bytes=g.get_op_graph_bytes(), shape_spec=spec,
                     specialize=True)
    cut = lo.mlir.index("func.func @main_static(")
    target = parse_target("llvm-cpu:host")
    vmfb = compile_mlir(lo.mlir[:cut] + "}\n", target).vmfb     # the ABI still names main_static
    bad = IreeExecutionContext(vmfb, lo.abi, target, ctx.tensors, shape_spec=spec, override=True)
    good = IreeExecutionContext(ctx.vmfb, ctx.abi, target, ctx.tensors, shape_spec=spec, override=True)
    session = IreeSession("local-task", target)
    assert _payload.restore(session, _payload.serialize(good, "0")).specialization[0] == "main_static"
    raises(S.PLUGIN_ERROR, _payload.restore, session, _payload.serialize(bad, "0"), match="main_static")
