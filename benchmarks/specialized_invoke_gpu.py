"""Is a specialized plan's static function slower than the static plan's module, or is it the call path?

On the GPU machine, for each case of a ``dynamic_vs_static.py compile`` folder: restore the static and
the specialized plan, execute each once on device-resident torch tensors (which binds the buffers),
then time, interleaved, (a) ``hd.Graph.execute`` and (b) IREE's bare invoke of the bound argument
list (``LoadedModule.invoke_list`` with the function ``entry_for`` chose: ``main`` for the static
plan, ``main_static`` for the specialized one), a device sync after each call; medians in us.

    python benchmarks/specialized_invoke_gpu.py .dyn_plans OUT.json [rounds]
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hipdnn_iree as hd  # noqa: E402
from dynamic_vs_static import case, inputs_for, out_dims  # noqa: E402


def main(folder: str, out: str, rounds: int = 200) -> None:
    import torch
    from hipdnn_iree.plugins.iree_linalg.run import _invoke_list
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    handle = hd.create_handle(device="cuda")
    rng = np.random.default_rng(0)
    result = {"gpu": torch.cuda.get_device_name(0), "rounds": rounds, "cases": {}}
    for name, meta in manifest["cases"].items():
        builder = case(name)[0]
        b, s = meta["shape"]
        dev = {u: torch.from_numpy(a).cuda() for u, a in inputs_for(builder(hd.Graph(io_data_type=hd.DataType.FLOAT), b, s), rng).items()}
        g = {k: hd.Graph.from_compiled_plan_file(handle, os.path.join(folder, f"{name}.{k}.plan")) for k in ("static", "specialized")}
        outs = {k: torch.empty(out_dims(g["static"]), device="cuda") for k in g}
        packs = {k: {**dev, 100: outs[k]} for k in g}
        for k, p in g.items():
            p.execute(handle, packs[k])
        torch.cuda.synchronize()
        bound = {}
        for k, p in g.items():
            ctx = p.get_execution_plan().context
            bound[k] = (ctx.module, list(ctx.view_cache.values())[-1])
        fns = {}
        for k in g:
            fns[f"execute/{k}"] = (lambda k=k: g[k].execute(handle, packs[k]))
            mod, bd = bound[k]
            fns[f"invoke/{k}"] = (lambda mod=mod, bd=bd: _invoke_list(mod, bd.args, bd.n_out, bd.entry))
        entries = {k: bound[k][1].entry for k in g}
        times = {n: [] for n in fns}
        order = list(fns)
        for r in range(rounds + 10):
            for n in (order if r % 2 == 0 else order[::-1]):
                t0 = time.perf_counter()
                fns[n]()
                torch.cuda.synchronize()
                if r >= 10:
                    times[n].append((time.perf_counter() - t0) * 1e6)
        med = {n: statistics.median(v) for n, v in times.items()}
        result["cases"][name] = {"entries": entries, "median_us": med,
                                 "q1_us": {n: float(np.percentile(v, 25)) for n, v in times.items()},
                                 "q3_us": {n: float(np.percentile(v, 75)) for n, v in times.items()}}
        print(name, entries, {n: round(v, 1) for n, v in med.items()}, flush=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 200)
