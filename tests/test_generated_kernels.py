"""Generated GPU kernels (knob GPU_KERNELS, docs/generated_kernels.md), on the CPU: Triton's ahead-of-time
kernels for sm_90a and sm_80, the MLIR that embeds them, a cuda:sm_80 plan compiled by IREE with them
inside, the knob and cache key, and a restore in a process where Triton cannot be imported.
Running them needs a GPU: benchmarks/gpu_kernels.py (gpu_run.sh kernels)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

import hipdnn_iree as hd  # noqa: E402
from hipdnn_iree.plugins.iree_linalg.kernels import PINNED_TRITON, generate, generator_id, triton_version  # noqa: E402
from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import _entry_params  # noqa: E402
from lowering.ops.generated_matmul import EpilogueStep, MatmulPattern, Operand, find_patterns  # noqa: E402

TARGET = "cuda:sm_80"


def _pattern(dtype="f16", steps=(), m=100, n=72, k=40, batch=2):
    return MatmulPattern(nodes=(0,), batch=batch, m=m, n=n, k=k, a=Operand(1, dtype, (m * k, k, 1)),
                         b=Operand(2, dtype, (0, 1, k)), acc_round="f32", steps=tuple(steps), out_uid=9,
                         out_dtype=dtype)


def _graph(handle, dtype=hd.DataType.HALF, epilogue=True, wt=True, knobs=None):
    g = hd.Graph(name="mm_gelu", io_data_type=dtype, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="X", uid=1, dim=[2, 64, 96])
    w = g.tensor(name="W", uid=2, dim=[1, 96, 80], stride=[96 * 80, 1, 96] if wt else [96 * 80, 80, 1])
    y = g.matmul(x, w)
    if epilogue:
        b = g.tensor(name="bias", uid=3, dim=[1, 1, 80])
        y = g.pointwise(g.pointwise(y, b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.GELU_FWD)
    y.set_output(True).set_uid(4)
    g.validate()
    g.build_operation_graph(handle)
    g.create_execution_plan("IREE_LINALG", knobs or {"GPU_KERNELS": "GENERATED"})
    g.check_support()
    g.build_plans()
    return g


@pytest.fixture(scope="module")
def handle():
    return hd.create_handle(device=None, target=TARGET)


def test_triton_is_the_pinned_version():
    assert triton_version() == PINNED_TRITON
    assert generator_id().startswith(f"triton-{PINNED_TRITON}:")


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_kernels_for_sm90a_and_sm80(dtype):
    steps = (EpilogueStep("add", "f32", Operand(3, dtype, (0, 0, 1))), EpilogueStep("gelu", "f32"))
    ks = generate(_pattern(dtype, steps))
    assert [(k.arch, k.fmt) for k in ks] == [("sm_90a", "cubin"), ("sm_80", "cubin"), ("sm_80", "ptx")]
    for k in ks:
        assert k.name == "hipdnn_matmul" and len(k.image) > 1000
        assert k.block in (128, 256) and k.grid[1] == 2 and k.shared <= 101376
    assert ks[0].image[:4] == b"\x7fELF" and ks[1].image[:4] == b"\x7fELF"
    ptx = ks[2].image.rstrip(b"\0").decode()
    assert ".target sm_80" in ptx
    # a, b, bias, c + Triton 3.6's global and profile scratch pointers: only pointers
    assert _entry_params(ptx, "hipdnn_matmul") == 6
    head = ptx[ptx.index(".entry hipdnn_matmul("):]
    head = head[:head.index(")")]
    assert head.count(".param .u64 .ptr") == 6


def test_sm90a_kernel_uses_wgmma():
    import triton
    from triton.backends.compiler import GPUTarget
    from hipdnn_iree.plugins.iree_linalg.kernels import _triton_matmul_src as src
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import _constexprs, config
    p = _pattern("bf16", m=256, n=256, k=256, batch=1)
    sig, const = _constexprs(p, config(p))
    k = triton.compile(triton.compiler.ASTSource(fn=src.hipdnn_matmul, signature=sig, constexprs=const),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})
    assert ".target sm_90a" in k.asm["ptx"] and "wgmma" in k.asm["ptx"]
    assert k.metadata.global_scratch_size == 0


def test_patterns_found_in_graph(handle):
    g = _graph(hd.create_handle(device=None, target=TARGET), knobs={"GPU_KERNELS": "IREE"})
    from graph_ir import decode_graph
    desc = decode_graph(g.get_op_graph_bytes())
    (p,) = find_patterns(desc)
    assert (p.batch, p.m, p.n, p.k) == (2, 64, 80, 96)
    assert p.a.strides == (64 * 96, 96, 1) and p.b.strides == (0, 1, 96)   # W column-major, batch broadcast
    assert [s.op for s in p.steps] == ["add", "gelu"] and p.steps[0].operand.strides == (0, 0, 1)
    assert p.out_uid == 4 and len(p.nodes) == 3


def test_generated_plan_compiles_and_carries_the_cubin(handle, tmp_path):
    g = _graph(handle)
    cfg = g.get_engine_config_at_index(0)
    assert cfg.knobs["GPU_KERNELS"] == "GENERATED"
    plan = g.serialize_compiled_plan()
    ks = _kernels_of(g)
    for k in ks:
        assert k.image.rstrip(b"\0") in plan, f"{k.arch} {k.fmt} image not in the plan"


def _kernels_of(g):
    from graph_ir import decode_graph
    desc = decode_graph(g.get_op_graph_bytes())
    (p,) = find_patterns(desc)
    return generate(p)


def test_lowered_mlir_holds_the_extern_dispatch(handle):
    from graph_ir import decode_graph
    from hipdnn_iree.plugins.iree_linalg.build import generated_kernels, lower
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    g = _graph(handle, knobs={"GPU_KERNELS": "IREE"})
    gb = g.get_op_graph_bytes()
    desc = decode_graph(gb)
    res = resolve(parse_target(TARGET), GraphSummary.of(desc), {"GPU_KERNELS": "GENERATED"})
    assert res.policy.generated_kernels == generator_id()
    res, kernels = generated_kernels(desc, res)
    text = lower(desc, gb, res, kernels=kernels).mlir   # parsed and verified by iree.compiler.ir
    assert text.count('"hal.dispatch.extern"') == 1
    assert 'export_name = "hipdnn_matmul"' in text
    assert "workgroup_size = [256 : index, 1 : index, 1 : index]" in text or \
        "workgroup_size = [128 : index, 1 : index, 1 : index]" in text
    assert 'hipdnn.kernel = "sm_90a-cubin"' in text and 'hipdnn.kernel = "sm_80-cubin"' in text
    assert 'hipdnn.kernel = "sm_80-ptx"' in text
    assert 'key = "compute_capability_major"' in text and "workgroup_local_memory = " in text
    # a, W, bias read-only; the output and the two scratch results writable
    assert text.count("#hal.pipeline.binding<storage_buffer, ReadOnly>") == 3
    assert "-> (tensor<2x64x80xf16>, tensor<16xi8>, tensor<16xi8>)" in text
    # no linalg matmul, no gelu left: the whole chain is the kernel
    assert "linalg.batch_matmul" not in text and "math.erf" not in text
    plain = lower(desc, gb, resolve(parse_target(TARGET), GraphSummary.of(desc), {})).mlir
    assert "hal.dispatch.extern" not in plain


def test_knob_and_cache_key(handle):
    from hipdnn_iree.plugins.iree_linalg.knobs import KNOB_NAMES, GraphSummary, resolve
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    from graph_ir.desc import OpKind
    assert "GPU_KERNELS" in KNOB_NAMES
    s = GraphSummary(kinds=frozenset({OpKind.MATMUL}), has_double=False, conv_ranks=(), f32_only=False)
    cuda, cpu = parse_target(TARGET), parse_target("llvm-cpu:host")
    gen = resolve(cuda, s, {"GPU_KERNELS": "GENERATED"})
    assert gen.identity != resolve(cuda, s, {}).identity
    assert resolve(cuda, s, {}).identity == resolve(cuda, s, {"GPU_KERNELS": "IREE"}).identity   # AUTO = IREE
    assert resolve(cpu, s, {"GPU_KERNELS": "GENERATED"}).policy.generated_kernels == ""          # CPU unchanged
    assert generator_id() in gen.policy.to_json()   # Triton version + template digest in the hashed policy


def test_graph_without_pattern_reports_iree(handle):
    g = hd.Graph(name="relu_only", io_data_type=hd.DataType.HALF)
    x = g.tensor(name="X", uid=1, dim=[4, 8])
    y = g.pointwise(x, mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_uid(2)
    g.validate()
    g.build_operation_graph(handle)
    g.create_execution_plan("IREE_LINALG", {"GPU_KERNELS": "GENERATED"})
    g.check_support()
    g.build_plans()
    plan = g.serialize_compiled_plan()
    r = hd.Graph.from_compiled_plan(handle, plan)
    assert r.get_engine_config_at_index(0).knobs.get("GPU_KERNELS") == "IREE"


def test_restore_without_triton(handle, tmp_path):
    g = _graph(handle)
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
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "'GPU_KERNELS': 'GENERATED'" in out.stdout and "tensors [1, 2, 3, 4]" in out.stdout


def test_gpu_kernels_benchmark_builds_tiny(tmp_path):
    """benchmarks/gpu_kernels.py at its tiny size, build-only (the GPU run: gpu_run.sh kernels)."""
    import json
    import runpy
    mod = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu_kernels.py"))
    out = tmp_path / "k.json"
    assert mod["main"](["--tiny", "--device", "cpu-check", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["knob"], r["reported"]) for r in rows} == {("IREE", "IREE"), ("GENERATED", "GENERATED")}


def test_gpu_kernels_knob_absent_on_cpu_handles():
    """API.md: GPU_KERNELS is a knob of CUDA/ROCm handles only; a CPU handle refuses it by name."""
    def names(h):
        g = hd.Graph(io_data_type=hd.DataType.FLOAT)
        a, b = g.tensor(name="a", uid=1, dim=[1, 4, 4]), g.tensor(name="b", uid=2, dim=[1, 4, 4])
        g.matmul(a, b).set_output(True).set_uid(3)
        g.build_operation_graph(h)
        return [k.name for k in g.get_knobs_for_engine("IREE_LINALG")], g
    cpu, g = names(hd.create_handle())
    assert "GPU_KERNELS" not in cpu and "GPU_MATMUL_TILE" in cpu
    with pytest.raises(hd.HipdnnError) as e:
        g.create_execution_plan("IREE_LINALG", {"GPU_KERNELS": "GENERATED"})
    assert "GPU_KERNELS" in str(e.value)
    assert "GPU_KERNELS" in names(hd.create_handle(device=None, target="cuda:sm_80"))[0]
    assert "GPU_KERNELS" in names(hd.create_handle(device=None, target="rocm:gfx942"))[0]
