"""Run the ``slurm-colo`` entry point in-process, as a shell would (its exit code included)."""

from __future__ import annotations

import sys

import pytest

from slurm_colo.cli import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``slurm-colo ARGV``: exit code (a ColoError prints and exits 2), stdout, stderr."""
    old = sys.argv
    sys.argv = ["slurm-colo", *argv]
    try:
        main()
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        sys.argv = old
    out = capsys.readouterr()
    return code, out.out, out.err
