"""Plans for a fleet: compile N real-model graphs for several targets on Ray, then start a serving process from the store.

Graphs: the 9 real-model blocks of ``gpu_blocks.py`` in f32, f16 and bf16 (27), then the 17 distinct
ResNet-50 conv layers (``cases.conv_case``, batch 1, channels-last) and transformer matmul+bias+GELU
chains (``cases.chain``) at BERT/Llama widths, the first N of them (``--graphs``, default 54).

For each worker count W (``--workers 1 2``): a Ray cluster with W CPUs (``ray.init(num_cpus=W)``, or
``--ray-start``: ``ray start --head --num-cpus=W`` as a separate cluster, joined by address), an empty
store, no compile cache (every plan compiled), ``hd.build_many(graphs, targets, ray_address=...)``;
wall time of the build (Ray's start excluded, reported apart), plans per second, speed-up over W=1,
failures. Then the serving start-up: a fresh process with the IREE compiler blocked from import
restores every ``llvm-cpu`` plan from the store (``hd.Graph.from_store``, loaded on the CPU) and
fetches the GPU plans' bytes, timed from process start; against the compile time of those plans.

The store is a Redis database when ``--store redis://...`` is given or ``redis-server`` is installed
(one is started on a free port, append-only file), else a temporary folder.

Usage:
    python benchmarks/fleet_compile.py [--graphs 54] [--targets llvm-cpu:host cuda:sm_80 rocm:gfx942]
        [--workers 1 2] [--store URL] [--ray-start] [--json F] [--md F] [--tiny]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import hipdnn_iree as hd  # noqa: E402

RESNET50_CONVS = [   # (x [C, H, W], w [K, C, R, S], pad, stride): the distinct conv layers of ResNet-50
    ([3, 224, 224], [64, 3, 7, 7], 3, 2),
    ([64, 56, 56], [64, 64, 1, 1], 0, 1), ([64, 56, 56], [64, 64, 3, 3], 1, 1), ([64, 56, 56], [256, 64, 1, 1], 0, 1),
    ([256, 56, 56], [64, 256, 1, 1], 0, 1), ([256, 56, 56], [128, 256, 1, 1], 0, 1),
    ([128, 56, 56], [128, 128, 3, 3], 1, 2), ([128, 28, 28], [512, 128, 1, 1], 0, 1),
    ([256, 56, 56], [512, 256, 1, 1], 0, 2), ([512, 28, 28], [128, 512, 1, 1], 0, 1),
    ([512, 28, 28], [256, 512, 1, 1], 0, 1), ([256, 28, 28], [256, 256, 3, 3], 1, 2),
    ([256, 14, 14], [1024, 256, 1, 1], 0, 1), ([1024, 14, 14], [256, 1024, 1, 1], 0, 1),
    ([1024, 14, 14], [512, 1024, 1, 1], 0, 1), ([512, 14, 14], [512, 512, 3, 3], 1, 2),
    ([512, 7, 7], [2048, 512, 1, 1], 0, 1),
]
CHAINS = [(256, 768, 3072), (256, 3072, 768), (256, 1024, 2816), (256, 2816, 1024), (128, 768, 768),
          (512, 1024, 1024), (64, 4096, 4096), (32, 768, 3072), (1024, 768, 3072), (128, 2048, 5632)]


def graphs(n: int, tiny: bool = False) -> list[tuple[str, object]]:
    """``[(label, hd.Graph)]``: the first ``n`` of the list in the module docstring (``tiny``: small chains only)."""
    import cases
    if tiny:
        return [(f"chain {m}x{k}x{o}", cases.chain((m, k, o)).build()) for m, k, o in
                [(8, 16, 16), (8, 16, 24), (4, 8, 8), (16, 16, 8)][:n]]
    import gpu_blocks
    out = []
    for dt in ("f32", "f16", "bf16"):
        for name, fn in gpu_blocks.BLOCKS.items():
            out.append((f"{name} {dt}", fn(dt)[0]))
    for x, w, pad, stride in RESNET50_CONVS:
        out.append((f"resnet50 conv {x}x{w} s{stride}",
                    cases.conv_case(f"r50 conv {len(out)}", [1, *x], w, [pad, pad], [stride, stride]).build()))
    for shape in CHAINS:
        out.append((f"matmul+bias+gelu {shape}", cases.chain(shape).build()))
    if n > len(out):
        raise SystemExit(f"--graphs {n}: only {len(out)} graphs are defined")
    return out[:n]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Redis:
    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="fleet-redis.")
        self.port = _free_port()
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                                      self.folder, "--appendonly", "yes", "--save", "", "--logfile",
                                      os.path.join(self.folder, "log")], stdout=subprocess.DEVNULL)
        import redis
        for _ in range(200):
            try:
                redis.Redis(port=self.port).ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _clear(store: hd.PlanStore) -> None:
    for ns in ("module", "tuning", "plan"):
        for k in store.keys(ns):
            store.delete(ns, k)


def _ray_cluster(workers: int, separate: bool):
    """Joins a fresh Ray cluster of ``workers`` CPUs; returns (address, seconds to start, stop())."""
    import ray
    t0 = time.perf_counter()
    if separate:
        port = _free_port()
        ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
        subprocess.run([ray_bin, "start", "--head", f"--port={port}", f"--num-cpus={workers}", "--include-dashboard=false",
                        "--disable-usage-stats"], check=True, capture_output=True)
        address = f"127.0.0.1:{port}"
        ray.init(address=address, log_to_driver=False)

        def stop():
            ray.shutdown()
            subprocess.run([ray_bin, "stop", "--force"], capture_output=True)
    else:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        address = "auto"

        def stop():
            ray.shutdown()
    # NOTE: workers start lazily; one task per CPU warms them so the build's time is compiling, not Ray's start
    ray.get([ray.remote(lambda: os.getpid()).remote() for _ in range(workers)])
    return address, time.perf_counter() - t0, stop


SERVE = textwrap.dedent("""
    import sys, time, json
    t_start = time.perf_counter()
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "iree.compiler" or name.startswith("iree.compiler."):
                raise ImportError("no compiler on a serving machine")
    sys.meta_path.insert(0, Block())
    import hipdnn_iree as hd
    t_import = time.perf_counter()
    keys = json.loads(sys.argv[1]); url = sys.argv[2]
    h = hd.create_handle(store=url)
    store = hd.PlanStore(url)
    restored = fetched = nbytes = 0
    for key, target in keys:
        if target.startswith("llvm-cpu"):
            g = hd.Graph.from_store(h, key)
            restored += 1
        else:
            nbytes += len(store.get("plan", key))
            fetched += 1
    print(json.dumps({"import_s": t_import - t_start, "total_s": time.perf_counter() - t_start,
                      "restored": restored, "fetched": fetched, "gpu_plan_bytes": nbytes,
                      "compiler_loaded": any(m.startswith("iree.compiler") for m in sys.modules)}))
""")


def serve(keys, url: str) -> dict:
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", SERVE, json.dumps(keys), url], capture_output=True, text=True,
                         cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        raise SystemExit(f"serving process failed:\n{run.stderr[-3000:]}")
    out = json.loads(run.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = wall
    return out


def run(n_graphs: int, targets, workers_list, store_url: str | None, separate: bool, tiny: bool, log=print) -> dict:
    gs = graphs(n_graphs, tiny)
    log(f"{len(gs)} graphs x {len(targets)} targets = {len(gs) * len(targets)} plans")
    server = None
    if store_url is None and shutil.which("redis-server"):
        server = _Redis()
        store_url = server.url
    tmp = None
    if store_url is None:
        tmp = tempfile.mkdtemp(prefix="fleet-store.")
        store_url = tmp
    store = hd.PlanStore(store_url)
    results, keys_for_serving = [], None
    try:
        for w in workers_list:
            _clear(store)
            address, start_s, stop = _ray_cluster(w, separate)
            try:
                t0 = time.perf_counter()
                keys = hd.build_many([g for _, g in gs], targets=targets, store=store, ray_address=address,
                                     cache=False, progress=False)
                wall = time.perf_counter() - t0
            finally:
                stop()
            failed = {f"{gs[i][0]} on {t}": str(e).splitlines()[0][:200] for (i, t), e in keys.items()
                      if isinstance(e, hd.HipdnnError)}
            ok = len(keys) - len(failed)
            results.append({"workers": w, "plans": ok, "failed": len(failed), "build_s": round(wall, 2),
                            "plans_per_s": round(ok / wall, 3), "ray_start_s": round(start_s, 2),
                            "failures": dict(list(failed.items())[:8])})
            log(f"workers {w}: {ok} plans ({len(failed)} failed) in {wall:.1f} s = {ok / wall:.2f} plans/s "
                f"(Ray started in {start_s:.1f} s)")
            if keys_for_serving is None:
                keys_for_serving = [(k, t) for (i, t), k in keys.items() if isinstance(k, str)]
        base = results[0]["plans_per_s"]
        for r in results:
            r["speedup"] = round(r["plans_per_s"] / base, 2) if base else None
        # serving start-up: the last run's plans are in the store
        cpu_keys = [(k, t) for k, t in keys_for_serving if t.startswith("llvm-cpu")]
        served = serve(keys_for_serving, store_url)
        compile_cpu_s = _compile_cpu_serially([g for _, g in gs], targets, log)
        log(f"serving start-up: {served['restored']} CPU plans restored and {served['fetched']} GPU plans fetched in "
            f"{served['total_s']:.2f} s (process {served['process_wall_s']:.2f} s); compiling the CPU plans: "
            f"{compile_cpu_s:.1f} s")
        serving = dict(served, cpu_plans=len(cpu_keys), compile_cpu_plans_s=round(compile_cpu_s, 2))
    finally:
        if server:
            server.stop()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"meta": _meta(store_url if not server else "redis-server (local, started by the script)", separate),
            "graphs": len(gs), "targets": list(targets), "runs": results, "serving": serving}


def _compile_cpu_serially(gs, targets, log) -> float:
    """What a serving machine without the store would do: build each llvm-cpu plan in this process (no cache)."""
    cpu = [t for t in targets if t.startswith("llvm-cpu")]
    if not cpu:
        return 0.0
    h = hd.create_handle(target=cpu[0], cache=False)
    t0 = time.perf_counter()
    for g in gs:
        try:
            g2 = hd.Graph.from_json(g.to_json())
            g2.build(h)
        except hd.HipdnnError:
            pass
    return time.perf_counter() - t0


def _meta(store: str, separate: bool) -> dict:
    import ray
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "date": time.strftime("%Y-%m-%d"),
            "versions": {"hipdnn_iree": hd.__version__, "ray": ray.__version__, "python": platform.python_version()},
            "store": store, "cluster": "ray start --head per worker count" if separate else "ray.init(num_cpus=W)",
            "compile_cache": "off (every plan compiled)", "repeats": 1}


def markdown(res: dict) -> str:
    lines = [f"{res['graphs']} graphs x {len(res['targets'])} targets ({', '.join(res['targets'])}), "
             f"{res['meta']['cores']} cores, {res['meta']['cluster']}, store {res['meta']['store']}", "",
             "| Ray workers | plans | failed | build (s) | plans/s | speed-up | Ray start (s) |", "|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        lines.append(f"| {r['workers']} | {r['plans']} | {r['failed']} | {r['build_s']} | {r['plans_per_s']} | "
                     f"{r['speedup']} | {r['ray_start_s']} |")
    s = res["serving"]
    lines += ["", f"Serving start-up (fresh process, IREE compiler blocked): {s['restored']} CPU plans restored and "
              f"{s['fetched']} GPU plans fetched in {s['total_s']:.2f} s ({s['import_s']:.2f} s of it importing "
              f"hipdnn_iree); compiling the same {s['cpu_plans']} CPU plans in one process: "
              f"{s['compile_cpu_plans_s']:.1f} s."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--graphs", type=int, default=54)
    ap.add_argument("--targets", nargs="+", default=["llvm-cpu:host", "cuda:sm_80", "rocm:gfx942"])
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--store", help="plan store URL or folder (default: a redis-server started here, else a folder)")
    ap.add_argument("--ray-start", action="store_true", help="a separate `ray start --head` cluster per worker count")
    ap.add_argument("--json", help="write the summary JSON here")
    ap.add_argument("--md", help="write the markdown table here")
    ap.add_argument("--tiny", action="store_true", help="4 small graphs at most (tests)")
    a = ap.parse_args(argv)
    n = min(a.graphs, 4) if a.tiny else a.graphs
    res = run(n, a.targets, a.workers, a.store, a.ray_start, a.tiny)
    md = markdown(res)
    print(md)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
