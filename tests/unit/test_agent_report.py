"""The end-of-run line each lab's agent gets (tests/support/agent_report.py)."""

from __future__ import annotations

from typing import Any

import agent_report


def test_the_line_gives_the_answers_and_the_lock_waits_in_milliseconds() -> None:
    status = {
        "request_seconds": {"sum": 0.5, "count": 100},
        "place_lock_wait_seconds": {"sum": 0.2, "count": 80, "max": 0.0375},
    }
    line = agent_report.answer_line("Slurm 24.11 lab", status)
    assert line == (
        "Slurm 24.11 lab agent: 100 requests since its last start, answered in 5.0 ms on average; "
        "placement requests waited for its lock 2.5 ms on average, 38 ms at the longest"
    )
    # an agent older than the lock figures, or one that placed nothing since its start
    idle = {"place_lock_wait_seconds": {"sum": 0.0, "count": 0, "max": 0.0}}
    assert agent_report.answer_line("y", idle).endswith("its lock - on average, -")
    assert agent_report.answer_line("x", {}).endswith(
        "answered in - on average; placement requests waited for its lock - on average, -"
    )


def test_an_agent_that_cannot_answer_is_reported_not_raised(monkeypatch: Any) -> None:
    monkeypatch.setattr(agent_report, "LINES", [])

    def gone() -> dict[str, Any]:
        raise RuntimeError("agent not running")

    agent_report.record("Slurm 22.05 single-node lab", gone)
    agent_report.record("Slurm 26.05 lab", lambda: {"request_seconds": {"sum": 1, "count": 4}})
    assert agent_report.LINES == [
        "Slurm 22.05 single-node lab agent: no status (RuntimeError: agent not running)",
        "Slurm 26.05 lab agent: 4 requests since its last start, answered in 250.0 ms on "
        "average; placement requests waited for its lock - on average, -",
    ]
