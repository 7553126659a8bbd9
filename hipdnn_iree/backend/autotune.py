"""Autotuning: time a graph's built plans on the caller's buffers and pick the fastest.

Engine-agnostic: it sees execution plans, never an engine's modules. Each candidate runs once and
its outputs are compared with plan 0's (``selfcheck.compare_arrays``: a miscompiled candidate is
dropped, never selected); then the survivors run in interleaved rounds (one call of each per
round, so drift on a shared machine hits every candidate alike) and the lowest median wins.
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from hipdnn_iree.backend.selfcheck import compare_arrays, to_host
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

MIN_ROUNDS = 5
MAX_ROUNDS = 50
BUDGET_S = 2.0   # timing rounds stop growing once one round of every candidate costs BUDGET_S / MIN_ROUNDS


def _outputs(plan, variant_pack) -> dict:
    tensors = getattr(plan.context, "tensors", None) or []
    return {t.uid: np.array(to_host(variant_pack[t.uid]), copy=True) for t in tensors if t.role == "output"}


def _synchronize(variant_pack) -> None:
    """Waits for work queued on device tensors' streams (torch CUDA), so a wall-clock read is the plan's."""
    for obj in variant_pack.values():
        if type(obj).__module__.split(".", 1)[0] == "torch" and getattr(obj, "is_cuda", False):
            import torch
            torch.cuda.synchronize(obj.device)
            return


def time_plans(plans: list, variant_pack: dict, workspace=None, rounds: int | None = None):
    """``plans``: [(index, ExecutionPlanDescriptor)], plan 0 (the reference) first.

    Returns (timings, dropped): ``timings`` [(index, median_ms)] fastest first; ``dropped``
    [(index, why)] for candidates that failed to run or disagreed with the reference plan.
    """
    if not plans:
        raise HipdnnError(Status.NOT_INITIALIZED, "autotune: no built plan to time")
    ref_index, ref_plan = plans[0]
    ref_plan.execute(variant_pack, workspace)
    _synchronize(variant_pack)
    reference = _outputs(ref_plan, variant_pack)
    by_uid = {t.uid: t for t in (getattr(ref_plan.context, "tensors", None) or [])}
    alive, dropped = [(ref_index, ref_plan)], []
    for index, plan in plans[1:]:
        try:
            plan.execute(variant_pack, workspace)
            _synchronize(variant_pack)
            got = _outputs(plan, variant_pack)
        except HipdnnError as e:
            dropped.append((index, f"failed to run: {e}"))
            continue
        bad = [w for uid, ref in reference.items()
               if (w := compare_arrays(by_uid[uid], got.get(uid, np.full_like(ref, np.nan)), ref,
                                       f" (plan {index} vs plan {ref_index})"))]
        if bad:
            dropped.append((index, "; ".join(bad)))
        else:
            alive.append((index, plan))
    # one more warm call each, timed, to size the rounds
    t0 = time.perf_counter()
    for _, plan in alive:
        plan.execute(variant_pack, workspace)
    _synchronize(variant_pack)
    per_round = max(time.perf_counter() - t0, 1e-6)
    if rounds is None:
        rounds = int(min(MAX_ROUNDS, max(MIN_ROUNDS, BUDGET_S / per_round)))
    samples = {i: [] for i, _ in alive}
    for r in range(rounds):
        order = alive if r % 2 == 0 else alive[::-1]
        for index, plan in order:
            t = time.perf_counter()
            plan.execute(variant_pack, workspace)
            _synchronize(variant_pack)
            samples[index].append((time.perf_counter() - t) * 1e3)
    timings = sorted(((i, float(np.median(s))) for i, s in samples.items()), key=lambda x: x[1])
    if dropped:
        warnings.warn("autotune dropped plan(s) whose outputs disagree with plan "
                      f"{ref_index} or that failed: " + " | ".join(f"plan {i}: {w}" for i, w in dropped),
                      RuntimeWarning, stacklevel=3)
    return timings, dropped
