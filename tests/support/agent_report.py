"""How each lab's agent answered placement requests while the lab's tests ran: how many,
and how long they waited for the agent's lock, over every run of the agent (some tests
restart it). An agent that stops logs its figures (``agent stopped: N placement requests
answered ...``); the one still running at the end gives them in ``status --json``. One
line per lab is printed at the end of the test run (tests/conftest.py), so a run whose
real-Slurm tests were slow or fell back shows where the agent's time went."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: one line per lab, in the order the labs finished
LINES: list[str] = []

_STOPPED = re.compile(
    r"agent stopped: (\d+) placement requests answered"
    r"(?: in [\d.]+ ms on average, waiting ([\d.]+) ms on average for the agent's lock, "
    r"([\d.]+) ms at the longest)?"
)


@dataclass
class Waits:
    """Placement requests and their waits for the agent's lock, over one or more runs."""

    runs: int = 0
    count: int = 0
    wait_ms: float = 0.0  # the sum
    longest_ms: float = 0.0

    def add(self, count: int, mean_ms: float, longest_ms: float) -> None:
        self.runs += 1
        self.count += count
        self.wait_ms += count * mean_ms
        self.longest_ms = max(self.longest_ms, longest_ms)

    def line(self, lab: str) -> str:
        if self.count == 0:
            return f"{lab} agent: no placement requests over {self.runs} run(s)"
        return (
            f"{lab} agent: {self.count} placement requests over {self.runs} run(s); they "
            f"waited for its lock {self.wait_ms / self.count:.1f} ms on average, "
            f"{self.longest_ms:.1f} ms at the longest"
        )


def log_size(path: Path) -> int:
    """Where the lab's agent log ends now: :func:`record` reads what comes after."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def stopped_runs(text: str, into: Waits) -> None:
    """Add each ``agent stopped`` line of an agent log to ``into``."""
    for m in _STOPPED.finditer(text):
        into.add(int(m[1]), float(m[2] or 0.0), float(m[3] or 0.0))


def running(status: dict[str, Any], into: Waits) -> None:
    """Add the running agent's figures (``status --json``) to ``into``."""
    pw = status.get("place_lock_wait_seconds") or {}
    n = int(pw.get("count") or 0)
    mean = 1000 * float(pw.get("sum") or 0.0) / n if n else 0.0
    into.add(n, mean, 1000 * float(pw.get("max") or 0.0))


def record(lab: str, log: Path, since: int, status: Callable[[], dict[str, Any]]) -> None:
    """Add ``lab``'s line: the runs its agent log shows stopping after offset ``since``,
    and the running agent. Nothing here may fail the teardown it runs in."""
    waits = Waits()
    notes = []
    try:
        with log.open("rb") as f:
            if log.stat().st_size >= since:  # else the lab made a new log: read it all
                f.seek(since)
            stopped_runs(f.read().decode("utf-8", "replace"), waits)
    except OSError as e:
        notes.append(f"log not read: {e}")
    try:
        running(status(), waits)
    except Exception as e:  # an agent that cannot answer is reported, not raised
        notes.append(f"no status from the running agent ({type(e).__name__}: {e})")
    LINES.append(waits.line(lab) + "".join(f"; {n}" for n in notes))
