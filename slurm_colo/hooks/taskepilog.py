"""TaskEpilog (job user, once per step). Nothing to undo per step: the Epilog does the
job-level work. Kept as an entry point so slurm.conf can name it and so later per-step
accounting has a home."""

from __future__ import annotations


def run() -> int:
    return 0
