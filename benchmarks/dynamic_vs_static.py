"""Dynamic (override-shape) plans against static plans, per case, in one interleaved run (issue 20).

    python benchmarks/dynamic_vs_static.py cpu [--out docs/benchmarks/dynamic_shapes.json]
    python benchmarks/dynamic_vs_static.py compile --target cuda:sm_80 --out .dyn_plans   # build machine
    python benchmarks/dynamic_vs_static.py run --plans .dyn_plans --device cuda --out DIR  # GPU machine

Three plans per case, all built at the case's shape: "static" (no dynamic shapes), "dynamic" (override
shapes, knob SHAPE_SPECIALIZE=OFF: one dynamic function) and "specialized" (override shapes, the
default SHAPE_SPECIALIZE=AUTO: the dynamic function plus the static code of the build shape, chosen
per call).

``cpu``: per case, the three plans and a second static plan (the noise floor: two identical
modules) timed in turn per round at the build shape (so load hits all alike; median, quartiles, n), then "dynamic" and "specialized" in turn at a shape not built (the
specialized plan runs its dynamic code there); build seconds and plan bytes of each; which module
function each call ran (``LoadedModule.calls``); outputs compared. Then, for one block, the compile
of one dynamic plan against the compiles of 8 static plans (one per batch size). The compile cache
is off (HIPDNN_IREE_CACHE=0) so every build compiles.

``compile``/``run``: the same three plans per GPU case as plan files for a GPU target (built here,
where IREE's compiler is), then on the GPU: all three checked against a float64 numpy reference at
the build shape, "dynamic" and "specialized" at three shapes not built, and the three timed at the
build shape (device-resident torch tensors, a sync after each call, interleaved rounds).
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
    "conv3x3_64c_28": (conv, conv_ref, (8, 0), [(1, 0), (3, 0), (13, 0)]),   # N, H, W varying
}
GPU_CASES = ("mlp_256x512", "layernorm_768", "attention_12x64", "attention_12x64@COMPOSED", "conv3x3_64c_28")
BATCHES = (1, 2, 4, 8, 12, 16, 24, 32)
KINDS = ("static", "dynamic", "specialized")
KIND_KNOBS = {"static": {}, "dynamic": {"SHAPE_SPECIALIZE": "OFF"}, "specialized": {}}


def graph(builder, b, s, kind, handle=None, sdpa_form=None):
    """A graph at (b, s); ``kind`` one of KINDS (or a bool: dynamic/static); built on ``handle``."""
    if isinstance(kind, bool):
        kind = "specialized" if kind else "static"
    g = hd.Graph(name=builder.__name__, io_data_type=F)
    dims = builder(g, b, s)
    if kind != "static":
        g.set_override_shape_enabled(True)
    knobs = dict(KIND_KNOBS[kind], **({"SDPA_FORM": sdpa_form} if sdpa_form else {}))
    if handle is not None and knobs:
        g.validate().build_operation_graph(handle).create_execution_plan("IREE_LINALG", knobs)
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


def calls(g) -> dict:
    """Invocations per module function of ``g``'s plan (``main``: dynamic code, ``main_static``)."""
    mod = getattr(g.get_execution_plan().context, "module", None)
    return dict(getattr(mod, "calls", {}) or {})


def summary(samples_ms):
    q = statistics.quantiles(samples_ms, n=4) if len(samples_ms) > 1 else [samples_ms[0]] * 3
    return {"median_ms": statistics.median(samples_ms), "q1_ms": q[0], "q3_ms": q[2],
            "min_ms": min(samples_ms), "max_ms": max(samples_ms), "n": len(samples_ms)}


def machine():
    return {"host": platform.node(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "hipdnn_iree": hd.__version__,
            "load_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def interleaved(plans: dict, run, rounds: int, warmup: int, sync=lambda: None) -> dict:
    """``run(kind, g)`` for each plan in turn per round; milliseconds after ``warmup`` rounds."""
    times = {k: [] for k in plans}
    for r in range(rounds + warmup):
        for k, g in plans.items():
            sync()
            t0 = time.perf_counter()
            run(k, g)
            sync()
            if r >= warmup:
                times[k].append((time.perf_counter() - t0) * 1e3)
    return times


# -- CPU -------------------------------------------------------------------------------------------

def run_cpu(rounds: int, out: str | None) -> dict:
    rng = np.random.default_rng(0)
    handle = hd.create_handle(cache=False)
    cases = {}
    for name, (builder, _, (b, s), others) in CASES.items():
        plans, build_s, dims = {}, {}, None
        for kind in KINDS:
            t0 = time.perf_counter()
            plans[kind], dims = graph(builder, b, s, kind, handle)
            build_s[kind] = time.perf_counter() - t0
        # NOTE: a second static plan of the same graph, timed like the others: the noise floor (two
        # identical modules) against which the other ratios are read on a loaded machine
        plans["static_again"], _ = graph(builder, b, s, "static", handle)
        pack = inputs_for(dims, rng)
        outs = {k: np.empty(out_dims(plans["static"]), np.float32) for k in plans}
        before = {k: calls(g) for k, g in plans.items()}
        times = interleaved(plans, lambda k, g: g.execute(handle, {**pack, 100: outs[k]}), rounds, 3)
        ran = {k: sorted(f for f, n in calls(g).items() if n != before[k].get(f, 0)) for k, g in plans.items()}
        # a shape not built: the specialized plan's dynamic code against the unspecialized plan's
        ob, os_ = others[1]
        tmp = hd.Graph(io_data_type=F)
        pack2 = inputs_for(builder(tmp, ob, os_), rng)
        dyn2 = {k: plans[k] for k in ("dynamic", "specialized")}
        outs2 = {k: _out_like(g, pack2) for k, g in dyn2.items()}
        before2 = {k: calls(g) for k, g in dyn2.items()}
        times2 = interleaved(dyn2, lambda k, g: g.execute(handle, {**pack2, 100: outs2[k]}), rounds, 3)
        ran2 = {k: sorted(f for f, n in calls(g).items() if n != before2[k].get(f, 0)) for k, g in dyn2.items()}
        med = {k: statistics.median(v) for k, v in times.items()}
        cases[name] = {
            "shape": [b, s], **{k: summary(times[k]) for k in plans},
            "ratio_dynamic": med["dynamic"] / med["static"], "ratio_specialized": med["specialized"] / med["static"],
            "ratio_static_again": med["static_again"] / med["static"],
            "functions_ran": ran,
            "max_abs_diff_vs_static": {k: float(np.max(np.abs(outs[k] - outs["static"]))) for k in KINDS[1:]},
            "build_s": build_s,
            "plan_bytes": {k: len(plans[k].serialize_compiled_plan()) for k in KINDS},
            "unbuilt_shape": {"shape": [ob, os_], **{k: summary(times2[k]) for k in dyn2},
                              "ratio_specialized_vs_dynamic": statistics.median(times2["specialized"])
                              / statistics.median(times2["dynamic"]),
                              "functions_ran": ran2,
                              "max_abs_diff": float(np.max(np.abs(outs2["specialized"] - outs2["dynamic"])))}}
        c = cases[name]
        print(f"{name:18} static {med['static']:8.3f}  dynamic {med['dynamic']:8.3f} ({c['ratio_dynamic']:.2f}x)  "
              f"specialized {med['specialized']:8.3f} ({c['ratio_specialized']:.2f}x), static again "
              f"{med['static_again']:8.3f} ({c['ratio_static_again']:.2f}x) ms; at {[ob, os_]}: "
              f"spec/dyn {c['unbuilt_shape']['ratio_specialized_vs_dynamic']:.2f}; build s "
              + ", ".join(f"{k} {v:.2f}" for k, v in build_s.items()) + "; bytes "
              + ", ".join(f"{k} {v}" for k, v in c["plan_bytes"].items()), flush=True)
    # compile once vs compile per shape (8 batch sizes), one block
    builder = mlp
    t0 = time.perf_counter()
    dyn, _ = graph(builder, 8, 128, "dynamic", handle)
    once = time.perf_counter() - t0
    t0 = time.perf_counter()
    spec, _ = graph(builder, 8, 128, "specialized", handle)
    once_spec = time.perf_counter() - t0
    per_shape, static_bytes = [], []
    for b in BATCHES:
        t0 = time.perf_counter()
        g, _ = graph(builder, b, 128, "static", handle)
        per_shape.append(time.perf_counter() - t0)
        static_bytes.append(len(g.serialize_compiled_plan()))
    compile_cmp = {"block": "mlp_256x512 (sequence 128)", "batch_sizes": list(BATCHES),
                   "dynamic_once_s": once, "specialized_once_s": once_spec,
                   "static_per_shape_s": per_shape, "static_total_s": sum(per_shape),
                   "dynamic_plan_bytes": len(dyn.serialize_compiled_plan()),
                   "specialized_plan_bytes": len(spec.serialize_compiled_plan()), "static_plan_bytes": static_bytes,
                   "static_total_bytes": sum(static_bytes)}
    print(f"compile: one dynamic plan {once:.2f} s ({compile_cmp['dynamic_plan_bytes']} bytes), specialized "
          f"{once_spec:.2f} s ({compile_cmp['specialized_plan_bytes']} bytes) vs 8 static plans "
          f"{sum(per_shape):.2f} s ({sum(static_bytes)} bytes)")
    result = {"machine": machine(), "rounds": rounds, "cases": cases, "compile": compile_cmp}
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
    return result


def _out_like(g, pack):
    """An output buffer for ``g`` at the shape ``pack``'s inputs give (the plan's spec resolves it)."""
    ctx = g.get_execution_plan().context
    resolved = ctx.shape_spec.resolve({u: tuple(a.shape) for u, a in pack.items()})
    return np.empty(resolved[100], np.float32)


# -- GPU: compile here, run there ----------------------------------------------------------------

def compile_gpu(target: str, out: str, only=None) -> None:
    os.makedirs(out, exist_ok=True)
    handle = hd.create_handle(cache=False) if target == "llvm-cpu:host" else \
        hd.create_handle(device=None, target=target, cache=False)
    manifest = {"target": target, "cases": {}}
    for name in (only or GPU_CASES):
        builder, _, (b, s), _, form = case(name)
        info = {"shape": [b, s], "build_s": {}, "plan_bytes": {}}
        for kind in KINDS:
            t0 = time.perf_counter()
            g, dims = graph(builder, b, s, kind, handle, form)
            info["build_s"][kind] = time.perf_counter() - t0
            data = g.serialize_compiled_plan()
            info["plan_bytes"][kind] = len(data)
            with open(os.path.join(out, f"{name}.{kind}.plan"), "wb") as f:
                f.write(data)
        manifest["cases"][name] = info
        print(f"compiled {name} for {target}: " + json.dumps(info), flush=True)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def run_gpu(plans: str, device: str, rounds: int, out: str) -> None:
    import torch
    with open(os.path.join(plans, "manifest.json")) as f:
        manifest = json.load(f)
    cpu = device == "cpu"           # a dry run of this step on the CPU (plans compiled for llvm-cpu:host)
    handle = hd.create_handle() if cpu else hd.create_handle(device=device)
    tdev = "cpu" if cpu else device
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    rng = np.random.default_rng(0)
    results = {"machine": {**machine(), "gpu": "cpu" if cpu else torch.cuda.get_device_name(0)},
               "target": manifest["target"], "rounds": rounds, "cases": {}}
    for name, meta in manifest["cases"].items():
        try:
            results["cases"][name] = _gpu_case(name, meta, plans, handle, tdev, sync, rounds, rng, torch)
        except Exception as e:    # NOTE: one case failing must not lose the others' figures
            results["cases"][name] = {"error": f"{type(e).__name__}: {e}"}
        print(name, json.dumps(results["cases"][name]), flush=True)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "dynamic_gpu.json"), "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)


def _gpu_case(name, meta, plans, handle, device, sync, rounds, rng, torch) -> dict:
    builder, ref, _, others, _ = case(name)
    g = {k: hd.Graph.from_compiled_plan_file(handle, os.path.join(plans, f"{name}.{k}.plan")) for k in KINDS}
    # NOTE: the noise floor: the static plan restored a second time (the same module) and timed with the others
    g["static_again"] = hd.Graph.from_compiled_plan_file(handle, os.path.join(plans, f"{name}.static.plan"))
    b, s = meta["shape"]

    def check(k, b_, s_):
        tmp = hd.Graph(io_data_type=F)
        host = inputs_for(builder(tmp, b_, s_), rng)
        want = ref({u: a.astype(np.float64) for u, a in host.items()})
        dev = {u: torch.from_numpy(a).to(device) for u, a in host.items()}
        y = torch.full(want.shape, float("nan"), device=device)
        before = calls(g[k])
        g[k].execute(handle, {**dev, 100: y})
        sync()
        got = y.cpu().numpy().astype(np.float64)
        ran = sorted(f for f, n in calls(g[k]).items() if n != before.get(f, 0))
        err = float(np.max(np.abs(got - want))) if np.isfinite(got).all() else float("nan")
        return {"plan": k, "shape": [b_, s_], "max_abs_err": err, "ran": ran,
                "ok": bool(np.allclose(got, want, rtol=2e-3, atol=2e-3))}
    checks = [check(k, b, s) for k in KINDS]
    checks += [check(k, b_, s_) for b_, s_ in others for k in ("dynamic", "specialized")]
    tmp = hd.Graph(io_data_type=F)
    dev = {u: torch.from_numpy(a).to(device) for u, a in inputs_for(builder(tmp, b, s), rng).items()}
    od = out_dims(g["static"])
    outs = {k: torch.empty(od, device=device) for k in g}
    before = {k: calls(p) for k, p in g.items()}
    times = interleaved(g, lambda k, p: p.execute(handle, {**dev, 100: outs[k]}), rounds, 5, sync)
    ran = {k: sorted(f for f, n in calls(p).items() if n != before[k].get(f, 0)) for k, p in g.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"shape": [b, s], "checks": checks, **{k: summary(times[k]) for k in g}, "functions_ran": ran,
            "ratio_dynamic": med["dynamic"] / med["static"], "ratio_specialized": med["specialized"] / med["static"],
            "ratio_static_again": med["static_again"] / med["static"],
            "build_s": meta.get("build_s"), "plan_bytes": meta.get("plan_bytes")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cpu")
    c.add_argument("--rounds", type=int, default=15)
    c.add_argument("--out")
    c = sub.add_parser("compile")
    c.add_argument("--target", default="cuda:sm_80")
    c.add_argument("--out", required=True)
    c.add_argument("--cases", nargs="*", help=f"a subset of {GPU_CASES}")
    c = sub.add_parser("run")
    c.add_argument("--plans", required=True)
    c.add_argument("--device", default="cuda")
    c.add_argument("--rounds", type=int, default=50)
    c.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "cpu":
        run_cpu(a.rounds, a.out)
    elif a.cmd == "compile":
        compile_gpu(a.target, a.out, a.cases)
    else:
        run_gpu(a.plans, a.device, a.rounds, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
