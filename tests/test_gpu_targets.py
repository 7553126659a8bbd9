"""AMD and NVIDIA plans compiled here: each module carries code for its arch, and restoring it
on the CPU fails with a clear mismatch error."""
import pytest

import hipdnn_iree as hd
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan

S = hd.Status


def _graph():
    g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
    x, w = g.tensor(uid=1, dim=[64, 128]), g.tensor(uid=2, dim=[128, 32])
    b = g.tensor(uid=3, dim=[1, 32])
    y = g.pointwise(g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.GELU_FWD)
    y.set_output(True).set_uid(4)
    return g


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950", "gfx1100"])
def test_amd_plans(arch):
    h = hd.create_handle(device=None, target=f"rocm:{arch}")
    g = _graph()
    g.build(h)
    data = g.serialize_compiled_plan()
    env = _envelope.decode(data)
    vmfb = _fusplan.unpack(env.plugin_payload).body
    assert b"rocm-hsaco-fb" in vmfb
    assert arch.encode() in vmfb
    assert b"\x7fELF" in vmfb                      # the HSA code object (an AMDGPU ELF) is embedded
    meta = _fusplan.unpack(env.plugin_payload).metadata
    assert (meta.target_device, meta.target_arch) == ("hip", f"rocm:{arch}")
    with pytest.raises(hd.HipdnnError) as ei:
        hd.Graph.from_compiled_plan(hd.create_handle(), data)
    assert ei.value.status == S.NOT_SUPPORTED
    assert f"rocm:{arch}" in str(ei.value) and "local-task" in str(ei.value)


def test_cuda_plan():
    h = hd.create_handle(device=None, target="cuda:sm_80")
    g = _graph()
    g.build(h)
    data = g.serialize_compiled_plan()
    vmfb = _fusplan.unpack(_envelope.decode(data).plugin_payload).body
    assert b"cuda-nvptx-fb" in vmfb and b"sm_80" in vmfb
    with pytest.raises(hd.HipdnnError) as ei:
        hd.Graph.from_compiled_plan(hd.create_handle(), data)
    assert ei.value.status == S.NOT_SUPPORTED and "cuda:sm_80" in str(ei.value)


def test_one_plan_for_several_amd_archs_is_kind_3():
    """IREE 3.13 cannot put several ROCm archs in one module (--iree-rocm-target takes one arch):
    a target list makes one module per arch inside one plan instead (FUSPLAN kind 3,
    tests/test_multi_target.py)."""
    h = hd.create_handle(device=None, target=["rocm:gfx90a", "rocm:gfx942"])
    g = _graph()
    g.build(h)
    fp = _fusplan.unpack(_envelope.decode(g.serialize_compiled_plan()).plugin_payload)
    assert fp.payload_kind == _fusplan.KIND_MULTI_TARGET
    for e, arch in zip(fp.entries, ("gfx90a", "gfx942")):
        mod = bytes(fp.module(e))
        assert e.target == f"rocm:{arch}" and arch.encode() in mod and b"rocm-hsaco-fb" in mod


def test_gpu_conv_flags_follow_the_graph():
    """Channels-last conv compilation on GPUs except for graphs whose convs are only dgrad
    (measured on an H200: see docs/performance.md), as the engine resolves it (knobs.resolve)."""
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    from hipdnn_iree.plugins.iree_linalg.targets import GPU_CONV_FLAGS, parse_target
    from graph_ir import OpKind

    def flags(target, kinds):
        summary = GraphSummary(kinds=frozenset(kinds), has_double=False, conv_ranks=(), f32_only=False)
        return list(resolve(parse_target(target), summary, {}).flags)
    assert flags("cuda:sm_80", [OpKind.CONV_FPROP, OpKind.POINTWISE]) == list(GPU_CONV_FLAGS)
    assert flags("cuda:sm_80", [OpKind.CONV_WGRAD]) == list(GPU_CONV_FLAGS)
    assert flags("cuda:sm_80", [OpKind.CONV_DGRAD]) == []
    assert flags("cuda:sm_80", [OpKind.CONV_DGRAD, OpKind.CONV_WGRAD]) == []
    assert flags("cuda:sm_80", [OpKind.MATMUL]) == []
    assert flags("rocm:gfx942", [OpKind.CONV_FPROP]) == list(GPU_CONV_FLAGS)
    assert flags("llvm-cpu", [OpKind.CONV_FPROP]) == []