"""The GPU_MATMUL_TILE knob: a transform-dialect tuning spec that sets the workgroup
tile of matmul dispatches on GPUs. Compiled here for cuda:sm_80 with the real IREE compiler (no GPU
needed to compile); its speed and outputs are measured on the H200 by benchmarks/autotune_gpu.py (retired; in git history at commit 9e99c4b)."""
import os

import pytest

import hipdnn_iree as hd
from hipdnn_iree.plugin_sdk.engine_config import HeurMode
from hipdnn_iree.plugins.iree_linalg import knobs
from hipdnn_iree.plugins.iree_linalg.targets import parse_target
from graph_ir.desc import OpKind

FLAG = "--iree-codegen-transform-dialect-library="


def linear_graph(dt=hd.DataType.HALF):
    """x [64, 256] @ W^T (an nn.Linear weight [128, 256] seen as [256, 128]) + relu."""
    g = hd.Graph(name="linear", io_data_type=dt, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[64, 256])
    w = g.tensor(name="w", uid=2, dim=[256, 128], stride=[1, 256])
    g.pointwise(g.matmul(x, w), mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3)
    return g


def build(h, tile=None, dt=hd.DataType.HALF):
    g = linear_graph(dt)
    g.build_operation_graph(h)
    g.create_execution_plan("IREE_LINALG", {"GPU_MATMUL_TILE": tile} if tile else {})
    g.check_support()
    g.build_plans()
    return g.get_execution_plan().context


@pytest.fixture(scope="module")
def cuda_handle():
    return hd.create_handle(device=None, target="cuda:sm_80", cache=False)


def test_tile_knob_changes_the_gpu_module(cuda_handle):
    base = build(cuda_handle)
    tiled = {t: build(cuda_handle, t) for t in ("64X64", "64X128")}
    assert not any(f.startswith(FLAG) for f in base.compile_flags)
    modules = {bytes(base.vmfb)}
    for tile, ctx in tiled.items():
        (flag,) = [f for f in ctx.compile_flags if f.startswith(FLAG)]
        assert tile in flag and flag.endswith("@__kernel_config")
        modules.add(bytes(ctx.vmfb))
    assert len(modules) == 3, "each tile must give a module of its own"


def test_tile_knob_is_checked_and_listed(cuda_handle):
    names = [k.name for k in cuda_handle.resource_manager.knobs(cuda_handle.resource_manager.engine_id_of("IREE_LINALG"))]
    assert "GPU_MATMUL_TILE" in names
    g = linear_graph()
    g.build_operation_graph(cuda_handle)
    with pytest.raises(hd.HipdnnError) as e:
        g.create_execution_plan("IREE_LINALG", {"GPU_MATMUL_TILE": "48X48"})
    assert e.value.status == hd.Status.BAD_PARAM and "GPU_MATMUL_TILE" in str(e.value)
    g.create_execution_plans([HeurMode.B])
    tiles = {g.get_engine_config_at_index(i).knobs.get("GPU_MATMUL_TILE") for i in range(g.get_execution_plan_count())}
    assert {"32X128", "64X64", "64X128"} <= tiles


def test_tile_knob_only_where_it_means_something():
    mm = knobs.GraphSummary(kinds=frozenset({OpKind.MATMUL}), has_double=False, conv_ranks=(), f32_only=False)
    no_mm = knobs.GraphSummary(kinds=frozenset({OpKind.SDPA}), has_double=False, conv_ranks=(), f32_only=False)
    cpu, gpu = parse_target("llvm-cpu:host"), parse_target("cuda:sm_80")
    on = {"GPU_MATMUL_TILE": "64X64"}
    assert any(f.startswith(FLAG) for f in knobs.resolve(gpu, mm, on).flags)
    assert not any(f.startswith(FLAG) for f in knobs.resolve(cpu, mm, on).flags)
    assert not any(f.startswith(FLAG) for f in knobs.resolve(gpu, no_mm, on).flags)
    assert not any("GPU_MATMUL_TILE" in k for k in knobs.candidates(cpu, mm, HeurMode.B))
    assert not any("GPU_MATMUL_TILE" in k for k in knobs.candidates(gpu, no_mm, HeurMode.B))


def test_tile_spec_file_is_named_by_its_text():
    flags = {t: knobs.tile_spec_flag(t) for t in ("32X128", "64X64")}
    assert flags["32X128"] != flags["64X64"]
    for tile, flag in flags.items():
        path = flag[len(FLAG):].rsplit("@", 1)[0]
        with open(path, encoding="utf-8") as f:
            assert f.read() == knobs.tile_spec_text(tile)
    assert "workgroup = [64, 64, 0]" in knobs.tile_spec_text("64X64")
    assert "thread = [2, 8, 0]" in knobs.tile_spec_text("64X64")
    assert os.path.basename(flags["64X64"]).startswith("gpu_matmul_tile_64X64_")
