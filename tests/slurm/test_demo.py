"""The demo on the single-node lab (``contrib/lab/demo.sh --single``): it runs and shows sharing
read back from Slurm. The README's default, on the multi-node lab, is tests/multinode/test_demo.py."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from .labtools import REPO, forget_probe_measurements


@pytest.fixture()
def forgets(clean: None) -> Iterator[None]:
    """The demo's last act teaches the agent a harmful pair, which it keeps across restarts:
    forget it so later tests see the lab's scores as they are."""
    yield
    forget_probe_measurements()


def test_demo_runs_and_reports_sharing(forgets: None) -> None:
    p = subprocess.run(
        ["bash", str(REPO / "contrib" / "lab" / "demo.sh"), "--single"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, DEMO_SECONDS="8"),
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    out = p.stdout
    assert "<- shared" in out  # at least one GPU runs two --colocate jobs
    assert "placed on GPU" in out and "own GPU" in out  # explain: a shared and an unshared job
    assert "multi-GPU/multi-node jobs are never shared" in out
    # the probe-and-undo act: the newcomer is requeued, runs again, alone
    assert "colo: requeued after 15s together: harmful" in out
    assert "probes: 1 undone" in out
    assert "(no new partner while job" in out
    assert "restarts=1  colo: requeued after a harmful pairing; now GPU" in out
    assert "demo done" in out
