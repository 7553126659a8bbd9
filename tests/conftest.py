import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/harness.py, tests/tolerances.py

import hipdnn_iree as hd  # noqa: E402


@pytest.fixture(scope="session")
def cpu():
    """A CPU handle (IREE local-task, llvm-cpu host target)."""
    return hd.create_handle()


@pytest.fixture
def rng(request):
    # Fresh data per test, reproducible from the test id and printed on failure.
    seed = abs(hash(request.node.nodeid)) % (2**32)
    return np.random.default_rng(seed)


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
    yield
    mp.undo()
