"""Every sample under samples/ runs on the CPU, prints PASS and exits 0; README lists each one.

Samples are found by glob, so a sample added later is run (and must be listed) without touching
this file.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from harness import REPO

SAMPLES = sorted(glob.glob(os.path.join(REPO, "samples", "*.py")))


def test_samples_exist():
    names = [os.path.basename(p) for p in SAMPLES]
    assert "serialized_matmul.py" in names
    assert any(n[:2].isdigit() for n in names), names


@pytest.mark.parametrize("path", SAMPLES, ids=[os.path.basename(p) for p in SAMPLES])
def test_sample_runs_on_the_cpu_and_passes(path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")   # CPU only
    proc = subprocess.run([sys.executable, path], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{os.path.basename(path)} exited {proc.returncode}:\n{out}"
    assert "PASS" in proc.stdout, out
    assert "FAIL" not in proc.stdout, out


@pytest.mark.parametrize("path", SAMPLES, ids=[os.path.basename(p) for p in SAMPLES])
def test_readme_lists_the_sample(path):
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert f"samples/{os.path.basename(path)}" in readme
