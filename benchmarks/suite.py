"""CPU benchmark of hipdnn-iree, every measurement in one run on the same graphs.

For each graph (benchmarks/cases.py): cold build (IREE compiles, cache off), cached build
(warm persistent compile cache), restore from the serialized plan, first execute after a
restore, steady execute; the per-execute overhead of ``Graph.execute`` against a bare
``iree.runtime`` call of the same module on the same inputs (``VmModule.copy_buffer`` +
``VmContext`` + ``FunctionInvoker``, results read back with ``to_host``); and throughput
(GFLOP/s) against numpy and, if ``import torch`` works, PyTorch on the CPU. All figures
are medians. Writes ``<out>/cpu_suite.md``, ``<out>/cpu_suite.json`` (per case and phase: median,
quartiles, min, max and sample count, plus the machine and conditions; no raw samples) and, with
matplotlib installed, ``<out>/cpu_suite.png``. Raw samples go only where ``--raw`` says (outside
docs/: the repository keeps summaries, the script regenerates samples).

Usage:
    python benchmarks/suite.py                    # full sizes -> docs/benchmarks/
    python benchmarks/suite.py --sizes tiny --out /tmp/b --repeats 2 --raw /tmp/b_raw.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hipdnn_iree as hd  # noqa: E402
from cases import Case, all_cases, strided  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ("cold build", "cached build", "restore", "first execute", "steady execute")
NAME = "cpu_suite"          # docs/benchmarks/cpu_suite.{md,json,png}
SAMPLE_KEYS = ("bare_execute", "numpy", "torch")   # per-case sample lists besides ``times``


def summarize(xs: list[float]) -> dict:
    """Seconds samples -> the summary kept in the repository: median, quartiles (``statistics.quantiles``,
    n=4; min and max below 4 samples, as the markdown's spread), min, max and the sample count."""
    q = statistics.quantiles(xs, n=4) if len(xs) >= 4 else [min(xs), 0, max(xs)]
    return {"median": statistics.median(xs), "q1": q[0], "q3": q[2], "min": min(xs), "max": max(xs), "n": len(xs)}


def summarize_result(r: dict) -> dict:
    """One case's result with every sample list replaced by its summary (idempotent)."""
    def s(xs):
        return xs if isinstance(xs, dict) else summarize(xs)
    out = {k: v for k, v in r.items() if k != "times" and k not in SAMPLE_KEYS}
    if "times" in r:
        out["times"] = {p: s(v) for p, v in r["times"].items()}
    out.update({k: s(r[k]) for k in SAMPLE_KEYS if k in r})
    return out


def write_summary(path: str, meta: dict, results: list[dict], later: list[dict]) -> None:
    """The summary document: ``{"meta", "units", "results", "later_runs"}`` (results of run 1, then later runs)."""
    doc = {"meta": meta, "units": "seconds; each sample list summarized as median, q1, q3, min, max, n",
           "results": [summarize_result(r) for r in results], "later_runs": [summarize_result(r) for r in later]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def timed(fn, min_runs: int, min_time: float, max_runs: int = 10_000) -> list[float]:
    """Runs ``fn`` until both ``min_runs`` calls and ``min_time`` seconds are reached (after one warm-up)."""
    fn()
    out, start = [], time.perf_counter()
    while len(out) < max_runs and (len(out) < min_runs or time.perf_counter() - start < min_time):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _bare_runtime(plan: bytes, case: Case):
    """A plain iree.runtime invocation of the plan's module: (call, output memory images)."""
    import iree.runtime as ireert
    from hipdnn_iree.backend import envelope as _envelope
    from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
    vmfb = _fusplan.unpack(_envelope.decode(plan).plugin_payload).body
    inst = ireert.VmInstance()
    dev = ireert.get_driver("local-task").create_default_device()
    module = ireert.VmModule.copy_buffer(inst, vmfb)
    ctx = ireert.VmContext(inst, modules=[ireert.create_hal_module(inst, dev), module])
    fn = module.lookup_function("main")
    abi = json.loads(fn.reflection["hipdnn_iree.abi"])
    args = []
    for t in abi["tensors"]:
        if t["role"] == "input":
            args.append(case.inputs[t["uid"]][1])
        else:
            dims, strides = case.outputs[t["uid"]]
            order = sorted(range(len(dims)), key=lambda a: -strides[a])
            args.append(np.zeros([dims[a] for a in order], np.float32))
    invoker = ireert.FunctionInvoker(ctx, dev, fn)

    def call():
        res = invoker(*args)
        return [r.to_host() for r in (res if isinstance(res, tuple) else (res,))]
    return call


def _pack(case: Case):
    pack = {u: arr for u, (arr, _) in case.inputs.items()}
    outs = {}
    for u, (dims, strides) in case.outputs.items():
        dense = np.zeros(int(np.prod(dims)), np.float32)
        outs[u] = strided(dense, dims, strides)
    return {**pack, **outs}, outs


def measure_case(case: Case, handles: dict, repeats: int, cold_repeats: int, min_time: float) -> dict:
    """Every measurement of one case; seconds lists under ``times``, plus derived numbers."""
    from hipdnn_iree.plugins.iree_linalg import cache as _cache
    exec_h = handles["cold"]
    times = {p: [] for p in PHASES}
    for _ in range(cold_repeats):
        g = case.build()
        t0 = time.perf_counter()
        g.build(exec_h)
        times["cold build"].append(time.perf_counter() - t0)
    plan = g.serialize_compiled_plan()
    g.release()
    case.build().build(handles["cached"]).release()          # fills the cache (not timed)
    hits = _cache.STATS.hits
    for _ in range(repeats):
        g = case.build()
        t0 = time.perf_counter()
        g.build(handles["cached"])
        times["cached build"].append(time.perf_counter() - t0)
        g.release()
    cache_hits = _cache.STATS.hits - hits
    pack, outs = _pack(case)
    r = None
    for _ in range(repeats):
        if r is not None:
            r.release()
        t0 = time.perf_counter()
        r = hd.Graph.from_compiled_plan(exec_h, plan)
        t1 = time.perf_counter()
        r.execute(exec_h, pack)
        times["restore"].append(t1 - t0)
        times["first execute"].append(time.perf_counter() - t1)
    bare = _bare_runtime(plan, case)
    loops = {"graph": lambda: r.execute(exec_h, pack), "bare": bare}
    if case.numpy_fn is not None and case.name != "tiny matmul (overhead probe)":
        loops["numpy"] = case.numpy_fn
    if case.torch_fn is not None and case.flops is not None or case.reference is not None:
        loops["torch"] = case.torch_fn
    samples = {k: [] for k in loops}
    for _ in range(3):   # NOTE: interleaved rounds so drift (other load on the machine) hits every side alike
        for k, fn in loops.items():
            samples[k] += _timed_maybe_torch(k, fn, min_time / 3)
    times["steady execute"], bare_exec = samples["graph"], samples["bare"]
    (out_uid, got), = outs.items()
    want = (case.reference or case.numpy_fn)()
    err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    bare_out = bare()[0]
    r.release()
    result = {"name": case.name, "shape": case.shape, "plan_bytes": len(plan), "cache_hits": cache_hits,
              "times": times, "bare_execute": bare_exec, "rel_err_vs_numpy": err,
              "bare_matches": bool(np.allclose(np.asarray(bare_out).ravel(), np.ascontiguousarray(
                  got.transpose(sorted(range(got.ndim), key=lambda a: -got.strides[a]))).ravel(), rtol=1e-5,
                  atol=1e-5)),
              "flops": case.flops}
    result.update({k: samples[k] for k in ("numpy", "torch") if k in samples})
    return result


def _timed_maybe_torch(kind: str, fn, min_time: float) -> list[float]:
    if kind != "torch":
        return timed(fn, 5, min_time)
    import torch
    with torch.inference_mode():
        return timed(fn, 5, min_time)


def run_suite(sizes: str = "full", repeats: int = 5, cold_repeats: int = 3, min_time: float = 1.0,
              out_dir: str | None = None, chart: bool | None = None, log=print, runs: int = 1) -> dict:
    """Measures every case and writes the report; returns ``{"meta", "results", "markdown", "files"}``.

    ``chart=None`` draws the PNG only when matplotlib imports.
    """
    out_dir = out_dir or os.path.join(REPO, "docs", "benchmarks")
    load_start = _load()
    results, later = [], []
    with tempfile.TemporaryDirectory(prefix="hipdnn_iree_bench_cache_") as cache_dir:
        handles = {"cold": hd.create_handle(cache=False), "cached": hd.create_handle(cache=cache_dir)}
        for run in range(runs):
            for case in all_cases(sizes):
                log(f"[bench] run {run + 1}: {case.name}: {case.shape}")
                try:
                    res = measure_case(case, handles, repeats, cold_repeats, min_time)
                except hd.HipdnnError as e:   # NOTE: an op family still in progress is skipped, not fatal
                    log(f"[bench]   skipped: {e}")
                    res = {"name": case.name, "shape": case.shape, "skipped": str(e)}
                res["run"] = run + 1
                (results if run == 0 else later).append(res)
    meta = machine_info(sizes, repeats, cold_repeats)
    meta["load_average_start"] = load_start
    md = render_report({"meta": meta, "results": results, "later_runs": later})
    os.makedirs(out_dir, exist_ok=True)
    files = {"markdown": os.path.join(out_dir, f"{NAME}.md"), "summary": os.path.join(out_dir, f"{NAME}.json")}
    with open(files["markdown"], "w", encoding="utf-8") as f:
        f.write(md)
    write_summary(files["summary"], meta, results, later)
    if chart is not False:
        png = os.path.join(out_dir, f"{NAME}.png")
        try:
            render_chart(results, png)
            files["png"] = png
        except ImportError:
            if chart:
                raise
            log("[bench] matplotlib is not installed: no PNG (pip install 'hipdnn-iree[bench]')")
    return {"meta": meta, "results": results, "later_runs": later, "markdown": md, "files": files}


def render_report(doc: dict) -> str:
    """The markdown report from a summary document (``write_summary``'s JSON, parsed) or raw results."""
    return render_markdown(doc["meta"], doc["results"]) + render_ratios(doc["results"], doc["later_runs"])


def machine_info(sizes: str, repeats: int, cold_repeats: int) -> dict:
    from importlib import metadata
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    versions = {"python": platform.python_version(), "numpy": np.__version__, "hipdnn-iree": hd.__version__}
    for dist in ("iree-base-compiler", "iree-base-runtime", "torch"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu,
            "cores": os.cpu_count(), "load_average": _load(), "sizes": sizes, "repeats": repeats, "cold_repeats": cold_repeats,
            "versions": versions}


def _load() -> list[float]:
    """The 1, 5 and 15 minute load averages (NaN where the OS has none)."""
    return [round(x, 2) for x in (os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3)]


def _med(xs) -> float:
    """Median of a sample list or of its summary (the report renders the same from either)."""
    return xs["median"] if isinstance(xs, dict) else statistics.median(xs)


def _ms(xs) -> str:
    m = _med(xs) * 1e3
    return f"{m:.3f}" if m < 1 else f"{m:.2f}" if m < 100 else f"{m:.0f}"


def render_markdown(meta: dict, results: list[dict]) -> str:
    v = meta["versions"]
    lines = [
        "# hipdnn-iree CPU benchmark",
        "",
        f"Measured {meta['date']} on {meta['cpu']} ({meta['cores']} cores), IREE local-task device, "
        f"target llvm-cpu:host. Python {v['python']}, numpy {v['numpy']}, "
        f"IREE {v.get('iree-base-compiler', '?')}/{v.get('iree-base-runtime', '?')}"
        + (f", PyTorch {v['torch']}" if "torch" in v else "") + f", hipdnn-iree {v['hipdnn-iree']}. "
        f"Load average (1/5/15 min) at the start of the run {', '.join(map(str, meta.get('load_average_start', [])))}"
        f", at the end {', '.join(map(str, meta['load_average']))} (other work on the "
        "machine inflates times, most of all for small executes and thread-pool libraries).",
        f"Produced by `python benchmarks/suite.py` (sizes `{meta['sizes']}`); every figure is a median "
        f"(builds: {meta['cold_repeats']} cold, {meta['repeats']} cached; {meta['repeats']} restores; "
        "executes: as many as fit in the time budget, at least 15, in three rounds that interleave hipdnn-iree, "
        "the bare runtime call, numpy and PyTorch so that load from other work hits each alike).",
        "",
        "## Build, restore and execute (ms)",
        "",
        "| graph | shape | plan | cold build (compile) | cached build | restore | first execute | steady execute "
        "| cold build / restore | cold build / cached build |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    done = [r for r in results if "skipped" not in r]
    for r in results:
        if "skipped" in r:
            lines.append(f"| {r['name']} | {r['shape']} | skipped: {r['skipped'][:120]} |||||||| ")
            continue
        t = r["times"]
        lines.append(f"| {r['name']} | {r['shape']} | {r['plan_bytes'] / 1024:.1f} KiB | {_ms(t['cold build'])} "
                     f"| {_ms(t['cached build'])} | {_ms(t['restore'])} | {_ms(t['first execute'])} "
                     f"| {_ms(t['steady execute'])} | {_med(t['cold build']) / _med(t['restore']):.0f}x "
                     f"| {_med(t['cold build']) / _med(t['cached build']):.0f}x |")
    lines += ["", "## Per-execute overhead: `Graph.execute` vs a bare `iree.runtime` call (µs)", "",
              "Same module, same inputs. The bare call is `FunctionInvoker(*memory_images)` plus `to_host()` of "
              "the result; `Graph.execute` adds variant-pack checks, layout views and writing into the "
              "caller's buffers.", "",
              "| graph | Graph.execute | bare iree.runtime | overhead | ratio | outputs agree |",
              "|---|---|---|---|---|---|"]
    for r in done:
        g, b = _med(r["times"]["steady execute"]) * 1e6, _med(r["bare_execute"]) * 1e6
        lines.append(f"| {r['name']} | {g:.1f} | {b:.1f} | {g - b:+.1f} | {g / b:.2f}x | "
                     f"{'yes' if r['bare_matches'] else 'NO'} |")
    has_torch = any("torch" in r for r in done)
    lines += ["", "## Throughput (GFLOP/s, higher is better)", "",
              "GFLOP/s = the op's multiply-adds x 2 / median steady time (the chain counts its matmul only). "
              "numpy's conv is im2col (`sliding_window_view`) + `tensordot`.", "",
              "| op | shape | hipdnn-iree | numpy | " + ("PyTorch CPU | " if has_torch else "")
              + "hipdnn-iree / numpy | max rel. error vs numpy |",
              "|---|---|---|---|" + ("---|" if has_torch else "") + "---|---|"]
    for r in done:
        if not r["flops"]:
            continue
        gf = lambda xs: r["flops"] / _med(xs) / 1e9  # noqa: E731
        npf = f"{gf(r['numpy']):.1f}" if "numpy" in r else "n/a"
        row = f"| {r['name']} | {r['shape']} | {gf(r['times']['steady execute']):.1f} | {npf} | "
        if has_torch:
            row += f"{gf(r['torch']):.1f} | " if "torch" in r else "n/a | "
        ratio = f"{gf(r['times']['steady execute']) / gf(r['numpy']):.2f}x" if "numpy" in r else "n/a"
        row += f"{ratio} | {r['rel_err_vs_numpy']:.1e} |"
        lines.append(row)
    lines += ["", f"![phase times and throughput]({NAME}.png)", ""]
    return "\n".join(lines)


def _spread(xs) -> str:
    """Median with the interquartile range, in ms."""
    q = (xs["q1"], 0, xs["q3"]) if isinstance(xs, dict) else (
        statistics.quantiles(xs, n=4) if len(xs) >= 4 else [min(xs), 0, max(xs)])
    return f"{_med(xs) * 1e3:.3g} [{q[0] * 1e3:.3g}-{q[2] * 1e3:.3g}]"


def render_ratios(results: list[dict], later: list[dict]) -> str:
    """hipdnn-iree against PyTorch CPU and numpy, every run: medians [interquartile range], ratios."""
    lines = ["", "## Against PyTorch CPU and numpy, every run (ms: median [interquartile range])", "",
             "Ratio = hipdnn-iree time / reference time of the same run (lower is better; 1.0 is parity). "
             "The tiny matmul row compares `Graph.execute` with the bare `iree.runtime` call instead.", "",
             "| case | run | hipdnn-iree | PyTorch CPU | numpy | / torch | / numpy | GFLOP/s | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(results + later, key=lambda r: ([x["name"] for x in results].index(r["name"]), r["run"])):
        if "skipped" in r:
            lines.append(f"| {r['name']} | {r['run']} | skipped |||||||")
            continue
        hd_t = r["times"]["steady execute"]
        tt, nt = r.get("torch"), r.get("numpy")
        if r["name"].startswith("tiny"):
            tt, nt = None, r["bare_execute"]
        gf = f"{r['flops'] / _med(hd_t) / 1e9:.0f}" if r["flops"] else ""
        lines.append(f"| {r['name']} | {r['run']} | {_spread(hd_t)} | {_spread(tt) if tt else ''} | "
                     f"{_spread(nt) if nt else ''} | {f'{_med(hd_t) / _med(tt):.2f}x' if tt else ''} | "
                     f"{f'{_med(hd_t) / _med(nt):.2f}x' if nt else ''} | {gf} | {r['rel_err_vs_numpy']:.1e} |")
    return "\n".join(lines) + "\n"


def render_chart(results: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    done = [r for r in results if "skipped" not in r]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(PHASES)
    for i, phase in enumerate(PHASES):
        ax1.bar([j + i * width for j in range(len(done))], [_med(r["times"][phase]) * 1e3 for r in done],
                width, label=phase)
    ax1.set_xticks([j + 0.4 - width / 2 for j in range(len(done))], [r["name"] for r in done], rotation=12,
                   fontsize=8)
    ax1.set_yscale("log")
    top = max(_med(r["times"][p]) for r in done for p in PHASES) * 1e3
    ax1.set_ylim(top=top * 40)   # NOTE: headroom above the bars for the legend
    ax1.set_ylabel("ms (median, log scale)")
    ax1.set_title("Build, restore and execute")
    ax1.legend(fontsize=8, ncol=3, loc="upper center")
    tp = [r for r in done if r["flops"]]
    engines = [("hipdnn-iree", lambda r: r["times"]["steady execute"]), ("numpy", lambda r: r.get("numpy")),
               ("PyTorch CPU", lambda r: r.get("torch"))]
    width = 0.8 / len(engines)
    for i, (label, get) in enumerate(engines):
        vals = [r["flops"] / _med(get(r)) / 1e9 if get(r) else 0.0 for r in tp]
        ax2.bar([j + i * width for j in range(len(tp))], vals, width, label=label)
    ax2.set_xticks([j + 0.4 - width / 2 for j in range(len(tp))], [r["name"] for r in tp], fontsize=8)
    ax2.set_ylabel("GFLOP/s (median)")
    ax2.set_title("CPU throughput")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", choices=("full", "tiny"), default="full")
    ap.add_argument("--repeats", type=int, default=5, help="cached builds and restores per graph")
    ap.add_argument("--cold-repeats", type=int, default=3, help="cold (compiling) builds per graph")
    ap.add_argument("--min-time", type=float, default=1.5, help="seconds per execute timing loop")
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks"))
    ap.add_argument("--raw", help="also write the raw timing samples to this file (keep it outside docs/: "
                    "the repository holds the summaries only)")
    ap.add_argument("--runs", type=int, default=2, help="passes over every case (the ratio table shows each)")
    args = ap.parse_args(argv)
    res = run_suite(args.sizes, args.repeats, args.cold_repeats, args.min_time, args.out, runs=args.runs)
    print(res["markdown"])
    if args.raw:
        with open(args.raw, "w", encoding="utf-8") as f:
            json.dump({"meta": res["meta"], "results": res["results"], "later_runs": res["later_runs"]}, f, indent=1)
    print("wrote " + ", ".join(res["files"].values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
