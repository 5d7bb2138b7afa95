"""slurm_colo.slurm.command.run_slurm: every way a Slurm command fails is one SlurmError that
names the command."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_colo.errors import SlurmError
from slurm_colo.slurm.command import run_slurm


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "scontrol"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_output_of_a_command_that_exits_0(tmp_path: Path) -> None:
    assert run_slurm([_script(tmp_path, "echo ok")], 5).stdout == "ok\n"


def test_a_missing_command_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="not found") as e:
        run_slurm([str(tmp_path / "squeue"), "--json"], 5)
    assert e.value.hint == "install slurm-client"


def test_a_failure_gives_the_last_line_slurm_printed(tmp_path: Path) -> None:
    argv = [_script(tmp_path, "echo first >&2; echo 'Invalid job id specified' >&2; exit 1")]
    with pytest.raises(SlurmError, match=r"scontrol release 7 failed: Invalid job id specified$"):
        run_slurm([*argv, "release", "7"], 5, what="scontrol release 7")
    with pytest.raises(SlurmError, match=r"failed: exit 3$"):
        run_slurm([_script(tmp_path, "exit 3")], 5)


def test_a_command_that_hangs_or_cannot_start(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match=r"sinfo timed out after 0.3s"):
        run_slurm([_script(tmp_path, "sleep 5")], 0.3, what="sinfo")
    with pytest.raises(SlurmError, match="could not start"):
        run_slurm([str(tmp_path)], 5)  # a directory: permission denied
