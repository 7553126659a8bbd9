"""Every sample under samples/ runs on the CPU, prints PASS and exits 0; README lists each one.

Samples are found by glob, so a sample added later is run (and must be listed) without touching
this file. README's sample environment (``pip install .``) has no PyTorch: a sample that imports
torch then prints one SKIP line and exits 0, and every other sample still passes there. A SKIP is
never a pass: here it is a pytest skip, and a failure where torch is importable.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from harness import REPO

SAMPLES = sorted(glob.glob(os.path.join(REPO, "samples", "*.py")))
HAVE_TORCH = importlib.util.find_spec("torch") is not None


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
    if proc.stdout.startswith("SKIP"):
        assert not HAVE_TORCH, f"{os.path.basename(path)} skipped though torch is importable here:\n{out}"
        pytest.skip(proc.stdout.strip())
    assert "PASS" in proc.stdout, out
    assert "FAIL" not in proc.stdout, out


# NOTE: a None entry in sys.modules makes `import torch` raise ImportError, as where it is not installed
_WITHOUT_TORCH = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
                  "runpy.run_path(sys.argv[0], run_name='__main__')")


def _needs_torch(path) -> bool:
    with open(path, encoding="utf-8") as f:
        return re.search(r"^\s*(import torch|from torch\b)", f.read(), flags=re.M) is not None


@pytest.mark.parametrize("path", SAMPLES, ids=[os.path.basename(p) for p in SAMPLES])
def test_sample_in_the_readme_environment_without_torch(path):
    """Without torch: a sample that imports it prints exactly one SKIP line naming `pip install torch`,
    runs nothing and exits 0; every other sample passes."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, path], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    out = proc.stdout + proc.stderr
    name = os.path.basename(path)
    assert proc.returncode == 0, f"{name} without torch exited {proc.returncode}:\n{out}"
    assert "Traceback" not in out, out
    if _needs_torch(path):
        lines = out.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("SKIP:") and "pip install torch" in lines[0], out
        assert name in lines[0] and "PASS" not in out, out
    else:
        assert "PASS" in proc.stdout and "FAIL" not in proc.stdout and "SKIP" not in proc.stdout, out


@pytest.mark.parametrize("path", SAMPLES, ids=[os.path.basename(p) for p in SAMPLES])
def test_readme_lists_the_sample(path):
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert f"samples/{os.path.basename(path)}" in readme
