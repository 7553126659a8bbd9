"""The two one-dispatch SCATTER forms of moe_grouped_matmul on this CPU (lowering/ops/moe.py): the CPU's
(destinations inverted, the contraction over output rows) and the GPUs' (the contraction over the rows
in their own order, the rows scattered by the region's root), the latter compiled for llvm-cpu from the
module the cuda:sm_80 target gets. Both checked against the float64 per-expert loop, then timed
interleaved: medians of ``--rounds`` rounds, two passes. Why the CPU keeps its own form.

Usage: python3 benchmarks/moe_scatter_forms_cpu.py [--tokens 512 --k 256 --n 256 --experts 8]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import hipdnn_iree as hd  # noqa: E402
from test_moe import H, SCATTER, expert_loop, forward_graph  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args(argv)
    import iree.compiler.tools as tools
    import iree.runtime as rt
    top_k, e = 2, a.experts
    m = a.tokens * top_k
    h = hd.create_handle(device="local-task", cache=False)
    g, _ = forward_graph(m, a.k, a.n, e, H, mode=SCATTER, top_k=top_k)()
    g.build(h)
    gpu_mlir = forward_graph(m, a.k, a.n, e, H, mode=SCATTER, top_k=top_k)()[0].get_mlir(target="cuda:sm_80")
    vmfb = tools.compile_str(gpu_mlir, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=host"])
    ctx = rt.SystemContext(config=rt.Config("local-task"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    rng = np.random.default_rng(30)
    tok = (rng.standard_normal((1, m, a.k)) / np.sqrt(a.k)).astype(np.float16)
    w = rng.standard_normal((e, a.k, a.n)).astype(np.float16)
    off = np.concatenate([[0, 0, 1], 1 + np.sort(rng.integers(0, m - 1, e - 3))]).astype(np.int32).reshape(e, 1, 1)
    slot = rng.permutation(m)
    idx, ks = (slot // top_k).astype(np.int32).reshape(1, m, 1), (slot % top_k).astype(np.int32).reshape(1, m, 1)
    out = np.zeros((1, m, a.n), np.float16)
    want = expert_loop(tok, w, off, SCATTER, top_k, idx, ks)
    forms = {"cpu_form": lambda: g.execute(h, {1: tok, 2: w, 3: off, 4: out, 5: idx, 6: ks}) or out,
             "gpu_form": lambda: np.asarray(ctx.modules.module.main(tok, w, off, out, idx, ks).to_host())}
    ok = True
    for name, f in forms.items():
        err = np.abs(np.asarray(f(), np.float64) - want).max() / np.abs(want).max()
        ok = ok and err <= 2e-3
        print(f"{name}: max rel err {err:.1e} ({'PASS' if err <= 2e-3 else 'FAIL'})")
    for p in ("A", "B"):
        times = {k: [] for k in forms}
        for _ in range(a.rounds):
            for k, f in forms.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
        print(p, {k: f"{np.median(v) * 1e3:.2f} ms" for k, v in times.items()})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
