"""The code passes ``ruff check`` with the rules pyproject.toml selects, and is as ``ruff format``
writes it (docs/contributing.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


PATHS = ["slurm_colo", "tests", "benchmarks", "contrib"]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "ruff", *args, "--no-cache", *PATHS]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def test_ruff_check_is_clean() -> None:
    p = _ruff("check")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "All checks passed" in p.stdout


def test_the_code_is_formatted() -> None:
    p = _ruff("format", "--check")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "already formatted" in p.stdout
