"""Knob F32_CONV_MATH (TF32 numerics for f32 convolutions, the cuDNN facade's default on CUDA)
and the matmul of operands widened from two different float types (it failed to compile for
CUDA), with the real IREE compiler: numbers on the CPU, compiles for cuda:sm_80."""
from __future__ import annotations

import numpy as np
import pytest

import hipdnn_iree as hd

F = hd.DataType.FLOAT


def _tf32(a: np.ndarray) -> np.ndarray:
    """Round to nearest TF32 (10 mantissa bits), ties to even: an independent numpy version."""
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def test_tf32_reference_ties_to_even():
    # 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even gives 1; 1 + 3 * 2^-11 gives 1 + 2^-9
    assert _tf32(np.array([1 + 2**-11], np.float32))[0] == 1.0
    assert _tf32(np.array([1 + 3 * 2**-11], np.float32))[0] == np.float32(1 + 2**-9)


def _conv_ref(x, w, pad):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, k, h + 2 * pad - r + 1, wd + 2 * pad - s + 1))
    for i in range(r):
        for j in range(s):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + out.shape[2], j:j + out.shape[3]], w[:, :, i, j])
    return out


def _conv_graph(handle, knobs):
    g = hd.Graph(name="conv", io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[2, 16, 7, 7])
    w = g.tensor(name="w", uid=2, dim=[8, 16, 3, 3])
    g.conv_fprop(x, w, padding=[1, 1]).set_output(True).set_uid(3)
    g.validate().build_operation_graph(handle)
    g.create_execution_plan("IREE_LINALG", knobs).check_support().build_plans()
    return g


def test_tf32_conv_rounds_operands_and_accumulates_in_f32(rng):
    h = hd.create_handle(device="local-task")
    x = rng.standard_normal((2, 16, 7, 7)).astype(np.float32)
    w = rng.standard_normal((8, 16, 3, 3)).astype(np.float32)
    want_ieee = _conv_ref(x.astype(np.float64), w.astype(np.float64), 1)
    want_tf32 = _conv_ref(_tf32(x).astype(np.float64), _tf32(w).astype(np.float64), 1)
    assert np.abs(want_tf32 - want_ieee).max() > 1e-3       # the two numerics differ measurably
    outs = {}
    for mode in ("IEEE", "TF32"):
        g = _conv_graph(h, {"F32_CONV_MATH": mode})
        y = np.zeros((2, 8, 7, 7), np.float32)
        g.execute(h, {1: x, 2: w, 3: y})
        outs[mode] = y
        mlir = g.get_execution_plan().context.mlir
        assert ("arith.bitcast" in mlir) == (mode == "TF32")
    assert np.abs(outs["IEEE"] - want_ieee).max() < 1e-4
    assert np.abs(outs["TF32"] - want_tf32).max() < 1e-4
    assert np.abs(outs["TF32"] - want_ieee).max() > 1e-3


def _tf32_row_conv(vals: np.ndarray) -> np.ndarray:
    """A 1x1 conv by 1 of the row ``vals`` (every value multiplied by 1) with F32_CONV_MATH=TF32."""
    h = hd.create_handle(device="local-task")
    n = vals.size
    g = hd.Graph(name="conv", io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[1, 1, 1, n])
    w = g.tensor(name="w", uid=2, dim=[1, 1, 1, 1])
    g.conv_fprop(x, w, padding=[0, 0]).set_output(True).set_uid(3)
    g.validate().build_operation_graph(h)
    g.create_execution_plan("IREE_LINALG", {"F32_CONV_MATH": "TF32"}).check_support().build_plans()
    y = np.zeros((1, 1, 1, n), np.float32)
    g.execute(h, {1: vals.astype(np.float32).reshape(1, 1, 1, n), 2: np.ones((1, 1, 1, 1), np.float32), 3: y})
    return y.ravel()


def test_tf32_conv_rounds_ties_to_even():
    vals = np.array([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 1 + 2**-12], np.float32)
    y = _tf32_row_conv(vals)
    np.testing.assert_array_equal(y, _tf32(vals))
    np.testing.assert_array_equal(y, np.array([1.0, 1 + 2**-9, -1.0, 1.0], np.float32))


def test_tf32_keeps_infinities_and_nans():
    y = _tf32_row_conv(np.array([np.inf, -np.inf, 1.0], np.float32))
    assert y[0] == np.inf and y[1] == -np.inf and y[2] == 1.0


def test_facade_picks_tf32_on_cuda_targets_only():
    torch = pytest.importorskip("torch")
    import hipdnn_iree.cudnn as cudnn

    def knobs(handle):
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, handle=handle)
        X = g.tensor(name="X", dim=[1, 4, 5, 5])
        W = g.tensor(name="W", dim=[4, 4, 3, 3])
        g.conv_fprop(X, W, padding=[1, 1]).set_output(True)
        g.validate().build_operation_graph().create_execution_plans([cudnn.heur_mode.A])
        return g.hd_graph.get_engine_config_at_index(0).knobs
    assert knobs(cudnn.create_handle(device="cpu")).get("F32_CONV_MATH", "AUTO") == "AUTO"
    cuda = cudnn.Handle(hd.create_handle(device=None, target="cuda:sm_80"))
    assert knobs(cuda)["F32_CONV_MATH"] == "TF32"
    assert torch is not None


def test_matmul_of_operands_widened_from_two_types_compiles_for_cuda():
    """bf16 -> f32 and f16 -> f32 casts feeding one f32 matmul: IREE 3.13 fused both casts into the
    contraction and failed to verify it for cuda:sm_80 (INTERNAL_ERROR before); cuDNN FE's
    test_mixed_precision_matmul builds this graph."""
    h = hd.create_handle(device=None, target="cuda:sm_80")
    g = hd.Graph(name="mixed", io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    a = g.tensor(name="a", uid=1, dim=[4, 16, 32], data_type=hd.DataType.BFLOAT16)
    b = g.tensor(name="b", uid=2, dim=[4, 32, 8], data_type=hd.DataType.HALF)
    af = g.pointwise(a, mode=hd.PointwiseMode.IDENTITY).set_data_type(F)
    bf = g.pointwise(b, mode=hd.PointwiseMode.IDENTITY).set_data_type(F)
    g.matmul(af, bf).set_output(True).set_uid(3).set_data_type(F)
    g.build(h)
    assert g.get_execution_plan() is not None
    assert "arith.addf" in g.get_mlir(target="cuda:sm_80")


def test_mixed_widened_matmul_numbers_on_cpu(rng):
    import ml_dtypes
    h = hd.create_handle(device="local-task")
    g = hd.Graph(name="mixed", io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    a = g.tensor(name="a", uid=1, dim=[2, 8, 16], data_type=hd.DataType.BFLOAT16)
    b = g.tensor(name="b", uid=2, dim=[2, 16, 4], data_type=hd.DataType.HALF)
    af = g.pointwise(a, mode=hd.PointwiseMode.IDENTITY).set_data_type(F)
    bf = g.pointwise(b, mode=hd.PointwiseMode.IDENTITY).set_data_type(F)
    g.matmul(af, bf).set_output(True).set_uid(3).set_data_type(F)
    g.build(h)
    av = rng.standard_normal((2, 8, 16)).astype(ml_dtypes.bfloat16)
    bv = rng.standard_normal((2, 16, 4)).astype(np.float16)
    c = np.zeros((2, 8, 4), np.float32)
    g.execute(h, {1: av, 2: bv, 3: c})
    want = av.astype(np.float64) @ bv.astype(np.float64)
    assert np.abs(c - want).max() < 1e-4
