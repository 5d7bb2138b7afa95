"""The wall clock, with its steps found.

Slurm's times, the hooks' journal and the jobs' progress points are all wall times, so the
agent and the node's sampler read the wall clock. A step of it (a date set by hand, NTP
stepping a clock that was far off) breaks the intervals measured across it: the agent's
own timers end at once or stretch by the step, and a probe window that spans one gives the
job a rate off by it.

The boot-time clock (Linux's ``CLOCK_BOOTTIME``: the monotonic clock with the time
suspended counted) does not step, so the wall clock's offset from it moves only by a step
(NTP's slewing moves both clocks alike). A move of ``STEP_S`` or more between two readings
is taken for a step; what to do about it is the caller's (the agent moves the times it
keeps by it, :meth:`.agent.state.AgentState.shift_clock`; the sampler's probe gives up the
window, :meth:`.node.probe.Prober.clock_stepped`).

The boot-time clock is the machine's, not the process's: a process that saved the offset
of its last reading hands it to the next one of the same boot (:meth:`WallClock.resume`,
the machine's boot id tells the boot), which then finds a step made while neither ran.

Pure apart from the clock reads and the boot id, which are injectable (tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["BOOT_ID", "STEP_S", "WallClock", "boot_id"]

#: a change of the wall clock's offset from the boot-time clock taken for a step, seconds
STEP_S = 2.0
#: the kernel's id of this boot (a fresh one at every boot)
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
#: the clock that does not step and runs on across processes (Linux; the monotonic one
#: elsewhere)
_STEADY = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def _steady() -> float:
    return time.clock_gettime(_STEADY)


def boot_id() -> str | None:
    """This boot's id; None when it cannot be read (then no offset is handed on)."""
    try:
        text = BOOT_ID.read_text("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


class WallClock:
    """Reads the wall clock and says when it stepped since the last reading. Not
    thread-safe: a caller with threads reads it under its lock."""

    def __init__(
        self,
        wall: Callable[[], float] | None = None,
        steady: Callable[[], float] | None = None,
        step_s: float = STEP_S,
    ) -> None:
        self._wall = wall or time.time
        self._steady = steady or _steady
        self.step_s = step_s
        self._offset: float | None = None

    @property
    def offset(self) -> float | None:
        """The wall clock's offset from the boot-time clock at the last reading (None
        before the first): what :meth:`resume` takes in the next process of this boot."""
        return self._offset

    def resume(self, offset: float) -> None:
        """Take the offset of the last reading of an earlier process of this boot, before
        the first reading: that reading then tells a step of the clock made since, while
        neither process ran."""
        if self._offset is None:
            self._offset = offset

    def read(self) -> tuple[float, float]:
        """(the wall time, how far the wall clock stepped since the last reading: 0.0 when
        it did not, or at the first reading unless :meth:`resume` gave one)."""
        wall, steady = self._wall(), self._steady()
        offset = wall - steady
        last, self._offset = self._offset, offset
        if last is None:
            return wall, 0.0
        step = offset - last
        return wall, step if abs(step) >= self.step_s else 0.0
