"""Dynamic-shape modules on a GPU: one cuda:sm_80 module per op family (built at one shape, lowered with
graph_ir.dynamic.analyze's spec, compiled once here) run on the device at several shapes against the
NUMPY_REFERENCE engine's results for static graphs built at those shapes.

    python benchmarks/gpu_dynamic_lowering.py prepare .gpu_dyn     # here: compile, inputs, references
    python benchmarks/gpu_dynamic_lowering.py run .gpu_dyn OUT.json # on the GPU machine (iree runtime only)
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

CASES = ("mlp", "bmm", "pointwise", "reduction", "layernorm", "rmsnorm", "batchnorm", "sdpa", "sdpa_mask", "sdpa_plain",
         "sdpa_plain@composed", "sdpa_big", "sdpa_big@composed",
         "gqa_block", "conv", "conv_hw_nchw", "conv_dgrad", "conv_wgrad", "conv_wgrad@f16")
TOL = {"float32": 2e-3, "float16": 2e-2}


def _wgrad(N, dt):
    import hipdnn_iree as hd
    g = hd.Graph(name="wgrad", io_data_type=dt, compute_data_type=hd.DataType.FLOAT)
    dy = g.tensor(name="dy", uid=1, dim=[N, 16, 14, 14])
    x = g.tensor(name="x", uid=2, dim=[N, 8, 14, 14])
    g.conv_wgrad(dy, x, padding=[1, 1]).set_dim([16, 8, 3, 3]).set_output(True).set_uid(3)
    return g


def prepare(folder: str, only=None) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import hipdnn_iree as hd
    import test_dynamic_lowering as T
    from hipdnn_iree.plugins.iree_linalg.compile import compile_mlir
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    from lowering import lower
    from graph_ir import decode_graph
    from graph_ir.dynamic import analyze
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    os.makedirs(folder, exist_ok=True)
    cpu = hd.create_handle()
    rng = np.random.default_rng(20)
    target = parse_target("cuda:sm_80")
    index = {}
    cases = {**T.CASES, "sdpa_big": (lambda B, S, S2: T.sdpa_plain(B, S, S2, 12, 64), (4, 128, 128),
                                     [(1, 7, 7), (3, 100, 100), (4, 128, 128)]),
             "conv_wgrad": (lambda N: _wgrad(N, hd.DataType.FLOAT), (4,), [(1,), (3,), (4,), (7,)]),
             "conv_wgrad@f16": (lambda N: _wgrad(N, hd.DataType.HALF), (4,), [(1,), (3,), (4,), (7,)])}
    for name in (only or CASES):
        base, _, form = name.partition("@")
        build, built, runs = cases[name if name in cases else base]
        data = T._graph_bytes(build(*built), cpu)
        desc = decode_graph(data)
        spec = analyze(desc)
        # NOTE: the engine's own choice (knobs.resolve, as a dynamic build): policy and flags
        knobs = {"SDPA_FORM": "COMPOSED"} if form == "composed" else {}
        resolved = resolve(target, GraphSummary.of(desc), knobs, dynamic=True)
        lowered = lower(data, target="cuda:sm_80", shape_spec=spec, policy=resolved.policy)
        flags = resolved.flags
        with open(os.path.join(folder, f"{name}.vmfb"), "wb") as f:
            f.write(compile_mlir(lowered.mlir, target, tuple(flags)).vmfb)
        abi = lowered.abi["tensors"]
        entries = []
        for r, sizes in enumerate(runs):
            g = build(*sizes)
            g.set_preferred_engine_id_ext("NUMPY_REFERENCE")
            g.build(cpu)
            tensors = {t.get_uid(): t for t in g._tensors}
            ins = [a["uid"] for a in abi if a["role"] == "input"]
            dims = spec.resolve({u: tuple(tensors[u].get_dim()) for u in ins})
            phys = {u: tuple(dims[u][a] for a in spec.orders[u]) for u in dims}
            half = form == "f16"
            pack = {u: T._random(rng, phys[u], tensors[u].get_data_type()) for u in ins}
            if half:
                pack = {u: a.astype(np.float16) for u, a in pack.items()}
            outs = [a["uid"] for a in abi if a["role"] == "output"]
            want = {u: np.zeros(phys[u], np.float16 if half else np.float32) for u in outs}
            g.execute(cpu, {u: a.transpose(np.argsort(spec.orders[u])) for u, a in {**pack, **want}.items()})
            arrays = {**{f"in{u}": a for u, a in pack.items()}, **{f"want{u}": a for u, a in want.items()}}
            np.savez(os.path.join(folder, f"{name}_{r}.npz"), **arrays)
            entries.append({"sizes": list(sizes), "dtype": "float16" if half else "float32",
                            "args": [[a["uid"], a["role"], list(phys[a["uid"]])] for a in abi]})
        index[name] = {"symbols": spec.symbols, "runs": entries}
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump(index, f, indent=1)


def run(folder: str, out_path: str) -> None:
    import iree.runtime as rt
    with open(os.path.join(folder, "index.json")) as f:
        index = json.load(f)
    config = rt.Config("cuda")
    results, ok = [], True
    for name, case in index.items():
        ctx = rt.SystemContext(config=config)
        with open(os.path.join(folder, f"{name}.vmfb"), "rb") as f:
            ctx.add_vm_module(rt.VmModule.copy_buffer(config.vm_instance, f.read()))
        main = ctx.modules.module["main"]
        for r, entry in enumerate(case["runs"]):
            z = np.load(os.path.join(folder, f"{name}_{r}.npz"))
            dtype = entry.get("dtype", "float32")
            args = [z[f"in{u}"] if role == "input" else np.zeros(shape, dtype) for u, role, shape in entry["args"]]
            res = main(*args)
            outs = [u for u, role, _ in entry["args"] if role == "output"]
            res = [res] if len(outs) == 1 else list(res)
            for u, got in zip(outs, res):
                got, want = np.asarray(got.to_host(), np.float64), z[f"want{u}"].astype(np.float64)
                err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)) if want.size else 0.0
                good = got.shape == want.shape and err < TOL[dtype]
                ok &= good
                results.append({"case": name, "sizes": entry["sizes"], "uid": u, "rel_max_err": err, "pass": good})
                print(f"{'PASS' if good else 'FAIL'} {name} {entry['sizes']} uid {u}: rel max err {err:.2e}", flush=True)
    import subprocess
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    with open(out_path, "w") as f:
        json.dump({"machine": gpu, "target": "cuda:sm_80", "all_pass": ok, "checks": len(results),
                   "results": results}, f, indent=1)
    print("ALL PASS" if ok else "SOME FAILED", len(results), "checks")


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(sys.argv[2], sys.argv[3:] or None)
    else:
        run(sys.argv[2], sys.argv[3])
