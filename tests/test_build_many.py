"""``hd.build_many`` (hipdnn_iree/frontend/build_many.py): a local process pool and real Ray tasks
(``ray.init(num_cpus=2)`` in this process), retries after a worker is killed mid-compile (SIGKILL
of the worker process while its ``iree-compile`` child runs), failures returned as values, progress
lines, autotune resources, and ``hipdnn-iree compile --store``. The store is a folder here (the Redis
backend is tests/test_plan_store.py's); the plans are restored and run.
"""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.frontend.fleet import autotune_resources
from harness import REPO


def _graph(n, name="many"):
    g = hd.Graph(name=f"{name}_{n}", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="X", uid=1, dim=[n, 24])
    w = g.tensor(name="W", uid=2, dim=[24, 8])
    g.pointwise(g.matmul(x, w), mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3)
    return g


def _bad_graph():
    """A graph file that a worker refuses (BAD_PARAM: a pointwise mode hipDNN does not have)."""
    g = _graph(4, "bad")
    text = g.to_json(indent=None).replace('"name": "bad_4"', '"name": "bad_graph"')
    return text.replace('"RELU_FWD"', '"NOT_A_MODE"')


def _check(store, key, n):
    h = hd.create_handle(store=store)
    r = hd.Graph.from_store(h, key)
    rng = np.random.default_rng(n)
    x, w = rng.standard_normal((n, 24), dtype=np.float32), rng.standard_normal((24, 8), dtype=np.float32)
    y = np.zeros((n, 8), np.float32)
    r.execute(h, {1: x, 2: w, 3: y})
    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class KillerOfCompilingWorker(threading.Thread):
    """Watches for an ``iree-compile`` process whose parent is a worker (a descendant of this process)
    and SIGKILLs that worker once: a worker lost mid-compile."""

    def __init__(self, worker_marker: str):
        super().__init__(daemon=True)
        self.marker, self.killed, self.stop = worker_marker, None, threading.Event()

    def run(self):
        deadline = time.monotonic() + 240
        while not self.stop.is_set() and time.monotonic() < deadline:
            for name in os.listdir("/proc"):
                if not name.isdigit() or "iree-compile" not in _cmdline(int(name)).split(" ")[0]:
                    continue
                parent = _parent(int(name))
                if parent and self.marker in _cmdline(parent):
                    os.kill(parent, signal.SIGKILL)
                    self.killed = parent
                    return
            time.sleep(0.02)


def test_local_pool_builds_every_pair_and_keeps_failures(tmp_path):
    store = hd.PlanStore(str(tmp_path / "store"))
    lines = []
    graphs = [_graph(5), _bad_graph(), _graph(6)]
    keys = hd.build_many(graphs, targets=["llvm-cpu:host"], store=store, workers=2, progress=lines.append,
                         cache=False)
    assert set(keys) == {(0, "llvm-cpu:host"), (1, "llvm-cpu:host"), (2, "llvm-cpu:host")}
    assert isinstance(keys[(1, "llvm-cpu:host")], hd.HipdnnError)
    assert keys[(0, "llvm-cpu:host")] == _graph(5).plan_key("llvm-cpu:host")
    _check(store, keys[(0, "llvm-cpu:host")], 5)
    _check(store, keys[(2, "llvm-cpu:host")], 6)
    assert lines[-1].startswith("build_many: 3/3 done, 1 failed")
    assert any("failed: graph 1 on llvm-cpu:host" in ln and "NOT_A_MODE" in ln for ln in lines), lines


def test_several_targets_one_plan_each(tmp_path):
    store = hd.PlanStore(str(tmp_path / "store"))
    targets = ["llvm-cpu:host", "rocm:gfx942", "cuda:sm_80"]
    keys = hd.build_many([_graph(7)], targets=targets, store=store, workers=2, progress=False)
    assert [k for (_, t), k in keys.items()] == [_graph(7).plan_key(t) for t in targets]
    assert len(set(keys.values())) == 3 and set(store.keys("plan")) == set(keys.values())
    _check(store, keys[(0, "llvm-cpu:host")], 7)
    with pytest.raises(hd.HipdnnError) as e:       # an AMD plan restores only where an AMD GPU is
        hd.Graph.from_store(hd.create_handle(store=store), keys[(0, "rocm:gfx942")])
    assert e.value.status == hd.Status.NOT_SUPPORTED


def test_bad_arguments_are_bad_param(tmp_path):
    for kwargs in ({"targets": []}, {"targets": ["rocm"]}, {"targets": ["llvm-cpu"], "max_retries": -1}):
        with pytest.raises(hd.HipdnnError) as e:
            hd.build_many([_graph(3)], store=str(tmp_path), **kwargs)
        assert e.value.status == hd.Status.BAD_PARAM


def test_local_pool_worker_killed_mid_compile_is_retried(tmp_path):
    store = hd.PlanStore(str(tmp_path / "store"))
    killer = KillerOfCompilingWorker("multiprocessing")
    killer.start()
    lines = []
    graphs = [_graph(n, "killed_local") for n in (30, 31, 32)]
    keys = hd.build_many(graphs, targets=["llvm-cpu:host"], store=store, workers=2, progress=lines.append,
                         cache=False)
    killer.stop.set()
    assert killer.killed, "no worker was seen compiling"
    assert any("worker lost" in ln for ln in lines), lines
    assert all(isinstance(k, str) for k in keys.values()), keys
    for (i, _), key in keys.items():
        _check(store, key, 30 + i)


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
             resources={"gpu_test_arch": 1})
    yield ray
    ray.shutdown()


def test_ray_builds_and_reports(ray_local, tmp_path):
    store = hd.PlanStore(str(tmp_path / "store"))
    lines = []
    keys = hd.build_many([_graph(8), _bad_graph()], targets=["llvm-cpu:host", "cuda:sm_80"], store=store,
                         ray_address="auto", progress=lines.append)
    assert len(keys) == 4
    assert all(isinstance(keys[(0, t)], str) for t in ("llvm-cpu:host", "cuda:sm_80"))
    assert all(isinstance(keys[(1, t)], hd.HipdnnError) for t in ("llvm-cpu:host", "cuda:sm_80"))
    _check(store, keys[(0, "llvm-cpu:host")], 8)
    assert lines[-1].startswith("build_many: 4/4 done, 2 failed")


def test_ray_worker_killed_mid_compile_is_retried(ray_local, tmp_path):
    store = hd.PlanStore(str(tmp_path / "store"))
    killer = KillerOfCompilingWorker("ray::")
    killer.start()
    graphs = [_graph(n, "killed_ray") for n in (40, 41, 42, 43)]
    keys = hd.build_many(graphs, targets=["llvm-cpu:host"], store=store, ray_address="auto", progress=False,
                         cache=False, max_retries=2)
    killer.stop.set()
    assert killer.killed, "no Ray worker was seen compiling"
    assert all(isinstance(k, str) for k in keys.values()), keys
    for (i, _), key in keys.items():
        _check(store, key, 40 + i)
    # no half-written entry: every stored plan verifies
    for key in store.keys("plan"):
        assert store.get("plan", key) is not None


def test_ray_task_lost_past_its_retries_is_an_error_value(ray_local, tmp_path):
    """With max_retries=0, a worker killed mid-compile costs that task only: it comes back as an
    INTERNAL_ERROR value, the others' plans are all there."""
    store = hd.PlanStore(str(tmp_path / "store"))
    killer = KillerOfCompilingWorker("ray::")
    killer.start()
    graphs = [_graph(n, "lost_ray") for n in (50, 51, 52)]
    keys = hd.build_many(graphs, targets=["llvm-cpu:host"], store=store, ray_address="auto", progress=False,
                         cache=False, max_retries=0)
    killer.stop.set()
    assert killer.killed
    lost = [p for p, k in keys.items() if isinstance(k, hd.HipdnnError)]
    assert len(lost) == 1 and keys[lost[0]].status == hd.Status.INTERNAL_ERROR
    assert "lost" in str(keys[lost[0]])
    for (i, t), key in keys.items():
        if (i, t) not in lost:
            _check(store, key, 50 + i)


def test_autotune_tasks_ask_for_the_device_resource(ray_local):
    assert autotune_resources("cuda:sm_90") == {"gpu_sm_90": 1}
    assert autotune_resources("rocm:gfx942") == {"gpu_gfx942": 1}
    assert autotune_resources("llvm-cpu:host") == {}
    # a task asking for a resource no node has stays pending: Ray schedules by it
    ray = ray_local
    from hipdnn_iree.frontend.build_many import build_task
    ref = ray.remote(build_task).options(resources={"gpu_sm_90": 1}, num_cpus=0).remote("{}", "cuda:sm_90", "/tmp")
    ready, _ = ray.wait([ref], timeout=2)
    assert not ready
    ray.cancel(ref, force=True)
    # and one asking for a resource a node has runs (the error: no CUDA device here, as a value)
    ref = ray.remote(build_task).options(resources={"gpu_test_arch": 1}, num_cpus=0).remote(
        _graph(3).to_json(), "cuda:sm_80", "/tmp/hipdnn-iree-test-store", True)
    out = ray.get(ref, timeout=120)
    assert out["error"] is not None and out["error"][0] == int(hd.Status.NOT_INITIALIZED)


def test_autotune_on_the_cpu_through_the_pool_stores_the_winner(tmp_path):
    store = hd.PlanStore(str(tmp_path / "store"))
    g = _graph(64, "tuned")
    keys = hd.build_many([g], targets=["llvm-cpu:host"], store=store, workers=1, autotune=True, progress=False)
    key = keys[(0, "llvm-cpu:host")]
    assert isinstance(key, str)
    assert len(store.keys("tuning")) == 1
    _check(store, key, 64)


def test_cli_compile_many_into_a_store_then_fetch(tmp_path):
    files = []
    for n in (9, 10):
        p = tmp_path / f"g{n}.json"
        p.write_text(_graph(n, "cli").to_json())
        files.append(str(p))
    store = str(tmp_path / "store")
    env = dict(os.environ, PYTHONPATH=REPO)
    run = subprocess.run([sys.executable, "-m", "hipdnn_iree.cli", "compile", *files, "--target", "llvm-cpu:host",
                          "rocm:gfx942", "--store", store], capture_output=True, text=True, cwd=REPO, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr
    lines = [ln.split() for ln in run.stdout.splitlines()]
    assert len(lines) == 4 and all(len(ln[0]) == 64 for ln in lines)
    assert "build_many: 4/4 done, 0 failed" in run.stderr and "4 of 4 plans in" in run.stderr
    key = next(ln[0] for ln in lines if ln[1] == files[0] and ln[2] == "llvm-cpu:host")
    out = tmp_path / "g9.plan"
    run = subprocess.run([sys.executable, "-m", "hipdnn_iree.cli", "fetch", key, "--store", store, "--out", str(out)],
                         capture_output=True, text=True, cwd=REPO, env=env)
    assert run.returncode == 0, run.stderr
    h = hd.create_handle()
    r = hd.Graph.from_compiled_plan(h, hd.load_plan(str(out)))
    y = np.zeros((9, 8), np.float32)
    r.execute(h, {1: np.ones((9, 24), np.float32), 2: np.ones((24, 8), np.float32), 3: y})
    assert float(y[0, 0]) == 24.0
