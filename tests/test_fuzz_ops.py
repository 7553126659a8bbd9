"""The random-graph fuzzer's CPU tier (tests/fuzz_ops.py): a few hundred random graphs (conv, matmul, norms,
sdpa; f32/f16/bf16/fp8; every layout the generator knows), each built by the IREE engine and compared with
a float64 reference. No wrong result and no raw exception is allowed; refusals are counted, not failed.
The GPU tier is the same generator at large sizes (benchmarks/gpu_run.sh fuzz)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fuzz_ops as F

HERE = os.path.dirname(os.path.abspath(__file__))


def test_generator_is_a_function_of_the_seed():
    assert F.gen_case(123) == F.gen_case(123)
    assert F.gen_case(123, "conv", "large") == F.gen_case(123, "conv", "large")
    kinds = {F.gen_case(s)["kind"] for s in range(200)}
    assert kinds == set(F.KINDS)


def test_generator_covers_the_space():
    """The axes the issue asks for all occur in a few hundred cases."""
    cs = [F.gen_case(s, "conv") for s in range(400)]
    assert {c["op"] for c in cs} == {"fprop", "dgrad", "wgrad"}
    assert {len(c["spatial"]) for c in cs} == {1, 2, 3}
    assert {c["layout"] for c in cs} == {"first", "last"}
    assert any(c["g"] > 1 and c["c"] // c["g"] > 1 for c in cs) and any(c["g"] == c["c"] > 1 for c in cs)
    assert any(max(c["stride"]) > 1 for c in cs) and any(max(c["dilation"]) > 1 for c in cs)
    ms = [F.gen_case(s, "matmul") for s in range(400)]
    assert {c["a_layout"] for c in ms} == {"row", "col", "pad"} and {c["bcast"] for c in ms} == {"none", "a", "b"}
    assert {c["dt"] for c in ms} == {"f32", "f16", "bf16", "fp8"}


def test_checker_catches_a_wrong_result(monkeypatch):
    """The comparison can fail: a graph whose reference is perturbed is reported WRONG with a repro line."""
    import hipdnn_iree as hd
    cs = F.gen_case(5, "matmul")
    real = F._BUILD["matmul"]

    def off(c, rng):
        g, ins, outs, refs, meta = real(c, rng)
        return g, ins, outs, {u: r + 0.5 * abs(r).max() for u, r in refs.items()}, meta
    monkeypatch.setitem(F._BUILD, "matmul", off)
    lines = []
    out = F.run([cs], hd.create_handle(), "llvm-cpu:host", log=lines.append)
    assert out["counts"] == {"WRONG": 1} and "--case" in lines[0]


@pytest.mark.parametrize("seed", [11, 12])
def test_cpu_tier(seed, tmp_path):
    """150 random graphs per seed in a child process (a crash cannot take pytest down)."""
    js = tmp_path / "fuzz.json"
    p = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_ops.py"), "--cases", "150", "--seed", str(seed),
                        "--json", str(js)], capture_output=True, text=True, timeout=1500)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    out = json.loads(js.read_text())
    counts = out["counts"]
    print(json.dumps({k: out[k] for k in ("counts", "refused", "median_build_s")}))
    assert not counts.get("WRONG") and not counts.get("error"), p.stdout[-4000:]
    assert counts.get("right", 0) >= 140, counts


@pytest.mark.parametrize("fp8", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("layout", ["pad", "col"])
def test_fp8_operand_in_a_strided_view(fp8, layout):
    """Found by the fuzzer: an FP8 input bound as a padded or transposed view failed inside the engine
    (numpy's as_strided cannot rebuild ml_dtypes' 1-byte types: PLUGIN_ERROR from a TypeError)."""
    import hipdnn_iree as hd
    cs = {"kind": "matmul", "seed": 7, "size": "small", "m": 48, "n": 72, "k": 49, "b": 2, "bcast": "none", "dt": "fp8",
          "a_layout": layout, "b_layout": "row", "out_layout": "pad", "epilogue": ["bias"], "fp8": fp8, "out_dt": "f32"}
    r = F.run_case(cs, hd.create_handle())
    assert r["status"] == "right", r


def test_cpu_matmul_of_a_padded_view_builds_with_auto_data_tiling():
    """Found by the fuzzer: f32 matmuls whose operand is a padded view failed to build on the CPU (IREE's data
    tiling exceeded its stack limit: INTERNAL_ERROR); AUTO now builds them untiled, and they are right."""
    import hipdnn_iree as hd
    for m, n, k, lb in ((51, 20, 104, "row"), (93, 24, 72, "col"), (89, 64, 120, "row")):
        cs = {"kind": "matmul", "seed": 3, "size": "small", "m": m, "n": n, "k": k, "b": 1, "bcast": "none", "dt": "f32",
              "a_layout": "pad", "b_layout": lb, "out_layout": "row", "epilogue": ["bias"]}
        r = F.run_case(cs, hd.create_handle(cache=False))
        assert r["status"] == "right", r


def test_device_tensor_binding_path():
    """The GPU tier binds torch tensors (a GPU handle refuses host arrays): the same conversion, with torch's
    CPU device, gives right results for strided f32/bf16/FP8 operands and outputs."""
    torch = pytest.importorskip("torch")
    import hipdnn_iree as hd
    h = hd.create_handle()
    cases = [{"kind": "matmul", "seed": 7, "size": "small", "m": 48, "n": 72, "k": 49, "b": 2, "bcast": "none", "dt": "fp8",
              "a_layout": "pad", "b_layout": "col", "out_layout": "pad", "epilogue": ["bias"], "fp8": "fp8_e4m3",
              "out_dt": "bf16"}] + [F.gen_case(s, "conv") for s in (1, 2, 3)]
    for cs in cases:
        r = F.run_case(cs, h, torch_device="cpu")
        assert r["status"] in ("right", "refused"), (F.describe(cs), r)
    a = F._array(np.random.default_rng(0), [2, 3, 5], [20, 1, 4], "bf16")
    t = F.to_torch(a, "cpu")
    assert t.dtype == torch.bfloat16 and t.stride() == (20, 1, 4)
    assert np.array_equal(F.from_torch(t, a).astype(np.float32), a.astype(np.float32))
