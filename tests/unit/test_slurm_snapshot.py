"""Snapshots taken in a child process: the compact form round-trips, the child reads Slurm
through the JSON backend (recorded 22.05 output behind fake squeue/sinfo), errors are clear."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from slurm_colo.errors import SlurmError
from slurm_colo.slurm.json_backend import parse_sinfo, parse_squeue
from slurm_colo.slurm.snapshot import ChildSnapshots, decode, encode, wanted

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def _recorded() -> tuple[list, list]:  # type: ignore[type-arg]
    jobs = parse_squeue(json.loads((FIX / "squeue-22.05.json").read_text()))
    nodes = parse_sinfo(json.loads((FIX / "sinfo-22.05.json").read_text()))
    return jobs, nodes


def test_round_trip_keeps_running_and_pending_jobs_only() -> None:
    jobs, nodes = _recorded()
    got_jobs, got_nodes = decode(encode(jobs, nodes))
    assert got_nodes == nodes
    assert got_jobs == [j for j in jobs if wanted(j)]
    assert {j.state for j in jobs} - {j.state for j in got_jobs}  # finished jobs are left out
    assert any(j.gres for j in got_jobs)  # GPU indices survive


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"format": "other"}',
        '{"format": "slurm-colo-snapshot/1"}',
        '{"format": "slurm-colo-snapshot/1", "jobs": [{"x": 1}], "nodes": []}',
    ],
)
def test_malformed_snapshot_is_a_slurm_error(text: str) -> None:
    with pytest.raises(SlurmError, match="malformed"):
        decode(text)


def _fake_slurm(tmp_path: Path, squeue_body: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("squeue", squeue_body), ("sinfo", f"cat {FIX / 'sinfo-22.05.json'}")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_child_reads_slurm_like_the_agent_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in _fake_slurm(tmp_path, f"cat {FIX / 'squeue-22.05.json'}").items():
        monkeypatch.setenv(k, v)
    jobs, nodes = ChildSnapshots("json", python=sys.executable).take()
    want_jobs, want_nodes = _recorded()
    assert jobs == [j for j in want_jobs if wanted(j)] and nodes == want_nodes


def test_child_failures_are_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in _fake_slurm(
        tmp_path, "echo 'Unable to contact slurm controller' >&2; exit 1"
    ).items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SlurmError, match="snapshot failed.*Unable to contact"):
        ChildSnapshots("json").take()
    # 22.05 with slurmctld down exits 0 with an error and no jobs: no snapshot, not an empty one
    (tmp_path / "bin" / "squeue").write_text(
        f"#!/bin/sh\ncat {FIX / 'squeue-22.05-controller-down.json'}\n"
    )
    with pytest.raises(SlurmError, match="snapshot failed.*Failed while looking for jobs"):
        ChildSnapshots("json").take()
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nsleep 5\n")
    hang.chmod(0o755)
    with pytest.raises(SlurmError, match="timed out"):
        ChildSnapshots("json", timeout_s=0.3, python=str(hang)).take()
