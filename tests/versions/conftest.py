"""Fixtures for the tests on the Slurm version labs (24.11, 26.05). Like tests/slurm they need
root (chroots, namespaces, Slurm daemons); in CI they always run. The lab of each version is
built when missing (mmdebstrap, the Debian mirror), brought up with slurm-colo installed
(`up.sh SUITE --colo`) for the first test of that version, and stopped after its last one."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator

import agent_report
import pytest

from .vlab import CLAB, VersionLab, selected_versions

IN_CI = os.environ.get("CI") == "true"
IS_ROOT = os.geteuid() == 0
_not_here = pytest.mark.skipif(
    not IS_ROOT and not IN_CI, reason="version-lab tests need root (sudo bash tests/run.sh)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unselected = []
    for item in items:
        if "tests/versions/" in str(item.fspath):
            item.add_marker(pytest.mark.versions)
            item.add_marker(_not_here)
            if item.name.endswith("[none]"):  # SLURM_VERSIONS names neither 24.11 nor 26.05
                unselected.append(item)
    if unselected:
        config.hook.pytest_deselected(items=unselected)
        items[:] = [i for i in items if i not in unselected]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "vlab" in metafunc.fixturenames:
        versions = selected_versions()
        metafunc.parametrize(
            "vlab",
            versions or [None],
            indirect=True,
            scope="session",
            ids=[f"slurm-{v}" for v in versions] or ["none"],
        )


@pytest.fixture(scope="session")
def vlab(request: pytest.FixtureRequest) -> Iterator[VersionLab]:
    if not IS_ROOT:
        pytest.fail("the version-lab tests must run as root: run tests/run.sh as root")
    if shutil.which("mmdebstrap") is None:
        pytest.fail("mmdebstrap is missing: apt-get install mmdebstrap (tests/run.sh does)")
    lab = VersionLab(request.param)
    t0 = time.monotonic()
    lab.build()
    t1 = time.monotonic()
    agent_log = lab.host_path(f"{CLAB}/agent.log")
    log_from = agent_report.log_size(agent_log)
    lab.up()
    t2 = time.monotonic()
    print(
        f"\n[versions] Slurm {lab.version} ({lab.suite}): "
        f"chroot {t1 - t0:.1f}s, up --colo {t2 - t1:.1f}s"
    )
    try:
        lab.cancel_all()
        yield lab
    finally:
        agent_report.record(f"Slurm {lab.version} lab", agent_log, log_from, lab.status)
        lab.down()


@pytest.fixture()
def vclean(vlab: VersionLab) -> Iterator[VersionLab]:
    """The version lab with an empty queue before and after, and the agent's view of the
    shared GPUs empty after."""
    vlab.cancel_all()
    yield vlab
    vlab.cancel_all()
    vlab.wait_agent_idle()
