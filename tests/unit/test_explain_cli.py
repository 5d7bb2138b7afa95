"""`slurm-colo explain` with the agent unreachable: it reads the job's Slurm record, and
says so when Slurm cannot be asked either (captured 24.11 outputs, tests/fixtures/slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run_cli as run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


@pytest.fixture
def no_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    conf = tmp_path / "config.toml"
    sock = tmp_path / "no-agent.sock"
    conf.write_text(f'[agent]\nsocket = "{sock}"\nslurm_backend = "json"\n')
    monkeypatch.setenv("SLURM_COLO_CONFIG", str(conf))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sinfo = bin_dir / "sinfo"
    sinfo.write_text("#!/bin/sh\necho 'slurm 24.11.5'\n")
    sinfo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def _squeue(bin_dir: Path, fixture: str) -> None:
    squeue = bin_dir / "squeue"
    squeue.write_text(f"#!/bin/sh\ncat {FIX / fixture} >&2\nexit 1\n")
    squeue.chmod(0o755)


def test_agent_and_slurm_both_down_is_an_error_naming_both(
    no_agent: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _squeue(no_agent, "squeue-24.11-controller-down.stderr")
    code, out, err = run(["explain", "5"], capsys)
    assert code != 0 and out == ""
    assert "job 5: the agent is unreachable (" in err
    assert "Unable to contact slurm controller (connect failure)" in err
    assert "scontrol ping" in err and "not found" not in err


def test_a_job_slurm_does_not_know_is_said_so(
    no_agent: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _squeue(no_agent, "squeue-24.11-unknown-job.stderr")
    code, out, _ = run(["explain", "5"], capsys)
    assert code == 0
    assert out.startswith("job 5: job not found in Slurm and agent unreachable")
