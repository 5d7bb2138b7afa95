"""The lab's stand-in training job for the real-Slurm tests (every lab's tools use this)."""

from __future__ import annotations

from pathlib import Path

#: the job itself, as the lab cluster ships it
STANDIN = Path(__file__).resolve().parents[2] / "contrib" / "lab" / "standin_job.py"


def standin_text() -> str:
    """The stand-in job's source."""
    return STANDIN.read_text()


def standin_cmd(out: Path, python: str) -> str:
    """The stand-in job copied to ``out`` (mode 0644: the jobs' user must read it); returns
    how to run it with ``python``."""
    path = out / "standin_job.py"
    path.write_text(standin_text())
    path.chmod(0o644)
    return f"{python} {path}"
