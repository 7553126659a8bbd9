"""Matmul numerics against the numpy reference: shapes, broadcast batch dims,
transposes through strides, dtypes and compute types."""
import numpy as np
import pytest

import hipdnn_iree as hd
from harness import compare_engines, filecheck, lowered_mlir, random_array

F, H, B = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16


def _t(dims, transposed=False):
    """Strides for dims, optionally with the last two axes swapped in memory."""
    from graph_ir.layout import packed_strides
    if not transposed:
        return list(packed_strides(dims))
    perm = list(range(len(dims) - 2)) + [len(dims) - 1, len(dims) - 2]
    ps = packed_strides([dims[p] for p in perm])
    strides = [0] * len(dims)
    for i, p in enumerate(perm):
        strides[p] = ps[i]
    return strides


CASES = [
    # a dims, b dims, transpose a, transpose b
    ([4, 8], [8, 5], False, False),
    ([33, 17], [17, 9], False, True),
    ([16, 32], [32, 8], True, False),
    ([3, 6, 7], [3, 7, 5], False, False),
    ([2, 3, 6, 7], [1, 1, 7, 5], False, False),     # broadcast batch dims
    ([1, 6, 7], [4, 7, 5], True, True),
    ([5, 4, 6], [6, 3], False, False),              # rank-2 B broadcast over batch
]


@pytest.mark.parametrize("dt", [F, H, B], ids=lambda d: d.name)
@pytest.mark.parametrize("a_dims,b_dims,ta,tb", CASES, ids=[f"{a}x{b}-{ta:d}{tb:d}" for a, b, ta, tb in CASES])
def test_matmul(cpu, rng, dt, a_dims, b_dims, ta, tb):
    sa, sb = _t(a_dims, ta), _t(b_dims, tb)
    A, Bm = random_array(a_dims, dt, rng, strides=sa), random_array(b_dims, dt, rng, strides=sb)

    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        a = g.tensor(name="A", uid=1, dim=a_dims, stride=sa)
        b = g.tensor(name="B", uid=2, dim=b_dims, stride=sb)
        c = g.matmul(a, b).set_output(True).set_uid(3)
        return g, {3: c}

    compare_engines(build, {1: A, 2: Bm}, cpu)


def test_matmul_bias_relu_broadcast(cpu, rng):
    X, W, bias = random_array([2, 16, 32], F, rng), random_array([32, 24], F, rng), random_array([1, 1, 24], F, rng)

    def build():
        g = hd.Graph(io_data_type=F)
        x, w = g.tensor(name="X", uid=1, dim=[2, 16, 32]), g.tensor(name="W", uid=2, dim=[32, 24])
        b = g.tensor(name="bias", uid=3, dim=[1, 1, 24])
        y = g.pointwise(g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.RELU_FWD)
        y.set_output(True).set_uid(4)
        return g, {4: y}

    got, want, _ = compare_engines(build, {1: X, 2: W, 3: bias}, cpu)
    # independent check of the reference on this case
    np.testing.assert_allclose(want[4], np.maximum(X @ W + bias, 0), rtol=1e-5, atol=1e-5)


def test_matmul_golden_ir(cpu):
    g = hd.Graph(io_data_type=H, compute_data_type=F)
    a = g.tensor(name="A", uid=1, dim=[4, 8])
    b = g.tensor(name="B", uid=2, dim=[8, 5], stride=[1, 8])
    g.matmul(a, b).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: func.func @main(%[[A:.+]]: tensor<4x8xf16>, %[[B:.+]]: tensor<5x8xf16>, %[[C:.+]]: tensor<4x5xf16> {iree.abi.output = 0 : index}) -> (tensor<4x5xf16>)
// CHECK-SAME: iree.reflection = {hipdnn_iree.abi =
// CHECK: %[[BT:.+]] = linalg.transpose ins(%[[B]] : tensor<5x8xf16>) {{.*}} permutation = [1, 0]
// CHECK: %[[ACC:.+]] = linalg.fill {{.*}} -> tensor<4x5xf32>
// CHECK: %[[MM:.+]] = linalg.matmul ins(%[[A]], %[[BT]] : tensor<4x8xf16>, tensor<8x5xf16>) outs(%[[ACC]] : tensor<4x5xf32>)
// CHECK: linalg.generic
// CHECK: arith.truncf {{.*}} : f32 to f16
// CHECK: return
""")


def test_batched_broadcast_uses_generic_contraction(cpu):
    g = hd.Graph(io_data_type=F)
    a = g.tensor(name="A", uid=1, dim=[2, 3, 6, 7])
    b = g.tensor(name="B", uid=2, dim=[1, 1, 7, 5])
    g.matmul(a, b).set_output(True).set_uid(3)
    filecheck(lowered_mlir(g, cpu), r"""
// CHECK: linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (0, 0, d4, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
// CHECK: arith.mulf
// CHECK: arith.addf
""")
