"""CPU before/after of a refactor: the same three measurements in alternating processes of two trees.

Each child process imports one tree (``--tree DIR`` first on ``sys.path``) and measures, on a small
matmul+bias+relu graph (f32, [8,64,128] x [1,128,256]):
  cached build   a fresh handle builds the graph with a warm compile cache (the tree's own folder),
                 median of 15;
  restore        ``Graph.deserialize_compiled_plan`` of the serialized plan, median of 30;
  execute        steady ``Graph.execute`` on the same buffers, median per call over 20 blocks of 200.
The driver runs ``--rounds`` rounds of one child per tree, order alternating, and prints the
medians of the per-child medians with the new/old ratio.

    git archive <old commit> | tar -x -C /tmp/old_tree
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/refactor_ab.py --old /tmp/old_tree --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(cache_dir: str) -> dict:
    import numpy as np
    import hipdnn_iree as hd

    def graph():
        g = hd.Graph(name="ab_mlp", io_data_type=hd.DataType.FLOAT, compute_data_type=hd.DataType.FLOAT)
        x = g.tensor(name="X", uid=1, dim=[8, 64, 128], stride=[64 * 128, 128, 1], data_type=hd.DataType.FLOAT)
        w = g.tensor(name="W", uid=2, dim=[1, 128, 256], stride=[128 * 256, 256, 1], data_type=hd.DataType.FLOAT)
        b = g.tensor(name="B", uid=3, dim=[1, 1, 256], stride=[256, 256, 1], data_type=hd.DataType.FLOAT)
        y = g.pointwise(g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.RELU_FWD)
        y.set_output(True).set_uid(4).set_data_type(hd.DataType.FLOAT)
        return g

    def build():
        h = hd.create_handle(cache=cache_dir)
        g = graph()
        g.validate().build_operation_graph(h).create_execution_plans([hd.HeurMode.A]).check_support().build_plans()
        return h, g

    h, g = build()                      # fills the cache on the first child
    builds = []
    for _ in range(15):
        t0 = time.perf_counter()
        build()
        builds.append(time.perf_counter() - t0)
    data = g.serialize_compiled_plan()
    restores = []
    for _ in range(30):
        t0 = time.perf_counter()
        r = hd.Graph()
        r.deserialize_compiled_plan(h, data)
        restores.append(time.perf_counter() - t0)
    rng = np.random.default_rng(0)
    pack = {1: hd.empty_aligned((8, 64, 128), np.float32), 2: hd.empty_aligned((1, 128, 256), np.float32),
            3: hd.empty_aligned((1, 1, 256), np.float32), 4: hd.empty_aligned((8, 64, 256), np.float32)}
    for k in (1, 2, 3):
        pack[k][...] = rng.standard_normal(pack[k].shape)
    for _ in range(50):
        g.execute(h, pack)
    blocks = []
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(200):
            g.execute(h, pack)
        blocks.append((time.perf_counter() - t0) / 200)
    return {"cached_build_ms": statistics.median(builds) * 1e3, "restore_ms": statistics.median(restores) * 1e3,
            "execute_us": statistics.median(blocks) * 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", help="the old tree (a git archive of the commit before)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        sys.path.insert(0, a.child)
        print(json.dumps(child(a.cache)))
        return 0
    trees = {"old": os.path.abspath(a.old), "new": REPO}
    caches = {k: tempfile.mkdtemp(prefix=f"ab_{k}_") for k in trees}
    runs = {k: [] for k in trees}
    for r in range(a.rounds):
        for k in (("old", "new") if r % 2 == 0 else ("new", "old")):
            env = dict(os.environ, PYTHONPATH=trees[k])
            p = subprocess.run([sys.executable, __file__, "--child", trees[k], "--cache", caches[k]], env=env,
                               capture_output=True, text=True, cwd=trees[k])
            if p.returncode != 0:
                print(p.stderr[-3000:], file=sys.stderr)
                return 1
            runs[k].append(json.loads(p.stdout.strip().splitlines()[-1]))
    out = {"what": __doc__.split("\n")[0], "rounds": a.rounds, "medians": {}, "per_round": runs}
    for metric in runs["old"][0]:
        o = statistics.median(x[metric] for x in runs["old"])
        n = statistics.median(x[metric] for x in runs["new"])
        out["medians"][metric] = {"old": round(o, 4), "new": round(n, 4), "new_over_old": round(n / o, 3)}
        print(f"{metric:16s} old {o:9.3f}  new {n:9.3f}  new/old {n / o:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
