"""Plans cross process boundaries: written in one Python process, restored and run in a fresh one
(with the IREE compiler made unavailable), and runnable through plain ``iree.runtime``."""
import json
import textwrap

import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
from harness import BLOCK_COMPILER, run_python

GRAPH_CODE = textwrap.dedent("""
    import hipdnn_iree as hd
    def build(m=64, k=128, n=96):
        g = hd.Graph(name="mlp", io_data_type=hd.DataType.FLOAT)
        x = g.tensor(name="X", uid=1, dim=[2, m, k])
        w = g.tensor(name="W", uid=2, dim=[1, k, n], stride=[k * n, 1, k])   # transposed via strides
        b = g.tensor(name="bias", uid=3, dim=[1, 1, n])
        y = g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD)
        g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(4)
        return g
""")



@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plans") / "mlp.plan"
    p = run_python(GRAPH_CODE + textwrap.dedent(f"""
        h = hd.create_handle()
        g = build()
        g.build(h)
        open({str(path)!r}, "wb").write(g.serialize_compiled_plan())
        print("WROTE")
    """))
    assert p.returncode == 0 and "WROTE" in p.stdout, p.stderr
    return path


def test_restore_and_execute_in_fresh_process_without_compiler(plan_file):
    p = run_python(BLOCK_COMPILER + GRAPH_CODE + textwrap.dedent(f"""
        import sys
        import numpy as np
        import hipdnn_iree as hd
        try:
            import iree.compiler
            raise SystemExit("compiler import was not blocked")
        except ImportError:
            pass
        h = hd.create_handle()
        data = open({str(plan_file)!r}, "rb").read()
        r = hd.Graph.from_compiled_plan(h, data)
        assert r.get_compiled_plan_tensor_uids() == [1, 2, 3, 4], r.get_compiled_plan_tensor_uids()
        rng = np.random.default_rng()
        x = rng.standard_normal((2, 64, 128), dtype=np.float32)
        w = np.ascontiguousarray(rng.standard_normal((1, 96, 128), dtype=np.float32)).transpose(0, 2, 1)
        b = rng.standard_normal((1, 1, 96), dtype=np.float32)
        y = np.full((2, 64, 96), np.nan, np.float32)
        r.execute(h, {{1: x, 2: w, 3: b, 4: y}})
        ref = build()
        ref.set_preferred_engine_id_ext("NUMPY_REFERENCE")
        ref.build(h)
        want = np.zeros_like(y)
        ref.execute(h, {{1: x, 2: w, 3: b, 4: want}})
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
        independent = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b, 0)
        np.testing.assert_allclose(y, independent, rtol=1e-4, atol=1e-4)
        assert "iree.compiler" not in sys.modules
        assert not any(m.startswith("iree.compiler") for m in sys.modules)
        print("RESTORED_OK")
    """))
    assert p.returncode == 0 and "RESTORED_OK" in p.stdout, p.stdout + p.stderr


def test_plain_iree_runtime_runs_the_payload(plan_file, cpu):
    data = plan_file.read_bytes()
    vmfb = _fusplan.unpack(_envelope.decode(data).plugin_payload).body
    import iree.runtime as ireert
    inst = ireert.VmInstance()
    dev = ireert.get_driver("local-task").create_default_device()
    module = ireert.VmModule.copy_buffer(inst, vmfb)
    ctx = ireert.VmContext(inst, modules=[ireert.create_hal_module(inst, dev), module])
    fn = module.lookup_function("main")
    abi = json.loads(fn.reflection["hipdnn_iree.abi"])
    assert [t["uid"] for t in abi["tensors"]] == [1, 2, 3, 4]
    assert [t["role"] for t in abi["tensors"]] == ["input", "input", "input", "output"]
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 64, 128), dtype=np.float32)
    w_mem = rng.standard_normal((1, 96, 128), dtype=np.float32)   # W's memory image (dims [1,128,96] transposed)
    b = rng.standard_normal((1, 1, 96), dtype=np.float32)
    out = ireert.FunctionInvoker(ctx, dev, fn)(x, w_mem, b, np.zeros((2, 64, 96), np.float32)).to_host()
    r = hd.Graph.from_compiled_plan(cpu, data)
    y = np.zeros((2, 64, 96), np.float32)
    r.execute(cpu, {1: x, 2: w_mem.transpose(0, 2, 1), 3: b, 4: y})
    np.testing.assert_array_equal(out, y)
    np.testing.assert_allclose(out, np.maximum(x.astype(np.float64) @ w_mem.transpose(0, 2, 1) + b, 0),
                               rtol=1e-4, atol=1e-4)
