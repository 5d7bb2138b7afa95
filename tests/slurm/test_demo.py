"""The demo on the single-node lab (``contrib/lab/demo.sh --single``): it runs and shows sharing
read back from Slurm. The README's default, on the multi-node lab, is tests/multinode/test_demo.py."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from .labtools import REPO, ctld_log_mark, ctld_log_since, forget_probe_measurements


@pytest.fixture()
def forgets(clean: None) -> Iterator[None]:
    """The demo's last act teaches the agent a harmful pair, which it keeps across restarts:
    forget it so later tests see the lab's scores as they are."""
    yield
    forget_probe_measurements()


def test_demo_runs_and_reports_sharing(forgets: None) -> None:
    mark = ctld_log_mark()
    p = subprocess.run(
        ["bash", str(REPO / "contrib" / "lab" / "demo.sh"), "--single"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, DEMO_SECONDS="8"),
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    out = p.stdout
    # on a failure: the whole demo, and what the Lua hook logged in slurmctld meanwhile
    hook = [ln for ln in ctld_log_since(mark).splitlines() if "slurm-colo" in ln]
    why = out + "\n-- slurmctld.log, the hook's lines --\n" + "\n".join(hook)
    assert "<- shared" in out, why  # at least one GPU runs two --colocate jobs
    assert "placed on GPU" in out and "own GPU" in out, why  # explain: a shared and an unshared job
    assert "multi-GPU/multi-node jobs are never shared" in out, why
    # the probe-and-undo act: the newcomer is requeued, runs again, alone
    assert "colo: requeued after 15s together: harmful" in out, why
    assert "probes: 1 undone" in out, why
    assert "(no new partner while job" in out, why
    assert "restarts=1  colo: requeued after a harmful pairing; now GPU" in out, why
    assert "demo done" in out, why
