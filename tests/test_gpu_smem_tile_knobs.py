"""GPU_MATMUL_TILE's _SMEM tiles, GPU_CONV_TILE and GPU_PAD_FUSION: transform-dialect
tuning specs with shared-memory operand tiles, and IREE's pad-into-conv fusion. Compiled here for
cuda:sm_80 with the real IREE compiler (no GPU needed to compile); their speed and outputs are measured
on the H200 by benchmarks/autotune_gpu.py (retired; in git history at commit 9e99c4b) (docs/benchmarks/autotune.md)."""
import pytest

import hipdnn_iree as hd
from hipdnn_iree.plugin_sdk.engine_config import HeurMode
from hipdnn_iree.plugins.iree_linalg import knobs
from hipdnn_iree.plugins.iree_linalg.targets import parse_target
from graph_ir.desc import OpKind
from test_gpu_matmul_tile_knob import linear_graph   # the same f16 nn.Linear graph

LIB = "--iree-codegen-transform-dialect-library="


def conv_graph():
    """f32 NHWC 3x3 conv (pad 1, N=2) + relu: a direct conv with an f32 input and a padded input."""
    n, c, f, hw = 2, 32, 64, 16   # NOTE: N=1 is folded away (6 loops), which the rank-7 matcher skips
    g = hd.Graph(name="conv", io_data_type=hd.DataType.FLOAT, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[n, c, hw, hw], stride=[hw * hw * c, 1, hw * c, c])
    w = g.tensor(name="w", uid=2, dim=[f, c, 3, 3], stride=[9 * c, 1, 3 * c, c])
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3).set_stride([hw * hw * f, 1, hw * f, f])
    return g


def build(h, make, cfg):
    g = make()
    g.build_operation_graph(h)
    g.create_execution_plan("IREE_LINALG", cfg)
    g.check_support()
    g.build_plans()
    return g.get_execution_plan().context


@pytest.fixture(scope="module")
def cuda_handle():
    return hd.create_handle(device=None, target="cuda:sm_80", cache=False)


def lib_flags(ctx):
    return [f for f in ctx.compile_flags if f.startswith(LIB)]


def spec_of(flag):
    with open(flag[len(LIB):].rsplit("@", 1)[0], encoding="utf-8") as f:
        return f.read()


def test_smem_matmul_tiles_change_the_gpu_module(cuda_handle):
    base = build(cuda_handle, linear_graph, {})
    plain = build(cuda_handle, linear_graph, {"GPU_MATMUL_TILE": "64X64"})
    smem = {t: build(cuda_handle, linear_graph, {"GPU_MATMUL_TILE": t}) for t in ("64X64_SMEM", "128X64_SMEM")}
    assert not lib_flags(base)
    for tile, ctx in smem.items():
        (flag,) = lib_flags(ctx)
        assert tile in flag and flag.endswith("@__kernel_config")
        text = spec_of(flag)
        assert "promote_operands = [0, 1]" in text and "@match_mm3" in text and "@match_mm4" in text
    assert "workgroup = [128, 64, 0]" in spec_of(lib_flags(smem["128X64_SMEM"])[0])
    assert "thread = [4, 8, 0]" in spec_of(lib_flags(smem["128X64_SMEM"])[0])
    modules = {bytes(base.vmfb), bytes(plain.vmfb)} | {bytes(c.vmfb) for c in smem.values()}
    assert len(modules) == 4, "each tile must give a module of its own"


def test_conv_tile_and_pad_fusion_change_the_gpu_module(cuda_handle):
    base = build(cuda_handle, conv_graph, {})
    tiled = build(cuda_handle, conv_graph, {"GPU_CONV_TILE": "4X8X64_SMEM"})
    padded = build(cuda_handle, conv_graph, {"GPU_PAD_FUSION": "ON"})
    both = build(cuda_handle, conv_graph, {"GPU_CONV_TILE": "4X8X64_SMEM", "GPU_MATMUL_TILE": "64X64_SMEM"})
    assert knobs.PAD_FUSION_FLAG in padded.compile_flags and knobs.PAD_FUSION_FLAG not in base.compile_flags
    (flag,) = lib_flags(tiled)
    text = spec_of(flag)
    assert "@match_conv7" in text and "tensor<?x?x?x?xf32>" in text and "workgroup = [1, 4, 8, 64, 0, 0, 0]" in text
    (flag,) = lib_flags(both)   # one library holds both: IREE applies a single one
    assert "@match_conv7" in spec_of(flag) and "@match_mm3" in spec_of(flag)
    assert len({bytes(base.vmfb), bytes(tiled.vmfb), bytes(padded.vmfb)}) == 3


def test_knobs_are_checked_listed_and_gpu_only(cuda_handle):
    names = [k.name for k in cuda_handle.resource_manager.knobs(cuda_handle.resource_manager.engine_id_of("IREE_LINALG"))]
    assert {"GPU_CONV_TILE", "GPU_PAD_FUSION", "GPU_MATMUL_TILE"} <= set(names)
    g = conv_graph()
    g.build_operation_graph(cuda_handle)
    with pytest.raises(hd.HipdnnError) as e:
        g.create_execution_plan("IREE_LINALG", {"GPU_CONV_TILE": "8X8"})
    assert e.value.status == hd.Status.BAD_PARAM and "GPU_CONV_TILE" in str(e.value)
    g.create_execution_plans([HeurMode.B])
    cfgs = [g.get_engine_config_at_index(i).knobs for i in range(g.get_execution_plan_count())]
    assert {"GPU_CONV_TILE": "4X8X64_SMEM"} in cfgs and {"GPU_PAD_FUSION": "ON"} in cfgs
    assert {"GPU_MATMUL_TILE": "64X64_SMEM"} in cfgs and {"GPU_MATMUL_TILE": "64X64"} not in cfgs
    conv = knobs.GraphSummary(kinds=frozenset({OpKind.CONV_FPROP}), has_double=False, conv_ranks=(2,), f32_only=True)
    cpu, gpu = parse_target("llvm-cpu:host"), parse_target("cuda:sm_80")
    for cfg in ({"GPU_CONV_TILE": "4X8X64_SMEM"}, {"GPU_PAD_FUSION": "ON"}, {"GPU_MATMUL_TILE": "64X64_SMEM"}):
        assert knobs.resolve(gpu, conv, cfg).identity != knobs.resolve(gpu, conv, {}).identity   # cache key follows
        assert knobs.resolve(cpu, conv, cfg).identity == knobs.resolve(cpu, conv, {}).identity
    assert knobs.resolve(gpu, conv, {"GPU_PAD_FUSION": "OFF"}).identity == knobs.resolve(gpu, conv, {}).identity
    assert not any(k.keys() & {"GPU_CONV_TILE", "GPU_PAD_FUSION"} for k in knobs.candidates(cpu, conv, HeurMode.B))
