"""What keeping f32 subnormals would cost on the CPU: IREE's runtime as shipped (FTZ and DAZ set
in MXCSR around every dispatch) against a copy of it with that one setting removed.

IREE 3.13's CPU runtime sets the x86 MXCSR flags FTZ and DAZ (0x8040) on its task workers
(iree/task/worker.c) and around each inline dispatch (iree/hal/local/inline_command_buffer.c);
no flag turns it off. To measure what IREE-compiled code would cost with subnormals kept, this
script copies the installed ``iree._runtime_libs`` into a temporary folder, patches the two
``or $0x8040`` immediates of that push to 0 (the copy then leaves MXCSR as the process has it:
IEEE, subnormals kept), and runs the same plans in child processes alternating between the stock
and the patched runtime (``--rounds`` rounds; each child times ``-n`` executes after warm-up and
reports the median). Inputs: normal random data, and the same data scaled into the subnormal range
(where the two modes differ: flushed, every operand reads as 0; kept, the CPU's slow paths).
Measurement only: nothing in hipdnn-iree runs the patched copy.

    .venv/bin/python benchmarks/subnormal_cost.py [--rounds 5] [-n 30] [--json out.json] [--tiny]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATCHES = [(bytes.fromhex("4881cf40800000"), bytes.fromhex("4881cf00000000")),   # or $0x8040,%rdi
           (bytes.fromhex("480d40800000"), bytes.fromhex("480d00000000"))]       # or $0x8040,%rax

CHILD = r"""
import json, sys, time, numpy as np, hipdnn_iree as hd
case, data, n, tiny = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "tiny"
h = hd.create_handle(cache=False)
rng = np.random.default_rng(0)
g = hd.Graph(name=case, io_data_type=hd.DataType.FLOAT)
if case == "matmul":
    M = K = N = 32 if tiny else 512
    a = g.tensor(name="A", uid=1, dim=[1, M, K]); b = g.tensor(name="B", uid=2, dim=[1, K, N])
    g.matmul(a, b).set_output(True).set_uid(3)
    shapes, out = [(1, M, K), (1, K, N)], (1, M, N)
else:
    Nb, C, H, W, Kc = (1, 8, 8, 8, 8) if tiny else (8, 64, 32, 32, 64)
    x = g.tensor(name="X", uid=1, dim=[Nb, C, H, W]); w = g.tensor(name="W", uid=2, dim=[Kc, C, 3, 3])
    g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_output(True).set_uid(3)
    shapes, out = [(Nb, C, H, W), (Kc, C, 3, 3)], (Nb, Kc, H, W)
g.build(h)
ins = [rng.standard_normal(s).astype(np.float32) for s in shapes]
if data == "subnormal":
    ins[0] *= np.float32(1e-39)          # every element of the first operand subnormal
pack = {1: ins[0], 2: ins[1], 3: np.empty(out, np.float32)}
for _ in range(3):
    g.execute(h, pack)
ts = []
for _ in range(n):
    t = time.perf_counter(); g.execute(h, pack); ts.append(time.perf_counter() - t)
print(json.dumps({"median_ms": 1e3 * float(np.median(ts)), "zeros": int((pack[3] == 0).sum()),
                  "flushed": bool(np.float32(1e-40) * 1 == 0)}))
"""


def patched_runtime(tmp: str) -> str:
    """A copy of iree._runtime_libs with the FTZ/DAZ push disabled; the folder to put on PYTHONPATH."""
    import iree._runtime_libs as libs
    src = os.path.dirname(libs.__file__)
    dst = os.path.join(tmp, "iree", "_runtime_libs")
    shutil.copytree(src, dst)
    (so,) = glob.glob(os.path.join(dst, "_runtime.*.so"))
    data = bytearray(open(so, "rb").read())
    for old, new in PATCHES:
        hits = [m.start() for m in re.finditer(re.escape(old), data)]
        if len(hits) != 1:
            raise SystemExit(f"expected one 'or $0x8040' site {old.hex()} in {so}, found {len(hits)}: "
                             "another IREE runtime build; this script knows 3.13's")
        data[hits[0]:hits[0] + len(new)] = new
    open(so, "wb").write(bytes(data))
    return tmp


def run(case: str, data: str, n: int, extra_path: str | None, tiny: bool = False) -> dict:
    env = dict(os.environ, HIPDNN_IREE_CACHE="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, REPO, os.environ.get("PYTHONPATH")) if p)
    p = subprocess.run([sys.executable, "-c", CHILD, case, data, str(n), "tiny" if tiny else "full"], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=600)
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--cases", default="matmul,conv")
    ap.add_argument("--json")
    ap.add_argument("--tiny", action="store_true", help="small shapes (tests/test_subnormals.py runs it so)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hipdnn_iree_noftz_") as tmp:
        noftz = patched_runtime(tmp)
        results = []
        for case in args.cases.split(","):
            for data in ("normal", "subnormal"):
                samples = {"flush (IREE as shipped)": [], "keep (patched copy)": []}
                zeros = {}
                for _ in range(args.rounds):   # NOTE: interleaved: one child of each side per round
                    for side, path in (("flush (IREE as shipped)", None), ("keep (patched copy)", noftz)):
                        r = run(case, data, args.n, path, args.tiny)
                        samples[side].append(r["median_ms"])
                        zeros[side] = r["zeros"]
                row = {"case": case, "data": data, "rounds": args.rounds, "executes_per_round": args.n}
                for side, v in samples.items():
                    row[side] = {"median_ms": round(statistics.median(v), 3), "min_ms": round(min(v), 3),
                                 "max_ms": round(max(v), 3), "output_zeros": zeros[side]}
                row["keep/flush"] = round(row["keep (patched copy)"]["median_ms"]
                                          / row["flush (IREE as shipped)"]["median_ms"], 3)
                results.append(row)
                print(json.dumps(row), flush=True)
    out = {"what": "median ms per execute, stock IREE runtime (FTZ/DAZ) vs a copy with the MXCSR push removed",
           "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "load": os.getloadavg()}, "results": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


if __name__ == "__main__":
    sys.exit(main())
