"""Generated convolution kernels (knob GPU_KERNELS=GENERATED, conv fprop NHWC + epilogue; docs/generated_kernels.md).

On the CPU: Triton's ahead-of-time implicit-GEMM kernels for sm_90a and sm_80 (ABI, no register
spills), the template's numbers in Triton's interpreter against float64 torch, the pattern finder
(what it takes, what it leaves to IREE), the MLIR that embeds the kernel, cuda:sm_80 plans compiled by
IREE with the cubins inside (one dispatch for conv + bias + relu), the knob and cache key, and a
restore in a process where Triton cannot be imported. ``gpu``-marked: the kernel runs on a CUDA
device against float64 torch and IREE's own plan (skipped here; not yet run on a GPU).
"""
from __future__ import annotations

import dataclasses
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
from lowering.ops.generated_conv import ConvPattern, EpilogueStep, Operand, find_conv_patterns  # noqa: E402
from lowering.ops.generated_matmul import find_patterns  # noqa: E402

TARGET = "cuda:sm_80"
_DT = {"f16": hd.DataType.HALF, "bf16": hd.DataType.BFLOAT16, "f32": hd.DataType.FLOAT}


def _nhwc(dims):
    """Channels-last strides of logical [N, C, H, W] dims (also KRSC for a filter [K, C, R, S])."""
    n, c, h, w = dims
    return (h * w * c, 1, w * c, c)


def _nchw(dims):
    n, c, h, w = dims
    return (c * h * w, h * w, w, 1)


def _pattern(dtype="bf16", n=32, c=64, k=64, hw=56, r=3, pad=1, stride=1, epi=True, w_layout=_nhwc, groups=1):
    o = (hw + 2 * pad - r) // stride + 1
    steps = (EpilogueStep("add", dtype, Operand(3, dtype, (0, 1, 0, 0))), EpilogueStep("relu", dtype)) if epi else ()
    return ConvPattern((0,), n, c, k, (hw, hw), (r, r), (o, o), (pad, pad), (stride, stride), (1, 1), groups,
                       Operand(1, dtype, _nhwc((n, c, hw, hw))), Operand(2, dtype, w_layout((k, c // groups, r, r))),
                       dtype, steps, 4, dtype)


def _graph(handle=None, dtype="bf16", n=2, c=32, k=48, hw=12, r=3, pad=1, stride=1, dilation=1, groups=1,
           x_layout=_nhwc, w_layout=_nhwc, y_layout=_nhwc, epi=("bias", "relu"), compute=None, knobs=None,
           name="conv"):
    """conv_fprop of X (uid 1) with W (uid 2), then the epilogue ops in ``epi`` ("bias": + B (uid 3)
    ``[1, K, 1, 1]``; "res": + Z (uid 5) ``[N, K, P, Q]`` NHWC; "relu"; "gelu"), output uid 4 in
    ``y_layout``. Built into plans when ``handle`` is given."""
    dt = _DT[dtype]
    g = hd.Graph(name=name, io_data_type=dt, compute_data_type=hd.DataType.FLOAT)
    xd, wd = (n, c, hw, hw), (k, c // groups, r, r)
    x = g.tensor(name="X", uid=1, dim=list(xd), stride=list(x_layout(xd)))
    w = g.tensor(name="W", uid=2, dim=list(wd), stride=list(w_layout(wd)))
    extra = {} if compute is None else {"compute_data_type": compute}
    y = g.conv_fprop(x, w, padding=[pad, pad], stride=[stride, stride], dilation=[dilation, dilation], **extra)
    o = (hw + 2 * pad - dilation * (r - 1) - 1) // stride + 1
    for op in epi:
        if op == "bias":
            b = g.tensor(name="B", uid=3, dim=[1, k, 1, 1], stride=[k, 1, k, k])
            y = g.pointwise(y, b, mode=hd.PointwiseMode.ADD)
        elif op == "res":
            z = g.tensor(name="Z", uid=5, dim=[n, k, o, o], stride=list(_nhwc((n, k, o, o))))
            y = g.pointwise(y, z, mode=hd.PointwiseMode.ADD)
        else:
            y = g.pointwise(y, mode={"relu": hd.PointwiseMode.RELU_FWD, "gelu": hd.PointwiseMode.GELU_FWD}[op])
    y.set_output(True).set_uid(4).set_stride(list(y_layout((n, k, o, o))))
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

@pytest.mark.parametrize("dtype,epi", [("bf16", True), ("f16", False)])
def test_kernels_for_sm90a_and_sm80(dtype, epi):
    p = _pattern(dtype, n=2, hw=12, epi=epi)
    ks = generate(p)
    assert [(k.arch, k.fmt) for k in ks] == [("sm_90a", "cubin"), ("sm_80", "cubin"), ("sm_80", "ptx")]
    for k in ks:
        assert k.name == "hipdnn_conv" and len(k.image) > 1000 and k.generator == generator_id()
        # M = 2 * 12 * 12 = 288 rows: BM 64 -> 5 row tiles, K = 64: one column tile; one group
        assert k.block == 128 and k.grid == (5, 1, 1) and 0 < k.shared <= MAX_SHARED
    assert ks[0].image[:4] == b"\x7fELF" and ks[1].image[:4] == b"\x7fELF"
    ptx = ks[2].image.rstrip(b"\0").decode()
    assert ".target sm_80" in ptx
    want = (4 if epi else 3) + 2   # x, w, (bias,) y, then Triton 3.6's global and profile scratch pointers
    assert _entry_params(ptx, "hipdnn_conv") == want
    head = ptx[ptx.index(".entry hipdnn_conv("):]
    head = head[:head.index(")")]
    assert head.count(".param .u64 .ptr") == want


def test_generate_refuses_without_triton_and_on_rocm(monkeypatch):
    from hipdnn_iree.plugins.iree_linalg.kernels import triton_conv
    with pytest.raises(hd.HipdnnError) as e:
        generate(_pattern(), "rocm:gfx942")
    assert "CUDA only" in str(e.value)
    # a Triton compile failure is reported as the engine's error, not Triton's traceback
    import triton

    def broken(*a, **k):
        raise RuntimeError("simulated Triton failure")
    with monkeypatch.context() as m:
        m.setattr(triton, "compile", broken)
        with pytest.raises(hd.HipdnnError) as e:
            triton_conv.compile_kernel(_pattern(), triton_conv.config(_pattern()), 80)
    assert "simulated Triton failure" in str(e.value)
    monkeypatch.setattr(triton_conv, "triton_version", lambda: None)
    with pytest.raises(hd.HipdnnError) as e:
        triton_conv.generate(_pattern())
    assert "needs Triton" in str(e.value)


# the benchmark's shapes (bf16 + bias + relu) and a few others: (pattern kwargs)
SPILL_CASES = [
    dict(n=32, c=64, k=64, hw=56, r=3, pad=1),                       # ResNet 3x3 64 -> 64
    dict(n=32, c=256, k=64, hw=56, r=1, pad=0),                      # 1x1 256 -> 64
    dict(n=32, c=128, k=128, hw=56, r=3, pad=1, stride=2, epi=False, dtype="f16"),
    dict(n=32, c=256, k=256, hw=28, r=3, pad=1, w_layout=_nchw),     # 128 x 128 tiles, 8 warps, KCRS
    dict(n=1, c=3, k=64, hw=224, r=7, pad=3, stride=2),              # stem: C = 3 (one masked channel block)
]


@pytest.mark.parametrize("case", SPILL_CASES, ids=lambda c: "-".join(f"{k}{v if not callable(v) else v.__name__}"
                                                                     for k, v in c.items()))
def test_no_register_spills_and_wgmma_on_sm90a(case, tmp_path):
    import triton
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_conv import fitted
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.path.exists(ptxas):
        pytest.skip("Triton's ptxas is not installed")
    p = _pattern(**case)
    for cap, arch in ((90, "sm_90a"), (80, "sm_80")):
        k = fitted(p, cap)[0]
        ptx = k.asm["ptx"]
        assert (cap == 90) == ("wgmma" in ptx)
        f = tmp_path / f"{arch}.ptx"
        f.write_text(ptx)
        out = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", str(f), "-o", os.devnull], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "0 bytes spill stores, 0 bytes spill loads" in out.stderr, out.stderr


_INTERPRET = textwrap.dedent("""
    import sys
    import numpy as np
    import torch
    import torch.nn.functional as F
    from triton.runtime import interpreter as ti
    orig = ti._patch_lang_tensor

    def patched(tensor, scope):
        orig(tensor, scope)
        # NOTE: Triton 3.6's interpreter keeps scalars as 1-element arrays, which numpy 2 refuses to int()
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    ti._patch_lang_tensor = patched
    from lowering.ops.generated_conv import ConvPattern, EpilogueStep, Operand
    from hipdnn_iree.plugins.iree_linalg.kernels import _triton_conv_src as src
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_conv import _constexprs, config

    TYPES = {"f16": torch.float16, "f32": torch.float32}

    def rnd(t, dt):   # the IREE lowering stores every intermediate in its declared type
        return t.to(TYPES[dt]).double()

    def run(n, c, k, h, w, r, s, pre, post, stride, dil, groups, wlay, epi, acc_dt, cfg_over=None):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(n, h, w, c, generator=g).half().permute(0, 3, 1, 2)          # NHWC storage
        cg = c // groups
        if wlay == "krsc":
            wt = torch.randn(k, r, s, cg, generator=g).half().permute(0, 3, 1, 2)
        else:
            wt = torch.randn(k, cg, r, s, generator=g).half()
        st = lambda t: tuple(0 if d == 1 else sd for d, sd in zip(t.shape, t.stride()))
        xd = F.pad(x.double(), (pre[1], post[1], pre[0], post[0]))
        ref = rnd(F.conv2d(xd, wt.double(), stride=stride, dilation=dil, groups=groups), acc_dt)
        _, _, p, q = ref.shape
        steps, ptrs, cur = [], [], acc_dt
        for op in epi:
            if op == "bias":
                b = torch.randn(1, k, 1, 1, generator=g).half()
                steps.append(EpilogueStep("add", "f16", Operand(9, "f16", st(b))))
                ptrs.append(b)
                ref, cur = rnd(ref + b.double(), "f16"), "f16"
            elif op == "res":      # a residual [N, K, P, Q] tensor, NHWC storage; f32 result
                z = torch.randn(n, p, q, k, generator=g).half().permute(0, 3, 1, 2)
                steps.append(EpilogueStep("add", "f32", Operand(9, "f16", st(z))))
                ptrs.append(z)
                ref, cur = rnd(ref + z.double(), "f32"), "f32"
            elif op == "pscale":   # a per-image, per-channel scale [N, K, 1, 1]
                z = torch.rand(n, k, 1, 1, generator=g).half()
                steps.append(EpilogueStep("mul", "f16", Operand(9, "f16", st(z))))
                ptrs.append(z)
                ref, cur = rnd(ref * z.double(), "f16"), "f16"
            elif op == "relu":
                steps.append(EpilogueStep("relu", cur))
                ref = rnd(torch.relu(ref), cur)
            elif op == "gelu":
                steps.append(EpilogueStep("gelu", cur))
                ref = rnd(F.gelu(ref), cur)
            elif op == "smul":
                steps.append(EpilogueStep("mul", cur, scalar=0.5))
                ref = rnd(ref * 0.5, cur)
        pat = ConvPattern((0,), n, c, k, (h, w), (r, s), (p, q), tuple(pre), tuple(stride), tuple(dil), groups,
                          Operand(1, "f16", st(x)), Operand(2, "f16", st(wt)), acc_dt, tuple(steps), 3, cur)
        cfg = dict(config(pat), **(cfg_over or {}))
        _, const = _constexprs(pat, cfg)
        for i in range(4):
            const.pop(f"e{i}_ptr", None)
        y = torch.full((n, p, q, k), float("nan"), dtype=TYPES[cur])     # written [N, P, Q, K]
        grid = (-(-(n * p * q) // cfg["BM"]) * -(-(k // groups) // cfg["BN"]), groups, 1)
        src.hipdnn_conv[grid](x, wt, *(ptrs + [None] * (4 - len(ptrs))), y, **const)
        got = y.permute(0, 3, 1, 2).double()
        return ((got - ref).abs().max() / ref.abs().max()).item()

    CASES = [
        # n, c, k, h, w, r, s, pre, post, stride, dilation, groups, w layout, epilogue, conv output type
        (2, 32, 48, 9, 9, 1, 1, (0, 0), (0, 0), (1, 1), (1, 1), 1, "krsc", ("bias", "relu"), "f16"),    # 1x1
        (2, 19, 21, 10, 11, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1), 1, "krsc", ("bias", "relu"), "f16"),  # odd C, K
        (1, 16, 32, 15, 15, 3, 3, (1, 1), (1, 1), (2, 2), (1, 1), 1, "kcrs", (), "f16"),                # stride 2, KCRS
        (2, 24, 40, 12, 12, 3, 3, (2, 2), (2, 2), (1, 1), (2, 2), 1, "krsc", ("bias", "relu"), "f16"),  # dilation 2
        (3, 8, 16, 9, 8, 2, 3, (1, 0), (0, 2), (1, 2), (2, 1), 1, "kcrs", ("res", "gelu"), "f16"),      # asymmetric
        (2, 32, 32, 8, 8, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1), 2, "krsc", ("bias", "relu"), "f16"),    # 2 groups
        (2, 20, 24, 7, 7, 5, 5, (2, 2), (2, 2), (1, 1), (1, 1), 1, "krsc", ("pscale", "smul"), "f32"),  # f32 out
        (1, 3, 16, 17, 17, 7, 7, (3, 3), (3, 3), (2, 2), (1, 1), 1, "krsc", ("relu",), "f16"),          # C = 3
    ]
    CFG = {0: {"BK": 16}, 1: {"BM": 64, "BN": 16}}   # more channel blocks per tap / more column tiles
    bad = 0
    for i, c in enumerate(CASES):
        err = run(*c, cfg_over=CFG.get(i))
        ok = err <= 4e-3
        bad += not ok
        print("ok " if ok else "BAD", i, c, err, flush=True)
    sys.exit(1 if bad else 0)
""")


def test_template_numerics_in_triton_interpreter():
    """The template's logic (implicit GEMM over taps and channel blocks, zero padding by masked loads,
    stride, dilation, asymmetric padding, R != S, KRSC and KCRS filters, odd C and K, N > 1, groups,
    the fused epilogue with bias, residual, per-image scale, scalar, relu, gelu) on the CPU in Triton's
    interpreter, f16, against float64 torch conv2d. NOTE: bf16 is left out: Triton 3.6's interpreter
    computes tl.dot of bf16 operands wrongly (test_generated_sdpa.py)."""
    pytest.importorskip("torch")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
    out = subprocess.run([sys.executable, "-c", _INTERPRET], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert out.stdout.count("ok ") == 8


# ---------------------------------------------------------------------------------------------
# the pattern finder
# ---------------------------------------------------------------------------------------------

def test_pattern_of_a_conv_bias_relu_graph(handle):
    desc = _op_graph(_graph(n=2, c=32, k=48, hw=12, stride=2), handle)
    (p,) = find_conv_patterns(desc)
    assert (p.n, p.c, p.k, p.in_hw, p.kern, p.out_hw, p.groups) == (2, 32, 48, (12, 12), (3, 3), (6, 6), 1)
    assert p.pre == (1, 1) and p.stride == (2, 2) and p.dilation == (1, 1)
    assert p.x.strides == _nhwc((2, 32, 12, 12)) and p.w.strides == _nhwc((48, 32, 3, 3))
    assert [s.op for s in p.steps] == ["add", "relu"] and p.steps[0].operand.strides == (0, 1, 0, 0)
    assert p.out_uid == 4 and len(p.nodes) == 3 and p.out_phys_shape == (2, 6, 6, 48)
    assert '"kind":"conv"' in p.key() and find_patterns(desc) == []


def test_pattern_variants(handle):
    h = handle
    # KCRS filter, dilation, no epilogue: the conv alone, its bound NHWC output
    (p,) = find_conv_patterns(_op_graph(_graph(w_layout=_nchw, dilation=2, pad=2, epi=()), h))
    assert p.w.strides == _nchw((48, 32, 3, 3)) and p.dilation == (2, 2) and p.steps == () and p.out_uid == 4
    # a residual NHWC tensor then gelu
    (p,) = find_conv_patterns(_op_graph(_graph(epi=("bias", "res", "gelu")), h))
    assert [s.op for s in p.steps] == ["add", "add", "gelu"]
    assert p.steps[1].operand.strides == _nhwc((2, 48, 12, 12))
    # grouped, Cg = Kg = 16
    (p,) = find_conv_patterns(_op_graph(_graph(c=32, k=32, groups=2), h))
    assert p.groups == 2
    # the output NCHW: the chain ends one step early (relu stays on IREE, the kernel writes the
    # virtual sum [N, P, Q, K])
    (p,) = find_conv_patterns(_op_graph(_graph(y_layout=_nchw), h))
    assert [s.op for s in p.steps] == ["add"] and len(p.nodes) == 2 and p.out_uid != 4


def _refused(g, h):
    return find_conv_patterns(_op_graph(g, h)) == []


def test_patterns_refused(handle):
    h = handle
    assert _refused(_graph(x_layout=_nchw), h)                          # NCHW x
    assert _refused(_graph(dtype="f32"), h)                             # f32 operands
    assert _refused(_graph(compute=hd.DataType.HALF), h)                # f16 compute
    assert _refused(_graph(c=32, k=32, groups=4), h)                    # Cg = 8 < 16
    assert _refused(_graph(c=32, k=32, groups=32, epi=()), h)           # depthwise
    assert _refused(_graph(c=1, k=16, epi=()), h)                       # C = 1 (NCHW's memory too)
    assert _refused(_graph(y_layout=_nchw, epi=()), h)                  # the conv's own output NCHW
    # 1-D and 3-D convs
    def cl(dims):   # channels-last strides of [N, C, *S]: C innermost, then the spatial axes
        st, acc = [0] * len(dims), dims[1]
        st[1] = 1
        for a in range(len(dims) - 1, 1, -1):
            st[a], acc = acc, acc * dims[a]
        st[0] = acc
        return st

    for dims in ([2, 16, 20], [2, 16, 6, 6, 6]):
        g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
        wd = [16, 16] + [3] * (len(dims) - 2)
        x = g.tensor(name="X", uid=1, dim=dims, stride=cl(dims))
        w = g.tensor(name="W", uid=2, dim=wd, stride=cl(wd))
        y = g.conv_fprop(x, w, padding=[1] * (len(dims) - 2))
        y.set_output(True).set_uid(4).set_stride(cl(dims))
        g.validate()
        assert _refused(g, h), dims
    # conv_mode CONVOLUTION (a flipped filter): IREE's, which refuses it
    desc = _op_graph(_graph(epi=()), h)
    node = desc.nodes[0]
    flipped = dataclasses.replace(desc, nodes=(dataclasses.replace(node, attrs=dataclasses.replace(
        node.attrs, conv_mode=1)),))
    assert find_conv_patterns(flipped) == []
    # dynamic-shape builds get no generated kernels
    from hipdnn_iree.plugins.iree_linalg.build import generated_kernels
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    res = resolve(parse_target(TARGET), GraphSummary.of(desc), {"GPU_KERNELS": "GENERATED"})
    assert res.policy.generated_kernels == generator_id()
    assert generated_kernels(desc, res, spec=object()) == (dataclasses.replace(
        res, policy=res.policy.with_(generated_kernels="")), None)


def test_refused_graphs_build_on_iree(handle):
    """NCHW storage and f32 operands with GPU_KERNELS=GENERATED: IREE's plan, reported as IREE."""
    for kw in (dict(x_layout=_nchw, y_layout=_nchw), dict(dtype="f32")):
        g = _graph(handle, **kw)
        assert g.get_execution_plan().context.knobs["GPU_KERNELS"] == "IREE", kw   # what was built
        restored = hd.Graph.from_compiled_plan(handle, g.serialize_compiled_plan())
        assert restored.get_engine_config_at_index(0).knobs["GPU_KERNELS"] == "IREE", kw
        assert b"hipdnn_conv" not in g.serialize_compiled_plan()


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


def test_lowered_mlir_holds_the_extern_dispatch(handle):
    g = _graph(n=2, c=32, k=48, hw=12)
    g.build_operation_graph(handle)
    res, text = _lower(g, {"GPU_KERNELS": "GENERATED"})
    assert res.policy.generated_kernels == generator_id()
    assert text.count('"hal.dispatch.extern"') == 1 and 'export_name = "hipdnn_conv"' in text
    assert "workgroup_size = [128 : index, 1 : index, 1 : index]" in text
    for tag in ("sm_90a-cubin", "sm_80-cubin", "sm_80-ptx"):
        assert f'hipdnn.kernel = "{tag}"' in text
    # x, w, bias read-only; y and the two scratch results writable
    assert text.count("#hal.pipeline.binding<storage_buffer, ReadOnly>") == 3
    assert text.count("#hal.pipeline.binding<storage_buffer>") == 3
    # x bound as its memory-order [N, H, W, C]; y written [N, P, Q, K]
    assert "(tensor<2x12x12x32xbf16>, tensor<48x3x3x32xbf16>, tensor<1x48x1x1xbf16>) -> " \
           "(tensor<2x12x12x48xbf16>, tensor<16xi8>, tensor<16xi8>)" in text
    assert "linalg.conv" not in text and "linalg.batch_matmul" not in text and "tensor.pad" not in text
    for knobs in ({}, {"GPU_KERNELS": "IREE"}, {"GPU_KERNELS": "AUTO"}):   # AUTO stays IREE
        res, plain = _lower(g, knobs)
        assert res.policy.generated_kernels == "" and "hal.dispatch.extern" not in plain


def test_conv_beside_a_matmul_pattern(handle):
    g = hd.Graph(name="conv_mm", io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="X", uid=1, dim=[1, 16, 8, 8], stride=list(_nhwc((1, 16, 8, 8))))
    w = g.tensor(name="W", uid=2, dim=[16, 16, 1, 1], stride=list(_nhwc((16, 16, 1, 1))))
    g.conv_fprop(x, w).set_output(True).set_uid(4).set_stride(list(_nhwc((1, 16, 8, 8))))
    a = g.tensor(name="A", uid=7, dim=[1, 32, 48])
    b = g.tensor(name="Bm", uid=8, dim=[1, 48, 16])
    g.matmul(a, b).set_output(True).set_uid(9)
    g.validate()
    g.build_operation_graph(handle)
    _, text = _lower(g, {"GPU_KERNELS": "GENERATED"})
    assert text.count('"hal.dispatch.extern"') == 2
    assert 'export_name = "hipdnn_conv"' in text and 'export_name = "hipdnn_matmul"' in text


def _kernels_of(g):
    (p,) = find_conv_patterns(decode_graph(g.get_op_graph_bytes()))
    return generate(p)


def test_generated_plan_is_one_dispatch_and_carries_the_cubins(handle):
    """conv + bias + relu (bf16, NHWC x and y, KRSC w, 3x3 pad 1) through the public API: one dispatch."""
    g = _graph(handle, n=2, c=64, k=64, hw=14)
    assert g.get_engine_config_at_index(0).knobs["GPU_KERNELS"] == "GENERATED"
    plan = g.serialize_compiled_plan()
    for k in _kernels_of(g):
        assert k.image.rstrip(b"\0") in plan, f"{k.arch} {k.fmt} image not in the plan"
    assert g.get_execution_plan().context.dispatch_count == 1
    iree = _graph(handle, n=2, c=64, k=64, hw=14, knobs={"GPU_KERNELS": "IREE"})
    assert iree.get_engine_config_at_index(0).knobs["GPU_KERNELS"] == "IREE"
    assert b"hipdnn_conv" not in iree.serialize_compiled_plan()
    assert iree.get_execution_plan().context.dispatch_count > 1


def test_chain_cut_before_an_nchw_output_plan(handle):
    """The output NCHW: the kernel covers conv + bias and writes the virtual sum channels-last; relu
    and the output's layout stay IREE's."""
    g = _graph(handle, y_layout=_nchw)
    assert g.get_engine_config_at_index(0).knobs["GPU_KERNELS"] == "GENERATED"
    assert _kernels_of(g)[1].image in g.serialize_compiled_plan()


def test_knob_and_cache_key_follow_the_template(monkeypatch, tmp_path):
    import shutil
    from hipdnn_iree.plugins.iree_linalg.kernels import triton_matmul
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, _has_pattern_op, resolve
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    from graph_ir.desc import OpKind
    assert "_triton_conv_src.py" in triton_matmul.SOURCES and "triton_conv.py" in triton_matmul.SOURCES
    s = GraphSummary(kinds=frozenset({OpKind.CONV_FPROP}), has_double=False, conv_ranks=(2,), f32_only=False)
    assert _has_pattern_op(s.traits)
    cuda = parse_target(TARGET)
    gen = resolve(cuda, s, {"GPU_KERNELS": "GENERATED"})
    assert gen.policy.generated_kernels == generator_id() and gen.identity != resolve(cuda, s, {}).identity
    assert resolve(cuda, s, {}).identity == resolve(cuda, s, {"GPU_KERNELS": "IREE"}).identity   # AUTO = IREE
    assert resolve(parse_target("llvm-cpu:host"), s, {"GPU_KERNELS": "GENERATED"}).policy.generated_kernels == ""
    # an edit of the conv template changes the generator identity, hence the policy (cache key)
    for name in triton_matmul.SOURCES:
        shutil.copy(os.path.join(triton_matmul._HERE, name), tmp_path / name)
    with open(tmp_path / "_triton_conv_src.py", "a") as f:
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


def test_rocm_plans_leave_convs_to_iree():
    """The conv template is CUDA only: a ROCm policy asking for generated kernels finds no conv pattern."""
    from hipdnn_iree.plugins.iree_linalg.build import generated_kernels
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    h = hd.create_handle(device=None, target="rocm:gfx942")
    desc = _op_graph(_graph(), h)
    res = resolve(parse_target("rocm:gfx942"), GraphSummary.of(desc), {"GPU_KERNELS": "GENERATED"})
    out, kernels = generated_kernels(desc, res)
    assert kernels is None and out.policy.generated_kernels == ""


def test_restore_without_triton(handle, tmp_path):
    g = _graph(handle, epi=("bias", "relu"))
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
    assert "'GPU_KERNELS': 'GENERATED'" in out.stdout and "tensors [1, 2, 3, 4]" in out.stdout


def test_gpu_kernels_benchmark_conv_builds_tiny(tmp_path):
    """benchmarks/gpu_kernels.py's conv cases at their tiny size, build-only (the GPU run: gpu_run.sh kernels)."""
    import json
    import runpy
    mod = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu_kernels.py"))
    out = tmp_path / "k.json"
    assert mod["main"](["--tiny", "--only", "conv", "--device", "cpu-check", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["case"], r["knob"], r["reported"]) for r in rows} == {
        ("tiny_conv3x3_bf16_bias_relu", "IREE", "IREE"), ("tiny_conv3x3_bf16_bias_relu", "GENERATED", "GENERATED")}


# ---------------------------------------------------------------------------------------------
# on a CUDA GPU (skipped without one): against float64 torch and IREE's own plan
# ---------------------------------------------------------------------------------------------

GPU_CASES = [
    # dtype, n, c, k, hw, r, pad, stride, dilation, groups, epilogue
    ("bf16", 8, 64, 64, 56, 3, 1, 1, 1, 1, ("bias", "relu")),
    ("f16", 8, 256, 64, 56, 1, 0, 1, 1, 1, ("bias", "relu")),
    ("bf16", 4, 128, 128, 28, 3, 1, 2, 1, 1, ()),
    ("f16", 2, 19, 21, 17, 3, 2, 1, 2, 1, ("bias", "res", "gelu")),   # odd C/K, dilation 2
    ("bf16", 3, 64, 96, 20, 3, 1, 1, 1, 2, ("bias", "relu")),         # 2 groups
    ("f16", 1, 3, 64, 224, 7, 3, 2, 1, 1, ("bias", "relu")),          # stem, C = 3
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: "-".join(map(str, c[:10])))
def test_generated_conv_on_cuda(case):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    import torch.nn.functional as F
    dtype, n, c, k, hw, r, pad, stride, dil, groups, epi = case
    h = hd.create_handle(device="cuda")
    kw = dict(dtype=dtype, n=n, c=c, k=k, hw=hw, r=r, pad=pad, stride=stride, dilation=dil, groups=groups, epi=epi)
    g = _graph(h, **kw)
    assert g.get_engine_config_at_index(0).knobs["GPU_KERNELS"] == "GENERATED"
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    gen = torch.Generator(device="cpu").manual_seed(0)
    cl = torch.channels_last
    x = torch.randn(n, c, hw, hw, generator=gen).to(tdt).cuda().contiguous(memory_format=cl)
    w = (torch.randn(k, c // groups, r, r, generator=gen) / (c // groups * r * r) ** 0.5).to(tdt).cuda() \
        .contiguous(memory_format=cl)
    b = torch.randn(1, k, 1, 1, generator=gen).to(tdt).cuda()
    ref = F.conv2d(x.double(), w.double(), padding=pad, stride=stride, dilation=dil, groups=groups)
    o = ref.shape[-1]
    z = torch.randn(n, k, o, o, generator=gen).to(tdt).cuda().contiguous(memory_format=cl)
    pack = {1: x, 2: w}
    for op in epi:
        if op == "bias":
            ref, pack[3] = ref + b.double(), b
        elif op == "res":
            ref, pack[5] = ref + z.double(), z
        else:
            ref = torch.relu(ref) if op == "relu" else F.gelu(ref)
    y = torch.full((n, k, o, o), float("nan"), dtype=tdt, device="cuda").contiguous(memory_format=cl)
    pack[4] = y
    g.execute(h, pack)
    torch.cuda.synchronize()
    tol = {"bf16": 2e-2, "f16": 4e-3}[dtype]
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= tol, err
    iree = _graph(h, knobs={"GPU_KERNELS": "IREE"}, **kw)
    y_iree = torch.full_like(y, float("nan"))
    pack[4] = y_iree
    iree.execute(h, pack)
    torch.cuda.synchronize()
    assert ((y.double() - y_iree.double()).abs().max() / ref.abs().max()).item() <= tol
