"""Zero-copy execution: host arrays imported without copies on the CPU, DLPack objects accepted,
device mismatches rejected; GPU-marked tests skip cleanly without a GPU."""
import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.plugin_sdk.buffers import BoundTensor, bind_device_pack
from hipdnn_iree.plugins.iree_linalg import runtime as _iree_rt

S = hd.Status


class DLPackOnly:
    """Exposes only the DLPack protocol (like a framework tensor), backed by a numpy array."""

    def __init__(self, arr, device_type=1):
        self.arr, self.device_type = arr, device_type

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return (self.device_type, 0)


@pytest.fixture(scope="module")
def plan():
    h = hd.create_handle()
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(uid=1, dim=[64, 32]), g.tensor(uid=2, dim=[32, 48])
    g.pointwise(g.matmul(a, b), mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3)
    g.build(h)
    return h, hd.Graph.from_compiled_plan(h, g.serialize_compiled_plan())


def test_aligned_arrays_are_used_in_place(plan, monkeypatch):
    h, r = plan
    a, b, c = hd.empty_aligned((64, 32)), hd.empty_aligned((32, 48)), hd.empty_aligned((64, 48))
    rng = np.random.default_rng()
    a[...] = rng.standard_normal(a.shape)
    b[...] = rng.standard_normal(b.shape)
    c[...] = np.nan
    copies = []
    real = _iree_rt.LoadedModule.host_view

    def spy(self, arr):
        copies.append(not any(np.shares_memory(arr, x) for x in (a, b, c)))   # a staging copy?
        return real(self, arr)

    monkeypatch.setattr(_iree_rt.LoadedModule, "host_view", spy)
    r.execute(h, {1: a, 2: b, 3: c})
    assert copies == [False, False, False]       # all three imported, none copied
    np.testing.assert_allclose(c, np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)


def test_unaligned_and_readonly_arrays_are_copied_correctly(plan):
    h, r = plan
    rng = np.random.default_rng()
    base = np.zeros(64 * 32 + 1, np.float32)
    a = base[1:].reshape(64, 32)                 # 4-byte misaligned
    a[...] = rng.standard_normal(a.shape)
    b = rng.standard_normal((32, 48)).astype(np.float32)
    b.setflags(write=False)
    out_base = np.zeros(64 * 48 + 1, np.float32)
    c = out_base[1:].reshape(64, 48)
    r.execute(h, {1: a, 2: b, 3: c})
    np.testing.assert_allclose(c, np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)
    assert out_base[0] == 0.0                    # nothing written outside the output


def test_dlpack_objects_on_cpu(plan):
    h, r = plan
    a = np.random.default_rng().standard_normal((64, 32)).astype(np.float32)
    b = np.random.default_rng().standard_normal((32, 48)).astype(np.float32)
    c = hd.empty_aligned((64, 48))
    r.execute(h, {1: DLPackOnly(a), 2: DLPackOnly(b), 3: c})
    np.testing.assert_allclose(c, np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)


def test_device_memory_on_cpu_handle_is_rejected(plan):
    h, r = plan
    c = np.full((64, 48), 5.0, np.float32)
    with pytest.raises(hd.HipdnnError) as ei:
        r.execute(h, {1: DLPackOnly(np.zeros((64, 32), np.float32), device_type=2),
                      2: np.zeros((32, 48), np.float32), 3: c})
    assert ei.value.status == S.BAD_PARAM and "CUDA" in str(ei.value) and "CPU" in str(ei.value)
    assert np.all(c == 5.0)


def test_host_memory_on_gpu_handle_is_rejected():
    t = [BoundTensor(1, "x", "input", hd.DataType.FLOAT, (4, 4), (4, 1))]
    with pytest.raises(hd.HipdnnError) as ei:
        bind_device_pack(t, {1: np.zeros((4, 4), np.float32)}, "cuda")
    assert ei.value.status == S.BAD_PARAM and "host memory" in str(ei.value)
    with pytest.raises(hd.HipdnnError) as ei:
        bind_device_pack(t, {1: DLPackOnly(np.zeros((4, 4), np.float32), device_type=1)}, "cuda")
    assert "host (CPU) memory" in str(ei.value)


def _cuda_handle():
    try:
        return hd.create_handle(device="cuda")
    except hd.HipdnnError:
        return None


@pytest.mark.gpu
def test_torch_cuda_tensors_in_place():
    torch = pytest.importorskip("torch")
    h = _cuda_handle()
    if h is None or not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(uid=1, dim=[128, 64]), g.tensor(uid=2, dim=[64, 96], stride=[1, 64])
    g.matmul(a, b).set_output(True).set_uid(3)
    g.build(h)
    r = hd.Graph.from_compiled_plan(h, g.serialize_compiled_plan())
    x = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(96, 64, device="cuda", dtype=torch.float16).t()   # strides (1, 64)
    y = torch.full((128, 96), float("nan"), device="cuda", dtype=torch.float16)
    ptr = y.data_ptr()
    r.execute(h, {1: x, 2: w, 3: y})
    assert y.data_ptr() == ptr
    torch.testing.assert_close(y.float(), (x.float() @ w.float()), rtol=2e-2, atol=2e-2)


def test_repeated_calls_reuse_imports_and_see_new_contents(plan, monkeypatch):
    """The same aligned buffers twice: the second call skips checks/imports but reads the new values."""
    h, r = plan
    a, b, c = hd.empty_aligned((64, 32)), hd.empty_aligned((32, 48)), hd.empty_aligned((64, 48))
    rng = np.random.default_rng()
    for i in range(3):
        a[...] = rng.standard_normal(a.shape)
        b[...] = rng.standard_normal(b.shape)
        r.execute(h, {1: a, 2: b, 3: c})
        np.testing.assert_allclose(c, np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)
        if i == 0:   # from now on every call must come from the cache
            monkeypatch.setattr(_iree_rt.LoadedModule, "host_view", lambda *a: pytest.fail("re-imported"))
    # copied (unaligned) inputs are never cached: new contents are seen
    monkeypatch.undo()
    base = np.zeros(64 * 32 + 1, np.float32)
    ua = base[1:].reshape(64, 32)
    for _ in range(2):
        ua[...] = rng.standard_normal(ua.shape)
        r.execute(h, {1: ua, 2: b, 3: c})
        np.testing.assert_allclose(c, np.maximum(ua.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)
