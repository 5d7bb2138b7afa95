"""What each lab's agent says of its answers when the lab's tests are done (since the
agent's last start: some tests restart it): how many it gave, how long they took and how
long placement requests waited for the agent's lock. Printed at the end of the test run
(tests/conftest.py), so a run whose real-Slurm tests were slow or fell back shows where
the agent's time went."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: one line per lab, in the order the labs finished
LINES: list[str] = []


def _ms(total: Any, count: Any) -> str:
    """The mean in milliseconds; "-" when nothing was counted."""
    try:
        n = int(count or 0)
        return f"{1000 * float(total or 0) / n:.1f} ms" if n else "-"
    except (TypeError, ValueError):
        return "?"


def answer_line(lab: str, status: dict[str, Any]) -> str:
    """One line from the agent's ``slurm-colo status --json``."""
    req = status.get("request_seconds") or {}
    wait = status.get("place_lock_wait_seconds") or {}
    longest = wait.get("max") if wait.get("count") else None
    return (
        f"{lab} agent: {req.get('count', 0)} requests since its last start, answered in "
        f"{_ms(req.get('sum'), req.get('count'))} on average; placement requests waited for "
        f"its lock {_ms(wait.get('sum'), wait.get('count'))} on average, "
        + (f"{1000 * float(longest):.0f} ms at the longest" if longest is not None else "-")
    )


def record(lab: str, status: Callable[[], dict[str, Any]]) -> None:
    """Add ``lab``'s line; a lab whose agent cannot answer says so instead of failing the
    teardown it runs in."""
    try:
        LINES.append(answer_line(lab, status()))
    except Exception as e:  # the report must never fail a test run
        LINES.append(f"{lab} agent: no status ({type(e).__name__}: {e})")
