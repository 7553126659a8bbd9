"""Generated attention kernels (knob GPU_KERNELS=GENERATED, sdpa forward; docs/generated_kernels.md).

On the CPU: Triton's ahead-of-time flash-attention kernels for sm_90a and sm_80 (ABI, no register
spills), the pattern finder (what it takes, what it leaves to IREE), the MLIR that embeds the
kernels (alone and beside a matmul pattern), a cuda:sm_80 plan compiled by IREE with the cubins
inside, the knob and cache key, and a restore in a process where Triton cannot be imported.
``gpu``-marked: the kernels run on a CUDA device against a float64 torch reference (skipped here).
"""
from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

import hipdnn_iree as hd  # noqa: E402
from graph_ir import decode_graph  # noqa: E402
from hipdnn_iree.plugins.iree_linalg.kernels import generate, generator_id  # noqa: E402
from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import MAX_SHARED, _entry_params  # noqa: E402
from lowering.ops.generated_matmul import find_patterns  # noqa: E402
from lowering.ops.generated_sdpa import Operand, SdpaPattern, find_sdpa_patterns  # noqa: E402

TARGET = "cuda:sm_80"
_DT = {"f16": hd.DataType.HALF, "bf16": hd.DataType.BFLOAT16, "f32": hd.DataType.FLOAT}


def _dense(dims):
    b, h, s, d = dims
    return (h * s * d, s * d, d, 1)


def _bshd(dims):
    """[B, H, S, D] logical, stored [B, S, H, D] (the common PyTorch layout)."""
    b, h, s, d = dims
    return (s * h * d, d, h * d, 1)


def _pattern(dtype="f16", b=2, hq=4, hk=2, sq=100, skv=72, d=64, causal=True, stats=False):
    q, k = (b, hq, sq, d), (b, hk, skv, d)
    return SdpaPattern(0, b, hq, hk, hk, sq, skv, d, d, Operand(1, dtype, _dense(q)), Operand(2, dtype, _dense(k)),
                       Operand(3, dtype, _dense(k)), 1 / math.sqrt(d), causal, 4, dtype, (0, 1, 2, 3),
                       5 if stats else None)


def _graph(handle=None, dtype="f16", b=1, hq=4, hk=2, hv=None, sq=64, skv=80, d=64, dv=None, causal=True,
           layout=_dense, out_layout=None, scale=None, stats=False, mask=False, matmul=False, compute=None,
           knobs=None, name="sdpa"):
    """An sdpa graph (uids q 1, k 2, v 3, o 4, stats 5, mask 6; with ``matmul`` a second, independent
    matmul X 7 @ W 8 -> 9). Built into plans when ``handle`` is given."""
    hv, dv = hv or hk, dv or d
    dt = _DT[dtype]
    g = hd.Graph(name=name, io_data_type=dt, compute_data_type=hd.DataType.FLOAT)
    dq, dk, dvd = (b, hq, sq, d), (b, hk, skv, d), (b, hv, skv, dv)
    q = g.tensor(name="Q", uid=1, dim=list(dq), stride=list(layout(dq)))
    k = g.tensor(name="K", uid=2, dim=list(dk), stride=list(layout(dk)))
    v = g.tensor(name="V", uid=3, dim=list(dvd), stride=list(layout(dvd)))
    extra = {}
    if mask:
        extra["mask"] = g.tensor(name="M", uid=6, dim=[1, 1, sq, skv], data_type=hd.DataType.BOOLEAN)
    if compute is not None:
        extra["compute_data_type"] = compute
    res = g.sdpa(q, k, v, attn_scale=scale, is_causal=causal, generate_stats=stats, **extra)
    o = res[0] if stats else res
    o.set_output(True).set_uid(4)
    if out_layout is not None:
        o.set_stride(list(out_layout((b, hq, sq, dv))))
    if stats:
        res[1].set_output(True).set_uid(5)
    if matmul:
        x = g.tensor(name="X", uid=7, dim=[1, 64, 96])
        w = g.tensor(name="W", uid=8, dim=[1, 96, 80])
        g.matmul(x, w).set_output(True).set_uid(9)
    g.validate()
    if handle is not None:
        g.build_operation_graph(handle)
        g.create_execution_plan("IREE_LINALG", knobs or {"GPU_KERNELS": "GENERATED"})
        g.check_support()
        g.build_plans()
    return g


@pytest.fixture(scope="module")
def handle():
    return hd.create_handle(device=None, target=TARGET)


def _op_graph(g, h):
    g.build_operation_graph(h)
    return decode_graph(g.get_op_graph_bytes())


# ---------------------------------------------------------------------------------------------
# kernel generation (no GPU)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,d,causal,stats", [("f16", 64, True, False), ("bf16", 128, False, True),
                                                  ("bf16", 80, True, False)])
def test_kernels_for_sm90a_and_sm80(dtype, d, causal, stats):
    p = _pattern(dtype, d=d, causal=causal, stats=stats)
    ks = generate(p)
    assert [(k.arch, k.fmt) for k in ks] == [("sm_90a", "cubin"), ("sm_80", "cubin"), ("sm_80", "ptx")]
    for k in ks:
        assert k.name == "hipdnn_sdpa" and len(k.image) > 1000 and k.generator == generator_id()
        # one grid and block for every variant: ceil(Sq / BM) query tiles x B * Hq heads
        assert k.block == 256 and k.grid == (1, 8, 1) and 0 < k.shared <= MAX_SHARED
    assert ks[0].image[:4] == b"\x7fELF" and ks[1].image[:4] == b"\x7fELF"
    ptx = ks[2].image.rstrip(b"\0").decode()
    assert ".target sm_80" in ptx
    want = (5 if stats else 4) + 2   # q, k, v, o (+ lse), then Triton 3.6's global and profile scratch pointers
    assert _entry_params(ptx, "hipdnn_sdpa") == want
    head = ptx[ptx.index(".entry hipdnn_sdpa("):]
    head = head[:head.index(")")]
    assert head.count(".param .u64 .ptr") == want


def test_small_query_tile():
    ks = generate(_pattern(sq=40, skv=300, causal=False))
    assert ks[0].grid == (1, 8, 1) and ks[0].block == 128   # BM 64, 4 warps


def _compile(p, cap):
    """The kernel ``generate`` embeds for ``cap`` (its block sizes after the shared-memory fit), with its PTX."""
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_sdpa import compile_kernel, config
    cfg = config(p, "sm_90a" if cap == 90 else "sm_80")
    while True:
        k = compile_kernel(p, cfg, cap)[0]
        if k.metadata.shared <= MAX_SHARED:
            return k
        cfg = dict(cfg, num_stages=cfg["num_stages"] - 1)


@pytest.mark.parametrize("d,causal", [(64, True), (128, True), (128, False)])
def test_no_register_spills_and_wgmma_on_sm90a(d, causal, tmp_path):
    """The benchmark's shapes (bf16, [B, S, H, D] storage): ptxas reports no spills on either arch."""
    import triton
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.path.exists(ptxas):
        pytest.skip("Triton's ptxas is not installed")
    dims = (2, 16, 2048, d)
    p = SdpaPattern(0, 2, 16, 16, 16, 2048, 2048, d, d, Operand(1, "bf16", _bshd(dims)),
                    Operand(2, "bf16", _bshd(dims)), Operand(3, "bf16", _bshd(dims)), 0.125, causal, 4, "bf16",
                    (0, 2, 1, 3))
    for cap, arch in ((90, "sm_90a"), (80, "sm_80")):
        k = _compile(p, cap)
        ptx = k.asm["ptx"]
        assert (cap == 90) == ("wgmma" in ptx)
        f = tmp_path / f"{arch}.ptx"
        f.write_text(ptx)
        out = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", str(f), "-o", os.devnull], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "0 bytes spill stores, 0 bytes spill loads" in out.stderr, out.stderr


_INTERPRET = textwrap.dedent("""
    import math, os, sys
    import numpy as np
    import torch
    from triton.runtime import interpreter as ti
    orig = ti._patch_lang_tensor

    def patched(tensor, scope):
        orig(tensor, scope)
        # NOTE: Triton 3.6's interpreter keeps scalars as 1-element arrays, which numpy 2 refuses to int()
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    ti._patch_lang_tensor = patched
    from lowering.ops.generated_sdpa import Operand, SdpaPattern
    from hipdnn_iree.plugins.iree_linalg.kernels import _triton_sdpa_src as src
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_sdpa import _constexprs, config

    def run(b, hq, hk, hv, sq, skv, d, dv, causal, stats, layout, o_layout):
        g = torch.Generator().manual_seed(1)

        def make(h, s, e, lay):
            if lay == "bshd":
                return torch.randn(b, s, h, e, generator=g).half().transpose(1, 2)
            if lay == "qkv":   # slot 1 of a packed [B, S, 3, H, E] buffer: a strided view
                return torch.randn(b, s, 3, h, e, generator=g).half()[:, :, 1].transpose(1, 2)
            return torch.randn(b, h, s, e, generator=g).half()

        q, k, v = make(hq, sq, d, layout), make(hk, skv, d, layout), make(hv, skv, dv, layout)
        o = make(hq, sq, dv, o_layout).fill_(float("nan"))
        st = lambda t: tuple(0 if n == 1 else s for n, s in zip(t.shape, t.stride()))
        scale = 1 / math.sqrt(d)
        p = SdpaPattern(0, b, hq, hk, hv, sq, skv, d, dv, Operand(1, "f16", st(q)), Operand(2, "f16", st(k)),
                        Operand(3, "f16", st(v)), scale, causal, 4, "f16",
                        (0, 2, 1, 3) if o_layout == "bshd" else (0, 1, 2, 3), 5 if stats else None)
        assert p.o_strides == tuple(o.stride()) or b == 1
        cfg = config(p, "sm_80")
        _, const = _constexprs(p, cfg)
        const.pop("lse_ptr", None)
        lse = torch.full((b, hq, sq), float("nan"))
        src.hipdnn_sdpa[(-(-sq // cfg["BM"]), b * hq, 1)](q, k, v, o, lse if stats else None, **const)
        qd = q.double()
        kd = k.double().repeat_interleave(hq // hk, 1)
        vd = v.double().repeat_interleave(hq // hv, 1)
        s = qd @ kd.transpose(-1, -2) * scale
        if causal:   # top-left: key j kept for query i iff j <= i
            s = s.masked_fill(~torch.ones(sq, skv, dtype=torch.bool).tril(), float("-inf"))
        ref = torch.softmax(s, -1) @ vd
        err = ((o.double() - ref).abs().max() / ref.abs().max()).item()
        lerr = (lse.double() - torch.logsumexp(s, -1)).abs().max().item() if stats else 0.0
        return err, lerr

    CASES = [
        (1, 2, 2, 2, 64, 64, 64, 64, True, False, "bhsd", "bhsd"),
        (2, 4, 2, 1, 100, 72, 64, 32, True, True, "bshd", "bshd"),     # GQA with Hk != Hv, Dv != D, partial tiles
        (1, 2, 1, 1, 200, 70, 128, 128, True, True, "bhsd", "bhsd"),   # Sq > Skv: late queries see every key
        (1, 2, 2, 2, 70, 300, 64, 64, True, False, "qkv", "bhsd"),     # Sq < Skv; q, k, v strided views
        (1, 3, 3, 3, 130, 129, 80, 48, False, True, "bhsd", "bshd"),   # padded head dims, non-causal
        (2, 2, 2, 2, 256, 256, 64, 64, False, False, "bhsd", "bhsd"),
        (1, 2, 2, 2, 40, 40, 16, 16, True, False, "bhsd", "bhsd"),     # BM 64
    ]
    bad = 0
    for c in CASES:
        err, lerr = run(*c)
        ok = err <= 4e-3 and lerr <= 1e-4
        bad += not ok
        print("ok " if ok else "BAD", c, err, lerr, flush=True)
    sys.exit(1 if bad else 0)
""")


def test_template_numerics_in_triton_interpreter():
    """The template's logic (online softmax, causal tile split and top-left mask, GQA with Hk != Hv,
    strided q/k/v/o, partial tiles, padded head dims, stats) on the CPU in Triton's interpreter, f16,
    against float64 torch. NOTE: bf16 is left out: Triton 3.6's interpreter computes tl.dot of bf16
    operands wrongly (on their raw bits; a 16x16 bf16 dot alone is off by 1e10)."""
    pytest.importorskip("torch")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
    out = subprocess.run([sys.executable, "-c", _INTERPRET], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert out.stdout.count("ok ") == 7


# ---------------------------------------------------------------------------------------------
# the pattern finder
# ---------------------------------------------------------------------------------------------

def test_pattern_of_a_gqa_causal_graph(handle):
    desc = _op_graph(_graph(dtype="bf16", b=2, hq=8, hk=2, hv=4, sq=50, skv=70, d=64, dv=128, layout=_bshd,
                            out_layout=_bshd, scale=0.3), handle)
    (p,) = find_sdpa_patterns(desc)
    assert (p.b, p.hq, p.hk, p.hv, p.sq, p.skv, p.d, p.dv) == (2, 8, 2, 4, 50, 70, 64, 128)
    assert p.q.strides == _bshd((2, 8, 50, 64)) and p.k.strides == _bshd((2, 2, 70, 64))
    assert p.scale == pytest.approx(0.3) and p.causal and p.o_dtype == "bf16" and not p.stats
    # o written in its own memory order [B, S, H, D]
    assert p.o_order == (0, 2, 1, 3) and p.o_strides == _bshd((2, 8, 50, 128))
    assert p.o_phys_shape == (2, 50, 8, 128)
    assert '"kind":"sdpa"' in p.key() and find_patterns(desc) == []


def test_pattern_defaults_and_stats(handle):
    h = handle
    (p,) = find_sdpa_patterns(_op_graph(_graph(d=128, causal=False, stats=True), h))
    assert p.scale == pytest.approx(1 / math.sqrt(128)) and not p.causal and p.stats and p.stats_uid == 5
    assert p.o_order == (0, 1, 2, 3)
    g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
    q = g.tensor(name="Q", uid=1, dim=[1, 2, 16, 64])
    kv = [g.tensor(name=n, uid=u, dim=[1, 2, 16, 64]) for n, u in (("K", 2), ("V", 3))]
    s = g.tensor(name="S", uid=10, value=0.25)
    g.sdpa(q, *kv, attn_scale=s).set_output(True).set_uid(4)
    (p,) = find_sdpa_patterns(_op_graph(g, h))
    assert p.scale == 0.25   # a constant scale tensor is compiled in


def _refused(g, h):
    return find_sdpa_patterns(_op_graph(g, h)) == []


def test_patterns_refused(handle):
    h = handle
    assert _refused(_graph(mask=True), h)                                  # a mask tensor
    assert _refused(_graph(dtype="f32"), h)                                # f32 q/k/v
    assert _refused(_graph(compute=hd.DataType.HALF), h)                   # f16 compute
    assert _refused(_graph(d=40), h)                                       # D not a multiple of 16
    assert _refused(_graph(d=256), h)                                      # D > 128
    assert _refused(_graph(dv=192), h)                                     # Dv > 128
    # a scale bound at execute (read on the device)
    g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
    q = g.tensor(name="Q", uid=1, dim=[1, 2, 16, 64])
    kv = [g.tensor(name=n, uid=u, dim=[1, 2, 16, 64]) for n, u in (("K", 2), ("V", 3))]
    s = g.tensor(name="S", uid=10, dim=[1], data_type=hd.DataType.FLOAT)
    g.sdpa(q, *kv, attn_scale=s).set_output(True).set_uid(4)
    assert _refused(g, h)
    # fields the kernel does not implement (dropout, bottom-right causal, ...): IREE's, which refuses them
    desc = _op_graph(_graph(), h)
    for field, value in (("dropout_probability", 0.1), ("causal_mask_bottom_right", True), ("alibi_mask", True),
                         ("max_uid", 11), ("left_bound", 3)):
        node = desc.nodes[0]
        bad = dataclasses.replace(desc, nodes=(dataclasses.replace(node, attrs=dataclasses.replace(
            node.attrs, **{field: value})),))
        assert find_sdpa_patterns(bad) == [], field
    # dynamic-shape builds get no generated kernels
    from hipdnn_iree.plugins.iree_linalg.build import generated_kernels
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    res = resolve(parse_target(TARGET), GraphSummary.of(desc), {"GPU_KERNELS": "GENERATED"})
    assert generated_kernels(desc, res, spec=object()) == (dataclasses.replace(
        res, policy=res.policy.with_(generated_kernels="")), None)


# ---------------------------------------------------------------------------------------------
# lowering, plans, knob
# ---------------------------------------------------------------------------------------------

def _lower(g, knobs):
    from hipdnn_iree.plugins.iree_linalg.build import generated_kernels, lower
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    gb = g.get_op_graph_bytes()
    desc = decode_graph(gb)
    res = resolve(parse_target(TARGET), GraphSummary.of(desc), knobs)
    res, kernels = generated_kernels(desc, res)
    return res, lower(desc, gb, res, kernels=kernels).mlir   # parsed and verified by iree.compiler.ir


def test_lowered_mlir_holds_the_extern_dispatch():
    h = hd.create_handle(device=None, target=TARGET)
    g = _graph(dtype="bf16", hq=4, hk=1, sq=64, skv=80, d=64, stats=True)
    g.build_operation_graph(h)
    res, text = _lower(g, {"GPU_KERNELS": "GENERATED"})
    assert res.policy.generated_kernels == generator_id()
    assert text.count('"hal.dispatch.extern"') == 1 and 'export_name = "hipdnn_sdpa"' in text
    assert "workgroup_size = [128 : index, 1 : index, 1 : index]" in text   # Sq 64: BM 64, 4 warps
    for tag in ("sm_90a-cubin", "sm_80-cubin", "sm_80-ptx"):
        assert f'hipdnn.kernel = "{tag}"' in text
    # q, k, v read-only; o, stats and the two scratch results writable
    assert text.count("#hal.pipeline.binding<storage_buffer, ReadOnly>") == 3
    assert text.count("#hal.pipeline.binding<storage_buffer>") == 4
    assert "-> (tensor<1x4x64x64xbf16>, tensor<1x4x64x1xf32>, tensor<16xi8>, tensor<16xi8>)" in text
    assert "iree_linalg_ext.attention" not in text and "math.exp" not in text   # no IREE attention left
    for knobs in ({}, {"GPU_KERNELS": "IREE"}, {"GPU_KERNELS": "AUTO"}):   # AUTO stays IREE
        res, plain = _lower(g, knobs)
        assert res.policy.generated_kernels == "" and "hal.dispatch.extern" not in plain


def test_sdpa_beside_a_matmul_pattern():
    h = hd.create_handle(device=None, target=TARGET)
    g = _graph(matmul=True, causal=False, layout=_bshd, out_layout=_bshd)
    g.build_operation_graph(h)
    _, text = _lower(g, {"GPU_KERNELS": "GENERATED"})
    assert text.count('"hal.dispatch.extern"') == 2
    assert 'export_name = "hipdnn_sdpa"' in text and 'export_name = "hipdnn_matmul"' in text
    # o written in [B, S, H, D] order by the kernel, read back through a transpose the output's cancels
    assert "-> (tensor<1x64x4x64xf16>, tensor<16xi8>, tensor<16xi8>)" in text


def _kernels_of(g):
    (p,) = find_sdpa_patterns(decode_graph(g.get_op_graph_bytes()))
    return generate(p)


def test_generated_plan_compiles_and_carries_the_cubin(handle):
    g = _graph(handle, dtype="bf16", hq=8, hk=2, sq=100, skv=130, d=128, layout=_bshd, out_layout=_bshd)
    assert g.get_engine_config_at_index(0).knobs["GPU_KERNELS"] == "GENERATED"
    plan = g.serialize_compiled_plan()
    for k in _kernels_of(g):
        assert k.image.rstrip(b"\0") in plan, f"{k.arch} {k.fmt} image not in the plan"
    # one dispatch: the kernel writes o in its memory order (the two transposes cancel)
    assert g.get_execution_plan().context.dispatch_count == 1
    iree = _graph(handle, dtype="bf16", hq=8, hk=2, sq=100, skv=130, d=128, layout=_bshd, out_layout=_bshd,
                  knobs={"GPU_KERNELS": "IREE"})
    assert iree.get_engine_config_at_index(0).knobs["GPU_KERNELS"] == "IREE"
    assert b"hipdnn_sdpa" not in iree.serialize_compiled_plan()


def test_strided_views_plan(handle):
    """q, k, v slots of one packed [B, S, 3, H, D] buffer (strided views: read by the kernel through
    their strides from each run's first element) and o a slot of a [B, S, 2, H, D] buffer (a strided
    output: the kernel writes row-major, the lowering's strided write does the rest)."""
    b, h, s, d = 1, 4, 96, 64
    g = hd.Graph(name="sdpa_packed", io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
    st = [s * 3 * h * d, d, 3 * h * d, 1]
    q, k, v = (g.tensor(name=n, uid=u, dim=[b, h, s, d], stride=st) for n, u in (("Q", 1), ("K", 2), ("V", 3)))
    o = g.sdpa(q, k, v, is_causal=True)
    o.set_output(True).set_uid(4).set_stride([s * 2 * h * d, d, 2 * h * d, 1])
    g.validate()
    desc = _op_graph(g, handle)
    (p,) = find_sdpa_patterns(desc)
    assert p.q.strides == (0, d, 3 * h * d, 1) and p.o_order == (0, 1, 2, 3)
    g.create_execution_plan("IREE_LINALG", {"GPU_KERNELS": "GENERATED"})
    g.check_support()
    g.build_plans()
    assert g.get_engine_config_at_index(0).knobs["GPU_KERNELS"] == "GENERATED"
    assert generate(p)[1].image in g.serialize_compiled_plan()


def test_knob_and_cache_key_follow_the_template(monkeypatch, tmp_path):
    import shutil
    from hipdnn_iree.plugins.iree_linalg.kernels import triton_matmul
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    from graph_ir.desc import OpKind
    assert "_triton_sdpa_src.py" in triton_matmul.SOURCES and "triton_sdpa.py" in triton_matmul.SOURCES
    s = GraphSummary(kinds=frozenset({OpKind.SDPA}), has_double=False, conv_ranks=(), f32_only=False)
    cuda = parse_target(TARGET)
    gen = resolve(cuda, s, {"GPU_KERNELS": "GENERATED"})
    assert gen.policy.generated_kernels == generator_id() and gen.identity != resolve(cuda, s, {}).identity
    assert resolve(cuda, s, {}).identity == resolve(cuda, s, {"GPU_KERNELS": "IREE"}).identity   # AUTO = IREE
    assert resolve(parse_target("llvm-cpu:host"), s, {"GPU_KERNELS": "GENERATED"}).policy.generated_kernels == ""
    # an edit of the attention template changes the generator identity, hence the policy (cache key)
    for name in triton_matmul.SOURCES:
        shutil.copy(os.path.join(triton_matmul._HERE, name), tmp_path / name)
    with open(tmp_path / "_triton_sdpa_src.py", "a") as f:
        f.write("\n# an edit\n")
    monkeypatch.setattr(triton_matmul, "_HERE", str(tmp_path))
    triton_matmul._source_digest.cache_clear()
    try:
        edited = resolve(cuda, s, {"GPU_KERNELS": "GENERATED"})
        assert generator_id() != gen.policy.generated_kernels
        assert edited.identity != gen.identity and edited.policy.generated_kernels == generator_id()
    finally:
        monkeypatch.undo()
        triton_matmul._source_digest.cache_clear()
    assert generator_id() == gen.policy.generated_kernels


def test_restore_without_triton(handle, tmp_path):
    g = _graph(handle, causal=True, stats=True)
    path = tmp_path / "gk.plan"
    hd.save_plan(str(path), g.serialize_compiled_plan())
    code = textwrap.dedent(f"""
        import sys
        sys.modules["triton"] = None          # import triton now fails
        import hipdnn_iree as hd
        h = hd.create_handle(device=None, target="{TARGET}")
        r = hd.Graph.from_compiled_plan(h, hd.load_plan({str(path)!r}))
        print("knobs", r.get_engine_config_at_index(0).knobs)
        print("tensors", r.get_compiled_plan_tensor_uids())
        assert sys.modules["triton"] is None
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "'GPU_KERNELS': 'GENERATED'" in out.stdout and "tensors [1, 2, 3, 4, 5]" in out.stdout


# ---------------------------------------------------------------------------------------------
# on a CUDA GPU (skipped without one): against float64 torch
# ---------------------------------------------------------------------------------------------

def _reference(torch, q, k, v, scale, causal):
    """float64 sdpa with top-left causal masking and GQA (query head h reads kv head h // (Hq / Hkv))."""
    q, k, v = q.double(), k.double(), v.double()
    hq = q.shape[1]
    k = k.repeat_interleave(hq // k.shape[1], dim=1)
    v = v.repeat_interleave(hq // v.shape[1], dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        sq, skv = s.shape[-2:]
        keep = torch.ones(sq, skv, dtype=torch.bool, device=s.device).tril()   # j <= i: top-left
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    return torch.matmul(torch.softmax(s, dim=-1), v), lse


GPU_CASES = [
    # dtype, b, hq, hk, sq, skv, d, causal, layout, stats
    ("bf16", 2, 8, 8, 512, 512, 64, True, "bhsd", False),
    ("f16", 2, 8, 8, 512, 512, 128, True, "bhsd", False),
    ("bf16", 1, 16, 16, 1024, 1024, 128, False, "bshd", False),
    ("f16", 2, 8, 2, 300, 300, 64, True, "bshd", False),     # GQA, partial tiles
    ("bf16", 1, 8, 1, 200, 777, 128, True, "bhsd", False),   # Sq < Skv (top-left), MQA
    ("f16", 1, 4, 2, 333, 100, 64, True, "bshd", True),      # Sq > Skv: late queries see every key; stats
    ("bf16", 2, 4, 4, 129, 200, 128, False, "bhsd", True),
    ("f16", 1, 4, 4, 256, 256, 96, True, "bhsd", False),     # D padded to 128
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: "-".join(map(str, c)))
def test_generated_sdpa_on_cuda(case):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    dtype, b, hq, hk, sq, skv, d, causal, layout, stats = case
    lay = _bshd if layout == "bshd" else _dense
    h = hd.create_handle(device="cuda")
    g = _graph(h, dtype=dtype, b=b, hq=hq, hk=hk, sq=sq, skv=skv, d=d, causal=causal, layout=lay,
               out_layout=lay, stats=stats, name=f"sdpa_{layout}")
    assert g.get_engine_config_at_index(0).knobs["GPU_KERNELS"] == "GENERATED"
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    gen = torch.Generator(device="cpu").manual_seed(0)

    def make(heads, s):
        shape = (b, s, heads, d) if layout == "bshd" else (b, heads, s, d)
        x = torch.randn(*shape, generator=gen)
        x = x.to(tdt).cuda()
        return x.transpose(1, 2) if layout == "bshd" else x

    q, k, v = make(hq, sq), make(hk, skv), make(hk, skv)
    o = make(hq, sq).fill_(float("nan"))
    assert o.stride() == lay((b, hq, sq, d))
    pack = {1: q, 2: k, 3: v, 4: o}
    if stats:
        st = torch.full((b, hq, sq, 1), float("nan"), dtype=torch.float32, device="cuda")
        pack[5] = st
    g.execute(h, pack)
    torch.cuda.synchronize()
    ref, lse = _reference(torch, q, k, v, 1 / math.sqrt(d), causal)
    tol = {"bf16": 2e-2, "f16": 4e-3}[dtype]
    err = ((o.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= tol, err
    if stats:
        assert (st.double() - lse).abs().max().item() <= 1e-3
    # the same graph on IREE's own lowering: the same numbers, within the io type's rounding
    iree = _graph(h, dtype=dtype, b=b, hq=hq, hk=hk, sq=sq, skv=skv, d=d, causal=causal, layout=lay,
                  out_layout=lay, stats=stats, name=f"sdpa_{layout}", knobs={"GPU_KERNELS": "IREE"})
    o_iree = make(hq, sq).fill_(float("nan"))
    pack[4] = o_iree
    iree.execute(h, pack)
    torch.cuda.synchronize()
    assert ((o.double() - o_iree.double()).abs().max() / ref.abs().max()).item() <= tol
