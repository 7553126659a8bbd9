"""``hipdnn-iree bench``: timing loops, summary statistics and a plain-text progress bar."""
from __future__ import annotations

import statistics
import sys
import time


def summarize(seconds: list[float]) -> dict:
    """Median, min, max and mean (seconds) of ``seconds``, with the count."""
    return {"median": statistics.median(seconds), "min": min(seconds), "max": max(seconds),
            "mean": statistics.fmean(seconds), "count": len(seconds)}


class Progress:
    """``[#####.....] 50/100`` on stderr for runs that take a while.

    ``mode``: ``"always"``, ``"never"`` or ``"auto"`` (shown once half a second has passed
    and the projected total is over 2 s). On a terminal the bar redraws in place; otherwise
    a line is printed every 10%.
    """

    def __init__(self, total: int, label: str, mode: str = "auto", stream=None):
        self.total, self.label, self.mode = total, label, mode
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.shown = False
        self._last_draw = 0.0
        self._last_decile = -1

    def _active(self, done: int) -> bool:
        if self.mode == "never" or self.total <= 0:
            return False
        if self.mode == "always" or self.shown:
            return True
        elapsed = time.perf_counter() - self.start
        return elapsed > 0.5 and done > 0 and elapsed / done * self.total > 2.0

    def update(self, done: int) -> None:
        if not self._active(done):
            return
        self.shown = True
        now = time.perf_counter()
        elapsed = now - self.start
        left = elapsed / done * (self.total - done) if done else 0.0
        if self.tty:
            if now - self._last_draw < 0.1 and done < self.total:
                return
            self._last_draw = now
            width = 30
            fill = int(width * done / self.total)
            self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (width - fill)}] {done}/{self.total} "
                              f"{left:5.1f} s left ")
        else:
            decile = done * 10 // self.total
            if decile == self._last_decile:
                return
            self._last_decile = decile
            self.stream.write(f"{self.label}: {done}/{self.total} ({decile * 10}%), {left:.1f} s left\n")
        self.stream.flush()

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run_bench(restore, execute, n: int, restores: int, progress: str = "auto") -> dict:
    """Times ``restores`` x (restore + first execute), then ``n`` steady executes of the last one.

    ``restore()`` returns a restored graph; ``execute(graph)`` runs it once. Returns seconds.
    """
    restore_s, first_s, graph = [], [], None
    for _ in range(restores):
        if graph is not None:
            graph.release()
        t0 = time.perf_counter()
        graph = restore()
        t1 = time.perf_counter()
        execute(graph)
        restore_s.append(t1 - t0)
        first_s.append(time.perf_counter() - t1)
    bar = Progress(n, "bench", progress)
    steady = []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            execute(graph)
            steady.append(time.perf_counter() - t0)
            bar.update(i + 1)
    finally:
        bar.close()
        graph.release()
    return {"restore_s": summarize(restore_s), "first_execute_s": summarize(first_s),
            "execute_s": summarize(steady)}


def _ms(s: dict) -> str:
    return f"{s['median'] * 1e3:10.3f} ms  (min {s['min'] * 1e3:.3f}, max {s['max'] * 1e3:.3f}, n={s['count']})"


def format_report(r: dict) -> str:
    return "\n".join([
        f"plan: {r['plan']} ({r['plan_bytes']} bytes), target {r['target']}, device {r['device']}",
        f"device + first restore:  {r['device_and_first_restore_s'] * 1e3:10.3f} ms",
        f"restore:        {_ms(r['restore_s'])}",
        f"first execute:  {_ms(r['first_execute_s'])}",
        f"execute:        {_ms(r['execute_s'])}",
    ])
