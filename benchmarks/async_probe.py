"""Can IREE's CUDA HAL run a plan without the host waiting, ordered with torch's stream?

Probe for issue 27 item 3 (asynchronous execute), in two steps:

    python benchmarks/async_probe.py compile --out .async_probe     # here (IREE compiler)
    python benchmarks/async_probe.py run --plans .async_probe --json out.json   # GPU machine

``compile`` lowers one f32 add graph (through hd.Graph) at two sizes and compiles each twice for
cuda:sm_80: IREE's default execution model (the exported function waits for the device) and
``--iree-execution-model=async-external`` (the function takes a wait fence and a signal fence).

``run`` measures, per call, a burst of 100 calls then one synchronize (medians of 20 rounds,
variants interleaved): torch eager, the synchronous module, the asynchronous module with calls
chained by one HAL semaphore, and the asynchronous module ordered with torch's current stream
through CUDA events (a torch event imported as the wait timepoint, the signal timepoint exported
as a CUDA event the torch stream waits on). It also checks the ordering: torch work that is
still running (``torch.cuda._sleep``) writes the input, the call must see it, and torch work
queued after the call must see the output, with no host wait between them; a control without
the events shows that the check can fail.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

SIZES = {"tiny": 1024, "big": 1 << 24}


def compile_probe(out: str) -> None:
    import subprocess
    import hipdnn_iree as hd
    from hipdnn_iree.plugins.iree_linalg.compile import find_compiler
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    os.makedirs(out, exist_ok=True)
    tool = find_compiler()
    flags = parse_target("cuda:sm_80").compile_flags()
    for name, n in SIZES.items():
        g = hd.Graph(name=f"add_{name}")
        a = g.tensor(name="a", dim=[n], stride=[1], data_type=hd.DataType.FLOAT)
        b = g.tensor(name="b", dim=[n], stride=[1], data_type=hd.DataType.FLOAT)
        c = g.pointwise(a, b, mode=hd.PointwiseMode.ADD)
        c.set_output(True)
        mlir = g.get_mlir(target="cuda:sm_80")
        for model, extra in (("sync", []), ("async", ["--iree-execution-model=async-external"])):
            path = os.path.join(out, f"{name}_{model}.vmfb")
            subprocess.run([tool, *flags, *extra, "-", "-o", path], input=mlir.encode(), check=True)
            print(path, os.path.getsize(path))


def _median_per_call(fn, rounds=20, calls=100):
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(calls)
        per.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per)


def run(plans: str, out_json: str | None) -> int:
    import ctypes
    import torch
    import iree.runtime as r
    from iree.runtime import _binding as B

    res: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}

    def save():
        if out_json:
            with open(out_json, "w") as f:
                json.dump(res, f, indent=1)
    inst = r.VmInstance()
    dev = r.get_driver("cuda").create_default_device()
    hal = r.create_hal_module(inst, dev)
    cu = ctypes.CDLL("libcuda.so.1")
    mods = {}
    for name in SIZES:
        for model in ("sync", "async"):
            m = r.VmModule.copy_buffer(inst, open(os.path.join(plans, f"{name}_{model}.vmfb"), "rb").read())
            ctx = r.VmContext(inst, modules=[hal, m])
            fn = m.lookup_function("main")
            mods[(name, model)] = (ctx, fn)
            res.setdefault("reflection", {})[f"{name}_{model}"] = str(fn.reflection)
    torch.manual_seed(0)
    tensors = {}
    for name, n in SIZES.items():
        a = torch.rand(n, device="cuda")
        b = torch.rand(n, device="cuda")
        c = torch.zeros(n, device="cuda")
        views = [dev.from_dlpack_capsule(t.__dlpack__()) for t in (a, b, c)]
        tensors[name] = (a, b, c, views)
    torch.cuda.synchronize()

    state = {"sem": dev.create_semaphore(0), "v": 0}

    def sync_args(name):
        a, b, c, views = tensors[name]
        args = r.VmVariantList(3)
        for v in views:
            args.push_ref(v)
        return args

    def call_sync(name):
        ctx, fn = mods[(name, "sync")]
        args = sync_args(name)
        rets = r.VmVariantList(1)

        def go(k):
            for _ in range(k):
                ctx.invoke(fn, args, rets)
            torch.cuda.synchronize()
        return go

    def call_async(name, wait_at_end="fence"):
        ctx, fn = mods[(name, "async")]
        a, b, c, views = tensors[name]
        rets = r.VmVariantList(1)

        def one():
            sem = state["sem"]
            v = state["v"]
            args = r.VmVariantList(5)
            for x in views:
                args.push_ref(x)
            args.push_ref(r.HalFence.create_at(sem, v))
            args.push_ref(r.HalFence.create_at(sem, v + 1))
            ctx.invoke(fn, args, rets)
            state["v"] = v + 1

        def go(k):
            for _ in range(k):
                one()
            if wait_at_end == "fence":
                r.HalFence.create_at(state["sem"], state["v"]).wait()
            else:
                torch.cuda.synchronize()
        return go, one

    def call_async_torch(name):
        """Ordered with torch's current stream through CUDA events."""
        ctx, fn = mods[(name, "async")]
        a, b, c, views = tensors[name]
        rets = r.VmVariantList(1)
        sin = dev.create_semaphore(0)
        sout = dev.create_semaphore(0)
        st = {"v": 0}

        def one():
            v = st["v"] + 1
            stream = torch.cuda.current_stream()
            ev = torch.cuda.Event()
            ev.record(stream)
            ext = B.HalExternalTimepoint()
            ext.type = B.ExternalTimepointType.CUDA_EVENT
            ext.cuda_event = ev.cuda_event
            sin.import_timepoint(v, ext)
            args = r.VmVariantList(5)
            for x in views:
                args.push_ref(x)
            args.push_ref(r.HalFence.create_at(sin, v))
            args.push_ref(r.HalFence.create_at(sout, v))
            ctx.invoke(fn, args, rets)
            out = B.HalExternalTimepoint()
            sout.export_timepoint(v, B.ExternalTimepointType.CUDA_EVENT, 0, out)
            rc = cu.cuStreamWaitEvent(ctypes.c_void_p(stream.cuda_stream), ctypes.c_void_p(out.cuda_event), 0)
            if rc != 0:
                raise RuntimeError(f"cuStreamWaitEvent -> {rc}")
            st["v"] = v
            st["keep"] = (ev, ext, out)

        def go(k):
            for _ in range(k):
                one()
            torch.cuda.synchronize()
        return go, one

    # 1. does each path work and give the right numbers?
    checks = {}
    for name in SIZES:
        a, b, c, views = tensors[name]
        ref = a + b
        for label, make in (("sync", lambda: call_sync(name)), ("async_fence", lambda: call_async(name)[0]),
                            ("async_torch_sync", lambda: call_async(name, "torch")[0]),
                            ("async_torch_events", lambda: call_async_torch(name)[0])):
            try:
                c.zero_()
                torch.cuda.synchronize()
                make()(1)
                ok = bool(torch.equal(c, ref))
                checks[f"{name}_{label}"] = {"ok": ok}
            except Exception as e:
                checks[f"{name}_{label}"] = {"error": f"{type(e).__name__}: {e}"}
    res["checks"] = checks
    save()
    print(json.dumps(checks, indent=1))

    # 2. ordering with torch's stream, no host wait: the input is written by torch behind a long
    # sleep kernel; the output is read by torch right after the call
    order = {}
    name = "big"
    a, b, c, views = tensors[name]
    for label in ("events", "control_no_events"):
        try:
            c.zero_()
            a.fill_(1.0)
            torch.cuda.synchronize()
            torch.cuda._sleep(200_000_000)   # ~0.1 s of GPU time on the current stream
            a.fill_(3.0)
            if label == "events":
                call_async_torch(name)[1]()
            else:
                call_async(name)[1]()
            snap = c.clone()              # torch stream, after the call
            torch.cuda.synchronize()
            want = 3.0 + b
            order[label] = {"output_seen_by_torch_ok": bool(torch.equal(snap, want)),
                            "final_ok": bool(torch.equal(c, want))}
        except Exception as e:
            order[label] = {"error": f"{type(e).__name__}: {e}"}
    res["ordering"] = order
    save()
    print(json.dumps(order, indent=1))

    # 2b. does the CUDA HAL export a semaphore timepoint as a CUDA event (the other direction)?
    try:
        sx = dev.create_semaphore(0)
        out = B.HalExternalTimepoint()
        sx.export_timepoint(1, B.ExternalTimepointType.CUDA_EVENT, 0, out)
        res["export_timepoint"] = {"ok": True, "cuda_event": int(out.cuda_event)}
    except Exception as e:
        res["export_timepoint"] = {"error": f"{type(e).__name__}: {e}"}
    # 2c. does torch.cuda.synchronize() (a device-wide wait) cover IREE's queued work? 50 chained
    # calls on 16M elements, then torch's synchronize, then the semaphore's value read at once
    try:
        go, one = call_async("big")
        start = state["v"]
        for _ in range(50):
            one()
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        waited = time.perf_counter() - t0
        reached = state["sem"].query()
        res["torch_synchronize_covers_iree"] = {"semaphore_after": int(reached), "expected": start + 50,
                                                "covered": int(reached) == start + 50,
                                                "synchronize_ms": waited * 1e3}
        r.HalFence.create_at(state["sem"], state["v"]).wait()
    except Exception as e:
        res["torch_synchronize_covers_iree"] = {"error": f"{type(e).__name__}: {e}"}
    save()
    print(json.dumps({k: res[k] for k in ("export_timepoint", "torch_synchronize_covers_iree")}, indent=1))

    # 3. burst timing, interleaved
    name = "tiny"
    a, b, c, views = tensors[name]

    def eager(k):
        for _ in range(k):
            torch.add(a, b, out=c)
        torch.cuda.synchronize()
    variants = {"torch_eager": eager, "iree_sync": call_sync(name)}
    try:
        variants["iree_async_fence_chain"] = call_async(name)[0]
        variants["iree_async_torch_events"] = call_async_torch(name)[0]
    except Exception as e:
        res["async_setup_error"] = str(e)
    samples = {k: [] for k in variants}
    for k, fn in variants.items():
        try:
            fn(20)
        except Exception as e:
            res.setdefault("errors", {})[k] = str(e)
    for _ in range(20):
        for k, fn in variants.items():
            if k in res.get("errors", {}):
                continue
            t0 = time.perf_counter()
            fn(100)
            samples[k].append((time.perf_counter() - t0) / 100 * 1e6)
    res["burst100_us_per_call"] = {k: statistics.median(v) for k, v in samples.items() if v}
    res["burst100_us_per_call_p10_p90"] = {k: (sorted(v)[2], sorted(v)[-3]) for k, v in samples.items() if v}
    # a single call's latency (call + synchronize), per variant
    lat = {k: [] for k in variants}
    for _ in range(50):
        for k, fn in variants.items():
            if k in res.get("errors", {}):
                continue
            t0 = time.perf_counter()
            fn(1)
            lat[k].append((time.perf_counter() - t0) * 1e6)
    res["single_call_us"] = {k: statistics.median(v) for k, v in lat.items() if v}
    save()
    print(json.dumps({k: res[k] for k in ("burst100_us_per_call", "single_call_us")}, indent=1))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["compile", "run"])
    ap.add_argument("--out", default=".async_probe")
    ap.add_argument("--plans", default=".async_probe")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.mode == "compile":
        compile_probe(a.out)
        return 0
    return run(a.plans, a.json)


if __name__ == "__main__":
    sys.exit(main())
