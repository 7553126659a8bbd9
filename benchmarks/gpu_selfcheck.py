"""The self-check (hipdnn_iree/backend/selfcheck.py) on a GPU: restored plans, torch CUDA tensors.

    python benchmarks/gpu_selfcheck.py compile --target cuda:sm_80 --out .gpu_selfcheck   # build machine
    python benchmarks/gpu_selfcheck.py run --plans .gpu_selfcheck --out DIR                # GPU machine

Plans: the BERT attention block of benchmarks/gpu_blocks.py in FLOAT and HALF as this release
lowers it, and the HALF one lowered WITHOUT the CUDA transpose barrier (docs/known_issues.md,
issue 1): IREE 3.13 miscompiles that one for CUDA, so its self-check must raise EXECUTION_FAILED.
Each plan is restored into a handle with ``self_check=True`` and into one without; the first
execution of each is timed (the difference is the self-check's cost), then later executions.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_blocks  # noqa: E402

import hipdnn_iree as hd  # noqa: E402


def compile_all(target: str, out: str) -> None:
    from lowering import _lower
    from lowering.ops import matmul, sdpa
    os.makedirs(out, exist_ok=True)
    h = hd.create_handle(device=None, target=target, cache=False)
    made = []
    for dt, variant in (("f32", "default"), ("f16", "default"), ("f16", "no_workaround")):
        saved = (_lower.needs_relayout_barrier, sdpa.needs_relayout_barrier)
        if variant == "no_workaround":   # NOTE: reproduces the IREE fault on purpose
            _lower.needs_relayout_barrier = sdpa.needs_relayout_barrier = lambda *a: False
        try:
            g, _ = gpu_blocks.bert_attention(dt)
            g.build(h)
        finally:
            _lower.needs_relayout_barrier, sdpa.needs_relayout_barrier = saved
        name = f"bert_attention.{dt}.{variant}.plan"
        hd.save_plan(os.path.join(out, name), g.serialize_compiled_plan())
        made.append({"dtype": dt, "variant": variant, "plan": name,
                     "workarounds": gpu_blocks.workarounds_in(g.get_execution_plan().context.mlir, ())})
        print("compiled", name, flush=True)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"target": target, "plans": made}, f, indent=1)


def run_all(plans: str, device: str, out: str | None) -> int:
    import torch
    manifest = json.load(open(os.path.join(plans, "manifest.json")))
    checked = hd.create_handle(device=device, target=manifest["target"], self_check=True)
    plain = hd.create_handle(device=device, target=manifest["target"], self_check=False)
    rows = []
    for entry in manifest["plans"]:
        data = hd.load_plan(os.path.join(plans, entry["plan"]))
        _, forward = gpu_blocks.bert_attention(entry["dtype"])
        row = dict(entry)
        for label, h in (("plain", plain), ("self_check", checked)):
            r = hd.Graph.from_compiled_plan(h, data)
            t = gpu_blocks._inputs(torch, r.get_compiled_plan_tensors(), entry["dtype"], "cuda")
            torch.cuda.synchronize()
            s = time.perf_counter()
            try:
                r.execute(h, t)
                torch.cuda.synchronize()
                row[f"{label}_first_ms"] = round(1e3 * (time.perf_counter() - s), 2)
                row[f"{label}_status"] = "ok"
            except hd.HipdnnError as e:
                row[f"{label}_first_ms"] = round(1e3 * (time.perf_counter() - s), 2)
                row[f"{label}_status"] = f"{e.status.name}: {e}"[:700]
            later = []
            for _ in range(20):
                s = time.perf_counter()
                try:
                    r.execute(h, t)
                except hd.HipdnnError as e:
                    row[f"{label}_later_status"] = e.status.name
                    break
                torch.cuda.synchronize()
                later.append(time.perf_counter() - s)
            row[f"{label}_later_median_ms"] = round(1e3 * sorted(later)[len(later) // 2], 3) if later else None
            row[f"{label}_later_n"] = len(later)        # sample count and range kept beside the median
            row[f"{label}_later_min_max_ms"] = [round(1e3 * min(later), 3), round(1e3 * max(later), 3)] if later else None
            with torch.no_grad():
                want = forward(torch, {u: v.double() for u, v in t.items()})[100]
            row[f"{label}_max_rel_err"] = float((t[100].double() - want).abs().max() / want.abs().max())
        rows.append(row)
        print(json.dumps(row), flush=True)
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "selfcheck.json"), "w") as f:
            json.dump({"target": manifest["target"], "gpu": torch.cuda.get_device_name(), "results": rows}, f, indent=1)
    ok = [r for r in rows if r["variant"] == "default"]
    bad = [r for r in rows if r["variant"] == "no_workaround"]
    good = all(r["self_check_status"] == "ok" for r in ok) and all(
        r["self_check_status"].startswith("EXECUTION_FAILED") for r in bad)
    print("self-check behaves as documented" if good else "UNEXPECTED self-check outcome")
    return 0 if good else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("--target", default="cuda:sm_80")
    c.add_argument("--out", default=".gpu_selfcheck")
    r = sub.add_parser("run")
    r.add_argument("--plans", default=".gpu_selfcheck")
    r.add_argument("--device", default="cuda")
    r.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "compile":
        compile_all(args.target, args.out)
        return 0
    return run_all(args.plans, args.device, args.out)


if __name__ == "__main__":
    sys.exit(main())
