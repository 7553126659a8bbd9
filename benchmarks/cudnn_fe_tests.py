"""Runs cuDNN frontend's own Python test files, unchanged, on this project's facade.

    python3 benchmarks/cudnn_fe_tests.py PATH/TO/cudnn-frontend/test/python [--files a.py b.py]
        [--json out.json] [--md out.md] [--timeout 900] [-k EXPR]

PATH is a checkout of cuDNN FE's ``test/python`` folder (its flat layout, e.g. tag v1.23.0; this
script fetches nothing). Each file runs in a pytest process of its own, in that folder (its
``pytest.ini`` selects the L0 tests, its ``conftest.py`` gives the handle fixture), with
``import cudnn`` resolving to ``hipdnn_iree.cudnn`` (``benchmarks/_cudnn_fe_plugin.py``). Per file:
tests passed, failed, errored and skipped, with the first failure's message; the table goes to
stdout (and ``--md``), every test's outcome to ``--json``.

``HIPDNN_IREE_FE_CPU=1`` runs the files on the CPU (tensors asked for on "cuda" made on the host):
a debugging aid where no GPU is; the H200 run is the measurement (docs/cudnn_fe_tests.md).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

DEFAULT_FILES = ("test_conv_fprop.py", "test_wgrads.py", "test_conv_bias.py", "test_matmul_bias_relu.py",
                 "test_rmsnorm.py", "test_layernorm.py", "test_batchnorm.py", "test_instancenorm.py",
                 "test_conv_genstats.py", "test_conv_reduction.py", "test_kernel_cache.py",
                 "test_deviceless_aot_compilation.py")


def _first_line(text: str, limit: int = 240) -> str:
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("E ") or "Error" in line or "error" in line:
            return line.lstrip("E ").strip()[:limit]
    return (text or "").strip().splitlines()[-1][:limit] if (text or "").strip() else ""


def run_file(folder: Path, name: str, timeout: float, extra: list[str]) -> dict:
    """One test file in a pytest process of its own: its tests' outcomes (from junit XML)."""
    xml = Path(os.environ.get("TMPDIR", "/tmp")) / f"cudnn_fe_{os.getpid()}_{name}.xml"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), str(folder)] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, "-m", "pytest", "-p", "_cudnn_fe_plugin", "-p", "no:cacheprovider", "-q",
           f"--junitxml={xml}", "-o", "junit_family=xunit1", name, *extra]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
    seconds = time.perf_counter() - t0
    tests = []
    if xml.exists():
        try:
            for case in ET.parse(xml).getroot().iter("testcase"):
                outcome, message = "passed", ""
                for tag in ("failure", "error", "skipped"):
                    el = case.find(tag)
                    if el is not None:
                        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                        message = _first_line((el.get("message") or "") + "\n" + (el.text or ""))
                        break
                tests.append({"test": case.get("name"), "outcome": outcome, "message": message,
                              "seconds": float(case.get("time") or 0)})
        finally:
            xml.unlink()
    counts = {k: sum(1 for t in tests if t["outcome"] == k) for k in ("passed", "failed", "error", "skipped")}
    first = next((t for t in tests if t["outcome"] in ("failed", "error")), None)
    if rc not in (0, 1, 5) and not tests:
        first = {"test": "(collection)", "message": _first_line(out)}
        counts["error"] += 1
    return {"file": name, "rc": rc, "seconds": round(seconds, 1), **counts, "tests": tests,
            "first_failure": f"{first['test']}: {first['message']}" if first else "",
            "output_tail": out[-4000:]}


def table(results: list[dict]) -> str:
    lines = ["| file | passed | failed | errors | skipped | s | first failure |", "|---|---|---|---|---|---|---|"]
    for r in results:
        msg = r["first_failure"].replace("|", "\\|")[:200]
        lines.append(f"| {r['file'].removesuffix('.py')} | {r['passed']} | {r['failed']} | {r['error']} | "
                     f"{r['skipped']} | {r['seconds']} | {msg} |")
    tot = {k: sum(r[k] for r in results) for k in ("passed", "failed", "error", "skipped")}
    ran = sum(tot.values())
    lines.append(f"| **total** ({ran} tests) | {tot['passed']} | {tot['failed']} | {tot['error']} | {tot['skipped']} | "
                 f"{round(sum(r['seconds'] for r in results), 1)} | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="cuDNN FE's test/python folder (flat layout)")
    ap.add_argument("--files", nargs="*", default=None, help=f"test files (default: {' '.join(DEFAULT_FILES)})")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per file")
    ap.add_argument("-k", default=None, help="pytest -k expression")
    args = ap.parse_args(argv)
    folder = args.folder.resolve()
    if not (folder / "conftest.py").exists():
        print(f"{folder}: no conftest.py: not cuDNN FE's test/python folder", file=sys.stderr)
        return 2
    files = args.files or [f for f in DEFAULT_FILES if (folder / f).exists()]
    extra = ["-k", args.k] if args.k else []
    meta = {"cpu_mode": os.environ.get("HIPDNN_IREE_FE_CPU", "") not in ("", "0"), "python": sys.version.split()[0]}
    try:
        import hipdnn_iree.cudnn as cudnn
        meta.update(facade=cudnn.engine_version_string())
        import torch
        meta.update(torch=torch.__version__, gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    except Exception as e:                  # noqa: BLE001 - the table is still worth writing
        meta.update(meta_error=repr(e))
    results = []
    for name in files:
        r = run_file(folder, name, args.timeout, extra)
        results.append(r)
        print(f"{name}: {r['passed']} passed, {r['failed']} failed, {r['error']} errors, {r['skipped']} skipped "
              f"({r['seconds']} s) {r['first_failure'][:160]}", flush=True)
        # NOTE: written after each file, so a run cut short still leaves the files it finished
        if args.json:
            args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
        if args.md:
            args.md.write_text(table(results) + "\n")
    print(table(results))
    return 0 if all(r["failed"] == 0 and r["error"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
