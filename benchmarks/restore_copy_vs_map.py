"""Restore time of hd.Graph.from_compiled_plan_file: the default copying restore (the file read
once into private aligned memory, the module imported from it without another copy) versus
mmap=True (the file mapped, the module imported from the mapping), for a small plan and a large one.

Plans: a real matmul + tanh plan (llvm-cpu, ~18 KB), and the same plan with its .vmfb padded to
--mb megabytes. NOTE: IREE ignores bytes after the module's archive, so the padded module loads and
runs, and every restore step that scales with the module's size (reading, copying, hashing,
importing) sees the full size; compiling a real multi-MB module would take long on this machine.
The payload is rebuilt as a proper FUSPLAN payload (digest over the padded body).

One process, the two methods interleaved (copy, map, copy, map, ...), the file in the page cache
(a warm-up restore of each first): the times are what a process pays to restore a plan it has on a
local disk it has read before. Each restored plan is executed once and checked against numpy.
Usage: python benchmarks/restore_copy_vs_map.py [--mb 8] [--n 41] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import hipdnn_iree as hd
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan


def small_plan(h) -> bytes:
    g = hd.Graph(name="restore_copy_vs_map", io_data_type=hd.DataType.FLOAT)
    x, w = g.tensor(name="X", uid=1, dim=[16, 32]), g.tensor(name="W", uid=2, dim=[32, 8])
    g.pointwise(g.matmul(x, w), mode=hd.PointwiseMode.TANH_FWD).set_output(True).set_uid(4)
    g.build(h)
    return g.serialize_compiled_plan()


def padded(data: bytes, mb: int) -> bytes:
    env = _envelope.decode(data)
    fp = _fusplan.unpack(env.plugin_payload)
    body = bytes(fp.body) + bytes(mb * (1 << 20) - len(fp.body))
    payload = _fusplan.pack(body, fp.payload_kind, fp.metadata,
                            envelope=_fusplan.envelope_fields(env.engine_id, env.workspace_size, env.tensor_uids))
    return _envelope.encode(_envelope.Envelope(1, env.engine_id, env.workspace_size, env.tensor_uids, payload))


def check(h, r) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 32), dtype=np.float32)
    w = rng.standard_normal((32, 8), dtype=np.float32)
    y = np.full((16, 8), np.nan, np.float32)
    r.execute(h, {1: x, 2: w, 4: y})
    np.testing.assert_allclose(y, np.tanh(x.astype(np.float64) @ w), rtol=1e-4, atol=1e-5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=8)
    ap.add_argument("--n", type=int, default=41)
    ap.add_argument("--json", default=None, help="also write the report here")
    args = ap.parse_args()
    h = hd.create_handle(cache=False)
    base = small_plan(h)
    report = {"samples_per_method": args.n, "cpus": os.cpu_count(), "load_average_before": os.getloadavg(),
              "python": sys.version.split()[0], "plans": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in (("small", base), (f"large_{args.mb}mb", padded(base, args.mb))):
            path = os.path.join(tmp, f"{name}.plan")
            hd.save_plan(path, data)
            times = {"copy": [], "map": []}
            for method in times:                                   # warm-up, and the numbers checked
                r = hd.Graph.from_compiled_plan_file(h, path, mmap=method == "map")
                assert r.get_execution_plan().context.in_place
                check(h, r)
                r.release()
            for _ in range(args.n):
                for method in times:
                    t0 = time.perf_counter()
                    r = hd.Graph.from_compiled_plan_file(h, path, mmap=method == "map")
                    times[method].append(time.perf_counter() - t0)
                    r.release()
            report["plans"][name] = {"plan_bytes": len(data), **{
                m: {"median_ms": statistics.median(t) * 1e3, "min_ms": min(t) * 1e3, "max_ms": max(t) * 1e3,
                    "q1_ms": statistics.quantiles(t, n=4)[0] * 1e3, "q3_ms": statistics.quantiles(t, n=4)[2] * 1e3}
                for m, t in times.items()}}
    report["load_average_after"] = os.getloadavg()
    for name, r in report["plans"].items():
        c, m = r["copy"], r["map"]
        print(f"{name:>12} ({r['plan_bytes']:>9} bytes): copy {c['median_ms']:8.3f} ms (IQR {c['q1_ms']:.3f}-"
              f"{c['q3_ms']:.3f})   map {m['median_ms']:8.3f} ms (IQR {m['q1_ms']:.3f}-{m['q3_ms']:.3f})   "
              f"copy - map {c['median_ms'] - m['median_ms']:+.3f} ms")
    print(f"load average before {report['load_average_before']}, after {report['load_average_after']}, "
          f"{report['cpus']} CPUs, n={args.n} per method")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
