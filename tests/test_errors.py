"""Bad input gets an hd.HipdnnError with the right status, names the problem, and loses nothing."""
import numpy as np
import pytest

import hipdnn_iree as hd
from harness import raises, random_array

S = hd.Status
F = hd.DataType.FLOAT




@pytest.fixture(scope="module")
def built():
    h = hd.create_handle()
    g = hd.Graph(io_data_type=F)
    a = g.tensor(name="A", uid=1, dim=[4, 8])
    b = g.tensor(name="B", uid=2, dim=[8, 5], stride=[1, 8])
    bias = g.tensor(name="bias", uid=4, dim=[1, 5])
    g.pointwise(g.matmul(a, b), bias, mode=hd.PointwiseMode.ADD).set_output(True).set_uid(3).set_name("C")
    g.build(h)
    restored = hd.Graph.from_compiled_plan(h, g.serialize_compiled_plan())
    return h, g, restored


def pack(rng):
    a = random_array([4, 8], rng=rng)
    b = random_array([8, 5], rng=rng, strides=[1, 8])
    bias = random_array([1, 5], rng=rng)
    c = np.full((4, 5), 7.0, np.float32)
    return {1: a, 2: b, 4: bias, 3: c}


@pytest.mark.parametrize("which", ["built", "restored"])
@pytest.mark.parametrize("mutate,match", [
    (lambda p: p.pop(2), "missing uid(s) 2 ('B')"),
    (lambda p: p.update({99: np.zeros(3, np.float32)}), "unknown uid(s) [99]"),
    (lambda p: p.update({1: np.zeros((4, 9), np.float32)}), "'A' (uid 1)"),
    (lambda p: p.update({1: np.zeros((4, 8), np.float64)}), "dtype float64"),
    (lambda p: p.update({2: np.zeros((8, 5), np.float32)}), "do not match the declared strides"),
    (lambda p: p.update({1: [[0.0] * 8] * 4}), "numpy array"),
    (lambda p: p.update({1: None}), "numpy array"),
])
def test_variant_pack_errors_leave_outputs_untouched(built, rng, which, mutate, match):
    h, g, restored = built
    graph = g if which == "built" else restored
    p = pack(rng)
    out = p[3]
    mutate(p)
    raises(S.BAD_PARAM, lambda: graph.execute(h, p), match=match)
    assert np.all(out == 7.0)


def test_output_errors(built, rng):
    h, g, _ = built
    p = pack(rng)
    ro = np.zeros((4, 5), np.float32)
    ro.setflags(write=False)
    p[3] = ro
    raises(S.BAD_PARAM, lambda: g.execute(h, p), match="read-only")
    p = pack(rng)
    p[3] = p[1][:, :5]  # aliases input A (and is not dense)
    raises(S.BAD_PARAM, lambda: g.execute(h, p))
    p = pack(rng)
    big = np.zeros(40, np.float32)
    p[3], p[1] = big[:20].reshape(4, 5), big.copy()[:32].reshape(4, 8)
    p[4] = big[15:20].reshape(1, 5)
    raises(S.BAD_PARAM, lambda: g.execute(h, p), match="shares memory")


def test_memory_order_buffers_are_accepted_flat_ones_refused(built, rng):
    h, g, _ = built
    p = pack(rng)
    want = p[1].astype(np.float64) @ p[2] + p[4]
    p[2] = np.ascontiguousarray(p[2].T)               # B's memory image in its memory-order shape
    c = np.zeros((4, 5), np.float32)
    p[3] = c
    g.execute(h, p)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    # NOTE: a buffer with only the right element count is refused: it hides transpositions
    raises(S.BAD_PARAM, lambda: g.execute(h, {**p, 2: p[2].reshape(-1)}), match="matches neither")
    raises(S.BAD_PARAM, lambda: g.execute(h, {**p, 3: np.zeros(20, np.float32)}), match="matches neither")


def test_variant_pack_shapes():
    h = hd.create_handle()
    raises(S.NOT_INITIALIZED, lambda: hd.Graph().execute(h, {}), match="no built plan")
    g = hd.Graph(io_data_type=F)
    g.matmul(g.tensor(uid=1, dim=[2, 2]), g.tensor(uid=2, dim=[2, 2])).set_output(True).set_uid(3)
    g.build(h)
    raises(S.BAD_PARAM_NULL_POINTER, lambda: g.execute(h, None))
    raises(S.BAD_PARAM, lambda: g.execute(h, [1, 2, 3]), match="dict")
    raises(S.BAD_PARAM_NULL_POINTER, lambda: g.execute(None, {}))


@pytest.mark.parametrize("build,status,match", [
    (lambda g: g.tensor(uid=1, dim=[2, -3]), S.BAD_PARAM, "dims [2, -3]"),
    (lambda g: g.tensor(uid=1, dim=[2, 3], stride=[3]), S.BAD_PARAM, "2 dims but 1 strides"),
    # NOTE: an input's strides may overlap ([2, 3] with [2, 1]) or not be multiples ([7, 2, 1]): it is
    # only read (tests/test_alias_inputs.py, which also checks that outputs with such strides are refused)
    (lambda g: g.tensor(uid=1, dim=[2, 3], stride=[3, 1], data_type=hd.DataType.NOT_SET), S.BAD_PARAM, "no data type"),
])
def test_bad_tensors(build, status, match):
    g = hd.Graph()
    a = build(g)
    if a.get_data_type() == hd.DataType.NOT_SET and "data type" not in match:
        a.set_data_type(F)
    b = g.tensor(uid=2, dim=[3, 2], data_type=F)
    g.matmul(a, b).set_output(True).set_uid(3)
    raises(status, g.validate, match=match)


def test_bad_graphs():
    raises(S.BAD_PARAM, hd.Graph().validate, match="no operations")
    g = hd.Graph(io_data_type=F)
    a, b = g.tensor(uid=1, dim=[2, 3]), g.tensor(uid=1, dim=[4, 2])
    g.matmul(a, b).set_output(True).set_uid(3)
    raises(S.BAD_PARAM, g.validate, match="uid 1 is used by")
    g = hd.Graph(io_data_type=F)
    a, b = g.tensor(uid=1, dim=[2, 3]), g.tensor(uid=2, dim=[4, 2])
    g.matmul(a, b).set_output(True).set_uid(3)
    raises(S.BAD_PARAM, g.validate, match="inner dims differ")
    g = hd.Graph(io_data_type=F)
    a, b = g.tensor(uid=1, dim=[2, 3]), g.tensor(uid=2, dim=[3, 4])
    g.matmul(a, b).set_output(True).set_uid(3).set_dim([2, 5])
    raises(S.BAD_PARAM, g.validate, match="has dims [2, 5] but the op gives [2, 4]")
    g = hd.Graph(io_data_type=F)
    x = g.tensor(uid=1, dim=[2, 3])
    raises(S.BAD_PARAM, lambda: g.pointwise(x, mode=12345), match="PointwiseMode")
    raises(S.BAD_PARAM, lambda: g.pointwise(x, "nope", mode=hd.PointwiseMode.ADD), match="TensorAttributes")
    g.pointwise(x, g.tensor(uid=2, dim=[4, 3]), mode=hd.PointwiseMode.ADD).set_output(True).set_uid(3)
    raises(S.BAD_PARAM, g.validate, match="do not broadcast")
    g = hd.Graph(io_data_type=F)
    g.pointwise(g.tensor(uid=1, dim=[2]), mode=hd.PointwiseMode.ADD).set_output(True)
    raises(S.BAD_PARAM, g.validate, match="takes 2 input(s), got 1")
    g = hd.Graph(io_data_type=F)
    g.pointwise(g.tensor(uid=1, dim=[2, 3], stride=[0, 1]), mode=hd.PointwiseMode.NEG).set_output(True).set_stride([0, 1])
    raises(S.BAD_PARAM, g.validate, match="only allowed on inputs")


def test_lifecycle_order_and_handles():
    h = hd.create_handle()
    g = hd.Graph(io_data_type=F)
    g.matmul(g.tensor(uid=1, dim=[2, 2]), g.tensor(uid=2, dim=[2, 2])).set_output(True).set_uid(3)
    raises(S.NOT_INITIALIZED, g.create_execution_plans, match="build_operation_graph")
    raises(S.NOT_INITIALIZED, g.check_support, match="create_execution_plans")
    raises(S.NOT_INITIALIZED, g.build_plans, match="check_support")
    raises(S.NOT_INITIALIZED, g.get_workspace_size)
    raises(S.BAD_PARAM, lambda: g.build("not a handle"), match="create_handle")
    raises(S.BAD_PARAM, lambda: hd.create_handle(device=None), match="needs a target")
    raises(S.NOT_SUPPORTED, lambda: hd.create_handle(target="tpu:v5"), match="unknown backend")
    raises(S.NOT_SUPPORTED, lambda: hd.create_handle(device="local-task", target="rocm:gfx942"), match="local-task")
    raises(S.BAD_PARAM, lambda: hd.create_handle(device=None, target="rocm"), match="gfx")
    raises(S.NOT_SUPPORTED, lambda: hd.create_handle(device="vulkan://7"), match="vulkan")
    e = raises(S.NOT_INITIALIZED, lambda: hd.create_handle(device="cuda://99"))
    assert "cuda://99" in str(e)


def test_compile_errors_carry_iree_diagnostics(monkeypatch):
    """Force bad MLIR into the compiler: the error carries IREE's diagnostics and the MLIR."""
    from hipdnn_iree.plugins.iree_linalg import compile as _compile
    from hipdnn_iree.plugins.iree_linalg import targets as _targets
    e = raises(S.INTERNAL_ERROR, lambda: _compile.compile_mlir("func.func @main() { bogus.op }",
                                                               _targets.parse_target("llvm-cpu")))
    assert "IREE diagnostics" in str(e) and "bogus.op" in str(e) and "error:" in str(e)


def test_no_other_exception_type_escapes_on_garbage():
    h = hd.create_handle()
    rng = np.random.default_rng(0)
    for n in (1, 7, 20, 64, 300):
        for _ in range(20):
            data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            with pytest.raises(hd.HipdnnError):
                hd.Graph.from_compiled_plan(h, data)
