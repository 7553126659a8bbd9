"""The cuDNN facade's lifecycle called out of order, twice, after a failed build, after
``deserialize`` and after ``destroy_handle``: every refusal is an ``hd.HipdnnError`` with its
status and a message naming what to call first, the caller's buffers are left as they were, and
every order that reaches a built plan computes the right numbers (float64 numpy reference).

(``execute`` before ``build`` used to raise ``KeyError: 0`` from inside the variant-pack binding.)
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import hipdnn_iree as hd
import hipdnn_iree.cudnn as cudnn

M, K, N = 4, 8, 3
STEPS = {
    "validate": lambda g: g.validate(),
    "build_operation_graph": lambda g: g.build_operation_graph(),
    "create_execution_plans": lambda g: g.create_execution_plans([cudnn.heur_mode.A]),
    "check_support": lambda g: g.check_support(),
    "build_plans": lambda g: g.build_plans(),
}


@pytest.fixture(scope="module")
def handle():
    h = cudnn.create_handle(device="cpu")
    yield h
    cudnn.destroy_handle(h)


def _graph(handle, k_b=K, **kw):
    """relu(A @ B): with ``k_b != K`` the inner dims differ and validate refuses the graph."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=handle,
                      **kw)
    A = g.tensor(name="A", dim=[1, M, K], stride=[M * K, K, 1])
    B = g.tensor(name="B", dim=[1, k_b, N], stride=[k_b * N, N, 1])
    C = g.relu(g.matmul(A, B))
    C.set_output(True)
    return g, A, B, C


def _buffers(rng, k_b=K):
    a = rng.standard_normal((1, M, K)).astype(np.float32)
    b = rng.standard_normal((1, k_b, N)).astype(np.float32)
    out = np.full((1, M, N), np.nan, np.float32)
    return a, b, out


def _ref(a, b):
    return np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0.0)


def _refused(fn, status, *words):
    """``fn()`` raises hd.HipdnnError with ``status`` and a message holding every word."""
    with pytest.raises(hd.HipdnnError) as ei:
        fn()
    assert ei.value.status == status, (ei.value.status, str(ei.value))
    for w in words:
        assert w in str(ei.value), (w, str(ei.value))
    return ei.value


def _unchanged(before, *now):
    for x, y in zip(before, now):
        np.testing.assert_array_equal(x, y)


def test_fresh_graph_every_method(handle, rng):
    """Nothing built: each method that needs a plan says which step comes first."""
    g, A, B, C = _graph(handle)
    a, b, out = _buffers(rng)
    keep = [a.copy(), b.copy(), out.copy()]
    pack = {A: a, B: b, C: out}
    for fn in (lambda: g.execute(pack), lambda: g.execute(pack, None, handle=handle),
               lambda: g.execute_plan_at_index(pack, None, 0)):
        _refused(fn, hd.Status.NOT_INITIALIZED, "validate()", "build(")
    for fn in (g.serialize, g.get_workspace_size, g.get_compiled_plan_tensors):
        _refused(fn, hd.Status.NOT_INITIALIZED, "validate()", "build(")
    _refused(g.check_support, hd.Status.NOT_INITIALIZED, "create_execution_plans()")
    _refused(g.build_plans, hd.Status.NOT_INITIALIZED, "check_support()")
    _refused(lambda: g.build_plan_at_index(0), hd.Status.NOT_INITIALIZED, "create_execution_plans()")
    for fn in (g.get_behavior_notes, lambda: g.get_plan_name_at_index(0), lambda: g.get_engine_and_knobs_at_index(0),
               lambda: g.get_behavior_notes_for_plan_at_index(0)):
        _refused(fn, hd.Status.NOT_INITIALIZED)
    _unchanged(keep, a, b, out)
    # and the graph is still good: the steps in order, then the right numbers
    g.build([cudnn.heur_mode.A])
    g.execute(pack)
    np.testing.assert_allclose(out, _ref(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("done", range(len(STEPS)), ids=lambda n: f"after_{n}_steps")
def test_execute_names_the_next_step(handle, rng, done):
    """After the first ``done`` steps, execute (and serialize, get_workspace_size) name the next one."""
    g, A, B, C = _graph(handle)
    names = list(STEPS)
    for name in names[:done]:
        STEPS[name](g)
    a, b, out = _buffers(rng)
    keep = [a.copy(), b.copy(), out.copy()]
    want = {0: "validate()", 1: "build_operation_graph()", 2: "create_execution_plans(",
            3: "check_support()", 4: "build_plans()"}[done]
    _refused(lambda: g.execute({A: a, B: b, C: out}), hd.Status.NOT_INITIALIZED, want, "build(")
    _refused(g.serialize, hd.Status.NOT_INITIALIZED, want)
    _refused(g.get_workspace_size, hd.Status.NOT_INITIALIZED, want)
    _unchanged(keep, a, b, out)


def test_every_order_of_the_steps(handle, rng):
    """All 120 orders of the five steps, with an execute after each step: every call succeeds or
    raises hd.HipdnnError (NOT_INITIALIZED); an execute that runs gives the reference numbers, one
    that is refused leaves the output as it was."""
    a, b, _ = _buffers(rng)
    ref = _ref(a, b)
    ran = 0
    for order in itertools.permutations(STEPS):
        g, A, B, C = _graph(handle)
        for i, name in enumerate(order):
            try:
                STEPS[name](g)
            except hd.HipdnnError as e:
                assert e.status == hd.Status.NOT_INITIALIZED, (order[:i + 1], str(e))
            out = np.full((1, M, N), np.nan, np.float32)
            try:
                g.execute({A: a, B: b, C: out})
            except hd.HipdnnError as e:
                assert e.status == hd.Status.NOT_INITIALIZED and "build(" in str(e), (order[:i + 1], str(e))
                assert np.isnan(out).all(), order[:i + 1]
                continue
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, err_msg=str(order[:i + 1]))
            ran += 1
    assert ran > 0     # the orders ending in build_plans after check_support, at least


def test_after_a_failed_build(handle, rng):
    """A build refused at validate (inner dims differ) or at create_execution_plans (an unsupported
    feature): execute, serialize and get_workspace_size say a plan must be built first."""
    g, A, B, C = _graph(handle, k_b=K + 1)
    _refused(lambda: g.build([cudnn.heur_mode.A]), hd.Status.BAD_PARAM, "inner dims")
    a, b, out = _buffers(rng, k_b=K + 1)
    keep = [a.copy(), b.copy(), out.copy()]
    _refused(lambda: g.execute({A: a, B: b, C: out}), hd.Status.NOT_INITIALIZED, "validate()", "build(")
    _refused(g.serialize, hd.Status.NOT_INITIALIZED, "validate()")
    _refused(g.get_workspace_size, hd.Status.NOT_INITIALIZED, "validate()")
    _unchanged(keep, a, b, out)

    g2 = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, handle=handle)
    A2 = g2.tensor(name="A", dim=[1, M, K], stride=[M * K, K, 1])
    B2 = g2.tensor(name="B", dim=[1, K, N], stride=[K * N, N, 1])
    C2 = g2.matmul(A2, B2, padding=1.0)     # refused at the build steps (NOT_SUPPORTED)
    C2.set_output(True)
    _refused(lambda: g2.build([cudnn.heur_mode.A]), hd.Status.NOT_SUPPORTED, "padding")
    a, b, out = _buffers(rng)
    _refused(lambda: g2.execute({A2: a, B2: b, C2: out}), hd.Status.NOT_INITIALIZED, "create_execution_plans(")
    assert np.isnan(out).all()


def test_twice(handle, rng):
    """validate, build, build_plans, execute, serialize and deserialize called twice work."""
    g, A, B, C = _graph(handle)
    g.validate().validate()
    g.build([cudnn.heur_mode.A])
    g.build([cudnn.heur_mode.A])
    g.build_plans()
    a, b, out = _buffers(rng)
    for _ in range(2):
        out[...] = np.nan
        g.execute({A: a, B: b, C: out})
        np.testing.assert_allclose(out, _ref(a, b), rtol=1e-5, atol=1e-5)
    data = g.serialize()
    assert g.serialize() == data
    r = cudnn.pygraph()
    r.deserialize(handle, data)
    r.deserialize(handle, data)
    out[...] = np.nan
    r.execute({A.get_uid(): a, B.get_uid(): b, C.get_uid(): out})
    np.testing.assert_allclose(out, _ref(a, b), rtol=1e-5, atol=1e-5)


def test_after_deserialize(handle, rng):
    """A restored graph holds only the plan: the build steps and new ops are NOT_SUPPORTED, saying
    so; deserializing into a graph that has tensors is BAD_PARAM; bad bytes are BAD_PARAM."""
    g, A, B, C = _graph(handle)
    g.build([cudnn.heur_mode.A])
    data = g.serialize()
    r = cudnn.pygraph()
    r.deserialize(handle, data)
    for fn in (r.validate, r.build_operation_graph, lambda: r.create_execution_plans([cudnn.heur_mode.A]),
               r.check_support, r.build_plans, lambda: r.build([cudnn.heur_mode.A]),
               lambda: r.tensor(name="Z", dim=[1, 2, 2], stride=[4, 2, 1])):
        _refused(fn, hd.Status.NOT_SUPPORTED, "restored")
    assert r.get_workspace_size() == g.get_workspace_size()
    _refused(lambda: g.deserialize(handle, data), hd.Status.BAD_PARAM, "empty")
    _refused(lambda: cudnn.pygraph().deserialize(handle, b"not a plan"), hd.Status.BAD_PARAM)
    a, b, out = _buffers(rng)
    r.execute({A.get_uid(): a, B.get_uid(): b, C.get_uid(): out})
    np.testing.assert_allclose(out, _ref(a, b), rtol=1e-5, atol=1e-5)


def test_after_destroy_handle(rng):
    """A graph whose handle was destroyed refuses to execute (BAD_PARAM naming destroy_handle)."""
    h = cudnn.create_handle(device="cpu")
    g, A, B, C = _graph(h)
    g.build([cudnn.heur_mode.A])
    cudnn.destroy_handle(h)
    a, b, out = _buffers(rng)
    _refused(lambda: g.execute({A: a, B: b, C: out}), hd.Status.BAD_PARAM, "destroy")
    assert np.isnan(out).all()
    _refused(lambda: cudnn.destroy_handle(h), hd.Status.BAD_PARAM, "destroy")
