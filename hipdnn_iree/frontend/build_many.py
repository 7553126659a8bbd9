"""``hd.build_many``: every (graph, target) pair built in local processes or as Ray tasks, into a plan store.

Each task (:func:`build_task`) runs in a worker process: it makes a compile-only handle on the store
(or, to autotune, a handle on the target's device), builds, serializes and writes the finished plan
under ``g.plan_key(target)``; compiled modules and tuning results reach the store through the
handle (``plugins/iree_linalg/cache.py``, ``tuning_db.py``). Build errors come back as values
(``hd.HipdnnError`` in the result dict); a lost worker (killed, out of memory) is retried, by Ray
(``max_retries``) or by resubmitting to a fresh local pool, then reported as INTERNAL_ERROR.
"""
from __future__ import annotations

import os
import sys
import time

from hipdnn_iree.frontend.fleet import autotune_resources, normalize_target
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.store import PlanStore, resolve as _resolve_store

_DEVICE_OF = {"llvm-cpu": "local-task", "cuda": "cuda", "rocm": "hip"}


def _random_pack(tensors) -> dict:
    """Buffers for autotuning: inputs uniform in [-1, 1] (integers 0..7, booleans half set), outputs zero."""
    import numpy as np
    from graph_ir.layout import physical_layout
    from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
    rng = np.random.default_rng(0)
    pack = {}
    for t in tensors:
        dt = numpy_dtype(int(t.data_type))
        phys = np.zeros(physical_layout(t.dims, t.strides).phys_shape, dt)
        if t.role == "input":
            if dt == np.bool_:
                phys[...] = rng.random(phys.shape) > 0.5
            elif dt.kind in "iu":
                phys[...] = rng.integers(0, 8, phys.shape)
            else:
                phys[...] = rng.uniform(-1, 1, phys.shape).astype(dt)
        pack[t.uid] = np.lib.stride_tricks.as_strided(phys, shape=tuple(t.dims),
                                                      strides=tuple(s * dt.itemsize for s in t.strides))
    return pack


def build_task(graph_json: str, target: str, store_url: str, autotune: bool = False, cache=None) -> dict:
    """One (graph, target) task, in a worker process (local pool or Ray): builds (or autotunes on
    the target's device), serializes, writes the plan to the store. Returns ``{"key", "plan"
    (the bytes when the store could not take them, else None), "error" ((status, message) or None),
    "pid", "seconds"}``; a HipdnnError is returned, not raised (Ray retries only lost workers)."""
    from hipdnn_iree.backend.handle import create_handle
    from hipdnn_iree.frontend.graph import Graph
    from hipdnn_iree.plugin_sdk.engine_config import BuildPlanPolicy, HeurMode
    t0 = time.perf_counter()
    out = {"key": None, "plan": None, "error": None, "pid": os.getpid(), "seconds": 0.0, "host": os.uname().nodename}
    try:
        store = PlanStore(store_url)
        g = Graph.from_json(graph_json)
        g.set_preferred_engine_id_ext("IREE_LINALG")
        out["key"] = key = g.plan_key(target)
        device = _DEVICE_OF[normalize_target(target).split(":")[0]] if autotune else None
        handle = create_handle(device=device, target=target, cache=cache, store=store)
        if autotune:
            g.validate().build_operation_graph(handle)
            g.create_execution_plans([HeurMode.A, HeurMode.B]).check_support()
            g.build_plans(BuildPlanPolicy.ALL)
            g.autotune(handle, _random_pack(g.get_compiled_plan_tensors()))
            out["winner"] = dict(g.get_engine_config_at_index(g.get_selected_plan_index()).knobs)
        else:
            g.build(handle)
        data = g.serialize_compiled_plan()
        if not store.try_put("plan", key, data):
            out["plan"] = data   # NOTE: the driver writes it (or keeps it locally): a built plan is never lost
    except HipdnnError as e:
        out["error"] = (int(e.status), e.message)
    out["seconds"] = time.perf_counter() - t0
    return out


class _Progress:
    def __init__(self, progress, total: int):
        self.sink = (progress if callable(progress) else
                     (lambda line: print(line, file=sys.stderr, flush=True)) if progress else None)
        self.total, self.done, self.failed = total, 0, 0

    def __call__(self, label: str, error: HipdnnError | None = None, retry: str | None = None) -> None:
        if retry is not None:
            if self.sink:
                self.sink(f"build_many: {label}: {retry}; retrying")
            return
        self.done += 1
        self.failed += error is not None
        if self.sink:
            tail = f"; failed: {label}: {error}" if error is not None else f" ({label})"
            self.sink(f"build_many: {self.done}/{self.total} done, {self.failed} failed{tail}")


def build_many(graphs, targets, store=None, ray_address=None, autotune=False, *, max_retries: int = 3,
               workers: int | None = None, progress=True, cache=None) -> dict:
    """Builds every graph for every target and writes the plans to ``store``.

    Args:
        graphs: ``hd.Graph`` objects (or their ``to_json()`` text).
        targets: target strings (``"llvm-cpu:x86-64-v3"``, ``"rocm:gfx942"``, ``"cuda:sm_80"``): one plan
            per (graph, target).
        store: an ``hd.PlanStore``, a ``redis://`` URL or a folder; None: ``HIPDNN_IREE_STORE``, else
            ``hd.PlanStore()`` (the default folder). Workers must reach it (a folder only works on one
            machine or a shared file system).
        ray_address: None builds in local processes (``workers`` of them, default the core count);
            ``"auto"``, ``"ray://host:10001"`` or a ``host:port`` fans out as Ray tasks (``ray.init(address=...)``,
            or the Ray this process already joined).
        autotune: True times every engine config on the target's device and stores the winner (in
            the tuning namespace) and the winning plan; on Ray each such task asks for the device's
            custom resource (:func:`autotune_resources`, e.g. ``{"gpu_sm_90": 1}``).
        max_retries: times a task is run again after its worker died (Ray's ``max_retries``; the
            local pool resubmits after a worker is lost). Build errors are not retried.
        workers: local pool size (ignored on Ray).
        progress: True prints ``build_many: done/total`` lines and each failure on stderr; a callable
            gets the lines; False is silent.
        cache: the workers' compile cache setting (as ``create_handle(cache=)``).

    Returns:
        ``{(graph index, target): key}`` for every pair; a pair that failed maps to its
        ``hd.HipdnnError`` instead (never missing).

    Example:
        >>> keys = hd.build_many([g], targets=["llvm-cpu:host"], store=hd.PlanStore("/tmp/s"))   # doctest: +SKIP
    """
    store = _resolve_store(store) or PlanStore()
    if isinstance(targets, str):
        targets = [targets]
    targets = list(targets)
    if not targets:
        raise HipdnnError(Status.BAD_PARAM, "build_many: targets is empty: name at least one target")
    for t in targets:
        normalize_target(t)   # NOTE: a bad target is BAD_PARAM here, not a failure in every task
    if not isinstance(max_retries, int) or max_retries < 0:
        raise HipdnnError(Status.BAD_PARAM, f"build_many: max_retries must be an int >= 0, got {max_retries!r}")
    results: dict = {}
    tasks = []
    for i, g in enumerate(graphs):
        try:
            text = g if isinstance(g, (str, bytes, dict)) else g.to_json(indent=None)
            if not isinstance(text, str):
                import json
                text = text.decode() if isinstance(text, bytes) else json.dumps(text)
        except HipdnnError as e:
            for t in targets:
                results[(i, t)] = e
            continue
        tasks.extend(((i, t), text) for t in targets)
    report = _Progress(progress, len(tasks) + len(results))
    for (i, t), e in list(results.items()):
        report(f"graph {i} on {t}", e)
    run = _run_ray if ray_address is not None else _run_local
    for pair, out in run(tasks, store, ray_address, autotune, max_retries, workers, cache, report):
        results[pair] = _result(pair, out, store)
        report(f"graph {pair[0]} on {pair[1]}", results[pair] if isinstance(results[pair], HipdnnError) else None)
    return {pair: results[pair] for pair in sorted(results, key=lambda p: (p[0], targets.index(p[1])))}


def _result(pair, out, store: PlanStore):
    if isinstance(out, HipdnnError):
        return out
    if out["error"] is not None:
        status, message = out["error"]
        return HipdnnError(Status(status), f"graph {pair[0]} on {pair[1]}: {message}")
    if out["plan"] is not None and not store.try_put("plan", out["key"], out["plan"]):
        local = PlanStore()
        if local.try_put("plan", out["key"], out["plan"]):
            import warnings
            warnings.warn(f"plan {out['key']} (graph {pair[0]} on {pair[1]}) kept in the local store {local.url}: "
                          f"plan store {store.url} is unreachable", RuntimeWarning, stacklevel=3)
    return out["key"]


def _lost(pair, attempts: int, why: str) -> HipdnnError:
    return HipdnnError(Status.INTERNAL_ERROR, f"graph {pair[0]} on {pair[1]}: the worker was lost {attempts} "
                                              f"time(s) ({why}); giving up after the retries")


def _run_local(tasks, store, _address, autotune, max_retries, workers, cache, report):
    """A process pool (spawned: IREE's runtime is not fork-safe); a pool broken by a lost worker is
    replaced and the unfinished tasks resubmitted, each at most ``max_retries`` times."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    pending = dict(tasks)
    attempts = {pair: 0 for pair in pending}
    n = max(1, min(workers or os.cpu_count() or 1, len(pending) or 1))
    while pending:
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(build_task, text, pair[1], store.url, autotune, cache): pair
                       for pair, text in pending.items()}
            for f in as_completed(futures):
                pair = futures[f]
                try:
                    out = f.result()
                except Exception as e:   # NOTE: BrokenProcessPool (a worker died) or a pickling failure
                    attempts[pair] += 1
                    if attempts[pair] > max_retries:
                        del pending[pair]
                        yield pair, _lost(pair, attempts[pair], f"{type(e).__name__}: {e}")
                    else:
                        report(f"graph {pair[0]} on {pair[1]}", retry=f"worker lost ({type(e).__name__})")
                    continue
                del pending[pair]
                yield pair, out


def _run_ray(tasks, store, address, autotune, max_retries, _workers, cache, report):
    try:
        import ray
    except ImportError:
        raise HipdnnError(Status.NOT_SUPPORTED, "build_many(ray_address=...) needs Ray: pip install "
                                                "'hipdnn-iree[fleet]'") from None
    if not ray.is_initialized():
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        except Exception as e:   # NOTE: ConnectionError, ValueError for a bad address, ...
            raise HipdnnError(Status.INTERNAL_ERROR, f"build_many: cannot join the Ray cluster at {address!r}: "
                                                     f"{type(e).__name__}: {e}") from None
    remote = ray.remote(build_task)
    refs = {}
    for pair, text in tasks:
        options = {"max_retries": max_retries, "num_cpus": 1}
        if autotune:
            options["resources"] = autotune_resources(pair[1])
            if options["resources"]:
                options["num_cpus"] = 0   # NOTE: the device is the scarce resource, not a core
        refs[remote.options(**options).remote(text, pair[1], store.url, autotune, cache)] = pair
    while refs:
        ready, _ = ray.wait(list(refs), num_returns=1)
        for ref in ready:
            pair = refs.pop(ref)
            try:
                out = ray.get(ref)
            except Exception as e:   # NOTE: WorkerCrashedError etc. after Ray's retries
                out = _lost(pair, max_retries + 1, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            yield pair, out


__all__ = ["build_many", "build_task"]
