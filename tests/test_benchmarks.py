"""Smoke run of the benchmark harness (benchmarks/suite.py) at tiny sizes: every measurement runs
and the report is written. No timing assertions."""
import glob
import importlib.util
import json
import os
import re
import sys

import pytest

from harness import REPO

MAX_LIST = 12   # a summary holds no list of numbers longer than this (raw samples are lists of hundreds)


def _longest_number_list(obj) -> int:
    """The length of the longest list of numbers anywhere in a parsed JSON document."""
    if isinstance(obj, dict):
        return max((_longest_number_list(v) for v in obj.values()), default=0)
    if isinstance(obj, list):
        own = len(obj) if obj and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in obj) else 0
        return max([own] + [_longest_number_list(v) for v in obj])
    return 0


@pytest.fixture(scope="module")
def suite():
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("bench_suite", os.path.join(REPO, "benchmarks", "suite.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(os.path.join(REPO, "benchmarks"))


def test_tiny_suite_writes_the_report(suite, tmp_path, monkeypatch):
    monkeypatch.setenv("HIPDNN_IREE_CACHE", "0")     # the suite uses its own temporary cache folder
    res = suite.run_suite(sizes="tiny", repeats=2, cold_repeats=1, min_time=0.01, out_dir=str(tmp_path),
                          chart=None, log=lambda *a: None)
    md = (tmp_path / "cpu_suite.md").read_text()
    assert md == res["markdown"]
    # the JSON next to it holds summaries only, and renders the same report
    summary = json.loads((tmp_path / "cpu_suite.json").read_text())
    assert _longest_number_list(summary) <= MAX_LIST, "raw samples in the summary"
    assert suite.render_report(summary) == md
    for r in summary["results"]:
        if "skipped" not in r:
            s = r["times"]["steady execute"]
            assert s["n"] >= 5 and s["min"] <= s["q1"] <= s["median"] <= s["q3"] <= s["max"]
    assert {"cpu", "cores", "load_average", "versions", "date"} <= set(summary["meta"])
    for heading in ("## Build, restore and execute", "## Per-execute overhead", "## Throughput"):
        assert heading in md
    done = [r for r in res["results"] if "skipped" not in r]
    assert {r["name"] for r in done} >= {"tiny matmul (overhead probe)", "matmul", "matmul+bias+gelu"}
    for r in done:
        assert r["name"] in md
        assert r["cache_hits"] == 2, "cached builds should all be cache hits"
        assert r["bare_matches"] and r["rel_err_vs_numpy"] < 1e-4
        assert all(len(v) >= 1 for v in r["times"].values())
    if "png" in res["files"]:
        with open(res["files"]["png"], "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    else:   # the PNG is optional: it may only be missing when matplotlib is
        assert importlib.util.find_spec("matplotlib") is None, "matplotlib is installed but no PNG was written"


def test_committed_results_are_summaries_not_raw_samples():
    files = glob.glob(os.path.join(REPO, "docs", "benchmarks", "*.json")) + glob.glob(
        os.path.join(REPO, "docs", "gpu_results", "*.json"))
    assert files
    raw = {os.path.relpath(f, REPO): n for f in files
           if (n := _longest_number_list(json.load(open(f, encoding="utf-8")))) > MAX_LIST}
    assert raw == {}, f"raw sample lists committed (longest list per file): {raw}"
    names = [os.path.basename(f) for f in glob.glob(os.path.join(REPO, "docs", "gpu_results", "*")) +
             glob.glob(os.path.join(REPO, "docs", "benchmarks", "*"))]
    assert not [n for n in names if re.search(r"issue\d|run\d|^final_|^gate_", n)], \
        "results are named after what they measure, not after the issue or run that produced them"


def test_committed_cpu_summary_renders_the_committed_report(suite):
    """The summary keeps every figure of the report: re-rendering it gives docs/benchmarks/cpu_suite.md."""
    with open(os.path.join(REPO, "docs", "benchmarks", "cpu_suite.json"), encoding="utf-8") as f:
        summary = json.load(f)
    with open(os.path.join(REPO, "docs", "benchmarks", "cpu_suite.md"), encoding="utf-8") as f:
        assert suite.render_report(summary) == f.read()
    m = summary["meta"]
    assert m["cpu"] and m["cores"] and m["versions"]["iree-base-runtime"]


def test_raw_samples_go_only_where_asked(suite, tmp_path, monkeypatch):
    """--raw writes the samples to the named file; the report folder gets the summary."""
    monkeypatch.setattr(suite, "all_cases", lambda sizes: [c for c in _cases(sizes) if c.name.startswith("tiny")])
    monkeypatch.setenv("HIPDNN_IREE_CACHE", "0")
    raw = tmp_path / "raw" / "samples.json"
    raw.parent.mkdir()
    out = tmp_path / "out"
    assert suite.main(["--sizes", "tiny", "--repeats", "1", "--cold-repeats", "1", "--min-time", "0.01",
                       "--runs", "1", "--out", str(out), "--raw", str(raw)]) == 0
    samples = json.loads(raw.read_text())
    assert len(samples["results"][0]["times"]["steady execute"]) >= 5
    assert sorted(p.name for p in out.iterdir() if p.suffix != ".png") == ["cpu_suite.json", "cpu_suite.md"]
    assert _longest_number_list(json.loads((out / "cpu_suite.json").read_text())) <= MAX_LIST


def _cases(sizes):
    from cases import all_cases
    return all_cases(sizes)


def test_gpu_figures_quoted_in_performance_md_are_in_the_summaries():
    """docs/performance.md's gate table quotes gpu_real_blocks.json's `gate` run row by row, and its
    before/after table the bench runs of gpu_graphs_vs_torch.json."""
    with open(os.path.join(REPO, "docs", "gpu_results", "gpu_real_blocks.json"), encoding="utf-8") as f:
        blocks = json.load(f)
    rows = {(r["block"], r["dtype"]): r for r in blocks["runs"]["gate"]["rows"]}
    assert blocks["runs"]["gate"]["passed"] == 27 and blocks["machine"]["gpu"].startswith("NVIDIA H200")
    with open(os.path.join(REPO, "docs", "performance.md"), encoding="utf-8") as f:
        perf = f.read()
    quoted = 0
    for line in perf.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 11 and (cells[0], "f32") in rows:
            for i, dt in enumerate(("f32", "f16", "bf16")):
                r = rows[(cells[0], dt)]
                ms, torch_ms = re.match(r"([\d.]+) \(([\d.]+)\)", cells[2 + 3 * i]).groups()
                assert abs(float(ms) - r["iree_ms"]["median"]) < 6e-4 and abs(float(torch_ms) - r["torch_eager_ms"]["median"]) < 6e-4
                assert r["iree_ms"]["n"] == 50
                quoted += 1
    assert quoted == 27
    with open(os.path.join(REPO, "docs", "gpu_results", "gpu_graphs_vs_torch.json"), encoding="utf-8") as f:
        bench = json.load(f)
    after = {(r["graph"], r["variant"]): r for r in bench["runs"]["after_gpu_fixes"]["rows"]}
    assert "| matmul 4096^3 | 1.262 | 1.184 |" in perf
    assert round(after[("matmul_4096", "base")]["hd_ms"]["median"], 3) == 1.184
    before = {(r["graph"], r["variant"]): r for r in bench["runs"]["first_gpu_path"]["rows"]}
    assert round(before[("matmul_4096", "base")]["hd_ms"]["median"], 3) == 1.262


def _side_by_side():
    spec = importlib.util.spec_from_file_location("cudnn_side_by_side",
                                                  os.path.join(REPO, "benchmarks", "cudnn_side_by_side.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cudnn_side_by_side_compiles_plans_and_runs_on_the_cpu(tmp_path, monkeypatch):
    """benchmarks/cudnn_side_by_side.py at tiny shapes: `compile` of two cases for cuda:sm_80 writes
    their plans and a manifest that binds every graph tensor by uid; `run --cpu-check` builds every
    case through the facade on the CPU, checks it against torch and times it (no cuDNN here)."""
    sbs = _side_by_side()
    monkeypatch.setenv("HIPDNN_IREE_CACHE", "0")
    plans = tmp_path / "plans"
    names = ["conv3x3_bias_relu_f16", "sdpa_causal_f16"]
    assert sbs.main(["compile", "--tiny", "--out", str(plans), "--cases", *names]) == 0
    man = json.loads((plans / "manifest.json").read_text())
    assert man["target"] == "cuda:sm_80" and man["tiny"] is True
    assert [c["name"] for c in man["cases"]] == names
    for c in man["cases"]:
        assert "error" not in c, c.get("error")
        for st in c["stages"]:
            assert (plans / st["plan"]).stat().st_size == st["bytes"] > 0
            assert {b["role"] for b in st["bind"]} == {"in", "out"}
            assert len({b["uid"] for b in st["bind"]}) == len(st["bind"])
    assert man["plan_bytes"] == sum(st["bytes"] for c in man["cases"] for st in c["stages"])
    # the nine op cases, the three blocks and the five training steps
    full = {c.name: c for c in sbs.all_cases()}
    groups = [c.group for c in full.values()]
    assert (groups.count("op"), groups.count("block"), groups.count("train"), len(full)) == (9, 3, 5, 17)
    assert full["sdpa_causal_bf16"].shape == "B2 H32 S2048 D128 causal BHSD"
    assert full["llama7b_block_bf16"].flops > 8e11
    out_json, out_md = tmp_path / "sbs.json", tmp_path / "sbs.md"
    rc = sbs.main(["run", "--cpu-check", "--json", str(out_json), "--md", str(out_md), "--rounds", "2",
                   "--burst", "1", "--warmup", "0"])
    res = json.loads(out_json.read_text())
    assert _longest_number_list(res) <= MAX_LIST
    assert [r["name"] for r in res["cases"]] == list(full)
    bad = {r["name"]: (r["errors"], {k: v["ok"] for k, v in r["checks"].items()}) for r in res["cases"] if not r["ok"]}
    assert rc == 0 and not bad, bad
    for r in res["cases"]:
        assert set(r["ms"]) == {"ours", "torch"} and r["ms"]["ours"]["n"] == 2
        assert r["checks"]["ours_vs_ref"]["ok"] and r["ours_over_torch"] > 0
    md = out_md.read_text()
    assert "989 TFLOP/s" in md and "llama7b_block_bf16" in md and "Geomean ours/cuDNN" in md


def test_restore_vs_build_runs_tiny(capsys):
    """benchmarks/restore_vs_build.py --tiny: both graphs built, restored and run; one table row each."""
    spec = importlib.util.spec_from_file_location("restore_vs_build", os.path.join(REPO, "benchmarks",
                                                                                   "restore_vs_build.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--repeats", "1", "--tiny"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and " ms " in line]
    assert [r.split(" | ")[0] for r in rows] == ["| sample matmul 4x8x5", "| matmul+bias+relu 16x32x64 f32"]


def test_readme_lists_every_file_and_each_is_run():
    """benchmarks/README.md names every file in benchmarks/, and each is run by a test (at a tiny
    size) or by a gpu_run.sh mode on the GPU machine."""
    bdir = os.path.join(REPO, "benchmarks")
    files = sorted(f for f in os.listdir(bdir) if f != "README.md" and not f.startswith((".", "__pycache__")))
    readme = open(os.path.join(bdir, "README.md"), encoding="utf-8").read()
    assert [f for f in files if f"`{f}`" not in readme] == []
    runner = open(os.path.join(bdir, "gpu_run.sh"), encoding="utf-8").read()
    tests = "".join(open(p, encoding="utf-8").read() for p in glob.glob(os.path.join(REPO, "tests", "test_*.py")))
    imported = {"cases.py", "gpu_blocks.py", "_cudnn_fe_plugin.py"}   # run through suite.py / cudnn_fe_tests.py
    run_by = {f: [w for w, text in (("a test", tests), ("gpu_run.sh", runner)) if f"benchmarks/{f}" in text
                  or f'"benchmarks", "{f}"' in text or f"import {f[:-3]}" in text]
              for f in files if f.endswith(".py")}
    assert [f for f, by in run_by.items() if not by and f not in imported] == []
    assert "prep_gpu_carry.sh" in readme and "gpu_run.sh" in readme


def test_fleet_compile_runs_tiny(tmp_path):
    """benchmarks/fleet_compile.py --tiny: 2 small graphs built on Ray with 1 and 2 workers into a store,
    then restored by a fresh process with the compiler blocked; the summary holds both runs."""
    import subprocess
    import sys
    pytest.importorskip("ray")
    pytest.importorskip("redis")
    out = tmp_path / "fleet.json"
    run = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "fleet_compile.py"), "--tiny", "--graphs", "2",
                          "--workers", "1", "2", "--targets", "llvm-cpu:host", "rocm:gfx942", "--store",
                          str(tmp_path / "store"), "--json", str(out)], capture_output=True, text=True, cwd=REPO,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(out.read_text())
    assert [r["workers"] for r in res["runs"]] == [1, 2]
    assert all(r["plans"] == 4 and r["failed"] == 0 for r in res["runs"])
    s = res["serving"]
    assert s["restored"] == 2 and s["fetched"] == 2 and s["compiler_loaded"] is False
    assert _longest_number_list(res) <= MAX_LIST
    assert "| Ray workers |" in run.stdout


def test_facade_cases_runs_tiny_on_the_cpu(tmp_path):
    """benchmarks/facade_cases.py --device cpu --tiny: the tiny grouped convs (NCHW/NHWC, 3x3/1x1) and the
    tiny matmul in 9 layouts plus the NaN diagnostics, through the facade, all right against float64 torch."""
    import subprocess
    import sys
    pytest.importorskip("torch")
    out = tmp_path / "cases.json"
    run = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "facade_cases.py"), "--device", "cpu",
                          "--tiny", "--json", str(out)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["summary"] == {"total": 20, "right": 20, "WRONG": 0, "refused": 0, "error": 0}
    assert {r["diag"] for r in res["results"]} == {None, "b_tail_nan", "a_tail_nan", "y_prefill_nan"}


def test_cpu_vs_torch_runs_one_row(tmp_path):
    """benchmarks/cpu_vs_torch.py --only layernorm: the row is checked against float64 (ok), timed on both
    sides, and the summary names the CPU, its vector features and numpy's BLAS."""
    import subprocess
    import sys
    pytest.importorskip("torch")
    out = tmp_path / "cpu.json"
    run = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "cpu_vs_torch.py"), "--only", "layernorm",
                          "--min-time", "0.2", "--json", str(out)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    res = json.loads(out.read_text())
    assert [r["name"] for r in res["results"]] == ["layernorm f32"] and res["results"][0]["ok"]
    r = res["results"][0]
    assert r["ours_over_torch"] > 0 and r["median_ms"]["ours"] > 0 and r["median_ms"]["torch"] > 0
    assert res["meta"]["cpu"] and "numpy_blas" in res["meta"]
