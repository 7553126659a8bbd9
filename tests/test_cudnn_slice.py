"""cuDNN FE's ``pygraph.slice`` on the facade: a graph input's slice is a view of the caller's
buffer (cuDNN FE's pointer-arithmetic form): Python slices with starts, stops, positive steps and
negative indices, torch and numpy buffers, checked against float64 numpy; a slice of an op's result
is refused with NOT_SUPPORTED (hipDNN's graph has no slice node)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hipdnn_iree as hd  # noqa: E402
import hipdnn_iree.cudnn as cudnn  # noqa: E402
from test_cudnn_facade import _build, handle  # noqa: E402,F401  (the facade's CPU handle; FE's five build steps)


def test_matmul_of_slices_like_test_slice(handle, rng):
    """test_slice.py's graph (bf16 operands, FLOAT compute), smaller."""
    a = torch.from_numpy(rng.standard_normal((6, 12, 20))).to(torch.bfloat16)
    b = torch.from_numpy(rng.standard_normal((6, 20, 10))).to(torch.bfloat16)
    sa = [slice(2, None), slice(5, None), slice(None)]
    sb = [slice(2, None), slice(None), slice(3, None)]
    g = cudnn.pygraph(handle=handle)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.matmul(A=g.slice(A, sa, name="A_slice"), B=g.slice(B, sb, name="B_slice"),
                 compute_data_type=cudnn.data_type.FLOAT)
    C.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    ws = _build(g)
    ref = a[tuple(sa)].double().numpy() @ b[tuple(sb)].double().numpy()
    assert C.get_dim() == list(ref.shape)
    c = torch.zeros(ref.shape, dtype=torch.bfloat16)
    g.execute({A: a, B: b, C: c}, ws, handle=handle)
    np.testing.assert_allclose(c.double().numpy(), ref, atol=0.15, rtol=2e-2)


@pytest.mark.parametrize("sl", [
    (slice(1, 4), slice(0, 9, 2), slice(None)),
    (slice(-3, None), slice(None, None, 3), slice(2, -1)),
    (slice(None, None, 2),),                                   # trailing axes whole
])
def test_slice_steps_and_negative_indices(handle, rng, sl):
    x = torch.from_numpy(rng.standard_normal((5, 9, 7))).float()
    g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor_like(x)
    S = g.slice(X, list(sl))
    Y = g.mul(a=S, b=2.0)
    ref = x.double().numpy()[sl] * 2
    # NOTE: unset, Y would take S's strides (cuDNN's pointwise rule): gapped, the input's buffer's
    Y.set_output(True).set_stride(list(torch.empty(ref.shape).stride()))
    ws = _build(g)
    assert S.get_dim() == list(ref.shape)
    assert S.get_stride() == list(x[sl].stride())
    y = torch.empty(ref.shape)
    g.execute({X: x, Y: y}, ws, handle=handle)
    np.testing.assert_allclose(y.double().numpy(), ref, rtol=1e-6)


def test_slice_of_a_strided_input_and_numpy_buffers(handle, rng):
    """The input is itself a transposed view; buffers are numpy arrays; the same input is used
    whole and sliced."""
    base = rng.standard_normal((8, 6)).astype(np.float32)
    x = base.T                                                  # dims [6, 8], strides [1, 6]
    g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(name="X", dim=[6, 8], stride=[1, 6], data_type=cudnn.data_type.FLOAT)
    S = g.slice(X, [slice(1, 5), slice(2, 8, 3)])
    Y = g.add(a=S, b=S)
    Z = g.reduction(input=X, mode=cudnn.reduction_mode.ADD)
    Y.set_output(True).set_stride([2, 1])
    Z.set_output(True).set_dim([1, 1]).set_stride([1, 1])
    ws = _build(g)
    y = np.empty((4, 2), np.float32)
    z = np.empty((1, 1), np.float32)
    g.execute({X: x, Y: y, Z: z}, ws, handle=handle)
    np.testing.assert_allclose(y, 2 * x.astype(np.float64)[1:5, 2:8:3], rtol=1e-6)
    np.testing.assert_allclose(z[0, 0], x.astype(np.float64).sum(), rtol=1e-5)


def test_slice_of_an_op_result_is_not_supported(handle):
    g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(name="X", dim=[4, 4], stride=[4, 1], data_type=cudnn.data_type.FLOAT)
    R = g.relu(input=X)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="slice.*not a graph input"):
        g.slice(R, [slice(0, 2)])
    with pytest.raises(hd.HipdnnError) as e:
        g.slice(R, [slice(0, 2)])
    assert e.value.status == hd.Status.NOT_SUPPORTED


@pytest.mark.parametrize("sl, what", [
    ([slice(None, None, -1)], "steps must be positive"),
    ([slice(3, 1)], "is empty"),
    ([slice(None)] * 3, "3 slices for a tensor of rank 2"),
    ([1], "must be a Python slice"),
])
def test_bad_slices_are_bad_param(handle, sl, what):
    g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(name="X", dim=[4, 4], stride=[4, 1], data_type=cudnn.data_type.FLOAT)
    with pytest.raises(hd.HipdnnError, match=what) as e:
        g.slice(X, sl)
    assert e.value.status == hd.Status.BAD_PARAM
