"""The end-of-run line each lab's agent gets (tests/support/agent_report.py): the agent runs
its log shows stopping, and the one still running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agent_report
import pytest

STOPS = """\
2026-11-27 22:00:01 INFO slurm_colo.agent agent listening on /run/slurm-colo/agent.sock
2026-11-27 22:01:00 INFO slurm_colo.agent agent stopped: 10 placement requests answered in \
4.0 ms on average, waiting 1.0 ms on average for the agent's lock, 12.5 ms at the longest
2026-11-27 22:02:00 INFO slurm_colo.agent agent stopped: 0 placement requests answered
2026-11-27 22:03:00 INFO slurm_colo.agent agent stopped: 30 placement requests answered in \
9.0 ms on average, waiting 3.0 ms on average for the agent's lock, 80.0 ms at the longest
"""


@pytest.fixture(autouse=True)
def fresh_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_report, "LINES", [])


def test_the_stopped_runs_and_the_running_agent_add_up(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("an earlier test run: agent stopped: 500 placement requests answered\n")
    since = agent_report.log_size(log)
    with log.open("a") as f:
        f.write(STOPS)
    status = {"place_lock_wait_seconds": {"sum": 0.02, "count": 10, "max": 0.0081}}
    agent_report.record("Slurm 24.11 lab", log, since, lambda: status)
    # 50 requests over 4 runs: (10 x 1.0 + 30 x 3.0 + 10 x 2.0) / 50 = 2.4 ms
    assert agent_report.LINES == [
        "Slurm 24.11 lab agent: 50 placement requests over 4 run(s); they waited for its "
        "lock 2.4 ms on average, 80.0 ms at the longest"
    ]


def test_a_lab_whose_log_was_made_anew_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text(STOPS)
    agent_report.record("lab", log, 10**6, lambda: {})
    assert agent_report.LINES[0].startswith("lab agent: 40 placement requests over 4 run(s)")


def test_what_cannot_be_read_is_said_and_never_raised(tmp_path: Path) -> None:
    def gone() -> dict[str, Any]:
        raise RuntimeError("agent not running")

    agent_report.record("Slurm 22.05 single-node lab", tmp_path / "none.log", 0, gone)
    (line,) = agent_report.LINES
    assert line.startswith("Slurm 22.05 single-node lab agent: no placement requests over 0")
    assert "log not read" in line
    assert line.endswith("no status from the running agent (RuntimeError: agent not running)")
