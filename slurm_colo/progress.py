"""Optional job-side progress reporting, for the job's own code::

    from slurm_colo.progress import report
    for step in range(n):
        train_step()
        report(step + 1)          # cumulative iterations (steps, samples, tokens...)

Writes ``$SLURM_COLO_PROGRESS_FILE`` (set by the TaskProlog) at most once per second, by
atomic rename, keeping at most :data:`MAX_POINTS` ``[time, iterations]`` points (older
ones are thinned out, so memory and file size stay bounded). Without the variable it does
nothing, so code using it runs unchanged outside slurm-colo. The Epilog turns the points
into ``progress = {"iterations", "rate", "solo_rate"}`` in the job's record. Standard
library only; never raises.
"""

from __future__ import annotations

import json
import os
import time

ENV = "SLURM_COLO_PROGRESS_FILE"
MAX_POINTS = 512
MIN_INTERVAL_S = 1.0


class ProgressReporter:
    def __init__(self, path: str | None = None, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.path = path if path is not None else os.environ.get(ENV, "")
        self.min_interval_s = min_interval_s
        self.points: list[list[float]] = []
        self._last_write = 0.0
        self._last: float | None = None

    def report(self, iterations: float, now: float | None = None, force: bool = False) -> None:
        if not self.path:
            return
        t = time.time() if now is None else now
        self._last = float(iterations)
        self.points.append([round(t, 3), float(iterations)])
        if len(self.points) > MAX_POINTS:  # keep the first point, thin the rest by half
            self.points = [self.points[0]] + self.points[2::2]
        if force or t - self._last_write >= self.min_interval_s:
            self.flush(t)

    def flush(self, now: float | None = None) -> None:
        if not self.path or not self.points:
            return
        self._last_write = time.time() if now is None else now
        data = json.dumps({"version": 1, "iterations": self._last, "points": self.points})
        tmp = f"{self.path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                f.write(data)
            os.replace(tmp, self.path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


_default: ProgressReporter | None = None


def report(iterations: float) -> None:
    """Report the job's cumulative progress (cheap; safe to call every step)."""
    global _default
    if _default is None:
        import atexit

        _default = ProgressReporter()
        atexit.register(_default.flush)
    _default.report(iterations)
