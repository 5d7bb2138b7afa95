"""Fixtures for the multi-node tests: the lab of contrib/lab/multinode (a controller and
three GPU nodes in their own namespaces) with slurm-colo installed. They need root; in CI
they always run, elsewhere a non-root run skips them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import agent_report
import pytest

from . import mntools

IN_CI = os.environ.get("CI") == "true"
IS_ROOT = os.geteuid() == 0
_not_here = pytest.mark.skipif(
    not IS_ROOT and not IN_CI, reason="multi-node tests need root (sudo bash tests/run.sh)"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/multinode/" in str(item.fspath):
            item.add_marker(pytest.mark.multinode)
            item.add_marker(_not_here)


@pytest.fixture(scope="session")
def mlab() -> Iterator[None]:
    """The multi-node lab, up (idempotent; left up afterwards, like the single-node lab)."""
    if not IS_ROOT:
        pytest.fail("the multi-node tests must run in CI: run .ci/run as root")
    log_from = agent_report.log_size(mntools.AGENT_LOG)
    mntools.lab_up()
    mntools.cancel_all()
    yield
    mntools.cancel_all()
    agent_report.record(
        "Slurm 22.05 multi-node lab", mntools.AGENT_LOG, log_from, mntools.agent_status
    )


@pytest.fixture()
def mclean(mlab: None) -> Iterator[None]:
    """Empty queue before and after, the agent running."""
    if mntools.agent_pid() is None:
        mntools.start_agent()
    mntools.cancel_all()
    yield
    mntools.cancel_all()
