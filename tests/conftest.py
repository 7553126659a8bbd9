import os
import sys
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/harness.py, tests/tolerances.py

import hipdnn_iree as hd  # noqa: E402


@pytest.fixture(scope="session")
def cpu():
    """A CPU handle (IREE local-task, llvm-cpu host target)."""
    return hd.create_handle()


_RNG_SEED = pytest.StashKey[int]()


@pytest.fixture
def rng(request):
    """Fresh data per test, the same in every run: seeded from the CRC-32 of the test id.

    NOTE: not hash(): str hashes are randomized per process (PYTHONHASHSEED). A failing test's
    report carries an "rng seed" section (pytest_runtest_makereport below).
    """
    seed = zlib.crc32(request.node.nodeid.encode("utf-8"))
    request.node.stash[_RNG_SEED] = seed
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Names the rng fixture's seed in the failure output of a test that used it."""
    outcome = yield
    report = outcome.get_result()
    seed = item.stash.get(_RNG_SEED, None)
    if report.failed and seed is not None:
        report.sections.append(("rng seed", f"rng seed {seed} (np.random.default_rng({seed}), "
                                            f"zlib.crc32 of {item.nodeid!r})"))


def pytest_collection_modifyitems(config, items):
    """GPU-marked tests skip cleanly when no GPU device can be created."""
    if not any("gpu" in item.keywords for item in items):
        return
    try:
        hd.create_handle(device="cuda")
        return
    except hd.HipdnnError:
        pass
    skip = pytest.mark.skip(reason="no CUDA device available (gpu-marked test)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _private_compile_cache(tmp_path_factory):
    """Builds in this test run (subprocesses too) use a per-session compile cache, never ~/.cache/hipdnn-iree."""
    mp = pytest.MonkeyPatch()
    mp.setenv("HIPDNN_IREE_CACHE_DIR", str(tmp_path_factory.mktemp("compile_cache")))
    mp.delenv("HIPDNN_IREE_CACHE_MAX_BYTES", raising=False)
    mp.delenv("HIPDNN_IREE_STORE", raising=False)   # NOTE: a developer's fleet store never leaks into the tests
    yield
    mp.undo()
