"""Fuzzing real plan files (tests/fuzz_plans.py) in a child process: a crash or a hang fails the test.

Default run: a few hundred cases. Dedicated run (100,000 cases): ``pytest -m slow tests/test_fuzz.py``
or ``python tests/fuzz_plans.py --cases 100000``.
"""
import json
import os
import signal
import subprocess
import sys

import pytest

from harness import REPO


def run_fuzz(cases: int, seed: int, timeout: int):
    try:
        p = subprocess.run([sys.executable, os.path.join(REPO, "tests", "fuzz_plans.py"), "--cases", str(cases),
                            "--seed", str(seed)], capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail(f"fuzzing {cases} cases hung (no result within {timeout} s)")
    if p.returncode < 0:
        pytest.fail(f"the interpreter crashed with {signal.Signals(-p.returncode).name} while fuzzing:\n{p.stderr[-3000:]}")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    counts = json.loads(p.stdout.strip().splitlines()[-1])
    assert counts.get("WRONG_RESULT", 0) == 0
    handled = sum(v for k, v in counts.items() if k.startswith(("rejected:", "restored_ok", "skipped:")))
    assert handled >= cases, counts
    return counts


def test_fuzz_plans_quick():
    counts = run_fuzz(400, seed=1, timeout=600)
    assert counts.get("restored_ok", 0) > 0 and counts.get("rejected:BAD_PARAM", 0) > 0
    print(counts)


@pytest.mark.slow
def test_fuzz_plans_100k():
    counts = run_fuzz(100_000, seed=2, timeout=3 * 3600)
    print(counts)
