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
