"""Restore time and resident memory of a large plan: bytes (hd.load_plan + from_compiled_plan)
versus in place (hd.Graph.from_compiled_plan_file: memory-mapped, module imported with
VmModule.wrap_buffer). Issue 11, item 3.

The large plan: a real plan (matmul + bias + GELU, llvm-cpu) whose .vmfb is padded at its end
to about --mb megabytes. NOTE: a graph without constants compiles to a small module, and ~50 MB
of real dispatches would take hours to compile here; IREE ignores bytes after the module's
archive, so the padded module is loadable and runs, while every restore step that scales with
the module's size (reading, copying, hashing, importing) sees the full size. The padded plan is
rebuilt as a proper FUSPLAN 1.1 payload (digest over the padded body).

Each sample is a fresh process (so memory figures do not mix), the two methods alternate, and
the report gives medians and min/max. Usage: python benchmarks/restore_inplace.py [--mb 50] [--n 7]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import hipdnn_iree as hd
    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    path, method = sys.argv[1], sys.argv[2]
    h = hd.create_handle()
    x = np.random.default_rng(0).standard_normal((2, 6, 16), dtype=np.float32)
    base_rss, base_anon = status("VmRSS"), status("RssAnon")
    t0 = time.perf_counter()
    if method == "bytes":
        r = hd.Graph.from_compiled_plan(h, hd.load_plan(path))
    else:
        r = hd.Graph.from_compiled_plan_file(h, path, mmap=True)
    t1 = time.perf_counter()
    rss, anon = status("VmRSS"), status("RssAnon")
    ctx = r.get_execution_plan().context
    w = np.random.default_rng(1).standard_normal((1, 12, 16), dtype=np.float32).transpose(0, 2, 1)
    b = np.random.default_rng(2).standard_normal((1, 1, 12), dtype=np.float32)
    y = np.zeros((2, 6, 12), np.float32)
    r.execute(h, {1: x, 2: w, 3: b, 4: y})
    print(json.dumps({"restore_s": t1 - t0, "rss_delta": rss - base_rss, "anon_delta": anon - base_anon,
                      "in_place": bool(ctx.in_place), "finite": bool(np.isfinite(y).all())}))
""")


def make_plan(path: str, mb: int) -> int:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
    import hipdnn_iree as hd
    from hipdnn_iree.backend import envelope as _envelope
    from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
    from make_corpus import build
    h = hd.create_handle(target="llvm-cpu:x86-64")
    g = build()
    g.build(h)
    env = _envelope.decode(g.serialize_compiled_plan())
    fp = _fusplan.unpack(env.plugin_payload)
    body = bytes(fp.body) + bytes(mb * (1 << 20) - len(fp.body))
    payload = _fusplan.pack(body, fp.payload_kind, fp.metadata,
                            envelope=_fusplan.envelope_fields(env.engine_id, env.workspace_size, env.tensor_uids))
    data = _envelope.encode(_envelope.Envelope(1, env.engine_id, env.workspace_size, env.tensor_uids, payload))
    hd.save_plan(path, data)
    return len(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--n", type=int, default=7)
    ap.add_argument("--json", default=None, help="also write the report here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "large.plan")
        size = make_plan(path, args.mb)
        samples = {"bytes": [], "in_place": []}
        for _ in range(args.n):
            for method in ("bytes", "in_place"):   # interleaved
                out = subprocess.run([sys.executable, "-c", CHILD, path, method], capture_output=True, text=True,
                                     env={**os.environ, "HIPDNN_IREE_CACHE": "0"})
                if out.returncode != 0:
                    raise SystemExit(out.stderr)
                samples[method].append(json.loads(out.stdout.strip().splitlines()[-1]))
    report = {"plan_bytes": size, "samples": args.n, "load_average": os.getloadavg(), "cpus": os.cpu_count()}
    for method, rows in samples.items():
        assert all(r["finite"] for r in rows)
        t = [r["restore_s"] * 1e3 for r in rows]
        rss = [r["rss_delta"] / 2**20 for r in rows]
        anon = [r["anon_delta"] / 2**20 for r in rows]
        report[method] = {"restore_ms_median": statistics.median(t), "restore_ms_min": min(t), "restore_ms_max": max(t),
                          "rss_delta_mib_median": statistics.median(rss), "anon_delta_mib_median": statistics.median(anon),
                          "module_in_place": rows[0]["in_place"]}
    print(json.dumps(report, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
