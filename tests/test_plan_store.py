"""The plan store (hipdnn_iree/plugin_sdk/store.py): directory and Redis backends, verified reads, atomic
writes, the compile cache / tuning database / finished plans going through it, ``g.plan_key``,
``hd.Graph.from_store``, ``hipdnn-iree fetch``, and the failure behaviour (unreachable store, damaged
entries, concurrent writers, Redis restarted mid-build).

Redis is Debian's real ``redis-server`` (tests/redis_server.py: ``HIPDNN_IREE_TEST_REDIS``, else one started
here on a free port with the append-only file fsync'ed on every write); no fake stands in for it.
"""
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.plugin_sdk import store as _store
from hipdnn_iree.plugins.iree_linalg import cache as _cache
from harness import REPO, run_python
import redis_server

pytestmark = pytest.mark.skipif(redis_server.binary() is None,
                                reason="redis-server is not installed (apt-get install redis-server): the plan "
                                       "store's Redis backend is tested against the real server only")

KEY = "ab" * 32


@pytest.fixture(scope="module")
def redis_url():
    """A Redis database for this module: HIPDNN_IREE_TEST_REDIS's server, else one of our own."""
    pytest.importorskip("redis")
    given = os.environ.get(redis_server.ENV)
    server = None
    if not given:
        server = redis_server.RedisServer().start()
        given = server.url
    url = given.rstrip("/").rsplit("/", 1)[0] + "/9" if given.count("/") > 2 else given + "/9"
    import redis
    redis.Redis.from_url(url).flushdb()
    yield url
    if server is not None:
        server.stop()


@pytest.fixture(autouse=True)
def _fresh_warnings():
    _store.reset_warnings()
    yield


def _graph(n=16, k=32, m=8, name="store_mlp"):
    g = hd.Graph(name=name, io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="X", uid=1, dim=[n, k])
    w = g.tensor(name="W", uid=2, dim=[k, m])
    g.pointwise(g.matmul(x, w), mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3)
    return g


def _check_runs(g, h, n=16, k=32, m=8):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((n, k), dtype=np.float32), rng.standard_normal((k, m), dtype=np.float32)
    y = np.full((n, m), np.nan, np.float32)
    g.execute(h, {1: x, 2: w, 3: y})
    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)


def _closed_port_url():
    return f"redis://127.0.0.1:{redis_server.free_port()}/0"


# -- the store on its own ------------------------------------------------------------------
@pytest.fixture(params=["directory", "redis"])
def store(request, tmp_path, redis_url):
    return hd.PlanStore(str(tmp_path / "store") if request.param == "directory" else redis_url)


def test_round_trip_and_namespaces(store):
    assert store.get("plan", KEY) is None
    assert store.put("plan", KEY, b"plan bytes")
    assert store.get("plan", KEY) == b"plan bytes"
    assert store.get("tuning", KEY) is None            # namespaces are apart
    assert store.put("module", KEY, b"first")
    assert not store.put("module", KEY, b"second")     # module entries: the first writer wins
    assert store.get("module", KEY) == b"first"
    assert store.put("plan", KEY, b"replaced")         # plan entries are replaced (a tuned plan wins)
    assert store.get("plan", KEY) == b"replaced"
    assert KEY in store.keys("plan")


def test_bad_keys_and_locations_are_bad_param(store):
    for bad in ("short", "AB" * 32, "../" + "a" * 61, None):
        with pytest.raises(hd.HipdnnError) as e:
            store.get("plan", bad)
        assert e.value.status == hd.Status.BAD_PARAM
    with pytest.raises(hd.HipdnnError) as e:
        store.get("nonsense", KEY)
    assert e.value.status == hd.Status.BAD_PARAM
    for bad in ("", "http://x/y", 5):
        with pytest.raises(hd.HipdnnError) as e:
            hd.PlanStore(bad)
        assert e.value.status == hd.Status.BAD_PARAM


def _corrupt(store, namespace, key, flip_at=-1):
    """Flips one byte of a stored entry in place (the file, or the Redis value with SETRANGE)."""
    if store.kind == "directory":
        path = os.path.join(store.url, "store", namespace, key + ".hds")
        data = bytearray(open(path, "rb").read())
        data[flip_at] ^= 0xFF
        open(path, "r+b").write(bytes(data))
    else:
        import redis
        r = redis.Redis.from_url(store.url)
        name = f"hipdnn-iree:{namespace}:{key}"
        data = r.get(name)
        pos = len(data) + flip_at if flip_at < 0 else flip_at
        r.setrange(name, pos, bytes([data[pos] ^ 0xFF]))


@pytest.mark.parametrize("flip_at", [-1, 0, 20])   # the value, the magic, the digest
def test_damaged_entry_is_a_miss_named_and_deleted(store, flip_at):
    store.put("plan", KEY, b"x" * 100)
    _corrupt(store, "plan", KEY, flip_at)
    with pytest.warns(RuntimeWarning, match=f"plan/{KEY} is damaged"):
        assert store.get("plan", KEY) is None
    assert KEY not in store.keys("plan")


def test_truncated_and_foreign_entries_are_misses(store):
    store.put("plan", KEY, b"y" * 100)
    other = "cd" * 32
    if store.kind == "directory":
        path = os.path.join(store.url, "store", "plan", KEY + ".hds")
        open(path, "r+b").truncate(60)
        # an entry copied under another key is not served for it
        store.put("plan", other, b"z")
        os.replace(os.path.join(store.url, "store", "plan", other + ".hds"),
                   os.path.join(store.url, "store", "plan", "ef" * 32 + ".hds"))
    else:
        import redis
        r = redis.Redis.from_url(store.url)
        r.set(f"hipdnn-iree:plan:{KEY}", r.get(f"hipdnn-iree:plan:{KEY}")[:60])
        store.put("plan", other, b"z")
        r.rename(f"hipdnn-iree:plan:{other}", f"hipdnn-iree:plan:{'ef' * 32}")
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert store.get("plan", KEY) is None
    with pytest.warns(RuntimeWarning, match=f"plan/{'ef' * 32} is damaged.*not plan/{'ef' * 32}"):
        assert store.get("plan", "ef" * 32) is None


def test_concurrent_writers_of_one_key_each_read_a_whole_value(store):
    """Two writers hammer one key with different values; every read is one of them, whole."""
    values = [bytes([i]) * 200_000 for i in (1, 2)]
    seen, errors = set(), []

    def write(v):
        s = hd.PlanStore(store.url)
        for _ in range(30):
            s.put("plan", KEY, v)

    def read():
        s = hd.PlanStore(store.url)
        for _ in range(60):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                try:
                    got = s.get("plan", KEY)
                except Exception as e:   # a damaged-entry warning would be an error here
                    errors.append(e)
                    return
            if got is not None:
                if got not in values:
                    errors.append(AssertionError(f"read a value that neither writer wrote ({len(got)} bytes)"))
                seen.add(got[:1])

    threads = [threading.Thread(target=write, args=(v,)) for v in values] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert store.get("plan", KEY) in values


def test_unreachable_redis_raises_internal_error_naming_it():
    s = hd.PlanStore(_closed_port_url())
    with pytest.raises(hd.HipdnnError) as e:
        s.get("plan", KEY)
    assert e.value.status == hd.Status.INTERNAL_ERROR and s.url in str(e.value)
    with pytest.warns(RuntimeWarning, match="unreachable.*building locally"):
        assert s.try_get("plan", KEY) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # said once per store and process
        assert not s.try_put("plan", KEY, b"x")


# -- builds through the store --------------------------------------------------------------
def test_build_writes_modules_and_a_fresh_process_reads_them(redis_url, tmp_path):
    """A build on a handle with a Redis store writes its module; another process, with an empty local
    cache, takes it from Redis without starting the compiler."""
    import redis
    redis.Redis.from_url(redis_url).flushdb()
    h = hd.create_handle(cache=str(tmp_path / "local1"), store=redis_url)
    _cache.STATS.reset()
    g = _graph(n=12, name="store_modules")
    g.build(h)
    _check_runs(g, h, n=12)
    assert _cache.STATS.remote_stores == 1 and len(hd.PlanStore(redis_url).keys("module")) == 1
    code = textwrap.dedent(f"""
        import sys, numpy as np, hipdnn_iree as hd
        from hipdnn_iree.plugins.iree_linalg import cache as _cache
        h = hd.create_handle(cache={str(tmp_path / 'local2')!r}, store={redis_url!r})
        g = hd.Graph(name="store_modules", io_data_type=hd.DataType.FLOAT)
        x = g.tensor(name="X", uid=1, dim=[12, 32]); w = g.tensor(name="W", uid=2, dim=[32, 8])
        g.pointwise(g.matmul(x, w), mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3)
        g.build(h)
        print("REMOTE_HITS", _cache.STATS.remote_hits, "COMPILER", "iree.compiler.tools" in sys.modules)
    """)
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "REMOTE_HITS 1 COMPILER False" in out.stdout, out.stdout


def test_env_setting_selects_the_store(redis_url, monkeypatch):
    monkeypatch.setenv("HIPDNN_IREE_STORE", redis_url)
    assert hd.create_handle().store == hd.PlanStore(redis_url)
    monkeypatch.delenv("HIPDNN_IREE_STORE")
    assert hd.create_handle().store is None        # no setting: no store, builds as before


def test_unreachable_store_builds_locally_and_warns_once(tmp_path):
    url = _closed_port_url()
    h = hd.create_handle(cache=False, store=url)
    with pytest.warns(RuntimeWarning) as record:
        for n in (5, 6):
            g = _graph(n=n, name="store_down")
            g.build(h)
            _check_runs(g, h, n=n)
    said = [w for w in record if url in str(w.message)]
    assert len(said) == 1 and "building locally" in str(said[0].message)


def test_damaged_module_entry_is_rebuilt_with_a_warning(redis_url, tmp_path):
    s = hd.PlanStore(redis_url)
    g = _graph(n=7, name="store_damaged")
    g.build(hd.create_handle(cache=False, store=s))
    before = set(s.keys("module"))
    key = next(k for k in before if hd.PlanStore(redis_url).get("module", k) and
               b"store_damaged" in hd.PlanStore(redis_url).get("module", k))
    _corrupt(s, "module", key, -10)
    _cache.STATS.reset()
    g2 = _graph(n=7, name="store_damaged")
    with pytest.warns(RuntimeWarning, match=f"module/{key} is damaged"):
        g2.build(hd.create_handle(cache=False, store=s))
    assert _cache.STATS.remote_hits == 0 and _cache.STATS.remote_stores == 1   # compiled again, stored again
    assert s.get("module", key) is not None
    h = hd.create_handle(cache=False, store=s)
    g3 = _graph(n=7, name="store_damaged")
    g3.build(h)
    _check_runs(g3, h, n=7)


def test_tuning_winners_are_shared_through_the_store(redis_url, tmp_path):
    """autotune on one handle stores its winner in the store; a handle with another (empty) local
    cache folder takes it for HeurMode.A."""
    from hipdnn_iree.plugins.iree_linalg import tuning_db
    s = hd.PlanStore(redis_url)
    h1 = hd.create_handle(cache=str(tmp_path / "a"), store=s)
    g = _graph(n=64, k=64, m=64, name="store_tuned")
    g.validate().build_operation_graph(h1).create_execution_plans([hd.HeurMode.A, hd.HeurMode.B]).check_support()
    g.build_plans(hd.BuildPlanPolicy.ALL)
    assert g.get_execution_plan_count() > 1
    rng = np.random.default_rng(0)
    pack = {1: rng.standard_normal((64, 64), dtype=np.float32), 2: rng.standard_normal((64, 64), dtype=np.float32),
            3: np.zeros((64, 64), np.float32)}
    g.autotune(h1, pack)
    winner = dict(g.get_engine_config_at_index(g.get_selected_plan_index()).knobs)
    key = tuning_db.entry_key(g.get_op_graph_bytes(), h1.target, tuning_db.device_identity(h1.device))
    assert key in s.keys("tuning")
    h2 = hd.create_handle(cache=str(tmp_path / "b"), store=s)
    g2 = _graph(n=64, k=64, m=64, name="store_tuned")
    g2.validate().build_operation_graph(h2).create_execution_plans([hd.HeurMode.A])
    assert dict(g2.get_engine_config_at_index(0).knobs) == winner
    # without the store, the other folder knows nothing of it
    g3 = _graph(n=64, k=64, m=64, name="store_tuned")
    assert tuning_db.TuningDb(str(tmp_path / "b")).entries() == {}
    g3.validate().build_operation_graph(hd.create_handle(cache=str(tmp_path / "c")))


# -- finished plans ------------------------------------------------------------------------
def test_plan_key_is_stable_and_separates_what_matters():
    k = _graph().plan_key("llvm-cpu:host")
    assert len(k) == 64 and k == _graph().plan_key("llvm-cpu")            # llvm-cpu is llvm-cpu:host
    g = _graph()
    g.set_preferred_engine_id_ext("IREE_LINALG")
    assert g.plan_key("llvm-cpu:host") == k                                # the default engine
    assert len({k, _graph().plan_key("rocm:gfx942"), _graph().plan_key("cuda:sm_80"), _graph(n=17).plan_key("llvm-cpu"),
                _graph().set_override_shape_enabled(True).plan_key("llvm-cpu")}) == 5
    with pytest.raises(hd.HipdnnError) as e:
        _graph().plan_key("nonsense:x")
    assert e.value.status in (hd.Status.BAD_PARAM, hd.Status.NOT_SUPPORTED)


def test_from_store_restores_and_runs(redis_url, tmp_path):
    s = hd.PlanStore(redis_url)
    g = _graph(n=9, name="store_plan")
    keys = hd.build_many([g], targets=["llvm-cpu:host"], store=s, workers=1, progress=False)
    key = keys[(0, "llvm-cpu:host")]
    assert key == g.plan_key("llvm-cpu:host")
    h = hd.create_handle(store=s)
    r = hd.Graph.from_store(h, key)
    _check_runs(r, h, n=9)
    with pytest.raises(hd.HipdnnError) as e:
        hd.Graph.from_store(h, "0" * 64)
    assert e.value.status == hd.Status.NOT_SUPPORTED and "0" * 64 in str(e.value)
    url = _closed_port_url()
    with pytest.raises(hd.HipdnnError) as e:
        hd.Graph.from_store(hd.create_handle(store=url), key)
    assert e.value.status == hd.Status.INTERNAL_ERROR and url in str(e.value)
    _corrupt(s, "plan", key, -5)
    with pytest.warns(RuntimeWarning, match=f"plan/{key} is damaged"):
        with pytest.raises(hd.HipdnnError) as e:
            hd.Graph.from_store(h, key)
    assert e.value.status == hd.Status.NOT_SUPPORTED


def test_from_store_in_a_process_without_the_compiler(redis_url):
    s = hd.PlanStore(redis_url)
    key = hd.build_many([_graph(n=11, name="store_nocompiler")], targets=["llvm-cpu:host"], store=s, workers=1,
                        progress=False)[(0, "llvm-cpu:host")]
    code = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "iree.compiler" or name.startswith("iree.compiler."):
                    raise ImportError("blocked: no compiler on a serving machine")
        sys.meta_path.insert(0, Block())
        import numpy as np, hipdnn_iree as hd
        h = hd.create_handle(store={redis_url!r})
        r = hd.Graph.from_store(h, {key!r})
        x = np.ones((11, 32), np.float32); w = np.ones((32, 8), np.float32); y = np.zeros((11, 8), np.float32)
        r.execute(h, {{1: x, 2: w, 3: y}})
        print("OK", float(y[0, 0]))
    """)
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "OK 32.0" in out.stdout


def test_cli_fetch(redis_url, tmp_path):
    s = hd.PlanStore(redis_url)
    key = hd.build_many([_graph(n=13, name="store_fetch")], targets=["llvm-cpu:host"], store=s, workers=1,
                        progress=False)[(0, "llvm-cpu:host")]
    out = tmp_path / "fetched.plan"
    run = subprocess.run([sys.executable, "-m", "hipdnn_iree.cli", "fetch", key, "--store", redis_url, "--out", str(out)],
                         capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert key in run.stdout
    h = hd.create_handle()
    _check_runs(hd.Graph.from_compiled_plan(h, hd.load_plan(str(out))), h, n=13)
    run = subprocess.run([sys.executable, "-m", "hipdnn_iree.cli", "fetch", "1" * 64, "--store", redis_url, "--out",
                          str(tmp_path / "no.plan")], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 1 and "1" * 64 in run.stderr and not (tmp_path / "no.plan").exists()
    run = subprocess.run([sys.executable, "-m", "hipdnn_iree.cli", "fetch", key, "--store", _closed_port_url(), "--out",
                          str(tmp_path / "no.plan")], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 1 and "unreachable" in run.stderr


def test_concurrent_builders_of_one_graph(redis_url, tmp_path):
    """Two processes build the same graph into the same store at once (no local cache): both finish,
    the store holds one valid plan and one valid module, and both restore it."""
    import redis
    redis.Redis.from_url(redis_url).flushdb()
    code = textwrap.dedent(f"""
        import hipdnn_iree as hd
        s = hd.PlanStore({redis_url!r})
        g = hd.Graph(name="store_race", io_data_type=hd.DataType.FLOAT)
        x = g.tensor(name="X", uid=1, dim=[16, 32]); w = g.tensor(name="W", uid=2, dim=[32, 8])
        g.pointwise(g.matmul(x, w), mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3)
        g.build(hd.create_handle(cache=False, store=s))
        key = g.plan_key("llvm-cpu:host")
        s.put("plan", key, g.serialize_compiled_plan())
        r = hd.Graph.from_store(hd.create_handle(store=s), key)
        print("KEY", key)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    keys = {o[0].split("KEY ")[1].split()[0] for o in outs}
    assert len(keys) == 1
    s = hd.PlanStore(redis_url)
    assert len(s.keys("module")) == 1 and s.keys("plan") == sorted(keys)
    h = hd.create_handle(store=s)
    _check_runs(hd.Graph.from_store(h, keys.pop()), h)


def test_redis_restarted_mid_build(tmp_path):
    """Redis is killed (SIGKILL) while build_many runs and started again on the same port and data
    folder: the build completes with every plan, entries written before the restart are served after
    it (append-only file, fsync always), and plans written while it was down are kept locally."""
    pytest.importorskip("redis")
    server = redis_server.RedisServer().start()
    try:
        url = server.url + "/0"
        s = hd.PlanStore(url)
        early = hd.build_many([_graph(n=3, name="before_restart")], targets=["llvm-cpu:host"], store=s, workers=1,
                              progress=False)[(0, "llvm-cpu:host")]
        lines = []
        killed = threading.Event()

        def on_progress(line):
            lines.append(line)
            if not killed.is_set() and "done" in line:
                killed.set()
                server.kill()
                threading.Timer(1.5, server.start).start()

        graphs = [_graph(n=n, name=f"restart_{n}") for n in range(20, 26)]
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            keys = hd.build_many(graphs, targets=["llvm-cpu:host"], store=s, workers=2, progress=on_progress,
                                 cache=False)
        assert killed.is_set()
        assert all(isinstance(k, str) for k in keys.values()), keys
        deadline = time.monotonic() + 20
        while server.proc is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(_store.RETRY_AFTER_S)
        h = hd.create_handle(store=s)
        _check_runs(hd.Graph.from_store(h, early), h, n=3)      # written before the restart, served after
        local = hd.PlanStore()
        for (i, _), key in keys.items():
            n = 20 + i
            got = s.get("plan", key) or local.get("plan", key)
            assert got is not None, f"plan of graph {i} lost"
            r = hd.Graph.from_compiled_plan(h, got)
            _check_runs(r, h, n=n)
    finally:
        server.stop()
