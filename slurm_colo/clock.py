"""The wall clock, with its steps found.

Slurm's times, the hooks' journal and the jobs' progress points are all wall times, so the
agent and the node's sampler read the wall clock. A step of it (a date set by hand, NTP
stepping a clock that was far off) breaks the intervals measured across it: the agent's
own timers end at once or stretch by the step, and a probe window that spans one gives the
job a rate off by it.

The monotonic clock does not step, so the wall clock's offset from it moves only by a
step (NTP's slewing moves it by well under a millisecond between two readings). A move of
``STEP_S`` or more between two readings is taken for a step; what to do about it is the
caller's (the agent moves the times it keeps by it, :meth:`.agent.state.AgentState.shift_clock`;
the sampler's probe gives up the window, :meth:`.node.probe.Prober.clock_stepped`).

Pure apart from the two clock reads, which are injectable (tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["STEP_S", "WallClock"]

#: a change of the wall clock's offset from the monotonic clock taken for a step, seconds
STEP_S = 2.0


class WallClock:
    """Reads the wall clock and says when it stepped since the last reading. Not
    thread-safe: a caller with threads reads it under its lock."""

    def __init__(
        self,
        wall: Callable[[], float] | None = None,
        steady: Callable[[], float] | None = None,
        step_s: float = STEP_S,
    ) -> None:
        self._wall = wall
        self._steady = steady
        self.step_s = step_s
        self._offset: float | None = None

    def read(self) -> tuple[float, float]:
        """(the wall time, how far the wall clock stepped since the last reading: 0.0 when
        it did not, or at the first reading)."""
        wall = self._wall() if self._wall is not None else time.time()
        steady = self._steady() if self._steady is not None else time.monotonic()
        offset = wall - steady
        last, self._offset = self._offset, offset
        if last is None:
            return wall, 0.0
        step = offset - last
        return wall, step if abs(step) >= self.step_s else 0.0
