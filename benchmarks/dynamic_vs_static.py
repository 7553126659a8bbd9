"""Dynamic (override-shape) plans against static plans, per case, in one interleaved run (issue 20).

    python benchmarks/dynamic_vs_static.py cpu [--out docs/benchmarks/dynamic_shapes.json]
    python benchmarks/dynamic_vs_static.py compile --target cuda:sm_80 --out .dyn_plans   # build machine
    python benchmarks/dynamic_vs_static.py run --plans .dyn_plans --device cuda --out DIR  # GPU machine

``cpu``: for each case a dynamic plan built at the case's shape and the static plan of that shape,
timed in turn per round (so load hits both alike; median, quartiles, n); then, for one block, the
compile of one dynamic plan against the compiles of 8 static plans (one per batch size), in
seconds, and plan bytes. The compile cache is off (HIPDNN_IREE_CACHE=0) so every build compiles.

``compile``/``run``: the same cases as plan files for a GPU target (built here, where IREE's
compiler is), then on the GPU: each dynamic plan checked against a float64 numpy reference at
three shapes it was not built for, and timed against its static plan at the build shape
(device-resident torch tensors, a sync after each call, interleaved rounds).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("HIPDNN_IREE_CACHE", "0")

import numpy as np  # noqa: E402

import hipdnn_iree as hd  # noqa: E402

F = hd.DataType.FLOAT
P = hd.PointwiseMode


# -- cases: build(g, B, S) -> {uid: dims} of inputs; output uid 100 ------------------------------

def mlp(g, b, s, e=256, f=512):
    x, w, bias = g.tensor(uid=1, dim=[b, s, e]), g.tensor(uid=2, dim=[1, e, f]), g.tensor(uid=3, dim=[1, 1, f])
    g.pointwise(g.pointwise(g.matmul(x, w), bias, mode=P.ADD), mode=P.RELU_FWD).set_output(True).set_uid(100)
    return {1: [b, s, e], 2: [1, e, f], 3: [1, 1, f]}


def mlp_ref(v):
    return np.maximum(v[1] @ v[2] + v[3], 0)


def layernorm(g, b, s, e=768):
    x, sc, bi = g.tensor(uid=1, dim=[b, s, e]), g.tensor(uid=2, dim=[1, 1, e]), g.tensor(uid=3, dim=[1, 1, e])
    g.layernorm(x, sc, bi, epsilon=1e-5)[0].set_output(True).set_uid(100)
    return {1: [b, s, e], 2: [1, 1, e], 3: [1, 1, e]}


def layernorm_ref(v):
    x = v[1]
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * v[2] + v[3]


def attention(g, b, s, h=12, d=64):
    q, k, vv = (g.tensor(uid=u, dim=[b, h, s, d]) for u in (1, 2, 3))
    o = g.sdpa(q, k, vv, attn_scale=1.0 / np.sqrt(d))
    (o[0] if isinstance(o, tuple) else o).set_output(True).set_uid(100)
    return {u: [b, h, s, d] for u in (1, 2, 3)}


def attention_ref(v):
    sc = np.einsum("bhqd,bhkd->bhqk", v[1], v[2]) / np.sqrt(v[1].shape[-1])
    a = np.exp(sc - sc.max(-1, keepdims=True))
    return (a / a.sum(-1, keepdims=True)) @ v[3]


def bias_gelu(g, b, s, e=1024):
    x, bias = g.tensor(uid=1, dim=[b, s, e]), g.tensor(uid=2, dim=[1, 1, e])
    g.pointwise(g.pointwise(x, bias, mode=P.ADD), mode=P.GELU_FWD).set_output(True).set_uid(100)
    return {1: [b, s, e], 2: [1, 1, e]}


def bias_gelu_ref(v):
    from math import erf
    x = v[1] + v[2]
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def row_sum(g, b, s, e=1024):
    x = g.tensor(uid=1, dim=[b, s, e])
    g.reduction(x, mode=hd.ReductionMode.ADD).set_output(True).set_uid(100).set_dim([b, s, 1])
    return {1: [b, s, e]}


def row_sum_ref(v):
    return v[1].sum(-1, keepdims=True)


def conv(g, b, s, c=64):
    x, w = g.tensor(uid=1, dim=[b, c, 28, 28]), g.tensor(uid=2, dim=[c, c, 3, 3])
    g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_output(True).set_uid(100)
    return {1: [b, c, 28, 28], 2: [c, c, 3, 3]}


def conv_ref(v):
    x, w = v[1], v[2]
    n, c, hh, ww = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, i:i + hh, j:j + ww] for i in range(3) for j in range(3)], -1)   # n c h w 9
    return np.einsum("nchwr,kcr->nkhw", cols, w.reshape(w.shape[0], c, 9))


# name -> (builder, reference, build shape (B, S), other shapes for the GPU check)
CASES = {
    "mlp_256x512": (mlp, mlp_ref, (8, 128), [(1, 7), (3, 100), (16, 333)]),
    "layernorm_768": (layernorm, layernorm_ref, (8, 128), [(1, 7), (3, 100), (16, 333)]),
    "attention_12x64": (attention, attention_ref, (4, 128), [(1, 7), (3, 100), (8, 257)]),
    "bias_gelu_1024": (bias_gelu, bias_gelu_ref, (8, 128), [(1, 7), (3, 100), (16, 333)]),
    "row_sum_1024": (row_sum, row_sum_ref, (8, 128), [(1, 7), (3, 100), (16, 333)]),
    "conv3x3_64c_28": (conv, conv_ref, (8, 0), [(1, 0), (3, 0), (13, 0)]),
}
GPU_CASES = ("mlp_256x512", "layernorm_768", "attention_12x64", "attention_12x64@COMPOSED")
BATCHES = (1, 2, 4, 8, 12, 16, 24, 32)


def graph(builder, b, s, dynamic: bool, handle=None, sdpa_form=None):
    g = hd.Graph(name=builder.__name__, io_data_type=F)
    dims = builder(g, b, s)
    if dynamic:
        g.set_override_shape_enabled(True)
    if handle is not None and sdpa_form:
        g.validate().build_operation_graph(handle).create_execution_plan("IREE_LINALG", {"SDPA_FORM": sdpa_form})
        g.check_support().build_plans()
    elif handle is not None:
        g.build(handle)
    return g, dims


def case(name):
    """``name`` or ``name@SDPA_FORM``: (builder, reference, build shape, other shapes, sdpa form)."""
    base, _, form = name.partition("@")
    return (*CASES[base], form or None)


def inputs_for(dims, rng):
    return {u: rng.uniform(-1, 1, d).astype(np.float32) for u, d in dims.items()}


def out_dims(g):
    return next(t.dims for t in g.get_compiled_plan_tensors() if t.uid == 100)


def summary(samples_ms):
    q = statistics.quantiles(samples_ms, n=4) if len(samples_ms) > 1 else [samples_ms[0]] * 3
    return {"median_ms": statistics.median(samples_ms), "q1_ms": q[0], "q3_ms": q[2],
            "min_ms": min(samples_ms), "max_ms": max(samples_ms), "n": len(samples_ms)}


def machine():
    return {"host": platform.node(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "hipdnn_iree": hd.__version__,
            "load_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


# -- CPU -------------------------------------------------------------------------------------------

def run_cpu(rounds: int, out: str | None) -> dict:
    rng = np.random.default_rng(0)
    handle = hd.create_handle(cache=False)
    cases = {}
    for name, (builder, _, (b, s), _) in CASES.items():
        t0 = time.perf_counter()
        dyn, dims = graph(builder, b, s, True, handle)
        t_dyn = time.perf_counter() - t0
        t0 = time.perf_counter()
        sta, _ = graph(builder, b, s, False, handle)
        t_sta = time.perf_counter() - t0
        pack = inputs_for(dims, rng)
        outs = {"dynamic": np.empty(out_dims(sta), np.float32), "static": np.empty(out_dims(sta), np.float32)}
        plans = {"dynamic": dyn, "static": sta}
        times = {k: [] for k in plans}
        for r in range(rounds + 3):
            for k, g in plans.items():
                t0 = time.perf_counter()
                g.execute(handle, {**pack, 100: outs[k]})
                if r >= 3:
                    times[k].append((time.perf_counter() - t0) * 1e3)
        same = float(np.max(np.abs(outs["dynamic"] - outs["static"])))
        cases[name] = {"shape": [b, s], "dynamic": summary(times["dynamic"]), "static": summary(times["static"]),
                       "ratio": statistics.median(times["dynamic"]) / statistics.median(times["static"]),
                       "max_abs_diff": same, "build_s": {"dynamic": t_dyn, "static": t_sta},
                       "plan_bytes": {"dynamic": len(dyn.serialize_compiled_plan()),
                                      "static": len(sta.serialize_compiled_plan())}}
        print(f"{name:18} dyn {cases[name]['dynamic']['median_ms']:8.3f} ms  static "
              f"{cases[name]['static']['median_ms']:8.3f} ms  ratio {cases[name]['ratio']:.2f}", flush=True)
    # compile once vs compile per shape (8 batch sizes), one block
    builder = mlp
    t0 = time.perf_counter()
    dyn, _ = graph(builder, 8, 128, True, handle)
    once = time.perf_counter() - t0
    per_shape, static_bytes = [], []
    for b in BATCHES:
        t0 = time.perf_counter()
        g, _ = graph(builder, b, 128, False, handle)
        per_shape.append(time.perf_counter() - t0)
        static_bytes.append(len(g.serialize_compiled_plan()))
    compile_cmp = {"block": "mlp_256x512 (sequence 128)", "batch_sizes": list(BATCHES),
                   "dynamic_once_s": once, "static_per_shape_s": per_shape, "static_total_s": sum(per_shape),
                   "dynamic_plan_bytes": len(dyn.serialize_compiled_plan()), "static_plan_bytes": static_bytes,
                   "static_total_bytes": sum(static_bytes)}
    print(f"compile: one dynamic plan {once:.2f} s vs 8 static plans {sum(per_shape):.2f} s; plan bytes "
          f"{compile_cmp['dynamic_plan_bytes']} vs {sum(static_bytes)} (8 files)")
    result = {"machine": machine(), "rounds": rounds, "cases": cases, "compile": compile_cmp}
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
    return result


# -- GPU: compile here, run there ----------------------------------------------------------------

def compile_gpu(target: str, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    handle = hd.create_handle(cache=False) if target == "llvm-cpu:host" else \
        hd.create_handle(device=None, target=target, cache=False)
    manifest = {"target": target, "cases": {}}
    for name in GPU_CASES:
        builder, _, (b, s), _, form = case(name)
        for kind in ("dynamic", "static"):
            g, dims = graph(builder, b, s, kind == "dynamic", handle, form)
            with open(os.path.join(out, f"{name}.{kind}.plan"), "wb") as f:
                f.write(g.serialize_compiled_plan())
        manifest["cases"][name] = {"shape": [b, s]}
        print(f"compiled {name} for {target}", flush=True)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def run_gpu(plans: str, device: str, rounds: int, out: str) -> None:
    import torch
    with open(os.path.join(plans, "manifest.json")) as f:
        manifest = json.load(f)
    cpu = device == "cpu"           # a dry run of this step on the CPU (plans compiled for llvm-cpu:host)
    handle = hd.create_handle() if cpu else hd.create_handle(device=device)
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    rng = np.random.default_rng(0)
    results = {"machine": {**machine(), "gpu": "cpu" if cpu else torch.cuda.get_device_name(0)},
               "target": manifest["target"],
               "rounds": rounds, "cases": {}}
    for name, meta in manifest["cases"].items():
        builder, ref, _, others, _ = case(name)
        dyn = hd.Graph.from_compiled_plan_file(handle, os.path.join(plans, f"{name}.dynamic.plan"))
        sta = hd.Graph.from_compiled_plan_file(handle, os.path.join(plans, f"{name}.static.plan"))
        checks = []
        for b, s in others:
            tmp = hd.Graph(io_data_type=F)
            dims = builder(tmp, b, s)
            host = inputs_for(dims, rng)
            want = ref({u: a.astype(np.float64) for u, a in host.items()})
            dev = {u: torch.from_numpy(a).to(device) for u, a in host.items()}
            y = torch.full(want.shape, float("nan"), device=device)
            dyn.execute(handle, {**dev, 100: y})
            sync()
            err = float(np.max(np.abs(y.cpu().numpy() - want)))
            checks.append({"shape": [b, s], "max_abs_err": err, "ok": bool(np.allclose(y.cpu().numpy(), want,
                                                                                         rtol=2e-3, atol=2e-3))})
        b, s = meta["shape"]
        tmp = hd.Graph(io_data_type=F)
        dims = builder(tmp, b, s)
        dev = {u: torch.from_numpy(a).to(device) for u, a in inputs_for(dims, rng).items()}
        od = next(t.dims for t in sta.get_compiled_plan_tensors() if t.uid == 100)
        outs = {"dynamic": torch.empty(od, device=device), "static": torch.empty(od, device=device)}
        times = {"dynamic": [], "static": []}
        for r in range(rounds + 5):
            for k, g in (("dynamic", dyn), ("static", sta)):
                sync()
                t0 = time.perf_counter()
                g.execute(handle, {**dev, 100: outs[k]})
                sync()
                if r >= 5:
                    times[k].append((time.perf_counter() - t0) * 1e3)
        results["cases"][name] = {"shape": [b, s], "checks": checks, "dynamic": summary(times["dynamic"]),
                                  "static": summary(times["static"]),
                                  "ratio": statistics.median(times["dynamic"]) / statistics.median(times["static"])}
        print(name, json.dumps(results["cases"][name]), flush=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "dynamic_gpu.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cpu")
    c.add_argument("--rounds", type=int, default=15)
    c.add_argument("--out")
    c = sub.add_parser("compile")
    c.add_argument("--target", default="cuda:sm_80")
    c.add_argument("--out", required=True)
    c = sub.add_parser("run")
    c.add_argument("--plans", required=True)
    c.add_argument("--device", default="cuda")
    c.add_argument("--rounds", type=int, default=50)
    c.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "cpu":
        run_cpu(a.rounds, a.out)
    elif a.cmd == "compile":
        compile_gpu(a.target, a.out)
    else:
        run_gpu(a.plans, a.device, a.rounds, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
