"""Autotuning where users run it: build, build_plans(ALL) and g.autotune in one process on the GPU
machine (the IREE compiler carried there), over the real blocks of benchmarks/gpu_blocks.py.

    python benchmarks/autotune_in_process.py --device cuda --target cuda:sm_80 --out DIR [--dtypes f32 f16]

Per block and io type: ``create_execution_plans([A, B])`` then ``build_plans(ALL)`` (compiles on
worker threads, loads on this thread), the configs kept and dropped (with why), then
``g.autotune(h, pack)`` on CUDA tensors: it times each built plan (interleaved, medians, in
hipdnn_iree/backend/autotune.py) and selects the fastest. Recorded: the default config's (plan 0)
median, the selected one's, their ratio, the selected knobs, and the selected plan's error against
a float64 torch reference (the gate's tolerance per io type); then the selected plan is serialized,
restored into a fresh graph and run again (same result). Output: ``DIR/autotune_in_process.json``
and a markdown table on stdout; the geomean of default/selected over the blocks.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hipdnn_iree as hd  # noqa: E402
from gpu_blocks import BLOCKS, TOL, _inputs  # noqa: E402


def _rel(torch, got, want) -> float:
    g, w = got.double(), want.double()
    return float((g - w).abs().max() / max(float(w.abs().max()), 1e-30))


def run_block(torch, h, name, dt) -> dict:
    row = {"block": name, "dtype": dt}
    t0 = time.perf_counter()
    g, forward = BLOCKS[name](dt)
    g.validate()
    g.build_operation_graph(h)
    g.create_execution_plans([hd.HeurMode.A, hd.HeurMode.B])
    g.check_support()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        g.build_plans(hd.BuildPlanPolicy.ALL)
    row["build_all_s"] = round(time.perf_counter() - t0, 1)
    row["configs_kept"] = g.get_execution_plan_count()
    row["configs_dropped"] = [{"knobs": c.knobs, "why": str(e).splitlines()[0][:200]}
                              for c, e in g.get_dropped_engine_configs()]
    tensors = g.get_compiled_plan_tensors()
    t = _inputs(torch, tensors, dt, "cuda")
    outs = [u.uid for u in tensors if u.role != "input"]
    ins = {u: v for u, v in t.items() if u not in outs}
    with torch.no_grad():
        want = forward(torch, {u: v.double() for u, v in ins.items()})
    t1 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        timings = g.autotune(h, t)
    torch.cuda.synchronize()
    row["autotune_s"] = round(time.perf_counter() - t1, 1)
    row["autotune_warnings"] = [str(w.message)[:300] for w in caught]
    ms = dict(timings)
    best = g.get_selected_plan_index()
    row["timed"] = len(timings)
    row["default_ms"], row["selected_ms"] = round(ms.get(0, float("nan")), 4), round(ms[best], 4)
    row["selected_index"], row["selected_knobs"] = best, dict(g.get_engine_config_at_index(best).knobs)
    row["default_over_selected"] = round(ms[0] / ms[best], 3) if 0 in ms else None
    for u in outs:
        t[u].fill_(float("nan"))
    g.execute(h, t)
    torch.cuda.synchronize()
    row["selected_err"] = max(_rel(torch, t[u], want[u]) for u in want)
    r = hd.Graph.from_compiled_plan(h, g.serialize_compiled_plan())
    again = {u: v.clone() for u, v in t.items()}
    for u in outs:
        again[u].fill_(float("nan"))
    r.execute(h, again)
    torch.cuda.synchronize()
    row["restored_err"] = max(_rel(torch, again[u], want[u]) for u in want)
    row["ok"] = row["selected_err"] <= TOL[dt] and row["restored_err"] <= TOL[dt]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--target", default="cuda:sm_80")
    ap.add_argument("--out", default="autotune_in_process_out")
    ap.add_argument("--dtypes", nargs="*", default=["f32", "f16", "bf16"])
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args(argv)
    import torch
    os.makedirs(a.out, exist_ok=True)
    h = hd.create_handle(device=a.device, target=a.target)
    rows = []
    for name in (a.only or list(BLOCKS)):
        for dt in a.dtypes:
            try:
                rows.append(run_block(torch, h, name, dt))
            except Exception as e:     # reported per block: the table says which one failed and how
                rows.append({"block": name, "dtype": dt, "ok": False, "error": f"{type(e).__name__}: {e}"[:500]})
            print(json.dumps(rows[-1]), flush=True)
    ratios = [r["default_over_selected"] for r in rows if r.get("default_over_selected")]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    summary = {"blocks": len(rows), "ok": sum(bool(r.get("ok")) for r in rows),
               "geomean_default_over_selected": round(geo, 3) if geo else None,
               "selected_not_default": sum(1 for r in rows if r.get("selected_index") not in (None, 0)),
               "device": torch.cuda.get_device_name(0)}
    with open(os.path.join(a.out, "autotune_in_process.json"), "w") as f:
        json.dump({"summary": summary, "rows": rows}, f, indent=1)
    print("| block | io | kept | dropped | default ms | selected ms | default/selected | selected knobs | err | ok |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['block']} | {r['dtype']} | {r.get('configs_kept')} | {len(r.get('configs_dropped', []))} | "
              f"{r.get('default_ms')} | {r.get('selected_ms')} | {r.get('default_over_selected')} | "
              f"{r.get('selected_knobs')} | {r.get('selected_err', r.get('error', ''))} | {r.get('ok')} |")
    print(json.dumps(summary))
    return 0 if summary["ok"] == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
