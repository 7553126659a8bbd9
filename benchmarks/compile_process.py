"""What compiling in a child process (``iree-compile``) costs per build, against compiling in this
process (``iree.compiler.api``, what hipdnn-iree did before issue 18).

Each round builds every case once per mode, interleaved, the compile cache off (``g.build`` end to end:
lowering, verification, compile, module load); medians, min and max over the rounds after a warm-up.
The in-process mode swaps ``compile.compile_mlir`` for the old in-process compile (kept here only
for this comparison: an LLVM fatal error there ends the process).

    python benchmarks/compile_process.py [--rounds 5] [--out docs/benchmarks/compile_process.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hipdnn_iree as hd  # noqa: E402
from hipdnn_iree.plugins.iree_linalg import compile as _compile  # noqa: E402

_LOCK = threading.Lock()


def inprocess_compile_mlir(mlir, target, extra_flags=(), timeout=None):
    """The in-process compile as it was: iree.compiler.api Session, fd 2 captured to a file."""
    from iree.compiler.api import Output, Session, Source
    with tempfile.TemporaryDirectory(prefix="hipdnn_iree_") as tmp:
        stats_path = os.path.join(tmp, "stats.json")
        flags = tuple(target.compile_flags()) + (
            "--iree-scheduling-dump-statistics-format=json",
            f"--iree-scheduling-dump-statistics-file={stats_path}") + tuple(extra_flags)
        with _LOCK:
            session = Session()
            session.set_flags(*flags)
            inv = session.invocation()
            inv.enable_console_diagnostics()
            saved = os.dup(2)
            with open(os.path.join(tmp, "diag.txt"), "wb") as f:
                os.dup2(f.fileno(), 2)
                try:
                    ok = inv.parse_source(Source.wrap_buffer(session, mlir.encode())) and inv.execute()
                    out = Output.open_membuffer()
                    if ok:
                        inv.output_vm_bytecode(out)
                    vmfb = bytes(out.map_memory()) if ok else b""
                    out.close()
                finally:
                    os.dup2(saved, 2)
                    os.close(saved)
            inv.close()
            session.close()
        if not ok:
            raise RuntimeError("in-process compile failed")
        try:
            with open(stats_path, encoding="utf-8") as f:
                d = int(json.load(f)["stream-aggregate"]["execution"]["dispatch-count"])
        except (OSError, ValueError, KeyError, TypeError):
            d = None
        return _compile.Compiled(vmfb, d, flags)


def tiny_matmul():
    g = hd.Graph(name="mm", io_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(name="A", uid=1, dim=[4, 8]), g.tensor(name="B", uid=2, dim=[8, 6])
    g.matmul(a, b).set_output(True).set_uid(3)
    return g


def conv3x3():
    n, c, h, w, k = 8, 64, 56, 56, 64
    g = hd.Graph(name="conv", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="X", uid=1, dim=[n, c, h, w], stride=[h * w * c, 1, w * c, c])
    f = g.tensor(name="W", uid=2, dim=[k, c, 3, 3], stride=[9 * c, 1, 3 * c, c])
    y = g.conv_fprop(x, f, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_uid(3)
    return g


def bert_attention():
    import gpu_blocks
    return gpu_blocks.bert_attention("f32")[0]


CASES = {"matmul 4x8 @ 8x6": tiny_matmul, "conv 3x3 + ReLU (N8 C64 56x56 K64, NHWC)": conv3x3,
         "BERT-base attention (Q/K/V projections + sdpa)": bert_attention}


def run(rounds: int, warmup: int = 1, target: str = "llvm-cpu:host") -> dict:
    h = hd.create_handle(device=None if target != "llvm-cpu:host" else "local-task", target=target, cache=False)
    child = _compile.compile_mlir
    modes = {"in-process": inprocess_compile_mlir, "child process": child}
    times = {(c, m): [] for c in CASES for m in modes}
    loads = []
    try:
        for r in range(warmup + rounds):
            loads.append(os.getloadavg()[0])
            for cname, make in CASES.items():
                for mname, fn in modes.items():
                    _compile.compile_mlir = fn
                    g = make()
                    t0 = time.perf_counter()
                    g.build(h)
                    dt = time.perf_counter() - t0
                    if r >= warmup:
                        times[(cname, mname)].append(dt * 1e3)
    finally:
        _compile.compile_mlir = child
    return {"times": times, "loads": loads, "rounds": rounds, "target": target}


TRIVIAL = "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> }"


def run_trivial(rounds: int, warmup: int = 1) -> str:
    """The fixed cost: compile_mlir alone on a module with no dispatch, in-process against child."""
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    target, child = parse_target("llvm-cpu:host"), _compile.compile_mlir
    modes = {"in-process": inprocess_compile_mlir, "child process": child}
    times = {m: [] for m in modes}
    for r in range(warmup + rounds):
        for m, fn in modes.items():
            t0 = time.perf_counter()
            fn(TRIVIAL, target)
            if r >= warmup:
                times[m].append((time.perf_counter() - t0) * 1e3)
    a, b = times["in-process"], times["child process"]
    return ("| compile only, module without dispatches | in-process ms (median, min-max) | child process ms "
            "(median, min-max) | difference ms |\n|---|---|---|---|\n"
            f"| `{TRIVIAL[:40]}...` | {statistics.median(a):.0f} ({min(a):.0f}-{max(a):.0f}) | "
            f"{statistics.median(b):.0f} ({min(b):.0f}-{max(b):.0f}) | "
            f"{statistics.median(b) - statistics.median(a):+.0f} |\n\n"
            f"{rounds} rounds after one warm-up, interleaved: the fixed cost of starting iree-compile "
            "(a process, loading libIREECompiler.so) and writing/reading the temporary files.")


MULTI_TARGETS = ["llvm-cpu:host", "llvm-cpu:x86-64-v3", "rocm:gfx942", "cuda:sm_80"]


def run_multi(rounds: int, warmup: int = 1) -> dict:
    """The MULTI_TARGETS built one after another (one compile-only handle per target, the times summed)
    against one handle with the target list (its compiles run in parallel child processes)."""
    singles = [hd.create_handle(device=None, target=t, cache=False) for t in MULTI_TARGETS]
    multi = hd.create_handle(device=None, target=MULTI_TARGETS, cache=False)
    modes = ["one after another", f"one multi-target handle ({os.cpu_count()} CPUs)"]
    times = {(c, m): [] for c in CASES for m in modes}
    for r in range(warmup + rounds):
        for cname, make in CASES.items():
            t0 = time.perf_counter()
            for h in singles:
                make().build(h)
            t1 = time.perf_counter()
            make().build(multi)
            t2 = time.perf_counter()
            if r >= warmup:
                times[(cname, modes[0])].append((t1 - t0) * 1e3)
                times[(cname, modes[1])].append((t2 - t1) * 1e3)
    return {"times": times, "modes": modes, "rounds": rounds}


def markdown_multi(res: dict) -> str:
    a_name, b_name = res["modes"]
    lines = [f"| graph, {len(MULTI_TARGETS)} targets | {a_name} ms (median, min-max) | {b_name} ms (median, min-max) "
             f"| ratio |", "|---|---|---|---|"]
    for c in CASES:
        a, b = res["times"][(c, a_name)], res["times"][(c, b_name)]
        ma, mb = statistics.median(a), statistics.median(b)
        lines.append(f"| {c} | {ma:.0f} ({min(a):.0f}-{max(a):.0f}) | {mb:.0f} ({min(b):.0f}-{max(b):.0f}) | "
                     f"{mb / ma:.2f} |")
    lines.append("")
    lines.append(f"Targets {MULTI_TARGETS}, compile-only handles, compile cache off, {res['rounds']} rounds after "
                 "one warm-up, interleaved.")
    return "\n".join(lines)


def markdown(res: dict) -> str:
    t = res["times"]
    lines = ["| graph | in-process ms (median, min-max) | child process ms (median, min-max) | difference ms | ratio |",
             "|---|---|---|---|---|"]
    for c in CASES:
        a, b = t[(c, "in-process")], t[(c, "child process")]
        ma, mb = statistics.median(a), statistics.median(b)
        lines.append(f"| {c} | {ma:.0f} ({min(a):.0f}-{max(a):.0f}) | {mb:.0f} ({min(b):.0f}-{max(b):.0f}) | "
                     f"{mb - ma:+.0f} | {mb / ma:.2f} |")
    loads = res["loads"]
    lines.append("")
    lines.append(f"`g.build()` end to end, compile cache off, target {res['target']}, {res['rounds']} rounds after "
                 f"one warm-up, modes and graphs interleaved in each round; {os.cpu_count()} CPUs "
                 f"({platform.processor() or platform.machine()}), 1-minute load average "
                 f"{min(loads):.1f}-{max(loads):.1f} during the run (a machine shared with other work).")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--target", default="llvm-cpu:host")
    ap.add_argument("--no-multi", action="store_true", help="skip the several-target table")
    ap.add_argument("--out", help="write the table to this markdown file (else print it)")
    args = ap.parse_args(argv)
    md = ("# Compiling in a child process: what it costs\n\n"
          f"Produced by `python benchmarks/compile_process.py --rounds {args.rounds}` "
          f"({time.strftime('%Y-%m-%d')}, iree-base-compiler {_compile.compiler_version()}).\n\n"
          "## One target: in-process against child-process compile\n\n")
    md += markdown(run(args.rounds, target=args.target))
    md += "\n\n## Fixed cost of the child process\n\n" + run_trivial(max(args.rounds, 10))
    if not args.no_multi:
        md += ("\n\n## Several targets: built one after another against one multi-target handle\n\n"
               + markdown_multi(run_multi(args.rounds)))
    print(md)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(md + "\n")


if __name__ == "__main__":
    main()
