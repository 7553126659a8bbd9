"""Build (compile) time vs restore-and-first-execute time, on the CPU, same graphs, one run.

Usage: python benchmarks/restore_vs_build.py [--repeats N] [--tiny]
Prints a markdown table of medians (and min/max) over N repetitions of each step. ``--tiny``
shrinks the second graph to 16x32x64 (tests/test_benchmarks.py runs it so).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import hipdnn_iree as hd


def sample_matmul():
    g = hd.Graph(name="sample_matmul", io_data_type=hd.DataType.FLOAT)
    g.matmul(g.tensor(name="A", uid=1, dim=[4, 8]), g.tensor(name="B", uid=2, dim=[8, 5])).set_output(True).set_uid(3)
    return g, {1: (4, 8), 2: (8, 5)}, {3: (4, 5)}


def mlp(m=256, k=512, n=1024):
    g = hd.Graph(name="matmul_bias_relu", io_data_type=hd.DataType.FLOAT)
    x, w = g.tensor(name="X", uid=1, dim=[m, k]), g.tensor(name="W", uid=2, dim=[k, n])
    b = g.tensor(name="bias", uid=3, dim=[1, n])
    y = g.pointwise(g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_uid(4)
    return g, {1: (m, k), 2: (k, n), 3: (1, n)}, {4: (m, n)}


def measure(factory, handle, repeats):
    rng = np.random.default_rng(0)
    _, ins, outs = factory()
    pack = {u: rng.standard_normal(s, dtype=np.float32) for u, s in ins.items()}
    pack.update({u: np.empty(s, np.float32) for u, s in outs.items()})
    build, restore, first, steady = [], [], [], []
    plan = None
    for _ in range(repeats):
        g = factory()[0]
        t0 = time.perf_counter()
        g.build(handle)
        build.append(time.perf_counter() - t0)
        plan = g.serialize_compiled_plan()
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = hd.Graph.from_compiled_plan(handle, plan)
        t1 = time.perf_counter()
        r.execute(handle, pack)
        t2 = time.perf_counter()
        restore.append(t1 - t0)
        first.append(t2 - t0)
    for _ in range(max(repeats, 20)):
        t0 = time.perf_counter()
        r.execute(handle, pack)
        steady.append(time.perf_counter() - t0)
    return {"build": build, "restore": restore, "restore+first": first, "steady": steady, "plan_bytes": len(plan)}


def fmt(xs):
    return f"{statistics.median(xs) * 1e3:.2f} ms (min {min(xs) * 1e3:.2f}, max {max(xs) * 1e3:.2f})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tiny", action="store_true", help="a 16x32x64 matmul+bias+relu in place of 256x512x1024")
    args = ap.parse_args(argv)
    handle = hd.create_handle()
    big = ("matmul+bias+relu 16x32x64 f32", lambda: mlp(16, 32, 64)) if args.tiny else \
        ("matmul+bias+relu 256x512x1024 f32", mlp)
    print("| graph | plan size | build (compile) | restore | restore + first execute | steady execute | build / (restore+first) |")
    print("|---|---|---|---|---|---|---|")
    for name, factory in [("sample matmul 4x8x5", sample_matmul), big]:
        r = measure(factory, handle, args.repeats)
        ratio = statistics.median(r["build"]) / statistics.median(r["restore+first"])
        print(f"| {name} | {r['plan_bytes']} B | {fmt(r['build'])} | {fmt(r['restore'])} | {fmt(r['restore+first'])} "
              f"| {fmt(r['steady'])} | {ratio:.0f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
