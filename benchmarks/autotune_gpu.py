"""Default vs autotuned engine configs on the GPU gate of real blocks (issue 19, item 7).

The GPU machine has no IREE compiler, so autotuning is done offline, in two steps:

    HIPDNN_IREE_CACHE=0 python benchmarks/autotune_gpu.py compile --out .gpu_autotune   # build machine
    python benchmarks/autotune_gpu.py run --plans .gpu_autotune --out DIR              # GPU machine

``compile`` builds every ``HeurMode.B`` engine config of each block of benchmarks/gpu_blocks.py
(f32, f16, bf16 io) for ``cuda:sm_80``, one graph per config through
``create_execution_plan("IREE_LINALG", knobs)``, and saves each plan. Configs whose ``.vmfb`` is
byte-identical to an earlier config's of the same block are recorded as duplicates and not saved
(identical modules cannot differ in speed). ``run`` restores every saved candidate, runs each once
and compares its outputs with candidate 0's (the default config) and with a float64 PyTorch
reference (max |err| / max |ref|, the gate's tolerances); candidates that disagree or fail are
dropped, as ``g.autotune`` drops them. Then every surviving candidate and torch eager are timed in
interleaved rounds (``calls`` calls each per round, device sync after each call, the order reversed
every other round); the fastest median is the autotuned config. Output: ``autotune.json`` (per block:
default, autotuned and torch medians with quartiles and sample counts, ratios, chosen knobs,
dropped candidates) and ``autotune.md``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hipdnn_iree as hd  # noqa: E402
from gpu_blocks import BLOCKS, DT, TOL, _inputs, _median_ms, _spread_ms  # noqa: E402

ENGINE = "IREE_LINALG"


# -- compile (build machine) ---------------------------------------------------------------------
def _candidates(h, name, dt) -> list[dict]:
    g, _ = BLOCKS[name](dt)
    g.build_operation_graph(h)
    g.create_execution_plans([hd.HeurMode.B])
    return [dict(g.get_engine_config_at_index(i).knobs) for i in range(g.get_execution_plan_count())]


def _build_one(h, name, dt, knobs):
    g, _ = BLOCKS[name](dt)
    t0 = time.perf_counter()
    try:
        g.build_operation_graph(h)
        g.create_execution_plan(ENGINE, knobs)
        g.check_support()
        g.build_plans()
    except hd.HipdnnError as e:
        return {"knobs": knobs, "error": str(e).splitlines()[0][:300], "compile_s": round(time.perf_counter() - t0, 2)}
    ctx = g.get_execution_plan().context
    return {"knobs": knobs, "compile_s": round(time.perf_counter() - t0, 2), "dispatches": ctx.dispatch_count,
            "vmfb_sha256": hashlib.sha256(bytes(ctx.vmfb)).hexdigest(), "vmfb_bytes": len(ctx.vmfb),
            "flags": list(ctx.compile_flags or ()), "_bytes": g.serialize_compiled_plan()}


def compile_all(target: str, out: str, names=None, dtypes=None, jobs: int = 2) -> None:
    os.makedirs(out, exist_ok=True)
    h = hd.create_handle(device=None, target=target, cache=False)
    manifest_path = os.path.join(out, "manifest.json")
    manifest = {"target": target, "blocks": []}
    for name in BLOCKS:
        if names and name not in names:
            continue
        for dt in dtypes or DT:
            cands = _candidates(h, name, dt)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                built = list(pool.map(lambda k: _build_one(h, name, dt, k), cands))
            seen = {}
            for i, c in enumerate(built):
                data = c.pop("_bytes", None)
                if data is None:
                    continue
                sha = c["vmfb_sha256"]
                if sha in seen:
                    c["same_module_as"] = seen[sha]
                    continue
                seen[sha] = i
                c["plan"] = f"{name}.{dt}.{i}.plan"
                hd.save_plan(os.path.join(out, c["plan"]), data)
            entry = {"block": name, "dtype": dt, "candidates": built, "wall_s": round(time.perf_counter() - t0, 2)}
            manifest["blocks"].append(entry)
            print(f"{name} {dt}: {len(built)} configs, {len(seen)} distinct modules, "
                  f"{sum(1 for c in built if 'error' in c)} failed, {entry['wall_s']} s", flush=True)
            with open(manifest_path, "w") as f:   # rewritten per block: a partial build is usable
                json.dump(manifest, f, indent=1)


# -- run (GPU machine) ---------------------------------------------------------------------------
def _rel_err(torch, got, ref) -> float:
    got, ref = got.double(), ref.double()
    if not torch.isfinite(got).all():
        return float("nan")
    return float((got - ref).abs().max()) / max(float(ref.abs().max()), 1e-6)


def _ok(e, tol) -> bool:
    return math.isfinite(e) and e <= tol


def run_block(torch, h, plans, entry, rounds, calls, sync):
    name, dt = entry["block"], entry["dtype"]
    _, forward = BLOCKS[name](dt)
    row = {"block": name, "dtype": dt, "candidates": []}
    cands = [(i, c) for i, c in enumerate(entry["candidates"]) if c.get("plan")]
    if not cands or cands[0][0] != 0:
        row["error"] = "default config did not build"
        return row
    restored = []
    for i, c in cands:
        restored.append((i, c, hd.Graph.from_compiled_plan(h, hd.load_plan(os.path.join(plans, c["plan"])))))
    tensors = restored[0][2].get_compiled_plan_tensors()
    t = _inputs(torch, tensors, dt, "cuda")
    outs = [u.uid for u in tensors if u.role != "input"]
    ins = {u: v for u, v in t.items() if u not in outs}
    with torch.no_grad():
        want = forward(torch, {u: v.double() for u, v in ins.items()})
    alive, first = [], None
    for i, c, r in restored:
        info = {"index": i, "knobs": c["knobs"], "dispatches": c.get("dispatches")}
        try:
            for u in outs:
                t[u].fill_(float("nan"))
            r.execute(h, t)
            sync()
            got = {u: t[u].clone() for u in want}
            info["err_vs_torch"] = max(_rel_err(torch, got[u], want[u]) for u in want)
            if first is None:
                first = got
                info["err_vs_default"] = 0.0
            else:
                info["err_vs_default"] = max(_rel_err(torch, got[u], first[u]) for u in want)
            info["ok"] = _ok(info["err_vs_torch"], TOL[dt]) and _ok(info["err_vs_default"], TOL[dt])
        except Exception as e:  # reported: a candidate that fails to run is dropped, never selected
            info["ok"], info["error"] = False, f"{type(e).__name__}: {e}"[:300]
        row["candidates"].append(info)
        if info["ok"]:
            alive.append((i, r, info))
    row["default_ok"] = row["candidates"][0]["ok"]
    sides = [(f"c{i}", (lambda r=r: r.execute(h, t))) for i, r, _ in alive] + [("torch", lambda: forward(torch, ins))]
    samples = {k: [] for k, _ in sides}
    with torch.no_grad():
        for _, fn in sides:
            fn(), fn()
        sync()
        for rnd in range(rounds):
            for key, fn in (sides if rnd % 2 == 0 else sides[::-1]):
                for _ in range(calls):
                    s = time.perf_counter()
                    fn()
                    sync()
                    samples[key].append(time.perf_counter() - s)
    for i, _, info in alive:
        info["ms"], info["spread"] = round(_median_ms(samples[f"c{i}"]), 4), _spread_ms(samples[f"c{i}"])
    row["torch_ms"], row["torch_spread"] = round(_median_ms(samples["torch"]), 4), _spread_ms(samples["torch"])
    if not alive or alive[0][0] != 0:
        row["error"] = "default config disagrees with torch or failed"
        if not alive:
            return row
    best = min(alive, key=lambda a: a[2]["ms"])[2]
    default = row["candidates"][0]
    row["default_ms"] = default.get("ms")
    row["tuned_ms"], row["tuned_knobs"], row["tuned_index"] = best["ms"], best["knobs"], best["index"]
    if row["default_ms"]:
        row["default_vs_torch"] = round(row["default_ms"] / row["torch_ms"], 3)
        row["speedup"] = round(row["default_ms"] / row["tuned_ms"], 3)
    row["tuned_vs_torch"] = round(row["tuned_ms"] / row["torch_ms"], 3)
    row["dropped"] = [{"index": c["index"], "knobs": c["knobs"], "why": c.get("error") or
                       f"err vs torch {c.get('err_vs_torch'):.2e}, vs default {c.get('err_vs_default'):.2e}"}
                      for c in row["candidates"] if not c["ok"]]
    return row


def run_all(plans: str, out: str, rounds: int, calls: int) -> int:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    manifest = json.load(open(os.path.join(plans, "manifest.json")))
    # NOTE: the GPU machine runs from a source tree (no entry points installed): plugins given here
    from hipdnn_iree.plugins.iree_linalg import IreeLinalgPlugin
    from hipdnn_iree.plugins.numpy_reference import NumpyReferencePlugin
    h = hd.create_handle(device="cuda", target=manifest["target"],
                         engine_plugins=[IreeLinalgPlugin(), NumpyReferencePlugin()])
    rows, t0 = [], time.perf_counter()
    for entry in manifest["blocks"]:
        try:
            row = run_block(torch, h, plans, entry, rounds, calls, torch.cuda.synchronize)
        except Exception as e:  # reported, not raised: the run should finish
            row = {"block": entry["block"], "dtype": entry["dtype"], "error": f"{type(e).__name__}: {e}"[:400]}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "candidates"}), flush=True)
    summary = summarize(rows)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "autotune.json"), "w") as f:
        json.dump({"target": manifest["target"], "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "rounds": rounds, "calls": calls, "wall_s": round(time.perf_counter() - t0, 1),
                   "summary": summary, "results": rows}, f, indent=1)
    table = markdown(rows, summary)
    with open(os.path.join(out, "autotune.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    return 0


def _geomean(xs):
    xs = [x for x in xs if x]
    return round(math.exp(sum(math.log(x) for x in xs) / len(xs)), 3) if xs else None


def summarize(rows) -> dict:
    good = [r for r in rows if r.get("speedup")]
    return {"blocks": len(rows), "timed": len(good), "geomean_speedup": _geomean([r["speedup"] for r in good]),
            "geomean_default_vs_torch": _geomean([r["default_vs_torch"] for r in good]),
            "geomean_tuned_vs_torch": _geomean([r["tuned_vs_torch"] for r in good]),
            "improved": sum(1 for r in good if r["tuned_index"] != 0)}


def _knobs(k) -> str:
    return ", ".join(f"{a}={b}" for a, b in sorted(k.items())) or "default"


def markdown(rows, summary) -> str:
    lines = ["| block | dtype | default ms | autotuned ms | torch ms | default/torch | tuned/torch | speedup | chosen | "
             "timed | dropped |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "tuned_ms" not in r:
            lines.append(f"| {r['block']} | {r['dtype']} | FAIL: {r.get('error', '')[:80]} |||||||||")
            continue
        timed = sum(1 for c in r["candidates"] if c.get("ms"))
        dropped = "; ".join(f"{_knobs(d['knobs'])}" for d in r["dropped"]) or "-"
        lines.append(f"| {r['block']} | {r['dtype']} | {r.get('default_ms')} | {r['tuned_ms']} | {r['torch_ms']} | "
                     f"{r.get('default_vs_torch')} | {r['tuned_vs_torch']} | {r.get('speedup')} | "
                     f"{_knobs(r['tuned_knobs'])} | {timed} | {dropped} |")
    lines.append("")
    lines.append(f"geomean speedup (default / autotuned): {summary['geomean_speedup']}; default/torch "
                 f"{summary['geomean_default_vs_torch']}, autotuned/torch {summary['geomean_tuned_vs_torch']}; "
                 f"{summary['improved']} of {summary['timed']} blocks chose a non-default config")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("--target", default="cuda:sm_80")
    c.add_argument("--out", default=".gpu_autotune")
    c.add_argument("--only", nargs="*")
    c.add_argument("--dtypes", nargs="*", choices=list(DT))
    c.add_argument("--jobs", type=int, default=2)
    r = sub.add_parser("run")
    r.add_argument("--plans", default=".gpu_autotune")
    r.add_argument("--out", default="autotune_out")
    r.add_argument("--rounds", type=int, default=7)
    r.add_argument("--calls", type=int, default=10)
    args = ap.parse_args(argv)
    if args.cmd == "compile":
        compile_all(args.target, args.out, args.only, args.dtypes, args.jobs)
        return 0
    return run_all(args.plans, args.out, args.rounds, args.calls)


if __name__ == "__main__":
    sys.exit(main())
