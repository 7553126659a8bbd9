"""Smoke run of the benchmark harness (benchmarks/suite.py) at tiny sizes: every measurement runs
and the report is written. No timing assertions."""
import importlib.util
import os
import sys

import pytest

from harness import REPO


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
    md = (tmp_path / "cpu.md").read_text()
    assert md == res["markdown"]
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
