"""On a GPU handle, in one process, as cuDNN users work: build (default and ALL), autotune,
execute, serialize and restore, for matmul, conv and sdpa graphs in FLOAT and HALF, on CUDA
tensors, against torch in float64. Every config build() can make must load and run when built
by build_plans(ALL) (whose compiles run on worker threads). gpu-marked: skips without a device;
needs the IREE compiler beside the runtime."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import hipdnn_iree as hd  # noqa: E402
import hipdnn_iree.cudnn as cudnn  # noqa: E402

pytestmark = pytest.mark.gpu
TOL = {hd.DataType.FLOAT: 2e-3, hd.DataType.HALF: 2e-2}
TDT = {hd.DataType.FLOAT: torch.float32, hd.DataType.HALF: torch.float16}


@pytest.fixture(scope="module")
def h():
    return hd.create_handle(device="cuda", target="cuda:sm_80")


def _matmul(dt):
    g = hd.Graph(name=f"mm_{dt.name}", io_data_type=dt, compute_data_type=hd.DataType.FLOAT)
    a = g.tensor(name="a", uid=1, dim=[1, 256, 512])
    b = g.tensor(name="b", uid=2, dim=[1, 512, 256])
    g.matmul(a, b).set_output(True).set_uid(3)
    return g, lambda t: t[1] @ t[2]


def _conv(dt):
    g = hd.Graph(name=f"conv_{dt.name}", io_data_type=dt, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[4, 32, 28, 28], stride=[28 * 28 * 32, 1, 28 * 32, 32])
    w = g.tensor(name="w", uid=2, dim=[64, 32, 3, 3], stride=[9 * 32, 1, 3 * 32, 32])
    y = g.pointwise(g.conv_fprop(x, w, padding=[1, 1]), mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_uid(3)
    return g, lambda t: torch.relu(torch.nn.functional.conv2d(t[1], t[2], padding=1))


def _sdpa(dt):
    g = hd.Graph(name=f"sdpa_{dt.name}", io_data_type=dt, compute_data_type=hd.DataType.FLOAT)
    q, k, v = (g.tensor(name=n, uid=i + 1, dim=[2, 4, 128, 64]) for i, n in enumerate("qkv"))
    g.sdpa(q, k, v, attn_scale=0.125, is_causal=True).set_output(True).set_uid(4)
    return g, lambda t: torch.nn.functional.scaled_dot_product_attention(t[1], t[2], t[3], is_causal=True, scale=0.125)


GRAPHS = {"matmul": _matmul, "conv": _conv, "sdpa": _sdpa}


def _pack(g, dt, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pack = {}
    for t in g.get_compiled_plan_tensors():
        buf = torch.empty_strided(list(t.dims), list(t.strides), dtype=TDT[dt], device="cuda")
        if t.role == "input":
            buf.copy_(torch.randn(list(t.dims), generator=gen, device="cuda") * 0.5)
        else:
            buf.fill_(float("nan"))
        pack[t.uid] = buf
    return pack


def _err(got, want):
    return float((got.double() - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("dt", [hd.DataType.FLOAT, hd.DataType.HALF], ids=["f32", "f16"])
@pytest.mark.parametrize("kind", list(GRAPHS))
def test_build_all_autotune_serialize_restore_on_the_gpu(h, kind, dt):
    g, ref = GRAPHS[kind](dt)
    g.build(h)
    pack = _pack(g, dt)
    out = max(pack)
    ins = {u: v.double() for u, v in pack.items() if u != out}
    want = ref(ins)
    g.execute(h, pack)
    torch.cuda.synchronize()
    assert _err(pack[out], want) <= TOL[dt]

    g2, _ = GRAPHS[kind](dt)
    g2.validate()
    g2.build_operation_graph(h)
    g2.create_execution_plans([hd.HeurMode.A, hd.HeurMode.B])
    g2.check_support()
    n = g2.get_execution_plan_count()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g2.build_plans(hd.BuildPlanPolicy.ALL)
    dropped = g2.get_dropped_engine_configs()
    assert not any("INVALID_CONTEXT" in str(e) for _, e in dropped), dropped
    assert g2.get_execution_plan_count() >= 2 and g2.get_execution_plan_count() + len(dropped) == n
    names = {g2.get_engine_config_at_index(i).engine_name for i in range(g2.get_execution_plan_count())}
    assert names == {"IREE_LINALG"}, names           # the host reference is no GPU candidate
    for i in range(g2.get_execution_plan_count()):
        pack[out].fill_(float("nan"))
        g2.execute_plan_at_index(h, pack, index=i)
        torch.cuda.synchronize()
        assert _err(pack[out], want) <= TOL[dt], (i, g2.get_engine_config_at_index(i), [str(w.message) for w in caught])
    timings = g2.autotune(h, pack)
    assert len(timings) >= 2 and g2.get_selected_plan_index() == timings[0][0]
    assert all(t > 0 for _, t in timings)
    pack[out].fill_(float("nan"))
    g2.execute(h, pack)
    torch.cuda.synchronize()
    assert _err(pack[out], want) <= TOL[dt]
    r = hd.Graph.from_compiled_plan(h, g2.serialize_compiled_plan())
    pack[out].fill_(float("nan"))
    r.execute(h, pack)
    torch.cuda.synchronize()
    assert _err(pack[out], want) <= TOL[dt]


def test_facade_build_plans_all_on_cuda_tensors():
    """The reported case through cuDNN FE code: a half matmul [1, 256, 512] x [1, 512, 256]."""
    handle = cudnn.create_handle(device="cuda", target="cuda:sm_80")
    a = torch.randn(1, 256, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(1, 512, 256, device="cuda", dtype=torch.float16)
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    A, B = graph.tensor_like(a), graph.tensor_like(b)
    C = graph.matmul(A=A, B=B)
    C.set_output(True).set_data_type(cudnn.data_type.HALF)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.B])
    graph.check_support()
    graph.build_plans(cudnn.build_plan_policy.ALL)
    assert graph.get_execution_plan_count() >= 2
    c = torch.empty(1, 256, 256, device="cuda", dtype=torch.float16)
    graph.execute({A: a, B: b, C: c}, torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    want = a.double() @ b.double()
    assert _err(c, want) <= 2e-2
