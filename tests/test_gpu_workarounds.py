"""The workarounds of docs/known_issues.md, checked on the CPU: each test fails if its workaround is
removed (the lowering or flag choice is asserted, and IREE's own dispatch IR is inspected for the
faulty form), and the IR with the workaround still gives the reference's numbers here.

1. CUDA f16/bf16 contractions with N before M: a compute_barrier keeps IREE from moving
   a transpose into a matmul (output relayouts, sdpa's V).
2. f16/bf16 NCHW conv_fprop on CUDA: the channels-last preprocessing pass.
3. f16/bf16 strided conv_dgrad on CUDA: no channels-last pass for dgrad-only graphs.
10. f16/bf16 convs on CUDA: a gathered matrix times the filter (one batched matmul over the groups), not
   IREE's conv code; with that form off (ROCm, f32), grouped fprop/wgrad split per group.
12. f16/bf16 matmuls on CUDA: the reduction zero-padded to a multiple of 16.

2, 3 and the split of 10 are checked with the GEMM form of 10 turned off (``_gemm_disabled``): on CUDA
they now apply to f32 convs, and to what ROCm gets.
"""
import re

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import random_array
from lowering import lower
from graph_ir.desc import OpKind
from lowering.ops import matmul as mm_lowering
from lowering.ops import sdpa as sdpa_lowering
from hipdnn_iree.plugins.iree_linalg.targets import GPU_CONV_FLAGS, parse_target

F, H, BF = hd.DataType.FLOAT, hd.DataType.HALF, hd.DataType.BFLOAT16
P = hd.PointwiseMode
BARRIER = "iree_tensor_ext.compute_barrier.start"
CUDA = "cuda:sm_80"


def _bytes(g, target=CUDA):
    g.build_operation_graph(hd.create_handle(device=None, target=target))
    return g.get_op_graph_bytes()


def bert_attention(dt, b=2, s=128, heads=12, d=64, bias=True):
    """The BERT-style graph: x -> per-head Q/K/V projections (+ bias) -> sdpa, output stored BSHD."""
    e = heads * d
    g = hd.Graph(name="bert_attention", io_data_type=dt, compute_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[b, 1, s, e])
    qkv = []
    for i, n in enumerate("qkv"):
        w = g.tensor(name="w" + n, uid=2 + 2 * i, dim=[1, heads, e, d], stride=[heads * d * e, d * e, 1, e])
        y = g.matmul(x, w)
        if bias:
            y = g.pointwise(y, g.tensor(name="b" + n, uid=3 + 2 * i, dim=[1, heads, 1, d]), mode=P.ADD)
        qkv.append(y)
    g.sdpa(*qkv, attn_scale=1.0 / 8).set_output(True).set_uid(100).set_stride([s * e, d, e, 1])
    return g


def matmul_transposed_out(dt, m=64, k=32, n=48, act=False, out_dt=None):
    g = hd.Graph(io_data_type=dt, compute_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[2, m, k])
    w = g.tensor(name="w", uid=2, dim=[1, k, n])
    y = g.matmul(x, w)
    if act:
        y = g.pointwise(y, mode=P.RELU_FWD)
    y.set_output(True).set_uid(3).set_stride([m * n, 1, m])
    if out_dt is not None:
        y.set_data_type(out_dt)
    return g


def _without_workaround(monkeypatch):
    from lowering import _lower
    never = lambda *a: False  # noqa: E731
    monkeypatch.setattr(_lower, "needs_relayout_barrier", never)
    monkeypatch.setattr(sdpa_lowering, "needs_relayout_barrier", never)


# -- 1: where the barrier goes ----------------------------------------------------------------------
def test_guard_rule():
    from lowering.policy import LoweringPolicy
    guard = lambda t, *e: mm_lowering.cuda_mma_guard(LoweringPolicy.for_target(t), *e)  # noqa: E731
    assert guard("cuda:sm_80", "f16", "f16")
    assert guard("cuda:sm_89", "f32", "bf16")
    assert not guard("cuda:sm_80", "f32", "f32")
    assert not guard("rocm:gfx942", "f16", "f16")
    assert not guard("llvm-cpu:host", "f16", "f16")


@pytest.mark.parametrize("dt", [H, BF], ids=lambda d: d.name)
def test_bert_attention_v_behind_barrier_on_cuda(dt):
    mlir = lower(_bytes(bert_attention(dt)), target=CUDA).mlir
    assert mlir.count(BARRIER) == 1, mlir
    # the barrier's result is the attention op's V operand
    bar = re.search(rf"(%\w+) = {re.escape(BARRIER)}", mlir).group(1)
    att = re.search(r"iree_linalg_ext.attention .*? ins\(([^:]*):", mlir).group(1)
    assert [a.strip() for a in att.split(",")][2] == bar


@pytest.mark.parametrize("target,dt", [(CUDA, F), ("rocm:gfx942", H), ("rocm:gfx90a", BF), ("llvm-cpu:host", H)])
def test_no_barrier_where_not_needed(target, dt):
    assert BARRIER not in lower(_bytes(bert_attention(dt), target), target=target).mlir
    assert BARRIER not in lower(_bytes(matmul_transposed_out(dt), target), target=target).mlir


@pytest.mark.parametrize("act", [False, True], ids=["matmul", "matmul-relu"])
def test_transposed_matmul_output_behind_barrier_on_cuda(act):
    mlir = lower(_bytes(matmul_transposed_out(H, act=act)), target=CUDA).mlir
    bar = re.search(rf"(%\w+) = {re.escape(BARRIER)}", mlir).group(1)
    assert re.search(rf"linalg.transpose ins\({re.escape(bar)} ", mlir), mlir


def test_no_barrier_for_plain_layouts_or_non_matmul_producers():
    g = hd.Graph(io_data_type=H, compute_data_type=F)   # matmul stored row-major: no relayout
    x, w = g.tensor(name="x", uid=1, dim=[2, 64, 32]), g.tensor(name="w", uid=2, dim=[1, 32, 48])
    g.matmul(x, w).set_output(True).set_uid(3)
    assert BARRIER not in lower(_bytes(g), target=CUDA).mlir
    g = hd.Graph(io_data_type=H, compute_data_type=F)   # transposed output of a pointwise op only
    x = g.tensor(name="x", uid=1, dim=[2, 64, 48])
    g.pointwise(x, mode=P.RELU_FWD).set_output(True).set_uid(3).set_stride([64 * 48, 1, 64])
    assert BARRIER not in lower(_bytes(g), target=CUDA).mlir


# -- 1: IREE's dispatch IR keeps every f16/bf16 contraction M-before-N ------------------------------
def _maps(text):
    return [[d.strip() for d in m.split(",") if d.strip()] for m in re.findall(r"affine_map<\([^)]*\) -> \(([^)]*)\)>", text)]


def n_before_m_contractions(flow_ir: str) -> list[str]:
    """Names of the dispatches holding an f16/bf16 x f16/bf16 -> f32 contraction whose innermost N
    loop (second operand and result) comes before its innermost M loop (first operand and result)."""
    found = []
    for fn in re.split(r"func.func @", flow_ir)[1:]:
        name = fn.split("(", 1)[0]
        for gen in re.finditer(r"linalg.generic \{indexing_maps = \[(.*?)\], iterator_types = \[(.*?)\]\} "
                               r"ins\([^:]*: tensor<[0-9x]*x(\w+)>, tensor<[0-9x]*x(\w+)>\) outs\([^:]*: tensor<[0-9x]*x(\w+)>",
                               fn):
            maps, its, a_t, b_t, o_t = gen.groups()
            if its.count("reduction") != 1 or a_t not in ("f16", "bf16") or o_t != "f32":
                continue
            lhs, rhs, out = (set(m) for m in _maps(maps)[:3])
            ms, ns = (lhs & out) - rhs, (rhs & out) - lhs
            if ms and ns:
                inner = lambda dims: max(int(d[1:]) for d in dims if d.startswith("d"))  # noqa: E731
                if inner(ns) < inner(ms):
                    found.append(name)
    return found


def _flow(mlir: str, flags=()) -> str:
    import iree.compiler.tools as tools
    return tools.compile_str(mlir, target_backends=["cuda"],
                             extra_args=["--iree-cuda-target=sm_80", "--compile-to=flow", *flags]).decode()


def test_checker_finds_the_faulty_form():
    """The reproducer has the faulty form and its control does not (the checker can fail)."""
    import os
    repro = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "repro")
    assert n_before_m_contractions(_flow(open(os.path.join(repro, "mma_n_before_m.mlir")).read()))
    assert not n_before_m_contractions(_flow(open(os.path.join(repro, "mma_m_before_n.mlir")).read()))


@pytest.mark.parametrize("dt", [H, BF], ids=lambda d: d.name)
def test_iree_makes_no_n_before_m_contraction_with_the_workaround(dt, monkeypatch):
    for g in (bert_attention(dt), matmul_transposed_out(dt)):
        data = _bytes(g)
        assert not n_before_m_contractions(_flow(lower(data, target=CUDA).mlir))
    _without_workaround(monkeypatch)   # what IREE 3.13 does without it: the BERT V projection goes wrong
    assert n_before_m_contractions(_flow(lower(_bytes(bert_attention(dt)), target=CUDA).mlir))
    assert n_before_m_contractions(_flow(lower(_bytes(matmul_transposed_out(dt)), target=CUDA).mlir))


# -- 1: the barrier changes no numbers (the CUDA lowering compiled for this CPU) ---------------------
def _run_on_cpu(mlir: str, args: list) -> np.ndarray:
    import iree.compiler.tools as tools
    import iree.runtime as rt
    vmfb = tools.compile_str(mlir, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=host"])
    ctx = rt.SystemContext(config=rt.Config("local-task"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    return np.asarray(ctx.modules.module.main(*args).to_host())


def _sdpa64(q, k, v, scale):
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v)


def test_cuda_ir_with_barriers_is_right_on_the_cpu(rng):
    b, s, heads, d = 1, 16, 2, 8
    e = heads * d
    mlir = lower(_bytes(bert_attention(H, b, s, heads, d)), target=CUDA).mlir
    assert BARRIER in mlir
    x = random_array([b, 1, s, e], H, rng)
    ws = [random_array([1, heads, d, e], H, rng, -0.5, 0.5) for _ in range(3)]   # memory order [1, H, D, E]
    bs = [random_array([1, heads, 1, d], H, rng) for _ in range(3)]
    args = [x, ws[0], bs[0], ws[1], bs[1], ws[2], bs[2], np.zeros([b, s, heads, d], np.float16)]
    got = _run_on_cpu(mlir, args).astype(np.float64)                 # memory order [B, S, H, D]
    q, k, v = (np.einsum("bse,hde->bhsd", x[:, 0].astype(np.float64), w[0].astype(np.float64))
               + bb[0][None].astype(np.float64) for w, bb in zip(ws, bs))
    want = _sdpa64(q, k, v, 1.0 / 8).transpose(0, 2, 1, 3)
    assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max()

    mlir = lower(_bytes(matmul_transposed_out(H, out_dt=F)), target=CUDA).mlir
    assert BARRIER in mlir
    xa, wa = random_array([2, 64, 32], H, rng), random_array([1, 32, 48], H, rng)
    got = _run_on_cpu(mlir, [xa, wa, np.zeros([2, 48, 64], np.float32)])
    want = np.einsum("bmk,kn->bnm", xa.astype(np.float64), wa[0].astype(np.float64))
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


# -- 2 and 3: the conv flags -----------------------------------------------------------------------
def _conv_graph(kinds, dt=H):
    g = hd.Graph(io_data_type=dt, compute_data_type=F)
    if "fprop" in kinds:
        x = g.tensor(name="x", uid=1, dim=[1, 32, 16, 16], stride=[16 * 16 * 32, 1, 16 * 32, 32])
        w = g.tensor(name="w", uid=2, dim=[64, 32, 3, 3], stride=[9 * 32, 1, 3 * 32, 32])
        g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_output(True).set_uid(3) \
            .set_stride([16 * 16 * 64, 1, 16 * 64, 64])
    if "dgrad" in kinds:
        dy = g.tensor(name="dy", uid=11, dim=[4, 64, 14, 14])
        w = g.tensor(name="wd", uid=12, dim=[64, 32, 3, 3])
        g.conv_dgrad(dy, w, padding=[1, 1], stride=[2, 2], dilation=[1, 1]).set_output(True).set_uid(13) \
            .set_dim([4, 32, 28, 28])
    return g


def engine_flags(target, kinds, dynamic=False):
    """The flags the IREE engine compiles a graph of these op kinds with (knobs.resolve, every knob AUTO)."""
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    summary = GraphSummary(kinds=frozenset(kinds), has_double=False, conv_ranks=(), f32_only=False)
    return list(resolve(parse_target(target), summary, {}, dynamic=dynamic).flags)


@pytest.mark.parametrize("target", [CUDA, "rocm:gfx942"])
def test_conv_flags_per_graph(target):
    assert engine_flags(target, [OpKind.CONV_FPROP]) == list(GPU_CONV_FLAGS)
    assert engine_flags(target, [OpKind.CONV_WGRAD]) == list(GPU_CONV_FLAGS)
    assert engine_flags(target, [OpKind.CONV_DGRAD]) == []
    assert engine_flags(target, [OpKind.CONV_FPROP, OpKind.CONV_DGRAD]) == list(GPU_CONV_FLAGS)   # documented limit
    assert engine_flags(target, [OpKind.CONV_DGRAD, OpKind.CONV_WGRAD]) == []
    assert engine_flags(target, [OpKind.MATMUL]) == []
    # dynamic builds: the pass fails on wgrad's dynamic N (graph_ir/dynamic.py), fprop graphs keep it
    assert engine_flags(target, [OpKind.CONV_WGRAD], dynamic=True) == []
    assert engine_flags(target, [OpKind.CONV_FPROP, OpKind.CONV_WGRAD], dynamic=True) == list(GPU_CONV_FLAGS)
    assert engine_flags("llvm-cpu:host", [OpKind.CONV_FPROP]) == []
    assert "iree-preprocessing-convert-conv-to-channels-last" in GPU_CONV_FLAGS[0]


def test_built_cuda_conv_plans_carry_their_flags():
    h = hd.create_handle(device=None, target=CUDA, cache=False)
    g = _conv_graph(["fprop"])
    g.build(h)
    assert set(GPU_CONV_FLAGS) <= set(g.get_execution_plan().context.compile_flags)
    g = _conv_graph(["dgrad"])
    g.build(h)
    assert not set(GPU_CONV_FLAGS) & set(g.get_execution_plan().context.compile_flags)


def _conv_dispatches(g):
    data = _bytes(g)
    from graph_ir.desc import decode_graph
    flags = engine_flags(CUDA, [n.kind for n in decode_graph(data).nodes])
    return re.findall(r"func.func @main_dispatch_\d+_(conv_[0-9x]+)_", _flow(lower(data, target=CUDA).mlir, flags))


def _gemm_disabled(monkeypatch):
    """The CUDA lowering without the GEMM form of conv (docs/known_issues.md 10): IREE's own conv forms."""
    from lowering import policy
    real = policy.LoweringPolicy.for_target.__func__
    monkeypatch.setattr(policy.LoweringPolicy, "for_target",
                        classmethod(lambda cls, t: real(cls, t).with_(conv_as_gemm=False)))


def test_conv_forms_iree_compiles(monkeypatch):
    _gemm_disabled(monkeypatch)
    """fprop becomes IREE's channels-last conv (output [.., h, w, f]; the NCHW form [.., f, h, w] is the
    faulty one); dgrad-only graphs keep the NCHW form that is right for them."""
    assert _conv_dispatches(_conv_graph(["fprop"])) == ["conv_16x16x64x3x3x32"]
    assert _conv_dispatches(_conv_graph(["dgrad"])) == ["conv_4x32x28x28x64x3x3"]


@pytest.mark.parametrize("target", ["rocm:gfx942", "rocm:gfx90a"])
def test_bert_attention_still_compiles_for_rocm(target):
    h = hd.create_handle(device=None, target=target, cache=False)
    for dt in (H, BF):
        g = bert_attention(dt, s=64, heads=4)
        g.build(h)
        ctx = g.get_execution_plan().context
        assert BARRIER not in ctx.mlir and ctx.dispatch_count == 4


# -- 10: grouped f16/bf16 conv_fprop / conv_wgrad on CUDA: one ungrouped conv per group ---------------
def _grouped_conv(op, dt=H, layout="last", g=2, cg=8, kg=16, rank=2):
    import fuzz_ops
    cs = {"kind": "conv", "seed": 3, "op": op, "n": 2, "c": g * cg, "k": g * kg, "g": g, "spatial": [8, 12][:rank],
          "r": [3, 3][:rank], "stride": [1, 2][:rank], "dilation": [1, 1][:rank], "padding": [1, 1][:rank],
          "dt": dt_name(dt), "layout": layout, "epilogue": ["bias", "relu"] if op == "fprop" else []}
    return cs, fuzz_ops.build_conv(cs, np.random.default_rng(0))


def dt_name(dt):
    return {H: "f16", BF: "bf16", F: "f32"}[dt]


def _split_disabled(monkeypatch):
    from lowering import policy
    real = policy.LoweringPolicy.for_target.__func__
    monkeypatch.setattr(policy.LoweringPolicy, "for_target",
                        classmethod(lambda cls, t: real(cls, t).with_(conv_split_groups=False, conv_as_gemm=False)))


@pytest.mark.parametrize("op", ["fprop", "wgrad"])
@pytest.mark.parametrize("layout", ["first", "last"])
def test_grouped_conv_reaches_iree_as_ungrouped_channels_last_convs(op, layout, monkeypatch):
    """Every conv dispatch IREE makes for a grouped CUDA conv is the ungrouped channels-last form (output
    channels after the spatial loops) that the channels-last pass gives ungrouped convs; the
    grouped form (a group loop ahead of the spatial ones) appears without the workaround."""
    def conv_dispatches(g):
        return re.findall(r"func.func @main_dispatch_\d+_(conv_[0-9x]+)_", _flow(lower(_bytes(g), target=CUDA).mlir,
                                                                                 GPU_CONV_FLAGS))
    _gemm_disabled(monkeypatch)
    _, (g, *_rest) = _grouped_conv(op, layout=layout)
    found = conv_dispatches(g)
    # loops (n, oh, ow, f, ...) for fprop and (c, kh, kw, k, ...) for wgrad (a correlation of x with dy)
    lead = {"fprop": "conv_2x8x6x16x", "wgrad": "conv_8x3x3x16x"}[op]
    assert len(found) == 2 and all(f.startswith(lead) for f in found), found   # 2 groups: 2 ungrouped convs
    _split_disabled(monkeypatch)
    _, (g, *_rest) = _grouped_conv(op, layout=layout)
    assert len(conv_dispatches(g)) == 1                                   # the grouped form, one dispatch


def test_split_rule(monkeypatch):
    _gemm_disabled(monkeypatch)
    from lowering.policy import LoweringPolicy as P
    assert P.for_target(CUDA).conv_split_groups
    assert not P.for_target("rocm:gfx942").conv_split_groups and not P.for_target("llvm-cpu:host").conv_split_groups
    # depthwise and dgrad keep their forms (one dispatch)
    for op, g, cg in (("fprop", 16, 1), ("dgrad", 2, 8)):
        _, (gr, *_rest) = _grouped_conv(op, g=g, cg=cg, kg=1 if cg == 1 else 16)
        assert "tensor.insert_slice" not in lower(_bytes(gr), target=CUDA).mlir.split("conv")[-1] or cg == 1


@pytest.mark.parametrize("op", ["fprop", "wgrad"])
@pytest.mark.parametrize("dt", [H, BF], ids=lambda d: d.name)
@pytest.mark.parametrize("rank", [1, 2])
def test_cuda_grouped_conv_ir_is_right_on_the_cpu(op, dt, rank):
    """The module CUDA gets for grouped convs (split per group), compiled for this CPU, against float64."""
    import fuzz_ops
    cs, (g, ins, outs, refs, meta) = _grouped_conv(op, dt, rank=rank, g=3)
    h = hd.create_handle(device="local-task", target="llvm-cpu:host", cache=False)
    from lowering import policy
    real = policy.LoweringPolicy.for_target.__func__
    mp = pytest.MonkeyPatch()
    try:   # the CUDA lowering's forms on this CPU: split groups, channels-first convs (GEMM form off)
        mp.setattr(policy.LoweringPolicy, "for_target", classmethod(
            lambda cls, t: real(cls, CUDA).with_(target=t, cuda_mma_barriers=False, conv_as_gemm=False)))
        assert "tensor.insert_slice" in lower(_bytes(g), target=CUDA).mlir
        r = fuzz_ops.run_case(cs, h)
    finally:
        mp.undo()
    assert r["status"] == "right", r


# -- 10: f16/bf16 convs on CUDA as a gathered matrix times the filter --------------------------------
# The fuzzer's convs that were wrong (21; H100, before the GEMM form) or failed to compile (5; H100, the
# first GEMM form) on the GPU: (op, n, c, k, groups, spatial, r, stride, dilation, padding, dt, layout,
# epilogue, seed); docs/gpu_results/fuzz_cuda_convs_matmuls_h100.json
GPU_FAILED_CONVS = [
    ["wgrad",1,288,112,4,[30,14],[2,2],[1,2],[1,1],[0,1],"f16","last",[],110000334],  # WRONG
    ["fprop",4,12,36,3,[6],[1],[1],[1],[1],"bf16","last",[],110000375],  # WRONG
    ["wgrad",2,76,12,1,[1,5],[5,1],[3,3],[1,2],[3,1],"f16","last",[],111000397],  # WRONG
    ["wgrad",1,24,204,3,[70],[3],[3],[1],[1],"f16","first",[],111000431],  # WRONG
    ["fprop",1,16,144,2,[4,27],[3,1],[3,2],[1,2],[0,0],"f16","first",["bias"],111000443],  # WRONG
    ["wgrad",1,204,48,3,[49],[2],[3],[2],[0],"f16","first",[],111000453],  # WRONG
    ["fprop",4,228,15,3,[3],[1],[1],[1],[0],"bf16","first",["bias","gelu"],111000464],  # WRONG
    ["wgrad",4,64,12,1,[8],[1],[3],[2],[0],"f16","last",[],112000410],  # WRONG
    ["wgrad",2,47,94,47,[1,6,10],[3,1,1],[3,1,3],[1,2,1],[2,1,0],"bf16","last",[],112000432],  # WRONG
    ["fprop",2,16,72,1,[1,17],[3,5],[3,1],[1,1],[1,2],"f16","first",["gelu"],102000383],  # error
    ["fprop",2,16,96,2,[55],[1],[2],[2],[1],"bf16","last",[],102000389],  # WRONG
    ["fprop",1,36,16,1,[6,11,2],[3,5,3],[1,1,1],[1,2,1],[2,2,2],"f16","first",["gelu"],102000438],  # WRONG
    ["fprop",4,84,27,3,[44],[1],[1],[2],[0],"bf16","first",["bias"],103000333],  # WRONG
    ["fprop",2,24,36,1,[1,3,6],[3,3,3],[3,1,1],[1,1,2],[2,0,3],"bf16","first",["bias","relu"],103000376],  # error
    ["fprop",2,276,240,3,[96],[1],[2],[2],[1],"f16","first",["bias"],103000415],  # WRONG
    ["dgrad",2,22,4,1,[55],[1],[1],[1],[0],"f16","first",[],105000362],  # WRONG
    ["fprop",1,40,16,1,[20,20],[2,3],[1,3],[1,2],[0,3],"f16","first",[],107000345],  # WRONG
    ["fprop",4,544,320,8,[12,25],[1,1],[1,3],[2,1],[0,0],"bf16","first",[],107000411],  # WRONG
    ["fprop",2,52,24,1,[2,3,8],[1,3,1],[1,1,1],[1,1,1],[1,0,0],"bf16","first",["gelu"],107000412],  # WRONG
    ["fprop",4,24,24,1,[5,3,5],[5,5,3],[1,3,1],[1,2,2],[2,5,1],"bf16","first",[],107000418],  # WRONG
    ["fprop",2,92,64,1,[5,1,12],[1,3,1],[1,1,2],[1,1,2],[0,2,1],"bf16","first",["bias","gelu"],108000435],  # WRONG
    ["dgrad",1,57,12,3,[1],[3],[2],[1],[2],"f16","first",[],313001000],  # error
    ["dgrad",1,3,3,3,[2,2,7],[1,2,2],[2,3,1],[1,1,2],[1,1,2],"bf16","last",[],314001012],  # error
    ["fprop",1,2,2,2,[27,3],[2,3],[3,1],[1,1],[0,1],"bf16","last",["bias","gelu"],302000995],  # error
    ["fprop",2,18,18,18,[27],[3],[3],[2],[0],"bf16","last",["tanh"],303000925],  # error
    ["fprop",1,21,21,21,[1,4],[2,1],[2,1],[1,1],[1,1],"bf16","last",[],306000995],  # error
]
_CONV_KEYS = ("op", "n", "c", "k", "g", "spatial", "r", "stride", "dilation", "padding", "dt", "layout", "epilogue", "seed")


def _fuzz_conv(row):
    return {"kind": "conv", "size": "large", **dict(zip(_CONV_KEYS, row))}


def _cuda_forms_on_cpu(mp, barriers=False):
    """The CUDA lowering's forms for builds on this CPU (``barriers``: the mma guards too, with the K padding
    they bring; the barriers themselves change nothing there)."""
    from lowering import policy
    real = policy.LoweringPolicy.for_target.__func__
    mp.setattr(policy.LoweringPolicy, "for_target", classmethod(
        lambda cls, t: real(cls, CUDA).with_(target=t, cuda_mma_barriers=barriers)))


def _dispatches(g, flags=()):
    return re.findall(r"func.func @main_dispatch_\d+_(\w+)", _flow(lower(_bytes(g), target=CUDA).mlir, flags))


@pytest.mark.parametrize("row", GPU_FAILED_CONVS[:21:4] + GPU_FAILED_CONVS[21:], ids=lambda r: f"{r[0]}-g{r[4]}-{r[10]}")
def test_cuda_convs_reach_iree_as_batch_matmuls(row):
    """No conv dispatch: a gather, the filter relayout and one batch_matmul with K a multiple of 16;
    the same convs in f32 keep IREE's conv forms."""
    import fuzz_ops
    cs = _fuzz_conv(row)
    found = _dispatches(fuzz_ops.build_conv(cs, np.random.default_rng(0))[0])
    assert not [d for d in found if d.startswith("conv")], found
    mms = [re.match(r"batch_matmul_(\d+)x(\d+)x(\d+)x(\d+)_", d) for d in found if d.startswith("batch_matmul")]
    assert len(mms) == 1 and int(mms[0].group(4)) % 16 == 0, found
    f32 = _dispatches(fuzz_ops.build_conv({**cs, "dt": "f32"}, np.random.default_rng(0))[0])
    one = all(r == 1 for r in cs["r"])   # f32 1x1 convs take the GEMM form too (14, below)
    assert bool([d for d in f32 if d.startswith("batch_matmul")]) == one, f32


def test_gpu_failed_convs_build_for_cuda():
    """The five that failed to compile (M = 1, and Fg = 1 with the output relayout fused) build now."""
    import fuzz_ops
    h = hd.create_handle(device=None, target=CUDA, cache=False)
    for row in GPU_FAILED_CONVS[21:]:
        fuzz_ops.build_conv(_fuzz_conv(row), np.random.default_rng(0))[0].build(h)


@pytest.mark.parametrize("part", [0, 1])
def test_cuda_conv_gemm_ir_is_right_on_the_cpu(part):
    """Every conv the GPU got wrong or failed on, and 30 random ones, in the CUDA lowering's form (GEMM)
    built for this CPU, against float64."""
    import fuzz_ops
    rows = GPU_FAILED_CONVS[part::2]
    cases = [_fuzz_conv(r) for r in rows] + [fuzz_ops.gen_case(7000 + 2 * i + part, "conv", "small") for i in range(15)]
    h = hd.create_handle(device="local-task", target="llvm-cpu:host", cache=False)
    mp = pytest.MonkeyPatch()
    try:
        _cuda_forms_on_cpu(mp)
        assert "linalg.batch_matmul" in lower(_bytes(fuzz_ops.build_conv(cases[0], np.random.default_rng(0))[0]),
                                              target=CUDA).mlir
        bad = [(fuzz_ops.describe(c), r) for c in cases for r in [fuzz_ops.run_case(c, h)] if r["status"] != "right"]
    finally:
        mp.undo()
    assert bad == []


# -- 12: the reduction of f16/bf16 matmuls on CUDA zero-padded to a multiple of 16 ----------------------
def _matmul_case(k, dt="bf16", b=5, m=1232, n=1296):
    import fuzz_ops
    cs = {"kind": "matmul", "seed": 5, "size": "large", "m": m, "n": n, "k": k, "b": b, "bcast": "none", "dt": dt,
          "a_layout": "row", "b_layout": "row", "out_layout": "row", "epilogue": []}
    return cs, fuzz_ops.build_matmul(cs, np.random.default_rng(0))[0]


def _k_padding(g) -> list:
    """The reduction entries of IREE's lowering configs' ``padding`` for ``g``'s CUDA module."""
    import iree.compiler as ic
    text = ic.compile_str(lower(_bytes(g), target=CUDA).mlir, target_backends=["cuda"],
                          extra_args=["--iree-cuda-target=sm_80", "--compile-to=executable-configurations"]).decode()
    return [int(p.split(",")[-1]) for p in re.findall(r"padding = \[([0-9, ]+)\]", text)]


@pytest.mark.parametrize("k", [40, 488, 3256])
def test_matmul_reduction_padded_to_16_on_cuda(k, monkeypatch):
    """The issue's K (8 mod 16): the contraction IREE gets has K a multiple of 16, and each K tile IREE picks
    divides it (nothing past B's end is read); without the padding, IREE pads K itself."""
    _, g = _matmul_case(k)
    found = _dispatches(g)
    kk = [int(d.split("_")[2].split("x")[3]) for d in found if d.startswith("batch_matmul")]
    assert kk == [-(-k // 16) * 16], found
    tiles = _k_padding(g)
    assert tiles and all(kk[0] % t == 0 for t in tiles), tiles
    monkeypatch.setattr(mm_lowering, "pad_reduction", lambda em, a, b: (a, b))
    assert any(k % t for t in _k_padding(g))                      # the form that read past B


def test_no_reduction_padding_where_not_needed():
    """Aligned K and f32 are not padded; ROCm gets the padding too (the same IREE pipeline pads K there:
    not measured on an AMD GPU); the CPU does not."""
    for k, dt in ((48, "bf16"), (40, "f32")):
        _, g = _matmul_case(k, dt, b=2, m=64, n=64)
        assert "tensor.pad" not in lower(_bytes(g), target=CUDA).mlir
    _, g = _matmul_case(37, b=2, m=64, n=64)
    assert "tensor.pad" in lower(_bytes(g, "rocm:gfx942"), target="rocm:gfx942").mlir
    assert "tensor.pad" not in lower(_bytes(g, "llvm-cpu:host"), target="llvm-cpu:host").mlir


@pytest.mark.parametrize("k", [8, 40, 133])
def test_cuda_matmul_with_padded_reduction_is_right_on_the_cpu(k):
    import fuzz_ops
    cs, _ = _matmul_case(k, b=3, m=57, n=75)
    h = hd.create_handle(device="local-task", target="llvm-cpu:host", cache=False)
    mp = pytest.MonkeyPatch()
    try:
        _cuda_forms_on_cpu(mp, barriers=True)
        assert "tensor.pad" in lower(_bytes(_matmul_case(k, b=3, m=57, n=75)[1]), target=CUDA).mlir
        r = fuzz_ops.run_case(cs, h)
    finally:
        mp.undo()
    assert r["status"] == "right", r


# -- 13: f16/bf16 operands widened to f32 by IDENTITY casts (cuDNN FE's matmul fuzzer, f32 outputs) ----
def _widened_case(k, dt="f16", a_layout="col", b=5, m=1376, n=40):
    import fuzz_ops
    cs = {"kind": "matmul", "seed": 5, "size": "large", "m": m, "n": n, "k": k, "b": b, "bcast": "none", "dt": dt,
          "a_layout": a_layout, "b_layout": "row", "out_layout": "row", "epilogue": [], "widen": True,
          "out_dt": "f32"}
    return cs, fuzz_ops.build_matmul(cs, np.random.default_rng(0))[0]


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_widened_matmul_takes_the_narrow_sources_and_their_guards_on_cuda(dt):
    """test_matmul_fuzzer's t77 (b5 1376x40x2120 f16, column-major A, f32 output): wrong on an H100 with the
    casts fused into IREE's f16 mma contraction. The contraction now reads the f16/bf16 sources, K padded
    to 2128, the transposed A behind a barrier; the CPU keeps the f32 form."""
    _, g = _widened_case(2120, dt)
    mlir = lower(_bytes(g), target=CUDA).mlir
    mm = [ln for ln in mlir.splitlines() if "linalg.batch_matmul" in ln]
    assert len(mm) == 1 and f"tensor<5x1376x2128x{dt}>, tensor<5x2128x40x{dt}>" in mm[0], mm
    assert BARRIER in mlir
    cpu = lower(_bytes(g, "llvm-cpu:host"), target="llvm-cpu:host").mlir
    assert "tensor.pad" not in cpu and BARRIER not in cpu
    assert "x2120xf32>" in [ln for ln in cpu.splitlines() if "linalg.batch_matmul" in ln][0]


def test_widened_matmul_of_different_sources_keeps_its_cast_apart():
    """bf16 x f16 widened: no narrow form (one mma type), the cast kept apart as before."""
    g = hd.Graph(io_data_type=F, compute_data_type=F)
    a = g.tensor(name="a", uid=1, dim=[1, 40, 24], data_type=BF)
    b = g.tensor(name="b", uid=2, dim=[1, 24, 16], data_type=H)
    a2, b2 = (g.pointwise(v, mode=P.IDENTITY, compute_data_type=F).set_data_type(F) for v in (a, b))
    g.matmul(a2, b2).set_output(True).set_uid(3)
    mlir = lower(_bytes(g), target=CUDA).mlir
    assert "tensor<1x40x24xf32>, tensor<1x24x16xf32>" in [ln for ln in mlir.splitlines() if "linalg.batch_matmul" in ln][0]


@pytest.mark.parametrize("k,dt,a_layout", [(40, "f16", "col"), (133, "bf16", "row"), (296, "f16", "pad")])
def test_cuda_widened_matmul_is_right_on_the_cpu(k, dt, a_layout):
    """The CUDA form of the widened matmul (narrow sources, K padded) built for this CPU, against float64."""
    import fuzz_ops
    cs, _ = _widened_case(k, dt, a_layout, b=3, m=57, n=75)
    h = hd.create_handle(device="local-task", target="llvm-cpu:host", cache=False)
    mp = pytest.MonkeyPatch()
    try:
        _cuda_forms_on_cpu(mp, barriers=True)
        assert "tensor.pad" in lower(_bytes(_widened_case(k, dt, a_layout, b=3, m=57, n=75)[1]), target=CUDA).mlir
        r = fuzz_ops.run_case(cs, h)
    finally:
        mp.undo()
    assert r["status"] == "right", r


def test_fuzzer_draws_widened_matmuls():
    import fuzz_ops
    cases = [fuzz_ops.gen_case(s, "matmul", "large") for s in range(200)]
    widened = [c for c in cases if c.get("widen")]
    assert widened and all(c["dt"] in ("f16", "bf16") and c["out_dt"] == "f32" for c in widened)
    assert "widened" in fuzz_ops.describe(widened[0])


# -- 14: f32 1x1 convolutions with a stride on CUDA (cuDNN FE's conv fuzzer) -----------------------------
FE_F32_K1_CONVS = [   # cuDNN FE v1.23 test_conv_fuzzer.py L0 cases wrong on an H200 (93-98% of the outputs)
    ["wgrad", 8, 32, 40, 1, [40, 16], [1, 1], [3, 1], [1, 1], [0, 0], "f32", "first", [], 716],     # t716
    ["fprop", 1, 256, 8, 1, [8, 16, 16], [1, 1, 1], [1, 1, 3], [1, 1, 1], [0, 0, 0], "f32", "first", ["bias"], 925],
]


@pytest.mark.parametrize("row", FE_F32_K1_CONVS, ids=["t716-wgrad-2d", "t925-fprop-3d"])
def test_f32_1x1_strided_convs_reach_iree_as_batch_matmuls_on_cuda(row):
    """No conv dispatch for the two f32 1x1 strided convs, a batch_matmul instead; f32 convs with a
    larger filter keep IREE's conv code; the CPU is unchanged."""
    import fuzz_ops
    cs = _fuzz_conv(row)
    found = _dispatches(fuzz_ops.build_conv(cs, np.random.default_rng(0))[0])
    assert not [d for d in found if d.startswith("conv")] and [d for d in found if d.startswith("batch_matmul")], found
    wide = {**cs, "r": [3] * len(cs["r"]), "padding": [1] * len(cs["r"])}
    found = _dispatches(fuzz_ops.build_conv(wide, np.random.default_rng(0))[0])
    assert not [d for d in found if d.startswith("batch_matmul")], found
    cpu = lower(_bytes(fuzz_ops.build_conv(cs, np.random.default_rng(0))[0], "llvm-cpu:host"), target="llvm-cpu:host")
    assert "linalg.batch_matmul" not in cpu.mlir


def test_cuda_f32_1x1_conv_gemm_ir_is_right_on_the_cpu():
    """The two cases, a dgrad and depthwise/grouped variants of them in the CUDA lowering's GEMM form built
    for this CPU, against float64."""
    import fuzz_ops
    rows = FE_F32_K1_CONVS + [
        ["dgrad", 2, 24, 40, 1, [20, 16], [1, 1], [3, 2], [1, 1], [0, 0], "f32", "first", [], 7001],
        ["fprop", 2, 32, 32, 4, [9, 10], [1, 1], [2, 3], [1, 1], [0, 0], "f32", "last", ["bias"], 7002],
        ["wgrad", 2, 16, 16, 16, [11, 7], [1, 1], [2, 2], [1, 1], [0, 0], "f32", "first", [], 7003]]
    h = hd.create_handle(device="local-task", target="llvm-cpu:host", cache=False)
    mp = pytest.MonkeyPatch()
    try:
        _cuda_forms_on_cpu(mp)
        assert "linalg.batch_matmul" in lower(_bytes(fuzz_ops.build_conv(_fuzz_conv(rows[0]),
                                                                         np.random.default_rng(0))[0]), target=CUDA).mlir
        bad = [(fuzz_ops.describe(c), r) for c in map(_fuzz_conv, rows) for r in [fuzz_ops.run_case(c, h)]
               if r["status"] != "right"]
    finally:
        mp.undo()
    assert bad == []
