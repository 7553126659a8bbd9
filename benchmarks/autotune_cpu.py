"""Default vs autotuned engine configs on CPU suite cases (issue 19, item 7), and what autotuning costs.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE HIPDNN_IREE_CACHE=0 \\
        python benchmarks/autotune_cpu.py --json autotune_cpu.json [--only NAME ...]

Per case of benchmarks/cases.py (the suite's graphs, f32, IREE ``local-task`` device): ``g.build(h)``
(the default config, plan 0), then ``g.autotune(h, pack)`` (adds the ``HeurMode.B`` configs, builds
them, checks each one's outputs against plan 0's, times the survivors in interleaved rounds and
selects the fastest). The seconds ``autotune`` takes are its cost per graph (compiles + timing; the
compile cache is off, so every candidate compiles). Then the default plan and the selected plan are
timed again, interleaved (``execute_plan_at_index``), so the reported speedup does not reuse the
samples that picked the winner. Each case records the machine load (``os.getloadavg``) before and
after: the build machine is shared.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hipdnn_iree as hd  # noqa: E402
from cases import all_cases, strided  # noqa: E402

DEFAULT_CASES = ("ResNet-50 3x3", "ResNet-50 1x1", "depthwise 3x3", "conv 1-D k3/2", "conv 3-D 3x3x3", "matmul",
                 "matmul+bias+gelu", "BERT-base attention", "BERT-base output+FFN")


def _pack(case):
    pack = {u: arr for u, (arr, _) in case.inputs.items()}
    for u, (dims, strides) in case.outputs.items():
        pack[u] = strided(np.zeros(int(np.prod(dims)), np.float32), dims, strides)
    return pack


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def run_case(case, h, rounds: int) -> dict:
    row = {"case": case.name, "shape": case.shape, "load_before": _load()}
    g = case.build()
    t0 = time.perf_counter()
    g.build(h)
    row["default_build_s"] = round(time.perf_counter() - t0, 2)
    pack = _pack(case)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        timings = g.autotune(h, pack)
        row["autotune_s"] = round(time.perf_counter() - t0, 2)
    row["warnings"] = [str(w.message)[:300] for w in caught]
    best = g.get_selected_plan_index()
    row["candidates"] = [{"index": i, "knobs": dict(g.get_engine_config_at_index(i).knobs), "autotune_ms": round(ms, 4)}
                         for i, ms in timings]
    row["candidate_count"] = g.get_execution_plan_count()
    row["chosen_index"], row["chosen_knobs"] = best, dict(g.get_engine_config_at_index(best).knobs)
    # independent re-timing: default (plan 0) vs chosen, interleaved, order alternating per round
    sides = [0] if best == 0 else [0, best]
    samples = {i: [] for i in sides}
    for i in sides:
        g.execute_plan_at_index(h, pack, index=i)
    for r in range(rounds):
        for i in (sides if r % 2 == 0 else sides[::-1]):
            t = time.perf_counter()
            g.execute_plan_at_index(h, pack, index=i)
            samples[i].append((time.perf_counter() - t) * 1e3)
    if case.reference is not None or case.numpy_fn is not None:
        want = (case.reference or case.numpy_fn)()
        (out_uid,) = case.outputs
        g.execute_plan_at_index(h, pack, index=best)
        got = np.asarray(pack[out_uid], np.float64)
        row["chosen_rel_err"] = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))

    def stat(xs):
        xs = sorted(xs)
        return {"median": round(xs[len(xs) // 2], 4), "q1": round(xs[len(xs) // 4], 4),
                "q3": round(xs[(3 * len(xs)) // 4], 4), "n": len(xs)}
    row["default_ms"] = stat(samples[0])
    row["tuned_ms"] = stat(samples[best])
    row["speedup"] = round(row["default_ms"]["median"] / row["tuned_ms"]["median"], 3)
    row["load_after"] = _load()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=list(DEFAULT_CASES))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    cases = [c for c in all_cases("full") if c.name in args.only]
    h = hd.create_handle(device="local-task", cache=False)
    rows = []
    for case in cases:
        try:
            row = run_case(case, h, args.rounds)
        except Exception as e:  # reported, not raised: the run should finish
            row = {"case": case.name, "error": f"{type(e).__name__}: {e}"[:400]}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "candidates"}), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"cpu_count": os.cpu_count(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
