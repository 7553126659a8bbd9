"""Shared timing loop of the ``cpu_*_forms.py`` A/B scripts."""
import statistics
import time


def interleaved_medians(calls: dict, rounds: int = 18, warmup: int = 3) -> dict:
    """Runs every callable of ``calls`` once per round, in turn (so load from other work hits each
    alike); returns name -> median milliseconds over the rounds after ``warmup``."""
    times = {name: [] for name in calls}
    for r in range(rounds):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            if r >= warmup:
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) * 1e3 for name, v in times.items()}


import contextlib


@contextlib.contextmanager
def lowering_forms(**fields):
    """Builds inside this block lower with these LoweringPolicy fields changed from the target's
    defaults (lowering/policy.py), e.g. ``lowering_forms(conv3d_as_2d=False)``. The policy is part of
    the compile cache key, so a cached module of the other form is never returned."""
    from lowering.policy import LoweringPolicy
    original = LoweringPolicy.__dict__["for_target"]
    LoweringPolicy.for_target = classmethod(lambda cls, t: original.__func__(cls, t).with_(**fields))
    try:
        yield
    finally:
        LoweringPolicy.for_target = original
