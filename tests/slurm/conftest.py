"""Fixtures for the real-Slurm tests. They need root (the lab starts slurmctld/slurmd and
creates /dev/nvidia*). In CI they always run; elsewhere, without root, they are skipped
with a message saying how to run them."""

from __future__ import annotations

import os
import time
from typing import Iterator

import pytest

from . import labtools


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/slurm/" in str(item.fspath):
            item.add_marker(pytest.mark.slurm)


@pytest.fixture(scope="session")
def lab() -> Iterator[None]:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the real-Slurm tests must run in CI: run .ci/run as root")
        pytest.skip("real-Slurm tests need root (sudo bash .ci/run)")
    labtools.lab_up()
    labtools.cancel_all()
    yield
    labtools.cancel_all()


@pytest.fixture()
def clean(lab: None) -> Iterator[None]:
    """Empty queue before and after; the agent running and past its circuit breaker."""
    if labtools.agent_pid() is None or not labtools.SOCKET.exists():
        labtools.start_agent()
        time.sleep(labtools.RETRY_AFTER_S + 0.5)
    labtools.cancel_all()
    yield
    labtools.cancel_all()
