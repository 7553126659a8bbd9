"""Runs cuDNN frontend's own Python test files, unchanged, on this project's facade.

    python3 benchmarks/cudnn_fe_tests.py PATH/TO/cudnn-frontend/test/python [--files a.py b.py]
        [--json out.json] [--md out.md] [--timeout 900] [-k EXPR] [--sides facade cudnn] [--mhas-all]

PATH is a checkout of cuDNN FE's ``test/python`` folder (its flat layout, e.g. tag v1.23.0; this
script fetches nothing). Each file runs in a pytest process of its own, in that folder (its
``pytest.ini`` selects the L0 tests, its ``conftest.py`` gives the handle fixture), with
``import cudnn`` resolving to ``hipdnn_iree.cudnn`` (``benchmarks/_cudnn_fe_plugin.py``). Per file:
tests passed, failed, errored and skipped, with the first failure's message; the table goes to
stdout (and ``--md``), every test's outcome to ``--json``.

``--sides facade cudnn`` (or ``HIPDNN_IREE_FE_SIDES="facade cudnn"``) runs every file twice: on the
facade, then on real cuDNN (``import cudnn`` left to the nvidia-cudnn-frontend package: an importable
one, or the wheel in ``.cudnn_whl/`` installed into a folder of its own with pip, no network), and
records passed/failed/errors/skipped per file for both sides. test_mhas.py (tens of thousands of
parametrizations) runs the selection ``MHAS_K`` (the features this engine could run: no ALiBi,
padding, dropout, ragged, paged or left-bound cases; ``--mhas-all`` for every one) under a time
cap of its own (``FILE_TIMEOUTS``, env ``HIPDNN_IREE_FE_MHAS_TIMEOUT``); a file stopped at its cap
is interrupted (SIGINT) so pytest still writes the outcomes of the tests it finished.

``--files all`` runs every flat test file of the folder (v1.23.0 has 36; ``all_files``). A test
that stops on ``cudnnGraphNotSupportedError`` where its file does not catch it is counted
"refused" (a clean NOT_SUPPORTED naming the feature), apart from failures. test_mhas_v2.py and the
two fuzzers have time caps too (``FILE_TIMEOUTS``; the env cap applies to every capped file).

``HIPDNN_IREE_FE_CPU=1`` runs the files on the CPU (tensors asked for on "cuda" made on the host):
a debugging aid where no GPU is; the H200 run is the measurement (docs/cudnn_fe_tests.md).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import signal
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
                 "test_deviceless_aot_compilation.py", "test_mhas.py")

# test_mhas.py: 27,648 forward and 4,608 backward parametrizations, most of them features this engine
# refuses (xfail at validate); the default run takes the ones it could run (both dtypes, layouts, head
# groups, bias, causal masks of both alignments, inference and training, forward and backward)
MHAS_K = "paged0 and alibi0 and padding0 and dropout0 and ragged0 and left_bound0 or " \
         "test_sdpa_backward and alibi0 and padding0 and dropout0 and ragged0 and left_bound0"
FILE_TIMEOUTS = {"test_mhas.py": {"facade": 240.0, "cudnn": 120.0},   # seconds, at most --timeout
                 "test_mhas_v2.py": {"facade": 150.0, "cudnn": 90.0},
                 "test_conv_fuzzer.py": {"facade": 120.0, "cudnn": 60.0},
                 "test_matmul_fuzzer.py": {"facade": 120.0, "cudnn": 60.0}}
# NOTE: a test that stops on cudnnGraphNotSupportedError (NOT_SUPPORTED) where the file does not
# catch it (test_flexible_sdpa.py calls validate() outside its try) is counted "refused", not
# failed: the facade refused the graph cleanly, naming the feature
REFUSED_MARKS = ("cudnnGraphNotSupportedError", "[NOT_SUPPORTED]")


def all_files(folder: Path) -> list[str]:
    """Every flat test file of the folder (``test_*.py`` at its top, not the fe_api/ tree; not
    test_utils.py, which holds helpers)."""
    return sorted(p.name for p in folder.glob("test_*.py") if p.name != "test_utils.py")
SIDES = ("facade", "cudnn")


def _first_line(text: str, limit: int = 240) -> str:
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("E ") or "Error" in line or "error" in line:
            return line.lstrip("E ").strip()[:limit]
    return (text or "").strip().splitlines()[-1][:limit] if (text or "").strip() else ""


def _cudnn_site() -> str | None:
    """A folder where real cuDNN FE's ``cudnn`` imports from: None when it already imports here;
    else the wheel in ``.cudnn_whl/`` installed with pip (no index, no dependencies) into a folder
    of its own."""
    probe = subprocess.run([sys.executable, "-c", "import cudnn, sys; sys.exit(0 if hasattr(cudnn, 'pygraph') and "
                            "'hipdnn' not in cudnn.__file__ else 1)"], capture_output=True)
    if probe.returncode == 0:
        return None
    site = Path(os.environ.get("TMPDIR", "/tmp")) / "cudnn_fe_real_site"
    if not (site / "cudnn").exists():
        wheels = sorted(glob.glob(str(ROOT / ".cudnn_whl" / "*.whl")))
        if not wheels:
            raise RuntimeError("real cuDNN side: no importable cudnn and no wheel in .cudnn_whl/")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                        str(site), *wheels], check=True)
    return str(site)


def _cudnn_lib_dirs() -> list[str]:
    """The cuDNN libraries torch brings (nvidia/cudnn/lib in a site folder), for the real side's loader."""
    found = []
    for entry in sys.path:
        d = Path(entry or ".") / "nvidia" / "cudnn" / "lib"
        if d.is_dir():
            found.append(str(d))
    return found


def run_file(folder: Path, name: str, timeout: float, extra: list[str], side: str = "facade",
             cudnn_site: str | None = None) -> dict:
    """One test file in a pytest process of its own: its tests' outcomes (from junit XML)."""
    xml = Path(os.environ.get("TMPDIR", "/tmp")) / f"cudnn_fe_{os.getpid()}_{side}_{name}.xml"
    env = dict(os.environ)
    paths = [str(HERE), str(ROOT), str(folder)]
    if side == "cudnn":
        env["HIPDNN_IREE_FE_SIDE"] = "cudnn"
        paths = [str(HERE), str(folder)] + ([cudnn_site] if cudnn_site else [])
        libs = _cudnn_lib_dirs()
        if libs:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH")
                                                             else []))
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, "-m", "pytest", "-p", "_cudnn_fe_plugin", "-p", "no:cacheprovider", "-q",
           f"--junitxml={xml}", "-o", "junit_family=xunit1", name, *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        # NOTE: SIGINT, not SIGKILL: pytest stops after the running test and still writes the junit
        # XML of the tests it finished; killed only if it does not stop within a minute
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        rc = "timeout"
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
                        if tag == "failure":
                            # NOTE: assert_close's message spans lines (mismatched count, greatest
                            # differences and where); keep them, with the test's last traceback line
                            detail = [ln.strip() for ln in (el.text or "").splitlines()
                                      if ln.strip().startswith("E ")][:8]
                            where = [ln.strip() for ln in (el.text or "").splitlines() if ".py:" in ln][-2:]
                            if detail or where:
                                message = " | ".join(detail + where)[:900]
                        break
                xfail = outcome == "skipped" and "xfail" in (el.get("type") or "")
                if outcome in ("failed", "error") and any(m in message for m in REFUSED_MARKS):
                    outcome = "refused"
                tests.append({"test": case.get("name"), "outcome": outcome, "message": message,
                              "seconds": float(case.get("time") or 0), **({"xfail": True} if xfail else {})})
        finally:
            xml.unlink()
    counts = {k: sum(1 for t in tests if t["outcome"] == k) for k in ("passed", "failed", "error", "skipped", "refused")}
    first = next((t for t in tests if t["outcome"] in ("failed", "error")), None)
    if rc not in (0, 1, 5) and not tests:
        first = {"test": "(collection)", "message": _first_line(out)}
        counts["error"] += 1
    refusal = next((t for t in tests if t["outcome"] == "refused"), None)
    return {"file": name, "side": side, "rc": rc, "seconds": round(seconds, 1), **counts, "tests": tests,
            "first_failure": f"{first['test']}: {first['message']}" if first else "",
            "first_refusal": f"refused: {refusal['test']}: {refusal['message']}" if refusal else "",
            "output_tail": (out or "")[-4000:]}


def table(results: list[dict]) -> str:
    """The per-file table; a side column (facade / cudnn) when both sides ran."""
    sides = list(dict.fromkeys(r.get("side", "facade") for r in results))
    both = len(sides) > 1
    head = "| file |" + (" side |" if both else "") + " passed | failed | errors | skipped | refused | s | first failure |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        msg = (r["first_failure"] or r.get("first_refusal", "")).replace("|", "\\|")[:200]
        cut = " (cut at its time cap)" if r["rc"] == "timeout" else ""
        side = f" {r.get('side', 'facade')} |" if both else ""
        lines.append(f"| {r['file'].removesuffix('.py')} |{side} {r['passed']} | {r['failed']} | {r['error']} | "
                     f"{r['skipped']} | {r.get('refused', 0)} | {r['seconds']}{cut} | {msg} |")
    for s in sides:
        rs = [r for r in results if r.get("side", "facade") == s]
        tot = {k: sum(r.get(k, 0) for r in rs) for k in ("passed", "failed", "error", "skipped", "refused")}
        side = f" {s} |" if both else ""
        lines.append(f"| **total** ({sum(tot.values())} tests) |{side} {tot['passed']} | {tot['failed']} | "
                     f"{tot['error']} | {tot['skipped']} | {tot['refused']} | {round(sum(r['seconds'] for r in rs), 1)} | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="cuDNN FE's test/python folder (flat layout)")
    ap.add_argument("--files", nargs="*", default=None, help=f"test files, or 'all' for every flat test file of the "
                                                             f"folder (default: {' '.join(DEFAULT_FILES)})")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per file")
    ap.add_argument("-k", default=None, help="pytest -k expression (every file)")
    ap.add_argument("--sides", nargs="+", choices=SIDES, default=None,
                    help="facade, cudnn (real cuDNN FE) or both (default: HIPDNN_IREE_FE_SIDES, else facade)")
    ap.add_argument("--mhas-all", action="store_true", help="every test_mhas.py parametrization (not MHAS_K)")
    ap.add_argument("--shard", default=None, help="I/N: this process runs every N-th test of each file from the "
                                                 "I-th (N processes in parallel share the files)")
    args = ap.parse_args(argv)
    if args.shard:
        os.environ["HIPDNN_IREE_FE_SHARD"] = args.shard
    folder = args.folder.resolve()
    if not (folder / "conftest.py").exists():
        print(f"{folder}: no conftest.py: not cuDNN FE's test/python folder", file=sys.stderr)
        return 2
    sides = args.sides or os.environ.get("HIPDNN_IREE_FE_SIDES", "facade").split()
    files = args.files or [f for f in DEFAULT_FILES if (folder / f).exists()]
    if files == ["all"]:
        files = all_files(folder)
    meta = {"cpu_mode": os.environ.get("HIPDNN_IREE_FE_CPU", "") not in ("", "0"), "python": sys.version.split()[0],
            "shard": args.shard,
            "sides": sides, "mhas_k": None if args.mhas_all else MHAS_K}
    try:
        import hipdnn_iree.cudnn as cudnn
        meta.update(facade=cudnn.engine_version_string())
        import torch
        meta.update(torch=torch.__version__, gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    except Exception as e:                  # noqa: BLE001 - the table is still worth writing
        meta.update(meta_error=repr(e))
    results = []
    for side in sides:
        site = None
        if side == "cudnn":
            try:
                site = _cudnn_site()
            except Exception as e:          # noqa: BLE001 - the facade side's results still count
                meta[f"{side}_error"] = repr(e)
                print(f"real cuDNN side skipped: {e!r}", flush=True)
                continue
        for name in files:
            extra = ["-k", args.k] if args.k else []
            timeout = args.timeout
            if name == "test_mhas.py" and not args.k and not args.mhas_all:
                extra = ["-k", MHAS_K]
            if name in FILE_TIMEOUTS:
                cap = os.environ.get("HIPDNN_IREE_FE_MHAS_TIMEOUT")
                timeout = min(timeout, float(cap) if cap else FILE_TIMEOUTS[name][side])
            r = run_file(folder, name, timeout, extra, side, site)
            results.append(r)
            print(f"[{side}] {name}: {r['passed']} passed, {r['failed']} failed, {r['error']} errors, {r['skipped']} "
                  f"skipped, {r['refused']} refused ({r['seconds']} s{', cut at its cap' if r['rc'] == 'timeout' else ''}) "
                  f"{r['first_failure'][:160]}", flush=True)
            # NOTE: written after each file, so a run cut short still leaves the files it finished
            if args.json:
                args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
            if args.md:
                args.md.write_text(table(results) + "\n")
    print(table(results))
    return 0 if all(r["failed"] == 0 and r["error"] == 0 for r in results if r.get("side") == "facade") else 1


if __name__ == "__main__":
    sys.exit(main())
