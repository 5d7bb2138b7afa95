"""What every hook shares: logging to syslog and stderr, environment parsing, and the
rule that an unexpected error is logged and swallowed (exit 0) instead of draining a node."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable

from slurm_colo.contracts.digits import decimal
from slurm_colo.contracts.records import UID_MAX
from slurm_colo.logsetup import setup_logging

log = logging.getLogger("slurm_colo.hooks")

__all__ = [
    "admin_comment_argv",
    "admin_comment_tag",
    "env_int",
    "exit_status",
    "guarded",
    "job_gpus",
    "job_uid",
    "log",
    "node_name",
    "setup_logging",
]


def node_name() -> str:
    """This node's name as Slurm knows it: SLURMD_NODENAME, else the short host name."""
    return os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


def env_int(name: str, default: int | None = None) -> int | None:
    v = os.environ.get(name, "").strip()
    try:
        return int(v)
    except ValueError:
        return default


def job_uid() -> int:
    """The job's uid (SLURM_JOB_UID); -1 when missing or not a user id."""
    uid = env_int("SLURM_JOB_UID", -1)
    return uid if uid is not None and 0 <= uid <= UID_MAX else -1


def job_gpus() -> list[int]:
    """Physical GPU indices of the job: SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES."""
    for name in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        raw = os.environ.get(name, "").strip()
        if raw and raw != "NoDevFiles":
            idx = (decimal(x.strip(), 9) for x in raw.split(","))
            out = [i for i in idx if i is not None]
            if out:
                return out
    return []


_TAG_RE = re.compile(r"slurm-colo\[[^\]]*\]")


def admin_comment_argv(job_id: int) -> list[str]:
    """The job's AdminComment and nothing else, whole (width 0: not cut at 20 characters),
    so no field its user writes (the job name, its paths) can pass for it."""
    squeue = shutil.which("squeue") or "/usr/bin/squeue"
    return [squeue, "--noheader", "--jobs", str(job_id), "--Format", "admin_comment:0"]


def admin_comment_tag(job_id: int, timeout_s: float = 2.0) -> str:
    """The placement tag the agent had slurmctld write into the job's AdminComment, read
    from Slurm (the Prolog's environment has the job's Comment only); "" if there is none
    or Slurm cannot be asked."""
    try:
        out = subprocess.run(
            admin_comment_argv(job_id),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = out.splitlines()
    m = _TAG_RE.match(lines[0].strip()) if lines else None
    return m.group(0) if m else ""


def exit_status() -> tuple[int, int]:
    """(exit code, signal) of the job from the Epilog environment.

    ``SLURM_JOB_EXIT_CODE2`` is ``code:signal``; ``SLURM_JOB_EXIT_CODE`` is the raw wait
    status (code << 8 | signal).
    """
    two = os.environ.get("SLURM_JOB_EXIT_CODE2", "")
    if ":" in two:
        a, _, b = two.partition(":")
        code, sig = decimal(a, 9), decimal(b, 9)
        if code is not None and sig is not None:
            return code, sig
    raw = env_int("SLURM_JOB_EXIT_CODE", 0) or 0
    return (raw >> 8) & 0xFF, raw & 0x7F


def guarded(hook: str, fn: Callable[[], int]) -> int:
    setup_logging(hook)
    try:
        return fn()
    except Exception as e:  # never drain a node for our own bug
        log.exception("%s failed for job %s: %s", hook, os.environ.get("SLURM_JOB_ID", "?"), e)
        return 0
