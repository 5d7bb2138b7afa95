"""The agent's clock: the wall time, which Slurm's times are in, with its steps found.

The agent compares its readings with Slurm's (a job's submit, start and end times), so it
reads the wall clock. Most of the times it keeps itself stand for intervals, though: how
long a placement has waited to show up in Slurm, when a requeued job may be released, how
long a refused right is left alone, the time owed to shared jobs since the last look, the
queue's trend. A step of the wall clock (a date set by hand, NTP stepping a clock that was
far off) would end those at once or stretch them by the step, and a step forward would be
charged to every shared job as time owed.

The monotonic clock does not step, so the wall clock's offset from it moves only by a step
(NTP's slewing moves it by well under a millisecond between two readings). A move of
``STEP_S`` or more between two readings is taken for a step, and the agent moves the times
it keeps by it (:meth:`.state.AgentState.shift_clock`). Slurm's own times are read afresh
at each look and left as Slurm has them: slurmctld's clock stepped with ours.

Pure apart from the two clock reads, which are injectable (tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["STEP_S", "AgentClock"]

#: a change of the wall clock's offset from the monotonic clock taken for a step, seconds
STEP_S = 2.0


class AgentClock:
    """Reads the wall clock and says when it stepped since the last reading. Not
    thread-safe: the agent reads it under its lock, so that no time is taken from the
    stepped clock before the kept times have been moved."""

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
