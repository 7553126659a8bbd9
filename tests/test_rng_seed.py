"""The ``rng`` fixture (tests/conftest.py) seeds from a stable hash of the test id, so a failing
test's data is the same in every run, and its failure output names the seed."""
import os
import re
import subprocess
import sys
import zlib

import pytest

from harness import REPO

_PROBE_ENV = "HIPDNN_IREE_RNG_SEED_PROBE"
_PROBE_ID = "tests/test_rng_seed.py::test_probe_fails_with_its_draws"


@pytest.mark.skipif(os.environ.get(_PROBE_ENV) != "1", reason="only run by test_seed_is_stable_across_processes")
def test_probe_fails_with_its_draws(rng):
    draws = [int(v) for v in rng.integers(0, 2**31, size=4)]
    pytest.fail(f"probe draws {draws}")


def test_seed_is_the_crc32_of_the_test_id(request, rng):
    import numpy as np
    seed = zlib.crc32(request.node.nodeid.encode("utf-8"))
    expected = np.random.default_rng(seed).random(3)
    assert list(rng.random(3)) == list(expected)


def _run_probe(hashseed: str) -> str:
    env = {**os.environ, _PROBE_ENV: "1", "PYTHONHASHSEED": hashseed}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", _PROBE_ID],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]   # the probe fails on purpose
    return p.stdout


def test_seed_is_stable_across_processes():
    """Two processes with different hash randomization draw the same data, and the failure
    report of each names the same seed."""
    outs = [_run_probe(s) for s in ("1", "2")]
    draws = [re.search(r"probe draws (\[[0-9, ]+\])", o) for o in outs]
    assert all(draws), outs[0][-3000:]
    assert draws[0].group(1) == draws[1].group(1)
    seed = zlib.crc32(_PROBE_ID.encode("utf-8"))
    for o in outs:
        assert f"rng seed {seed}" in o, o[-3000:]
