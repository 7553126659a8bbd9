"""One restored plan under concurrent execution, and restore/execute/release cycles without leaks.

Default run: 8 threads x 1,000 executions; 1,000 cycles. ``-m slow``: 10,000 cycles.
"""
import os
import threading

import numpy as np
import pytest

import hipdnn_iree as hd


def _plan(h):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x, w = g.tensor(name="X", uid=1, dim=[16, 32]), g.tensor(name="W", uid=2, dim=[32, 8])
    b = g.tensor(name="b", uid=3, dim=[1, 8])
    g.pointwise(g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.TANH_FWD)\
        .set_output(True).set_uid(4)
    g.build(h)
    return g.serialize_compiled_plan()


@pytest.fixture(scope="module")
def setup():
    h = hd.create_handle()
    return h, _plan(h)


def test_concurrent_execution_8_threads(setup):
    h, data = setup
    r = hd.Graph.from_compiled_plan(h, data)
    errors, done = [], []

    def worker(tid):
        rng = np.random.default_rng(tid)
        try:
            for i in range(1000):
                x = rng.standard_normal((16, 32), dtype=np.float32)
                w = rng.standard_normal((32, 8), dtype=np.float32)
                b = rng.standard_normal((1, 8), dtype=np.float32)
                y = np.full((16, 8), np.nan, np.float32)
                r.execute(h, {1: x, 2: w, 3: b, 4: y})
                if not np.allclose(y, np.tanh(x.astype(np.float64) @ w + b), rtol=1e-4, atol=1e-4):
                    errors.append((tid, i))
            done.append(tid)
        except Exception as e:  # pragma: no cover - reported below
            errors.append((tid, repr(e)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors[:5]
    assert sorted(done) == list(range(8))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cycles(h, data, n):
    x = np.ones((16, 32), np.float32)
    w = np.ones((32, 8), np.float32)
    b = np.zeros((1, 8), np.float32)
    y = np.empty((16, 8), np.float32)
    for _ in range(n):
        r = hd.Graph.from_compiled_plan(h, data)
        r.execute(h, {1: x, 2: w, 3: b, 4: y})
        r.release()
    assert np.allclose(y, np.tanh(32.0))


# Stated bound: after warm-up, resident memory may grow by at most 16 MiB over the cycles
# (one plan's module is about 12 KiB; a leak of the module or its context per cycle would exceed it).
RSS_BOUND = 16 * 2**20


@pytest.mark.parametrize("n", [1000, pytest.param(10_000, marks=pytest.mark.slow)])
def test_restore_execute_release_cycles_do_not_leak(setup, n):
    h, data = setup
    _cycles(h, data, 200)  # warm-up: allocator pools, caches
    before = _rss_bytes()
    _cycles(h, data, n)
    growth = _rss_bytes() - before
    print(f"{n} cycles: RSS growth {growth / 2**20:.2f} MiB")
    assert growth < RSS_BOUND, f"RSS grew {growth / 2**20:.1f} MiB over {n} cycles"
