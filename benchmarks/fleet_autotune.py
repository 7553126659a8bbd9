"""Autotune through Ray on a GPU machine, against in-process autotune (issue 46's GPU acceptance).

1. A Ray cluster whose node offers one ``gpu_<arch>`` resource per GPU (``ray start --head
   --resources='{"gpu_sm_90": 1}'``, started here unless ``--address`` names one) runs
   ``hd.build_many(graphs, targets=[TARGET], autotune=True)``: each task asks for that resource, so it
   runs where the device is, times every engine config and stores the winner (tuning namespace) and the
   winning plan.
2. The same graphs autotuned in this process on a handle without a store.
3. Winners compared per graph; where they differ, both timing lists are printed (candidates within a few
   per cent of each other swap places with noise).
4. A fresh process with an empty local cache and the store builds each graph with ``HeurMode.A``: its plan 0
   must carry the stored winner's knobs.

Usage (GPU machine): python benchmarks/fleet_autotune.py [--target cuda:sm_90] [--device cuda] [--store URL]
    [--address ADDR] [--json F]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import hipdnn_iree as hd  # noqa: E402


def graphs():
    import cases
    import gpu_blocks
    out = [gpu_blocks.BLOCKS[n]("f16")[0] for n in ("bert_output_ffn", "llama_swiglu_mlp", "resnet50_bottleneck")]
    out += [cases.chain((m, k, n)).build() for m, k, n in ((4096, 4096, 4096), (256, 768, 3072))]
    return out


def in_process(gs, target, device):
    from hipdnn_iree.frontend.build_many import _random_pack
    h = hd.create_handle(device=device, target=target, cache=tempfile.mkdtemp())
    out = {}
    for g in gs:
        g = hd.Graph.from_json(g.to_json())
        g.validate().build_operation_graph(h).create_execution_plans([hd.HeurMode.A, hd.HeurMode.B]).check_support()
        g.build_plans(hd.BuildPlanPolicy.ALL)
        timings = g.autotune(h, _random_pack(g.get_compiled_plan_tensors()))
        out[g.name] = {"knobs": dict(g.get_engine_config_at_index(g.get_selected_plan_index()).knobs),
                       "timings_ms": [[i, round(t, 4)] for i, t in timings]}
    return out


LATER = textwrap.dedent("""
    import json, sys, tempfile, hipdnn_iree as hd
    graphs, url, target, device = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    h = hd.create_handle(device=device, target=target, cache=tempfile.mkdtemp(), store=url)
    out = {}
    for text in graphs:
        g = hd.Graph.from_json(text)
        g.validate().build_operation_graph(h).create_execution_plans([hd.HeurMode.A])
        out[g.name] = dict(g.get_engine_config_at_index(0).knobs)
    print(json.dumps(out))
""")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--target", default="cuda:sm_90")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--store", help="plan store (default: a temporary folder)")
    ap.add_argument("--address", help="a running Ray cluster offering the gpu_<arch> resource (default: start one)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    from hipdnn_iree.frontend.fleet import autotune_resources
    resource = autotune_resources(a.target)
    store = hd.PlanStore(a.store or tempfile.mkdtemp(prefix="fleet-autotune."))
    gs = graphs()
    started = False
    address = a.address
    if address is None:
        ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
        ray_bin = ray_bin if os.path.exists(ray_bin) else "ray"
        subprocess.run([ray_bin, "start", "--head", "--port=6391", "--num-cpus=4", f"--resources={json.dumps(resource)}",
                        "--include-dashboard=false", "--disable-usage-stats"], check=True)
        address, started = "127.0.0.1:6391", True
    try:
        keys = hd.build_many(gs, targets=[a.target], store=store, ray_address=address, autotune=True)
    finally:
        import ray
        ray.shutdown()
        if started:
            subprocess.run([ray_bin, "stop", "--force"])
    failed = {gs[i].name: str(e) for (i, _), e in keys.items() if isinstance(e, hd.HipdnnError)}
    ray_winners = {}
    for k in store.keys("tuning"):
        e = json.loads(store.get("tuning", k))
        ray_winners[e["graph"]] = {"knobs": e["knobs"], "timings_ms": e["timings_ms"], "device": e["device"]}
    local = in_process(gs, a.target, a.device)
    later = subprocess.run([sys.executable, "-c", LATER, json.dumps([g.to_json() for g in gs]), store.url, a.target,
                            a.device], capture_output=True, text=True, cwd=REPO)
    later_knobs = json.loads(later.stdout.strip().splitlines()[-1]) if later.returncode == 0 else {"error": later.stderr[-2000:]}
    rows = []
    for g in gs:
        r, loc = ray_winners.get(g.name), local.get(g.name)
        rows.append({"graph": g.name, "ray_winner": r and r["knobs"], "in_process_winner": loc and loc["knobs"],
                     "same": bool(r and loc and r["knobs"] == loc["knobs"]),
                     "later_build_takes_stored": bool(r and later_knobs.get(g.name) == r["knobs"]),
                     "ray_timings_ms": r and r["timings_ms"][:6], "in_process_timings_ms": loc and loc["timings_ms"][:6]})
    res = {"target": a.target, "device": a.device, "resource": resource, "failed": failed, "graphs": rows,
           "same_winners": sum(r["same"] for r in rows), "later_takes_stored": sum(r["later_build_takes_stored"] for r in rows)}
    for r in rows:
        print(f"{r['graph']}: ray {r['ray_winner']} | in-process {r['in_process_winner']} | same {r['same']} | "
              f"later build takes stored {r['later_build_takes_stored']}")
    print(f"same winners {res['same_winners']}/{len(rows)}; later build takes the stored winner "
          f"{res['later_takes_stored']}/{len(rows)}; failed {failed}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if not failed and res["later_takes_stored"] == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
