"""Inputs whose strides alias (several logical elements at one address) or are not multiples of each
other: legal, since an input is only read (cuDNN FE's own matmul test reads B through
``torch.as_strided(B, (B, K, N), (N*K, 1, N))``). Such an input is bound as the run of its span
elements and read with a gather (``lowering/strided.py``); an output with such strides is refused,
and an output may not share memory with an aliasing input. Numbers against numpy on the same
``as_strided`` views."""
from __future__ import annotations

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import raises
from graph_ir.layout import packed_strides

F = hd.DataType.FLOAT
P = hd.PointwiseMode
BB, M, K, N = 2, 4, 16, 8
B_STRIDES = [K * N, 1, N]          # cuDNN FE's view: axis 1 (stride 1, K elements) overlaps axis 2 (stride N)


def _view(base: np.ndarray, dims, strides) -> np.ndarray:
    """``base`` (1-D) seen with element ``strides`` from its first element (read-only)."""
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    assert base.ndim == 1 and base.size >= span
    return np.lib.stride_tricks.as_strided(base, shape=dims, strides=[s * base.itemsize for s in strides],
                                           writeable=False)


def _run(rng, dims, strides, extra=0):
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    base = hd.empty_aligned((span + extra,), np.float32)
    base[...] = rng.uniform(-1, 1, base.shape)
    return base, _view(base, dims, strides)


def _matmul_graph(engine=None):
    g = hd.Graph(name="alias_b", io_data_type=F)
    a = g.tensor(name="a", uid=1, dim=[BB, M, K])
    b = g.tensor(name="b", uid=2, dim=[BB, K, N], stride=B_STRIDES)
    g.matmul(a, b).set_output(True).set_uid(3).set_name("c")
    if engine:
        g.set_preferred_engine_id_ext(engine)
    return g


@pytest.fixture(scope="module")
def matmul(cpu):
    return _matmul_graph().build(cpu)


def test_layout_of_an_aliasing_input():
    from graph_ir.layout import physical_layout
    from graph_ir.desc import GraphError
    lay = physical_layout([BB, K, N], B_STRIDES)
    assert lay.gather and not lay.is_dense and lay.host is None
    assert lay.span == 1 + (BB - 1) * K * N + (K - 1) + (N - 1) * N and lay.phys_shape == (lay.span,)
    # the layouts the strided path handles keep it (no gather): a padded slice, packed QKV
    for dims, strides in (([32, 24], [40, 1]), ([2, 3, 5, 4], [180, 4, 36, 1])):
        lay = physical_layout(dims, strides)
        assert not lay.gather and lay.host is not None
    with pytest.raises(GraphError, match="may not alias"):
        physical_layout([5, 4], [1, 1], "tensor 'y' (uid 2)", output=True)
    with pytest.raises(GraphError, match="not a multiple"):
        physical_layout([3, 4], [9, 2], "tensor 'y' (uid 2)", output=True)


def test_matmul_reads_cudnn_fe_overlapping_b(cpu, matmul, rng):
    a = rng.uniform(-1, 1, (BB, M, K)).astype(np.float32)
    base, b = _run(rng, [BB, K, N], B_STRIDES)
    out = np.full((BB, M, N), np.nan, np.float32)
    matmul.execute(cpu, {1: a, 2: b, 3: out})
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    # the same input given as its run of span elements (its memory-order shape)
    out2 = np.full((BB, M, N), np.nan, np.float32)
    matmul.execute(cpu, {1: a, 2: base, 3: out2})
    np.testing.assert_array_equal(out, out2)
    # a buffer shorter than the span is refused
    raises(hd.Status.BAD_PARAM, matmul.execute, cpu, {1: a, 2: base[:-1].copy(), 3: out2}, match="matches neither")


def test_the_gather_is_only_used_where_needed(cpu):
    mlir = _matmul_graph().get_mlir()
    assert "tensor.extract %arg1[" in mlir and "linalg.index" in mlir
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[32, 24], stride=[40, 1])     # a padded slice: expand + slice as before
    g.pointwise(x, mode=P.NEG).set_output(True).set_uid(2)
    mlir = g.get_mlir()
    assert "tensor.extract_slice" in mlir and "tensor.extract %" not in mlir and "linalg.index" not in mlir


def test_restored_plan_and_reference_engine_read_aliasing_b(cpu, matmul, rng):
    a = rng.uniform(-1, 1, (BB, M, K)).astype(np.float32)
    _, b = _run(rng, [BB, K, N], B_STRIDES)
    want = a.astype(np.float64) @ b
    restored = hd.Graph.from_compiled_plan(cpu, matmul.serialize_compiled_plan())
    ref = _matmul_graph("NUMPY_REFERENCE").build(cpu)
    for g in (restored, ref):
        out = np.full((BB, M, N), np.nan, np.float32)
        g.execute(cpu, {1: a, 2: b, 3: out})
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def _add_graph(dims, x_strides, engine=None):
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=dims, stride=x_strides)
    y = g.tensor(name="y", uid=2, dim=dims)
    # NOTE: z's strides set (row-major): left unset they follow x's stride order
    g.pointwise(x, y, mode=P.ADD).set_output(True).set_uid(3).set_name("z").set_stride(list(packed_strides(dims)))
    if engine:
        g.set_preferred_engine_id_ext(engine)
    return g


@pytest.mark.parametrize("dims,strides", [
    ([5, 4], [1, 1]),            # a sliding window: each row starts one element after the last
    ([3, 5, 4], [0, 1, 1]),      # broadcast (stride 0) and a sliding window
    ([3, 4], [5, 2]),            # interleaved rows (no two elements at one address)
    ([3, 4], [9, 2]),            # strides that are not multiples of each other (no overlap)
    ([4, 3, 3], [2, 3, 1]),      # overlapping, out of stride order
    ([2, 1, 6], [3, 7, 1]),      # overlap with a size-1 axis of arbitrary stride
], ids=["window", "bcast_window", "interleaved", "non_multiple", "unordered", "unit_axis"])
@pytest.mark.parametrize("engine", [None, "NUMPY_REFERENCE"], ids=["iree", "reference"])
def test_pointwise_add_reads_aliasing_input(cpu, rng, dims, strides, engine):
    g = _add_graph(dims, strides, engine).build(cpu)
    _, x = _run(rng, dims, strides, extra=3)
    y = rng.uniform(-1, 1, dims).astype(np.float32)
    out = np.full(dims, np.nan, np.float32)
    g.execute(cpu, {1: x, 2: y, 3: out})
    np.testing.assert_allclose(out, x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


def test_torch_cpu_views_through_the_hd_api(cpu, matmul, rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(rng.uniform(-1, 1, (BB, M, K)).astype(np.float32))
    b = torch.from_numpy(rng.uniform(-1, 1, BB * K * N).astype(np.float32)).as_strided((BB, K, N), B_STRIDES)
    out = torch.full((BB, M, N), float("nan"))
    matmul.execute(cpu, {1: a, 2: b, 3: out})
    torch.testing.assert_close(out, torch.matmul(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("strides,match", [([1, 1], "may not alias"), ([5, 2], "may not alias"),
                                           ([9, 2], "not a multiple")])
@pytest.mark.parametrize("engine", [None, "NUMPY_REFERENCE"], ids=["iree", "reference"])
def test_an_output_may_not_alias(cpu, strides, match, engine):
    dims = [5, 4] if strides == [1, 1] else [3, 4]
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=dims)
    g.pointwise(x, mode=P.NEG).set_output(True).set_uid(2).set_name("y").set_stride(strides)
    if engine:
        g.set_preferred_engine_id_ext(engine)
    e = raises(hd.Status.BAD_PARAM, g.build, cpu, match=match)
    assert "output tensor 'y' (uid 2)" in str(e) and str(dims) in str(e) and str(strides) in str(e), str(e)


def test_an_output_may_not_share_memory_with_an_aliasing_input(cpu, rng):
    dims, strides = [5, 4], [1, 1]
    g = _add_graph(dims, strides).build(cpu)
    base = hd.empty_aligned((40,), np.float32)
    base[...] = rng.uniform(-1, 1, base.shape)
    before = base.copy()
    x = _view(base, dims, strides)                       # elements 0..7 of base
    y = rng.uniform(-1, 1, dims).astype(np.float32)
    for out in (base[:20].reshape(dims), base[6:26].reshape(dims)):   # over x's first / last elements
        e = raises(hd.Status.BAD_PARAM, g.execute, cpu, {1: x, 2: y, 3: out}, match="shares memory")
        assert np.array_equal(base, before), str(e)
    # past the input's span, in the same buffer: fine
    out = base[20:].reshape(dims)
    g.execute(cpu, {1: x, 2: y, 3: out})
    np.testing.assert_allclose(out, x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)
    assert np.array_equal(base[:20], before[:20])


def test_dynamic_build_with_an_aliasing_input(cpu, rng):
    g = _matmul_graph()
    g.set_dynamic_shape_enabled(True)
    g.build(cpu)
    a = rng.uniform(-1, 1, (BB, M, K)).astype(np.float32)
    _, b = _run(rng, [BB, K, N], B_STRIDES)
    out = np.full((BB, M, N), np.nan, np.float32)
    g.execute(cpu, {1: a, 2: b, 3: out})
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def _cudnn_matmul(device, torch, dev="cpu"):
    import hipdnn_iree.cudnn as cudnn
    handle = cudnn.create_handle(device=device)
    g = torch.Generator(device="cpu").manual_seed(7)
    a = torch.randn(BB, M, K, generator=g).to(dev)
    b_strided = torch.randn(BB, K, N, generator=g).to(dev)
    b = torch.as_strided(b_strided, (BB, K, N), (N * K, 1, N))       # cuDNN FE's test, at small sizes
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    A, B = graph.tensor_like(a), graph.tensor_like(b)
    C = graph.matmul(name="mm", A=A, B=B)
    C.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    graph.build([cudnn.heur_mode.A])
    c = torch.full((BB, M, N), float("nan"), device=dev)
    ws = torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device=dev)
    graph.execute({A: a, B: b, C: c}, ws)
    return c, torch.matmul(a, b)


def test_cudnn_facade_matmul_with_as_strided_b():
    torch = pytest.importorskip("torch")
    c, ref = _cudnn_matmul("cpu", torch)
    torch.testing.assert_close(c, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_cudnn_facade_matmul_with_as_strided_b_on_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    c, ref = _cudnn_matmul("cuda", torch, dev="cuda")
    torch.cuda.synchronize()
    torch.testing.assert_close(c, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_hd_matmul_with_aliasing_b_on_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    h = hd.create_handle(device="cuda")
    g = _matmul_graph().build(h)
    a = torch.randn(BB, M, K, device="cuda")
    b = torch.randn(BB * K * N, device="cuda").as_strided((BB, K, N), B_STRIDES)
    out = torch.full((BB, M, N), float("nan"), device="cuda")
    g.execute(h, {1: a, 2: b, 3: out})
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.matmul(a, b), rtol=1e-4, atol=1e-4)
