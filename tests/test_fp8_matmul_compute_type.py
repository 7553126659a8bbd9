"""An FP8 matmul with no compute type set accumulates in f32 (FLOAT), as docs/api.md says, through
``hd.Graph`` and through the cuDNN facade: it builds and matches a float64 matmul of the
FP8-rounded inputs. (It used to default to INT32, as if FP8 were an integer type, and every such
matmul failed to build with NOT_SUPPORTED "integer compute type (i32) needs integer operands".)"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import hipdnn_iree as hd
from graph_ir._fbs.graph_generated import DataType as D
from graph_ir.desc import GraphDesc, NodeDesc, default_compute_type

F8 = {hd.DataType.FP8_E4M3: ml_dtypes.float8_e4m3fn, hd.DataType.FP8_E5M2: ml_dtypes.float8_e5m2}
PAIRS = [(hd.DataType.FP8_E4M3, hd.DataType.FP8_E4M3), (hd.DataType.FP8_E5M2, hd.DataType.FP8_E5M2),
         (hd.DataType.FP8_E4M3, hd.DataType.FP8_E5M2)]


def _fp8(rng, shape, dt):
    """Random values rounded to the FP8 type (the buffer), and their exact values in float64."""
    codes = (rng.standard_normal(shape) * 2.0).astype(F8[dt])
    return codes, codes.astype(np.float64)


@pytest.mark.parametrize("ta,tb", PAIRS, ids=lambda t: t.name)
def test_hd_graph_fp8_matmul_defaults_to_float(cpu, rng, ta, tb):
    B, M, K, N = 2, 5, 24, 7
    g = hd.Graph(name="fp8_mm")
    a = g.tensor(name="A", uid=1, dim=[B, M, K], data_type=ta)
    b = g.tensor(name="B", uid=2, dim=[B, K, N], data_type=tb)
    y = g.matmul(a, b)                                # no compute_data_type, none on the graph
    y.set_output(True).set_uid(3).set_data_type(hd.DataType.FLOAT)
    g.build(cpu)
    xa, ra = _fp8(rng, (B, M, K), ta)
    xb, rb = _fp8(rng, (B, K, N), tb)
    out = np.full((B, M, N), np.nan, np.float32)
    g.execute(cpu, {1: xa, 2: xb, 3: out})
    np.testing.assert_allclose(out, ra @ rb, rtol=1e-5, atol=1e-5)


def test_cudnn_fp8_matmul_defaults_to_float(rng):
    import hipdnn_iree.cudnn as cudnn
    M, K, N = 6, 32, 5
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FP8_E4M3)      # no compute_data_type anywhere
    A = g.tensor(name="A", dim=[1, M, K], stride=[M * K, K, 1], data_type=cudnn.data_type.FP8_E4M3)
    Bt = g.tensor(name="B", dim=[1, K, N], stride=[K * N, 1, K], data_type=cudnn.data_type.FP8_E4M3)  # col-major
    C = g.matmul(A, Bt)
    C.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    g.build([cudnn.heur_mode.A])
    xa, ra = _fp8(rng, (1, M, K), hd.DataType.FP8_E4M3)
    xbt, rbt = _fp8(rng, (1, N, K), hd.DataType.FP8_E4M3)
    xb = xbt.transpose(0, 2, 1)                                   # dims [1, K, N], strides [K*N, 1, K]
    out = np.full((1, M, N), np.nan, np.float32)
    g.execute({A: xa, Bt: xb, C: out})
    np.testing.assert_allclose(out, ra @ rbt.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ta,tb,want", [
    (D.FP8_E4M3, D.FP8_E4M3, D.FLOAT), (D.FP8_E5M2, D.FP8_E4M3, D.FLOAT), (D.FP4_E2M1, D.FP4_E2M1, D.FLOAT),
    (D.FP8_E4M3, D.INT8, D.FLOAT), (D.INT8, D.FP8_E4M3, D.FLOAT), (D.INT8, D.HALF, D.FLOAT),
    (D.INT8, D.INT8, D.INT32), (D.UINT8, D.INT8, D.INT32), (D.HALF, D.HALF, D.FLOAT)])
def test_default_compute_type_rule(ta, tb, want):
    """The rule hipDNN's graph is stamped with: INT32 only when no operand is a float type
    (FP8/FP4/E8M0 are float types)."""
    from graph_ir.desc import MatmulAttrs, TensorDesc
    ts = [TensorDesc(uid=1, name="a", dims=(1, 2, 3), strides=(6, 3, 1), data_type=ta),
          TensorDesc(uid=2, name="b", dims=(1, 3, 2), strides=(6, 2, 1), data_type=tb),
          TensorDesc(uid=3, name="y", dims=(1, 2, 2), strides=(4, 2, 1), data_type=D.FLOAT)]
    n = NodeDesc(name="mm", compute_data_type=D.UNSET, attrs=MatmulAttrs(a_uid=1, b_uid=2, c_uid=3))
    g = GraphDesc(name="g", io_data_type=D.UNSET, intermediate_data_type=D.UNSET, compute_data_type=D.UNSET,
                  tensors=tuple(ts), nodes=(n,))
    assert default_compute_type(g, n) == want
