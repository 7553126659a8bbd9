"""cuDNN FE's flexible-graph SDPA (``sdpa(score_mod=callback)``) on the facade: the callback gets the
graph and the scaled scores and builds pointwise nodes on them (masks from gen_index and
comparisons, softcapping); the attention is composed from matmul, pointwise and reduction nodes.
Written like cuDNN FE's test_flexible_sdpa.py, checked against float64 numpy. What the composition
cannot do (grouped-query heads, score_mod_bprop in the backward pass) is NOT_SUPPORTED."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hipdnn_iree as hd  # noqa: E402
import hipdnn_iree.cudnn as cudnn  # noqa: E402
from test_cudnn_facade import _build, handle  # noqa: E402,F401  (the facade's CPU handle; FE's five build steps)


def _qkv(rng, b, h, s_q, s_kv, d, dtype=torch.float16):
    """BSHD-interleaved tensors as the cuDNN FE file makes them (strides [S*H*D, D, H*D, 1])."""
    def one(s):
        return torch.from_numpy(rng.standard_normal(b * s * h * d)).to(dtype).as_strided(
            (b, h, s, d), (s * h * d, d, h * d, 1))
    return one(s_q), one(s_kv), one(s_kv)


def _ref(q, k, v, scale, mod, bias=None):
    q, k, v = (t.double().numpy() for t in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * scale
    if bias is not None:
        s = s + bias
    s = mod(s)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    return (e / e.sum(-1, keepdims=True)) @ v, m + np.log(e.sum(-1, keepdims=True))


def _graph(handle):
    return cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                         compute_data_type=cudnn.data_type.FLOAT, handle=handle)


def _pbv(g, name, value, dtype):
    cpu = torch.full((1, 1, 1, 1), value, dtype=dtype)
    return g.tensor(name=name, dim=cpu.size(), stride=cpu.stride(), is_pass_by_value=True, data_type=cpu.dtype), cpu


def arrow_mask(g, score, row_bound, col_bound, diag_0, diag_1, neg_inf):
    """test_flexible_sdpa.py's arrow mask: keep rows < row_bound, columns < col_bound and the band
    diag_0 <= row - col <= diag_1 (INT32 indices and bounds, BOOLEAN compares)."""
    row = g.gen_index(input=score, axis=2)
    row.set_data_type(cudnn.data_type.INT32)
    col = g.gen_index(input=score, axis=3)
    col.set_data_type(cudnn.data_type.INT32)

    def lt(index, bound):
        m = g.cmp_lt(input=index, comparison=bound, compute_data_type=cudnn.data_type.BOOLEAN)
        m.set_data_type(cudnn.data_type.INT32)
        return m
    diff = g.sub(a=row, b=col, compute_data_type=cudnn.data_type.INT32)
    diff.set_data_type(cudnn.data_type.INT32)
    ge = g.cmp_ge(input=diff, comparison=diag_0, compute_data_type=cudnn.data_type.BOOLEAN)
    ge.set_data_type(cudnn.data_type.INT32)
    le = g.cmp_le(input=diff, comparison=diag_1, compute_data_type=cudnn.data_type.BOOLEAN)
    le.set_data_type(cudnn.data_type.INT32)
    band = g.logical_and(ge, le, compute_data_type=cudnn.data_type.BOOLEAN)
    band.set_data_type(cudnn.data_type.INT32)
    mask = g.logical_or(lt(row, row_bound), lt(col, col_bound), compute_data_type=cudnn.data_type.BOOLEAN)
    mask.set_data_type(cudnn.data_type.INT32)
    mask = g.logical_or(mask, band, compute_data_type=cudnn.data_type.BOOLEAN)
    mask.set_data_type(cudnn.data_type.INT32)
    return g.binary_select(input0=score, input1=neg_inf, mask=mask)


def test_arrow_mask(handle, rng):
    b, h, s, d = 2, 3, 24, 16
    q_t, k_t, v_t = _qkv(rng, b, h, s, s, d)
    o_t = torch.empty(b * s * h * d, dtype=torch.float16).as_strided(q_t.shape, q_t.stride())
    g = _graph(handle)
    q, k, v = g.tensor_like(q_t), g.tensor_like(k_t), g.tensor_like(v_t)
    neg_inf, neg_inf_cpu = _pbv(g, "neg_inf", -1e9, torch.float32)
    bounds = [_pbv(g, n, val, torch.int32) for n, val in (("row", 2), ("col", 3), ("d0", 1), ("d1", 2))]
    scale = 1 / np.sqrt(d)
    o, stats = g.sdpa(name="sdpa", q=q, k=k, v=v, generate_stats=False, attn_scale=scale,
                      score_mod=partial(arrow_mask, row_bound=bounds[0][0], col_bound=bounds[1][0],
                                        diag_0=bounds[2][0], diag_1=bounds[3][0], neg_inf=neg_inf))
    assert stats is None
    o.set_output(True).set_dim(list(q_t.shape)).set_stride(list(q_t.stride()))
    ws = _build(g)
    g.execute({q: q_t, k: k_t, v: v_t, o: o_t, neg_inf: neg_inf_cpu, **{t: c for t, c in bounds}}, ws)
    r, c = np.arange(s)[:, None], np.arange(s)[None, :]
    keep = (r < 2) | (c < 3) | ((r - c >= 1) & (r - c <= 2))
    ref, _ = _ref(q_t, k_t, v_t, scale, lambda x: np.where(keep, x, -1e9))
    np.testing.assert_allclose(o_t.double().numpy(), ref, atol=2e-3, rtol=2e-3)


def softcap(g, score, cap):
    return g.mul(a=g.tanh(input=g.div(a=score, b=cap)), b=cap)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softcap_with_stats_bias_and_causal(handle, rng, dtype):
    """score_mod after the scale, bias and causal mask (cuDNN's order); Stats of the modified scores."""
    b, h, s_q, s_kv, d = 2, 2, 12, 12, 8
    q_t, k_t, v_t = _qkv(rng, b, h, s_q, s_kv, d, dtype)
    bias_t = torch.from_numpy(rng.standard_normal((1, h, s_q, s_kv))).to(dtype)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF if dtype == torch.float16 else cudnn.data_type.BFLOAT16,
                      intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT,
                      handle=handle)
    q, k, v, bias = (g.tensor_like(t) for t in (q_t, k_t, v_t, bias_t))
    cap, cap_cpu = _pbv(g, "cap", 0.8, torch.float32)
    o, stats = g.sdpa(q=q, k=k, v=v, generate_stats=True, attn_scale=0.5, bias=bias, use_causal_mask=True,
                      score_mod=partial(softcap, cap=cap))
    o.set_output(True).set_dim([b, h, s_q, d]).set_stride([h * s_q * d, s_q * d, d, 1])
    stats.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    ws = _build(g)
    assert stats.get_dim() == [b, h, s_q, 1]
    o_t = torch.empty(b, h, s_q, d, dtype=dtype)
    st_t = torch.empty(b, h, s_q, 1)
    g.execute({q: q_t, k: k_t, v: v_t, bias: bias_t, cap: cap_cpu, o: o_t, stats: st_t}, ws)
    causal = np.tril(np.ones((s_q, s_kv), bool))
    ref, ref_st = _ref(q_t, k_t, v_t, 0.5,
                       lambda x: 0.8 * np.tanh(np.where(causal, x, -1e30) / 0.8), bias_t.double().numpy())
    tol = 2e-3 if dtype == torch.float16 else 2e-2
    np.testing.assert_allclose(o_t.double().numpy(), ref, atol=tol, rtol=tol)
    np.testing.assert_allclose(st_t.double().numpy(), ref_st, atol=1e-4, rtol=1e-4)


def document_mask(g, score, doc, doc_t, neg_inf):
    """test_flexible_sdpa.py's document mask: a score is kept when its row and column belong to the
    same document (INT32 document ids broadcast along rows and columns)."""
    col = g.gen_index(input=score, axis=3, compute_data_type=cudnn.data_type.INT32)
    col.set_data_type(cudnn.data_type.INT32)
    ones = g.cmp_le(input=col, comparison=col, compute_data_type=cudnn.data_type.FLOAT)
    ones.set_data_type(cudnn.data_type.INT32)
    rows = g.scale(input=ones, scale=doc, compute_data_type=cudnn.data_type.FLOAT)
    rows.set_data_type(cudnn.data_type.INT32)
    cols = g.scale(input=ones, scale=doc_t, compute_data_type=cudnn.data_type.FLOAT)
    cols.set_data_type(cudnn.data_type.INT32)
    same = g.cmp_eq(input=rows, comparison=cols, compute_data_type=cudnn.data_type.FLOAT)
    same.set_data_type(cudnn.data_type.INT32)
    return g.binary_select(input0=score, input1=neg_inf, mask=same)


def test_document_mask(handle, rng):
    s, d = 16, 32
    q_t, k_t, v_t = _qkv(rng, 1, 1, s, s, d)
    doc_t = torch.from_numpy(np.sort(rng.integers(0, 4, s)).astype(np.int32)).reshape(1, 1, s, 1)
    g = _graph(handle)
    q, k, v = g.tensor_like(q_t), g.tensor_like(k_t), g.tensor_like(v_t)
    doc, doc_tt = g.tensor_like(doc_t), g.tensor_like(doc_t.reshape(1, 1, 1, s))
    neg_inf, neg_inf_cpu = _pbv(g, "neg_inf", -1e9, torch.float32)
    o, _ = g.sdpa(q=q, k=k, v=v, generate_stats=False, attn_scale=0.25,
                  score_mod=partial(document_mask, doc=doc, doc_t=doc_tt, neg_inf=neg_inf))
    o.set_output(True).set_dim(list(q_t.shape)).set_stride(list(q_t.stride()))
    ws = _build(g)
    o_t = torch.empty(s * d, dtype=torch.float16).as_strided(q_t.shape, q_t.stride())
    g.execute({q: q_t, k: k_t, v: v_t, doc: doc_t, doc_tt: doc_t.reshape(1, 1, 1, s), neg_inf: neg_inf_cpu, o: o_t}, ws)
    ids = doc_t.numpy().reshape(-1)
    same = ids[:, None] == ids[None, :]
    ref, _ = _ref(q_t, k_t, v_t, 0.25, lambda x: np.where(same, x, -1e9))
    np.testing.assert_allclose(o_t.double().numpy(), ref, atol=2e-3, rtol=2e-3)


def test_grouped_query_heads_with_score_mod_are_not_supported(handle, rng):
    g = _graph(handle)
    q = g.tensor(name="q", dim=[1, 4, 8, 16], stride=[512, 128, 16, 1])
    k = g.tensor(name="k", dim=[1, 2, 8, 16], stride=[256, 128, 16, 1])
    v = g.tensor(name="v", dim=[1, 2, 8, 16], stride=[256, 128, 16, 1])
    o, _ = g.sdpa(q=q, k=k, v=v, generate_stats=False, attn_scale=0.5, score_mod=lambda gr, sc: sc)
    o.set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="score_mod with grouped-query heads") as e:
        g.validate()
    assert e.value.status == hd.Status.NOT_SUPPORTED


def test_score_mod_must_return_a_graph_tensor(handle):
    g = _graph(handle)
    q = g.tensor(name="q", dim=[1, 1, 8, 16], stride=[128, 128, 16, 1])
    with pytest.raises(hd.HipdnnError, match="score_mod must return a tensor") as e:
        g.sdpa(q=q, k=q, v=q, generate_stats=False, attn_scale=0.5, score_mod=lambda gr, sc: None)
    assert e.value.status == hd.Status.BAD_PARAM


def test_score_mod_in_the_backward_pass_is_not_supported(handle):
    g = _graph(handle)
    dims, st = [1, 1, 8, 16], [128, 128, 16, 1]
    q, k, v, o, do = (g.tensor(name=n, dim=dims, stride=st) for n in ("q", "k", "v", "o", "dO"))
    stats = g.tensor(name="stats", dim=[1, 1, 8, 1], stride=[8, 8, 1, 1], data_type=cudnn.data_type.FLOAT)
    dq, dk, dv = g.sdpa_backward(q=q, k=k, v=v, o=o, dO=do, stats=stats, attn_scale=0.5,
                                 score_mod=lambda gr, sc: sc, score_mod_bprop=lambda gr, sc: sc)
    for t in (dq, dk, dv):
        t.set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="score_mod"):
        g.validate()
