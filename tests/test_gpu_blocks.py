"""The GPU gate's scripts on the CPU: every block's graph, its PyTorch float64 reference and its input
recipe agree with IREE on llvm-cpu (so a GPU failure of the gate is the GPU's), and the CUDA
plans record their workarounds. (The self-check probe, benchmarks/gpu_selfcheck.py, is retired: in
git history at commit 9e99c4b.)"""
import json
import os
import sys

import pytest

from harness import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import gpu_blocks  # noqa: E402

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_every_block_passes_on_the_cpu(tmp_path, dt):
    plans, out = str(tmp_path / "plans"), str(tmp_path / "out")
    gpu_blocks.compile_all("llvm-cpu:host", plans, dtypes=[dt])
    rc = gpu_blocks.run_all(plans, "local-task", out, rounds=1, calls=1)
    res = json.load(open(os.path.join(out, "blocks.json")))["results"]
    assert {r["block"] for r in res} == set(gpu_blocks.BLOCKS)
    assert rc == 0, [r for r in res if not r["ok"]]
    assert all(r["max_rel_err"] <= gpu_blocks.TOL[dt] for r in res)
    assert "| bert_attention |" in open(os.path.join(out, "blocks.md")).read()


def test_cuda_plans_record_their_workarounds(tmp_path):
    gpu_blocks.compile_all("cuda:sm_80", str(tmp_path), names=["bert_attention", "resnet50_stem"], dtypes=["f16"])
    m = {e["block"]: e for e in json.load(open(tmp_path / "manifest.json"))["blocks"]}
    assert m["bert_attention"]["workarounds"] == ["mma-transpose-barrier"]
    # The stem's f16 conv takes the CUDA GEMM form (lowering/ops/conv.py _conv_gemm): its batched product's
    # output relayout sits behind the same propagation barrier as the attention's matmuls.
    assert m["resnet50_stem"]["workarounds"] == ["mma-transpose-barrier", "conv-channels-last"]
