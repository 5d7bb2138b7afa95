"""Fixtures for the real-Slurm tests. They need root (the lab starts slurmctld/slurmd and
creates /dev/nvidia*). In CI they always run; elsewhere, without root, they are skipped
with a message saying how to run them."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import agent_report
import pytest

from . import labtools

IN_CI = os.environ.get("CI") == "true"
IS_ROOT = os.geteuid() == 0
# Outside CI a non-root run leaves these tests out; under CI they always run (see `lab`).
_not_here = pytest.mark.skipif(
    not IS_ROOT and not IN_CI, reason="real-Slurm tests need root (sudo bash tests/run.sh)"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/slurm/" in str(item.fspath):
            item.add_marker(pytest.mark.slurm)
            item.add_marker(_not_here)


@pytest.fixture(scope="session")
def lab() -> Iterator[None]:
    if not IS_ROOT:
        pytest.fail("the real-Slurm tests must run in CI: run .ci/run as root")
    log_from = agent_report.log_size(labtools.AGENT_LOG)
    labtools.lab_up()
    if labtools.LEARNED.exists():  # left by an earlier run: start from the lab's own scores
        labtools.forget_probe_measurements()
    labtools.cancel_all()
    yield
    labtools.cancel_all()
    agent_report.record(
        "Slurm 22.05 single-node lab", labtools.AGENT_LOG, log_from, labtools.agent_status
    )
    if labtools.LEARNED.exists():  # leave the lab's scores as the tests found them
        labtools.forget_probe_measurements()


@pytest.fixture()
def clean(lab: None) -> Iterator[None]:
    """Empty queue before and after; the agent running and past its circuit breaker."""
    if labtools.agent_pid() is None or not labtools.SOCKET.exists():
        labtools.start_agent()
        time.sleep(labtools.RETRY_AFTER_S + 0.5)
    labtools.cancel_all()
    yield
    labtools.cancel_all()


@pytest.fixture()
def restore_agent(clean: None) -> Iterator[None]:
    """For a test that stops, pauses or kills the agent: afterwards it runs again (resumed
    if paused) and the Lua hook's circuit breaker has closed."""
    yield
    pid = labtools.agent_pid()
    if pid:
        os.kill(pid, signal.SIGCONT)
    labtools.start_agent()
    time.sleep(labtools.RETRY_AFTER_S + 0.5)
