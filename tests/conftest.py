"""Shared test set-up: tests/support holds helpers used by several test folders."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "support"))

from agent_report import LINES  # noqa: E402


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The labs' agents: how long their placement answers took (tests/support/agent_report.py)."""
    if LINES:
        terminalreporter.section("lab agents")
        for line in LINES:
            terminalreporter.write_line(line)
