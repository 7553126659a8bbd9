"""cuDNN FE's pointwise stride rule on the facade: an output whose strides the caller left unset
takes the strides of the first input with the same dims, gaps included (cuDNN FE's
node/pointwise.h). test_apply_rope.py relies on it: it writes the rotated halves in place into
views of a wider buffer (x[..., :n] with strides [T*hs, hs, 1]). Checked against float64 numpy."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hipdnn_iree.cudnn as cudnn  # noqa: E402
from test_cudnn_facade import _build, handle  # noqa: E402,F401  (the facade's CPU handle; FE's five build steps)


def _rope_graph(handle, x1, x2, cos1, cos2, sin1, sin2):
    g = cudnn.pygraph(handle=handle, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    ts = [g.tensor_like(t) for t in (x1, x2, cos1, cos2, sin1, sin2)]
    X1, X2, C1, C2, S1, S2 = ts
    Y1 = g.sub(a=g.mul(a=X1, b=C1), b=g.mul(a=X2, b=S1))
    Y2 = g.add(a=g.mul(a=X2, b=C2), b=g.mul(a=X1, b=S2))
    Y1.set_output(True).set_data_type(cudnn.data_type.HALF)
    Y2.set_output(True).set_data_type(cudnn.data_type.HALF)
    return g, ts, Y1, Y2


def test_rope_in_place_into_views(handle, rng):
    """test_apply_rope.py's graph, smaller: Y1/Y2 inherit x1's/x2's gapped strides and are written
    back into x itself (outputs bound to their inputs' buffers); the rest of x is left as it was."""
    B, T, hs, n = 6, 40, 24, 8
    x = torch.from_numpy(rng.standard_normal((B, T, hs))).to(torch.float16)
    theta = rng.uniform(0, 6.3, (1, T, n))
    cos, sin = torch.from_numpy(np.cos(theta)).float(), torch.from_numpy(np.sin(theta)).float()
    x1, x2 = x[..., : n // 2], x[..., n // 2: n]
    bufs = [x1, x2, cos[..., : n // 2], cos[..., n // 2:], sin[..., : n // 2], sin[..., n // 2:]]
    g, ts, Y1, Y2 = _rope_graph(handle, *bufs)
    ws = _build(g)
    assert Y1.get_stride() == list(x1.stride()) == [T * hs, hs, 1]
    assert Y2.get_stride() == list(x2.stride())
    x64 = x.double().numpy().copy()
    c1, c2, s1, s2 = (b.double().numpy() for b in bufs[2:])
    a, b = x64[..., : n // 2], x64[..., n // 2: n]
    ref = x64.copy()
    ref[..., : n // 2] = a * c1 - b * s1
    ref[..., n // 2: n] = b * c2 + a * s2
    g.execute({**dict(zip(ts, bufs)), Y1: x1, Y2: x2}, ws, handle=handle)
    np.testing.assert_allclose(x.double().numpy(), ref, atol=1e-2, rtol=1e-2)
    np.testing.assert_array_equal(x.double().numpy()[..., n:], x64[..., n:])   # untouched


def test_output_into_a_separate_gapped_buffer(handle, rng):
    """An output bound to its own gapped view (no aliasing): the inherited strides address it."""
    a = torch.from_numpy(rng.standard_normal((3, 5, 16))).float()[..., 2:9]
    b = torch.from_numpy(rng.standard_normal((3, 5, 7))).float()
    g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    A, Bt = g.tensor_like(a), g.tensor_like(b)
    Y = g.mul(a=A, b=Bt)
    Y.set_output(True)
    ws = _build(g)
    assert Y.get_stride() == [80, 16, 1]
    wide = torch.full((3, 5, 16), 7.0)
    g.execute({A: a, Bt: b, Y: wide[..., 2:9]}, ws, handle=handle)
    np.testing.assert_allclose(wide[..., 2:9].double().numpy(), a.double().numpy() * b.double().numpy(), rtol=1e-6)
    assert (wide[..., :2] == 7).all() and (wide[..., 9:] == 7).all()


def test_first_same_dims_input_wins_and_broadcast_is_passed_over(handle):
    """in_0 broadcast (dims differ): the strides come from in_1; an input with stride 0 on an axis
    of the same dims is passed over (the output falls back to packed strides)."""
    g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    A = g.tensor(name="A", dim=[1, 4, 6], stride=[24, 6, 1])
    Bt = g.tensor(name="B", dim=[2, 4, 6], stride=[1, 12, 2])
    Y = g.add(a=A, b=Bt)
    Y.set_output(True)
    C = g.tensor(name="C", dim=[2, 4, 6], stride=[0, 6, 1])
    Z = g.mul(a=C, b=C)
    Z.set_output(True)
    g.validate()
    assert Y.get_stride() == [1, 12, 2]
    assert Z.get_stride() == [24, 6, 1]


def test_explicit_strides_are_kept(handle):
    g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    A = g.tensor(name="A", dim=[2, 3], stride=[1, 2])
    Y = g.relu(input=A)
    Y.set_output(True).set_stride([3, 1])
    g.validate()
    assert Y.get_stride() == [3, 1]
