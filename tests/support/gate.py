"""Jobs that run until the test lets them end (the real-Slurm tests of every lab)."""

from __future__ import annotations


def gated_script(first: str, gate: str) -> str:
    """A job script that runs ``first`` (say, printing its environment), then waits until
    the test creates the file ``gate`` or a minute has passed: the test can look at the
    node while every job surely runs, however slow the machine."""
    return f"{first}; for _ in $(seq 600); do [ -e {gate} ] && exit 0; sleep 0.1; done"
