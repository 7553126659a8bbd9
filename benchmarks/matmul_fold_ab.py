"""A/B on a GPU of two lowerings (trees), through the cuDNN facade: matmul + bias + gelu with a
batched A and a one-batch B, cuDNN FE's linear layers. First used for a broadcast-batch generic
(old) against the batch folded into one 2-D matmul (new, commit "a batched A times a one-batch B",
reverted after this measurement): H200, 2 rounds, old/new 1.11, 0.93, 0.96, within the run-to-run
spread; docs/gpu_results/matmul_fold_ab_h200.json.

    python3 benchmarks/matmul_fold_ab.py --old PATH_TO_OLD_TREE --json out.json     # driver
PATH_TO_OLD_TREE holds the older packages (``git archive REV lowering | tar -x -C DIR``).
Each round runs one process per tree, alternating (old, new, old, new, ...), with the compile cache
off (HIPDNN_IREE_CACHE=0); in each process every case is built, checked against torch (float64 of
the same inputs) and timed: bursts of 10 executes then one synchronize, 30 bursts, median per call.
torch eager (matmul + bias + gelu) is timed in the same process.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES = [("f16 4x512x1024 @ 1024x4096", "float16", 4, 512, 1024, 4096),
         ("bf16 8x128x4096 @ 4096x4096", "bfloat16", 8, 128, 4096, 4096),
         ("f16 16x512x1600 @ 1600x6400", "float16", 16, 512, 1600, 6400)]


def child() -> dict:
    import torch
    import hipdnn_iree.cudnn as cudnn
    h = cudnn.create_handle()
    out = {}
    for name, dt, b, m, k, n in CASES:
        tdt = getattr(torch, dt)
        x = torch.randn(b, m, k, device="cuda", dtype=tdt)
        w = torch.randn(1, k, n, device="cuda", dtype=tdt) / k ** 0.5
        bias = torch.randn(1, 1, n, device="cuda", dtype=tdt)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT,
                          handle=h)
        X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(bias)
        Y = g.gelu(g.bias(g.matmul(X, W), B))
        Y.set_output(True).set_data_type(tdt)
        t0 = time.perf_counter()
        g.build([cudnn.heur_mode.A])
        build_s = time.perf_counter() - t0
        y = torch.empty(b, m, n, device="cuda", dtype=tdt)
        pack = {X: x, W: w, B: bias, Y: y}
        g.execute(pack, None)
        torch.cuda.synchronize()
        ref = torch.nn.functional.gelu(x.double() @ w.double() + bias.double())
        err = ((y.double() - ref).abs().max() / ref.abs().max()).item()

        def burst(fn):
            times = []
            for _ in range(30):
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(10):
                    fn()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t) / 10 * 1e3)
            return statistics.median(times)
        for _ in range(3):
            g.execute(pack, None)
        ours = burst(lambda: g.execute(pack, None))
        eager = burst(lambda: torch.nn.functional.gelu(torch.matmul(x, w) + bias))
        out[name] = {"ms": ours, "torch_ms": eager, "rel_err": err, "build_s": build_s,
                     "tflops": 2 * b * m * k * n / ours / 1e9}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=False)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child()))
        return 0
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"old": os.path.abspath(args.old), "new": here}
    runs = {"old": [], "new": []}
    for r in range(args.rounds):
        for label in ("old", "new"):
            env = dict(os.environ, HIPDNN_IREE_CACHE="0")
            # NOTE: the old tree may hold only the packages that differ (e.g. lowering/): first on the
            # path, the rest comes from this checkout
            rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != here]
            env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([trees[label], here] + rest))
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env, capture_output=True,
                                  text=True, cwd=here, timeout=400)
            line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
            if line is None:
                print(label, "failed:", proc.stderr[-2000:])
                return 1
            runs[label].append(json.loads(line[7:]))
            print(f"round {r} {label}: " + json.dumps(runs[label][-1]), flush=True)
    summary = {}
    for name, *_ in CASES:
        row = {lab: statistics.median(x[name]["ms"] for x in runs[lab]) for lab in runs}
        row["torch"] = statistics.median(x[name]["torch_ms"] for lab in runs for x in runs[lab])
        row["old_over_new"] = row["old"] / row["new"]
        row["max_rel_err"] = max(x[name]["rel_err"] for lab in runs for x in runs[lab])
        summary[name] = row
        print(f"| {name} | old {row['old']:.3f} ms | new {row['new']:.3f} ms | torch {row['torch']:.3f} ms | "
              f"old/new {row['old_over_new']:.2f} | err {row['max_rel_err']:.1e} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
