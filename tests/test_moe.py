"""MoE grouped matmul (hipDNN's MOE_GROUPED_MATMUL / MOE_GROUPED_MATMUL_BWD): the IREE engine and the
numpy reference against a per-expert loop in float64 written here, on random data in FLOAT and
HALF; NONE, GATHER and SCATTER routing; experts with no token and with one, rows before the first
offset; the offsets changed between executions of one built plan (the groups' boundaries are
execute-time values), the plan saved, loaded and restored; the weight gradient; the dispatch count
of each plan; bad graphs (BAD_PARAM naming the field); CUDA and ROCm compiles; cuDNN FE's
``moe_grouped_matmul`` / ``moe_grouped_matmul_bwd`` on ``hipdnn_iree.cudnn.pygraph``."""
from __future__ import annotations

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import empty_like_tensor, raises
from tolerances import tolerance

F, H, I32, I64 = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.INT32, hd.DataType.INT64
S = hd.Status
NONE, GATHER, SCATTER = hd.MoeGroupedMatmulMode.NONE, hd.MoeGroupedMatmulMode.GATHER, hd.MoeGroupedMatmulMode.SCATTER
NP = {F: np.float32, H: np.float16}


# -- the loop the engines are checked against: one expert (group) at a time, float64 -----------------
def expert_loop(token, weight, offsets, mode=NONE, top_k=0, token_index=None, token_ks=None):
    """``[1, rows, N]``: for each group g, its rows ``offsets[g] .. next offset - 1`` times ``weight[g % E]``."""
    tok, w = np.asarray(token, np.float64)[0], np.asarray(weight, np.float64)
    off = [int(o) for o in np.asarray(offsets).reshape(-1)]
    routed = np.asarray(token_index).shape[1] if mode == GATHER else tok.shape[0]
    out = np.zeros((routed, w.shape[2]))
    for g, start in enumerate(off):
        end = off[g + 1] if g + 1 < len(off) else routed
        for r in range(start, end):
            src = int(np.asarray(token_index).reshape(-1)[r]) if mode == GATHER else r
            dst = r
            if mode == SCATTER:
                dst = int(np.asarray(token_index).reshape(-1)[r]) * top_k + int(np.asarray(token_ks).reshape(-1)[r])
            out[dst] = tok[src] @ w[g % w.shape[0]]
    return out[None]


def expert_loop_backward(doutput, token, offsets):
    """``[G, K, N]``: ``dweight[g]`` sums ``token[r]^T doutput[r]`` over group g's rows."""
    dy, tok = np.asarray(doutput, np.float64)[0], np.asarray(token, np.float64)[0]
    off = [int(o) for o in np.asarray(offsets).reshape(-1)]
    dw = np.zeros((len(off), tok.shape[1], dy.shape[1]))
    for g, start in enumerate(off):
        end = off[g + 1] if g + 1 < len(off) else tok.shape[0]
        for r in range(start, end):
            dw[g] += np.outer(tok[r], dy[r])
    return dw


def _offsets(values, dt=np.int32):
    return np.asarray(values, dt).reshape(-1, 1, 1)


def _close(got, want, dt, what):
    rtol, atol = tolerance(dt)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol * scale, err_msg=what)


# -- graphs ------------------------------------------------------------------------------------------
def forward_graph(m, k, n, e, dt=F, groups=None, mode=NONE, routed=None, top_k=0, offset_type=I32):
    """uids: token 1, weight 2, first_token_offset 3, output 4, token_index 5, token_ks 6."""
    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        tok = g.tensor(name="token", uid=1, dim=[1, m, k])
        w = g.tensor(name="weight", uid=2, dim=[e, k, n])
        off = g.tensor(name="first_token_offset", uid=3, dim=[groups or e, 1, 1], data_type=offset_type)
        kw = {}
        if mode in (GATHER, SCATTER):
            kw["token_index"] = g.tensor(name="token_index", uid=5, dim=[1, routed or m, 1], data_type=I32)
        if mode == SCATTER:
            kw["token_ks"] = g.tensor(name="token_ks", uid=6, dim=[1, m, 1], data_type=I32)
        y = g.moe_grouped_matmul(tok, w, off, mode=mode, top_k=top_k, name="moe", **kw)
        return g, y.set_output(True).set_uid(4)
    return build


def backward_graph(m, k, n, e, dt=F):
    """uids: doutput 1, token 2, first_token_offset 3, dweight 4."""
    def build():
        g = hd.Graph(io_data_type=dt, compute_data_type=F)
        dy = g.tensor(name="doutput", uid=1, dim=[1, m, n])
        tok = g.tensor(name="token", uid=2, dim=[1, m, k])
        off = g.tensor(name="first_token_offset", uid=3, dim=[e, 1, 1], data_type=I32)
        dw = g.moe_grouped_matmul_backward(dy, tok, off, name="moe_bwd")
        return g, dw.set_output(True).set_uid(4)
    return build


class Engines:
    """One build of a graph on IREE_LINALG and one on NUMPY_REFERENCE, executed many times."""

    def __init__(self, build, handle):
        self.handle = handle
        self.iree, self.out = build()
        self.iree.build(handle)
        assert self.iree.get_execution_plan_engine_id() == hd.engine_id_from_name("IREE_LINALG")
        self.ref, self.ref_out = build()
        self.ref.set_preferred_engine_id_ext("NUMPY_REFERENCE")
        self.ref.build(handle)

    @property
    def dispatches(self) -> int:
        return self.iree.get_execution_plan().context.dispatch_count

    def run(self, pack, graph=None):
        got = empty_like_tensor(self.out)
        (graph or self.iree).execute(self.handle, {**pack, 4: got})
        return got

    def reference(self, pack):
        want = empty_like_tensor(self.ref_out)
        self.ref.execute(self.handle, {**pack, 4: want})
        return want


def _report(record_property, what, n):
    record_property(f"dispatch_count[{what}]", n)
    print(f"\n{what}: {n} dispatches")


# Offset tables of 4 experts over 13 rows: an expert with no token, experts with one token, all rows
# in one expert, rows 0..2 before the first offset (they belong to no expert: zeros), every expert empty.
ROUTINGS = [[0, 5, 5, 6], [0, 1, 2, 3], [0, 13, 13, 13], [3, 3, 8, 12], [13, 13, 13, 13]]


@pytest.mark.parametrize("dt", [F, H], ids=lambda d: d.name)
def test_forward_one_plan_many_routings(cpu, rng, dt, record_property):
    m, k, n, e = 13, 12, 7, 4
    eng = Engines(forward_graph(m, k, n, e, dt), cpu)
    _report(record_property, f"moe_grouped_matmul NONE {dt.name}", eng.dispatches)
    assert eng.dispatches == 1, "the row -> expert map, the contraction and its epilogue: one dispatch region"
    token = rng.uniform(-1, 1, (1, m, k)).astype(NP[dt])
    weight = rng.uniform(-1, 1, (e, k, n)).astype(NP[dt])
    for offsets in ROUTINGS:
        pack = {1: token, 2: weight, 3: _offsets(offsets)}
        want = expert_loop(token, weight, offsets)
        got = eng.run(pack)
        _close(got, want, dt, f"IREE, offsets {offsets}")
        _close(eng.reference(pack), want, dt, f"NUMPY_REFERENCE, offsets {offsets}")
        assert np.all(np.asarray(got)[0, :offsets[0]] == 0)     # rows before the first offset: in no expert


def test_forward_int64_offsets_and_batched_groups(cpu, rng):
    """G = 2 * E groups (batch 2: group g uses expert g % E), INT64 offsets."""
    m, k, n, e = 11, 6, 5, 3
    eng = Engines(forward_graph(m, k, n, e, groups=2 * e, offset_type=I64), cpu)
    token, weight = rng.standard_normal((1, m, k)).astype(np.float32), rng.standard_normal((e, k, n)).astype(np.float32)
    for offsets in ([0, 2, 2, 5, 6, 10], [0, 0, 0, 0, 0, 1]):
        pack = {1: token, 2: weight, 3: _offsets(offsets, np.int64)}
        _close(eng.run(pack), expert_loop(token, weight, offsets), F, f"offsets {offsets}")
        _close(eng.reference(pack), expert_loop(token, weight, offsets), F, f"reference, offsets {offsets}")


def test_gather(cpu, rng, record_property):
    """Routed rows read token rows token_index[r] (several rows may read one token, some none)."""
    tokens, top_k, k, n, e = 5, 3, 8, 6, 4
    routed = tokens * top_k
    eng = Engines(forward_graph(tokens, k, n, e, mode=GATHER, routed=routed), cpu)
    _report(record_property, "moe_grouped_matmul GATHER FLOAT", eng.dispatches)
    assert eng.dispatches == 1
    assert eng.out.get_dim() == [1, routed, n]
    token, weight = rng.standard_normal((1, tokens, k)).astype(np.float32), rng.standard_normal((e, k, n)).astype(np.float32)
    for offsets in ([0, 4, 4, 5], [2, 9, 14, 15]):
        index = rng.integers(0, tokens, (1, routed, 1)).astype(np.int32)
        pack = {1: token, 2: weight, 3: _offsets(offsets), 5: index}
        want = expert_loop(token, weight, offsets, GATHER, token_index=index)
        _close(eng.run(pack), want, F, f"offsets {offsets}")
        _close(eng.reference(pack), want, F, f"reference, offsets {offsets}")


def test_scatter(cpu, rng, record_property):
    """Rows (expert order) written back to token order: output row token_index[r] * top_k + token_ks[r]."""
    tokens, top_k, k, n, e = 4, 2, 7, 5, 3
    m = tokens * top_k
    eng = Engines(forward_graph(m, k, n, e, mode=SCATTER, top_k=top_k), cpu)
    _report(record_property, "moe_grouped_matmul SCATTER FLOAT", eng.dispatches)
    assert eng.dispatches == 1, "row -> expert map, the scatter of the sources, the contraction: one region (CPU)"
    token, weight = rng.standard_normal((1, m, k)).astype(np.float32), rng.standard_normal((e, k, n)).astype(np.float32)
    for offsets in ([0, 3, 3], [1, 1, 7]):          # an empty expert; row 0 in no expert (its slot stays 0)
        slot = rng.permutation(m)
        index, ks = (slot // top_k).astype(np.int32).reshape(1, m, 1), (slot % top_k).astype(np.int32).reshape(1, m, 1)
        pack = {1: token, 2: weight, 3: _offsets(offsets), 5: index, 6: ks}
        want = expert_loop(token, weight, offsets, SCATTER, top_k, index, ks)
        got = eng.run(pack)
        _close(got, want, F, f"offsets {offsets}")
        _close(eng.reference(pack), want, F, f"reference, offsets {offsets}")
        if offsets[0] == 1:
            assert np.all(np.asarray(got)[0, slot[0]] == 0)


@pytest.mark.parametrize("dt", [F, H], ids=lambda d: d.name)
def test_backward_one_plan_many_routings(cpu, rng, dt, record_property):
    m, k, n, e = 13, 6, 5, 4
    eng = Engines(backward_graph(m, k, n, e, dt), cpu)
    _report(record_property, f"moe_grouped_matmul_bwd {dt.name}", eng.dispatches)
    assert eng.dispatches == 1
    assert eng.out.get_dim() == [e, k, n]
    dy = rng.uniform(-1, 1, (1, m, n)).astype(NP[dt])
    token = rng.uniform(-1, 1, (1, m, k)).astype(NP[dt])
    for offsets in ROUTINGS:
        pack = {1: dy, 2: token, 3: _offsets(offsets)}
        want = expert_loop_backward(dy, token, offsets)
        got = eng.run(pack)
        _close(got, want, dt, f"IREE, offsets {offsets}")
        _close(eng.reference(pack), want, dt, f"NUMPY_REFERENCE, offsets {offsets}")
        for ex in range(e):        # an expert with no rows gets zeros
            if offsets[ex] == (offsets[ex + 1] if ex + 1 < e else m):
                assert np.all(np.asarray(got)[ex] == 0), (offsets, ex)


def test_forward_and_backward_in_one_graph(cpu, rng):
    """A training step's two MoE nodes sharing token and offsets: one plan, one execute."""
    m, k, n, e = 9, 5, 4, 3
    g = hd.Graph(io_data_type=F)
    tok = g.tensor(name="token", uid=1, dim=[1, m, k])
    w = g.tensor(name="weight", uid=2, dim=[e, k, n])
    off = g.tensor(name="offsets", uid=3, dim=[e, 1, 1], data_type=I32)
    dy = g.tensor(name="dY", uid=4, dim=[1, m, n])
    y = g.moe_grouped_matmul(tok, w, off).set_output(True).set_uid(5)
    dw = g.moe_grouped_matmul_backward(dy, tok, off).set_output(True).set_uid(6)
    g.build(cpu)
    data = {1: rng.standard_normal((1, m, k)).astype(np.float32), 2: rng.standard_normal((e, k, n)).astype(np.float32),
            4: rng.standard_normal((1, m, n)).astype(np.float32)}
    for offsets in ([0, 4, 4], [0, 1, 8]):
        outs = {5: empty_like_tensor(y), 6: empty_like_tensor(dw)}
        g.execute(cpu, {**data, 3: _offsets(offsets), **outs})
        _close(outs[5], expert_loop(data[1], data[2], offsets), F, "output")
        _close(outs[6], expert_loop_backward(data[4], data[1], offsets), F, "dweight")


def test_plan_saved_loaded_and_restored(cpu, rng, tmp_path):
    m, k, n, e = 10, 8, 6, 3
    g, _ = forward_graph(m, k, n, e)()
    g.build(cpu)
    path = tmp_path / "moe.plan"
    hd.save_plan(path, g.serialize_compiled_plan())
    r = hd.Graph.from_compiled_plan(cpu, hd.load_plan(path))
    assert r.is_restored
    token, weight = rng.standard_normal((1, m, k)).astype(np.float32), rng.standard_normal((e, k, n)).astype(np.float32)
    for offsets in ([0, 1, 1], [0, 6, 9], [4, 4, 10]):
        got = np.full((1, m, n), np.nan, np.float32)
        r.execute(cpu, {1: token, 2: weight, 3: _offsets(offsets), 4: got})
        _close(got, expert_loop(token, weight, offsets), F, f"restored plan, offsets {offsets}")


def test_dynamic_shape_build_keeps_the_op_static(cpu, rng):
    """With dynamic shapes on, the MoE operands keep their dims (graph_ir/ops/_moe.py dynamic_fixed)."""
    m, k, n, e = 6, 4, 3, 2
    g, y = forward_graph(m, k, n, e)()
    g.set_dynamic_shape_enabled(True)
    g.build(cpu)
    token, weight = rng.standard_normal((1, m, k)).astype(np.float32), rng.standard_normal((e, k, n)).astype(np.float32)
    got = empty_like_tensor(y)
    g.execute(cpu, {1: token, 2: weight, 3: _offsets([0, 2]), 4: got})
    _close(got, expert_loop(token, weight, [0, 2]), F, "dynamic build")


def test_routing_outside_the_contract(cpu, rng):
    """The reference refuses it (BAD_PARAM naming the tensor and value, as hipDNN's reference); the
    compiled plan does not fault: rows reading an index out of range give zeros."""
    m, k, n, e = 6, 4, 3, 2
    tokens, weight = rng.standard_normal((1, m, k)).astype(np.float32), rng.standard_normal((e, k, n)).astype(np.float32)
    eng = Engines(forward_graph(m, k, n, e), cpu)
    raises(S.BAD_PARAM, eng.reference, {1: tokens, 2: weight, 3: _offsets([4, 2])}, match="first_token_offset[1] = 2")
    raises(S.BAD_PARAM, eng.reference, {1: tokens, 2: weight, 3: _offsets([0, 7])}, match="first_token_offset[1] = 7")
    assert np.isfinite(eng.run({1: tokens, 2: weight, 3: _offsets([4, 2])})).all()
    gather = Engines(forward_graph(m, k, n, e, mode=GATHER, routed=4), cpu)
    index = np.array([0, 9, -1, 5], np.int32).reshape(1, 4, 1)
    pack = {1: tokens, 2: weight, 3: _offsets([0, 2]), 5: index}
    raises(S.BAD_PARAM, gather.reference, pack, match="token row 9")
    got = np.asarray(gather.run(pack))[0]
    assert np.all(got[1:3] == 0)                    # rows reading token rows 9 and -1
    want = np.stack([tokens[0, 0].astype(np.float64) @ weight[0], tokens[0, 5].astype(np.float64) @ weight[1]])
    np.testing.assert_allclose(got[[0, 3]], want, rtol=1e-5, atol=1e-5)


# -- bad graphs -----------------------------------------------------------------------------------
def _validate(build):
    g = hd.Graph(io_data_type=F)
    y = build(g)
    y.set_output(True)
    g.validate()


def _t(g, name, dims, dt=None):
    return g.tensor(name=name, dim=dims, **({"data_type": dt} if dt is not None else {}))


BAD = [
    ("K differs", "field 'weight'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 5, 3]), _t(g, "o", [2, 1, 1], I32))),
    ("token rank 2", "field 'token'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32))),
    ("token not [1, M, K]", "field 'token'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [2, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32))),
    ("weight rank 2", "field 'weight'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [4, 3]), _t(g, "o", [2, 1, 1], I32))),
    ("offsets [G, 2, 1]", "field 'first_token_offset'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 2, 1], I32))),
    ("offsets rank 1", "field 'first_token_offset'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2], I32))),
    ("groups not a multiple of E", "field 'first_token_offset'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [3, 1, 1], I32))),
    ("GATHER without token_index", "field 'token_index'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32),
                                    mode=GATHER)),
    ("token_index not [1, R, 1]", "field 'token_index'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32),
                                    token_index=_t(g, "i", [1, 8, 2], I32), mode=GATHER)),
    ("SCATTER without token_ks", "field 'token_ks'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32),
                                    token_index=_t(g, "i", [1, 8, 1], I32), mode=SCATTER, top_k=2)),
    ("SCATTER token_ks rows", "field 'token_ks'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32),
                                    token_index=_t(g, "i", [1, 8, 1], I32), token_ks=_t(g, "k", [1, 7, 1], I32),
                                    mode=SCATTER, top_k=2)),
    ("SCATTER top_k 0", "field 'top_k'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32),
                                    token_index=_t(g, "i", [1, 8, 1], I32), token_ks=_t(g, "k", [1, 8, 1], I32),
                                    mode=SCATTER)),
    ("SCATTER top_k > E", "field 'top_k'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32),
                                    token_index=_t(g, "i", [1, 8, 1], I32), token_ks=_t(g, "k", [1, 8, 1], I32),
                                    mode=SCATTER, top_k=3)),
    ("FLOAT offsets", "field 'first_token_offset'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], F))),
    ("HALF token_index", "field 'token_index'",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32),
                                    token_index=_t(g, "i", [1, 8, 1], H), mode=GATHER)),
    ("mode 7", "mode",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32), mode=7)),
    ("top_k negative", "top_k",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32), top_k=-1)),
    ("output dims set wrong", "has dims [1, 8, 4] but the op gives [1, 8, 3]",
     lambda g: g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]),
                                    _t(g, "o", [2, 1, 1], I32)).set_dim([1, 8, 4])),
    ("bwd rows differ", "field 'token'",
     lambda g: g.moe_grouped_matmul_backward(_t(g, "dy", [1, 8, 3]), _t(g, "t", [1, 7, 4]), _t(g, "o", [2, 1, 1], I32))),
    ("bwd doutput rank", "field 'doutput'",
     lambda g: g.moe_grouped_matmul_backward(_t(g, "dy", [8, 3]), _t(g, "t", [1, 8, 4]), _t(g, "o", [2, 1, 1], I32))),
    ("bwd offsets shape", "field 'first_token_offset'",
     lambda g: g.moe_grouped_matmul_backward(_t(g, "dy", [1, 8, 3]), _t(g, "t", [1, 8, 4]), _t(g, "o", [1, 2, 1], I32))),
    ("bwd FLOAT offsets", "field 'first_token_offset'",
     lambda g: g.moe_grouped_matmul_backward(_t(g, "dy", [1, 8, 3]), _t(g, "t", [1, 8, 4]), _t(g, "o", [2, 1, 1], F))),
]


@pytest.mark.parametrize("build, match", [(b, m) for _, m, b in BAD], ids=[i for i, _, _ in BAD])
def test_bad_graph_is_bad_param_naming_the_field(build, match):
    e = raises(S.BAD_PARAM, _validate, build, match=match)
    assert "moe_grouped_matmul" in e.message


def test_offsets_without_a_data_type_take_the_io_type_and_are_refused_at_build(cpu):
    g = hd.Graph(io_data_type=F)
    g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "offs", [2, 1, 1])).set_output(True)
    raises(S.BAD_PARAM, g.build, cpu, match="field 'first_token_offset' (tensor 'offs'")


def test_integer_operands_and_compute_type_are_not_supported(cpu):
    g = hd.Graph(io_data_type=F)
    g.moe_grouped_matmul(_t(g, "t", [1, 8, 4], hd.DataType.INT8), _t(g, "w", [2, 4, 3]),
                         _t(g, "o", [2, 1, 1], I32)).set_output(True)
    raises(S.NOT_SUPPORTED, g.build, cpu, match="field 'token'")
    g = hd.Graph(io_data_type=F)
    g.moe_grouped_matmul(_t(g, "t", [1, 8, 4]), _t(g, "w", [2, 4, 3]), _t(g, "o", [2, 1, 1], I32),
                         compute_data_type=I32).set_output(True)
    raises(S.NOT_SUPPORTED, g.build, cpu, match="compute type")


def test_graph_json_and_flatbuffer_keep_the_node(cpu):
    from graph_ir.desc import decode_graph
    g, _ = forward_graph(8, 4, 3, 2, mode=SCATTER, top_k=2)()
    g.validate()
    assert '"mode": 2' in g.to_json() and '"top_k": 2' in g.to_json()
    g2 = hd.Graph.from_json(g.to_json())
    g2.build_operation_graph(cpu)
    g.build_operation_graph(cpu)
    node = decode_graph(g.get_op_graph_bytes()).nodes[0]
    assert node.attrs == decode_graph(g2.get_op_graph_bytes()).nodes[0].attrs
    assert (node.attrs.mode, node.attrs.top_k, node.attrs.token_index_uid, node.attrs.token_ks_uid) == (2, 2, 5, 6)


# -- GPU targets (compile only: no device needed) ----------------------------------------------------
@pytest.mark.parametrize("target", ["cuda:sm_80", "rocm:gfx942", "rocm:gfx950"])
def test_gpu_compile(target):
    """HALF forward (NONE and GATHER) and backward: the MLIR for the target, then a compile."""
    m, k, n, e = 64, 32, 48, 4
    text = forward_graph(m, k, n, e, H)()[0].get_mlir(target=target)
    assert "tensor.extract %arg1[" in text and "linalg.generic" in text     # the weight read per row's expert
    from hipdnn_iree.plugins.iree_linalg.knobs import NO_REDUCTION_DISTRIBUTION_FLAG
    h = hd.create_handle(device=None, target=target)
    for build, forward in ((forward_graph(m, k, n, e, H), True),
                           (forward_graph(m, k, n, e, H, mode=GATHER, routed=96), True),
                           (backward_graph(m, k, n, e, H), False)):
        g, _ = build()
        g.build(h)
        ctx = g.get_execution_plan().context
        assert ctx.dispatch_count == 1
        # the forward compiles without IREE's GPU reduction vector distribution (knobs.py, "gather")
        assert (NO_REDUCTION_DISTRIBUTION_FLAG in ctx.compile_flags) == forward
    # SCATTER on GPUs: the rows' products scattered to their slots by the region's root (lowering/ops/moe.py)
    g, _ = forward_graph(2 * m, k, n, e, H, mode=SCATTER, top_k=2)()
    g.build(h)
    assert g.get_execution_plan().context.dispatch_count == 1
    assert "unique_indices(true)" in g.get_execution_plan().context.mlir


@pytest.mark.parametrize("dt", [F, H], ids=lambda d: d.name)
def test_gpu_scatter_form_on_the_cpu(rng, dt):
    """The SCATTER lowering GPU targets get (rows multiplied in their own order, then scattered), compiled
    for this CPU and run by the IREE runtime: right against the per-expert loop, for routings with an
    empty expert, a one-row expert and a row in no expert (its slot stays zero)."""
    import iree.compiler.tools as tools
    import iree.runtime as rt
    tokens, top_k, k, n, e = 24, 2, 20, 12, 4
    m = tokens * top_k
    g, _ = forward_graph(m, k, n, e, dt, mode=SCATTER, top_k=top_k)()
    mlir = g.get_mlir(target="cuda:sm_80")
    assert "unique_indices(true)" in mlir and mlir != g.get_mlir(target="llvm-cpu")
    vmfb = tools.compile_str(mlir, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=host"])
    ctx = rt.SystemContext(config=rt.Config("local-task"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    token = rng.standard_normal((1, m, k)).astype(NP[dt])
    weight = rng.standard_normal((e, k, n)).astype(NP[dt])
    for offsets in ([0, 10, 10, 11], [3, 3, 4, 30]):
        slot = rng.permutation(m)
        index, ks = (slot // top_k).astype(np.int32).reshape(1, m, 1), (slot % top_k).astype(np.int32).reshape(1, m, 1)
        out = np.full((1, m, n), np.nan, NP[dt])
        # argument order: the module's signature (token, weight, offsets, output, token_index, token_ks)
        got = np.asarray(ctx.modules.module.main(token, weight, _offsets(offsets), out, index, ks).to_host())
        want = expert_loop(token, weight, offsets, SCATTER, top_k, index, ks)
        _close(got, want, dt, f"offsets {offsets}")
        if offsets[0] > 0:
            assert np.all(got[0, slot[:offsets[0]]] == 0)


# -- cuDNN FE's API ------------------------------------------------------------------------------
def test_cudnn_facade_forward_and_backward(rng):
    torch = pytest.importorskip("torch")
    import hipdnn_iree.cudnn as cudnn
    m, k, n, e = 12, 8, 6, 3
    handle = cudnn.create_handle(device="cpu")
    token = torch.from_numpy(rng.standard_normal((1, m, k)).astype(np.float32))
    weight = torch.from_numpy(rng.standard_normal((e, k, n)).astype(np.float32))
    dy = torch.from_numpy(rng.standard_normal((1, m, n)).astype(np.float32))
    offsets = torch.tensor([0, 5, 5], dtype=torch.int32).reshape(e, 1, 1)
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    T = graph.tensor(name="token", dim=token.size(), stride=token.stride(), data_type=cudnn.data_type.FLOAT)
    W = graph.tensor(name="weight", dim=weight.size(), stride=weight.stride(), data_type=cudnn.data_type.FLOAT)
    O = graph.tensor(name="first_token_offset", dim=[e, 1, 1], stride=[1, 1, 1], data_type=cudnn.data_type.INT32)
    DY = graph.tensor(name="doutput", dim=dy.size(), stride=dy.stride(), data_type=cudnn.data_type.FLOAT)
    Y = graph.moe_grouped_matmul(T, W, O, mode=cudnn.moe_grouped_matmul_mode.NONE,
                                 compute_data_type=cudnn.data_type.FLOAT, name="moe")
    DW = graph.moe_grouped_matmul_bwd(DY, T, O, compute_data_type=cudnn.data_type.FLOAT, name="moe_bwd")
    Y.set_output(True)
    DW.set_output(True)
    assert Y.get_dim() == [1, m, n] and Y.get_stride() == [m * n, n, 1]
    assert DW.get_dim() == [e, k, n] and DW.get_stride() == [k * n, 1, k]     # cuDNN FE: column-major dweight
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A])
    graph.check_support()
    graph.build_plans()
    ws = torch.empty(graph.get_workspace_size(), dtype=torch.uint8)
    out = torch.empty(1, m, n)
    dw = torch.empty_strided((e, k, n), (k * n, 1, k))
    graph.execute({T: token, W: weight, O: offsets, DY: dy, Y: out, DW: dw}, ws, handle=handle)
    _close(out.numpy(), expert_loop(token.numpy(), weight.numpy(), [0, 5, 5]), F, "facade output")
    _close(dw.numpy(), expert_loop_backward(dy.numpy(), token.numpy(), [0, 5, 5]), F, "facade dweight")
    offsets = torch.tensor([0, 1, 2], dtype=torch.int32).reshape(e, 1, 1)       # the same plan, new routing
    graph.execute({T: token, W: weight, O: offsets, DY: dy, Y: out, DW: dw}, ws, handle=handle)
    _close(out.numpy(), expert_loop(token.numpy(), weight.numpy(), [0, 1, 2]), F, "facade output, new routing")
    with pytest.raises(hd.HipdnnError, match="first_token_offset"):
        g2 = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, handle=handle)
        g2.moe_grouped_matmul(g2.tensor(name="t", dim=[1, 4, 2], stride=[8, 2, 1]),
                              g2.tensor(name="w", dim=[1, 2, 2], stride=[4, 2, 1]),
                              g2.tensor(name="o", dim=[1, 1, 1], stride=[1, 1, 1], data_type=cudnn.data_type.FLOAT))
