"""Strided views that are not a dense permutation: packed QKV, sliced inputs, output slots
in bigger buffers. Numbers against float64 references computed here; CPU zero-copy checked."""
import numpy as np
import pytest

import hipdnn_iree as hd
from harness import raises

F = hd.DataType.FLOAT
B, S, H, D = 2, 16, 2, 8          # H * D * 4 bytes = 64: each of Q, K, V starts 64-byte aligned
QKV_STRIDES = [S * 3 * H * D, D, 3 * H * D, 1]          # dims [B, H, S, D] inside [B, S, 3, H, D]
SLOT_STRIDES = [S * 2 * H * D, D, 2 * H * D, 1]         # dims [B, H, S, D] inside [B, S, 2, H, D]


def _attention_graph(scale=0.25, out_strides=SLOT_STRIDES):
    g = hd.Graph(name="packed_qkv", io_data_type=F)
    q, k, v = (g.tensor(name=n, uid=u, dim=[B, H, S, D], stride=QKV_STRIDES) for n, u in (("q", 1), ("k", 2), ("v", 3)))
    g.sdpa(q, k, v, attn_scale=scale).set_output(True).set_uid(4).set_stride(out_strides)
    return g


def _sdpa_ref(q, k, v, scale):
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


def _packed(rng):
    qkv = hd.empty_aligned((B, S, 3, H, D), np.float32)
    qkv[...] = rng.uniform(-1, 1, qkv.shape)
    return qkv, [qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3)]


@pytest.fixture(scope="module")
def attention(cpu):
    return _attention_graph().build(cpu)


def test_packed_qkv_sdpa_into_an_output_slot(cpu, attention, rng):
    qkv, (q, k, v) = _packed(rng)
    big = np.full((B, S, 2, H, D), 5.0, np.float32)
    out = big[:, :, 1].transpose(0, 2, 1, 3)
    attention.execute(cpu, {1: q, 2: k, 3: v, 4: out})
    np.testing.assert_allclose(out, _sdpa_ref(q, k, v, 0.25), rtol=1e-5, atol=1e-5)
    assert np.all(big[:, :, 0] == 5.0), "the elements around the output slot must keep their values"


def test_packed_qkv_from_torch_views(cpu, attention, rng):
    torch = pytest.importorskip("torch")
    qkv = torch.from_numpy(rng.uniform(-1, 1, (B, S, 3, H, D)).astype(np.float32))
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))     # torch views, no copies
    big = torch.full((B, S, 2, H, D), -3.0)
    out = big[:, :, 0].transpose(1, 2)
    attention.execute(cpu, {1: q, 2: k, 3: v, 4: out})
    ref = _sdpa_ref(q.numpy(), k.numpy(), v.numpy(), 0.25)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)
    assert bool((big[:, :, 1] == -3.0).all())


def test_strided_inputs_are_imported_in_place(cpu, attention, rng, monkeypatch):
    from hipdnn_iree.plugins.iree_linalg import runtime
    seen = []
    real = runtime.LoadedModule.host_view
    monkeypatch.setattr(runtime.LoadedModule, "host_view",
                        lambda self, arr: seen.append(arr.__array_interface__["data"][0]) or real(self, arr))
    qkv, (q, k, v) = _packed(rng)
    out = hd.empty_aligned((B, S, 2, H, D), np.float32)[:, :, 1].transpose(0, 2, 1, 3)
    attention._plan.context.view_cache.clear()
    attention.execute(cpu, {1: q, 2: k, 3: v, 4: out})
    ptrs = [t.__array_interface__["data"][0] for t in (q, k, v, out)]
    assert seen == ptrs, "each strided view is imported where it lies: no staging copy"


def test_restored_plan_and_reference_engine_read_strided_views(cpu, attention, rng):
    qkv, (q, k, v) = _packed(rng)
    restored = hd.Graph.from_compiled_plan(cpu, attention.serialize_compiled_plan())
    ref_graph = _attention_graph()
    ref_graph.set_preferred_engine_id_ext("NUMPY_REFERENCE")
    ref_graph.build(cpu)
    outs = []
    for g in (restored, ref_graph):
        big = np.full((B, S, 2, H, D), 1.5, np.float32)
        g.execute(cpu, {1: q, 2: k, 3: v, 4: big[:, :, 1].transpose(0, 2, 1, 3)})
        assert np.all(big[:, :, 0] == 1.5)
        outs.append(big[:, :, 1].transpose(0, 2, 1, 3))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    t = {t.uid: t for t in restored.get_compiled_plan_tensors()}
    assert list(t[1].strides) == QKV_STRIDES and list(t[4].strides) == SLOT_STRIDES


def test_sliced_input_and_memory_image(cpu, rng):
    """A column slice of a wider activation (padded rows), given as a view or as its memory run."""
    wide = rng.uniform(-1, 1, (32, 40)).astype(np.float32)
    x = wide[:, 4:28]                                       # dims [32, 24], strides [40, 1]
    g = hd.Graph(io_data_type=F)
    xt = g.tensor(name="x", uid=1, dim=[32, 24], stride=[40, 1])
    w = g.tensor(name="w", uid=2, dim=[24, 16])
    y = g.pointwise(g.matmul(xt, w), mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_uid(3)
    g.build(cpu)
    wv = rng.uniform(-1, 1, (24, 16)).astype(np.float32)
    want = np.maximum(x.astype(np.float64) @ wv, 0)
    for buf in (x, wide.reshape(-1)[4:4 + 31 * 40 + 24]):   # the view, then its run of span elements
        out = np.zeros((32, 16), np.float32)
        g.execute(cpu, {1: buf, 2: wv, 3: out})
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    raises(hd.Status.BAD_PARAM, g.execute, cpu, {1: np.ascontiguousarray(x), 2: wv, 3: np.zeros((32, 16), np.float32)},
           match="do not match the declared strides")


def test_outputs_may_not_alias_what_they_are_computed_from(cpu, attention, rng):
    qkv, (q, k, v) = _packed(rng)
    before = qkv.copy()
    # the output written over V's elements: refused, nothing written
    e = raises(hd.Status.BAD_PARAM, attention.execute, cpu,
               {1: q, 2: k, 3: v, 4: np.lib.stride_tricks.as_strided(v, strides=[4 * x for x in SLOT_STRIDES])},
               match="alias")
    assert np.array_equal(qkv, before), str(e)
    # two strided outputs interleaved in one buffer: refused (a strided output is written span-wide)
    g = hd.Graph(io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[4, 8])
    g.pointwise(x, mode=hd.PointwiseMode.NEG).set_output(True).set_uid(2).set_stride([16, 1])
    g.pointwise(x, mode=hd.PointwiseMode.ABS).set_output(True).set_uid(3).set_stride([16, 1])
    g.build(cpu)
    pair = np.zeros((4, 16), np.float32)
    raises(hd.Status.BAD_PARAM, g.execute, cpu, {1: np.ones((4, 8), np.float32), 2: pair[:, :8], 3: pair[:, 8:]},
           match="lie in one span")
    # ... but separate slots of separate buffers are fine
    a, b = np.zeros((4, 16), np.float32), np.zeros((4, 16), np.float32)
    xs = rng.uniform(-1, 1, (4, 8)).astype(np.float32)
    g.execute(cpu, {1: xs, 2: a[:, :8], 3: b[:, 8:]})
    np.testing.assert_array_equal(a[:, :8], -xs)
    np.testing.assert_array_equal(b[:, 8:], np.abs(xs))
    assert not a[:, 8:].any() and not b[:, :8].any()


@pytest.mark.parametrize("target", ["cuda:sm_80", "rocm:gfx942"])
def test_packed_qkv_compiles_for_gpus(target):
    h = hd.create_handle(device=None, target=target)
    g = _attention_graph().build(h)
    assert len(g.serialize_compiled_plan()) > 1000
