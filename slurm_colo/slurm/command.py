"""Running one Slurm command (``squeue``, ``sinfo``, ``scontrol``): the one place
slurm-colo's Slurm glue starts one and turns how it failed into a
:class:`~slurm_colo.errors.SlurmError`. Building the argv and parsing the output live with
their callers. (The agent's snapshot child, :mod:`.snapshot`, is our own Python, started
by :class:`~.snapshot.ChildSnapshots`.)"""

from __future__ import annotations

import subprocess

from ..errors import SlurmError


def run_slurm(
    argv: list[str], timeout_s: float, what: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and return its result when it exits 0. Otherwise a :class:`SlurmError`
    naming the command (``what``; default its first three words): not found, could not
    start, did not finish within ``timeout_s``, or failed with the last line it printed."""
    name = what or " ".join(argv[:3])
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found", hint="install slurm-client") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{name} timed out after {timeout_s:g}s") from None
    except OSError as e:
        raise SlurmError(f"{name} could not start: {e.strerror}") from None
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines()
        last = lines[-1][:300] if lines else f"exit {p.returncode}"
        raise SlurmError(f"{name} failed: {last}")
    return p
