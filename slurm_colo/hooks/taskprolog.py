"""TaskProlog (job user, once per step): print the ``export`` lines the Prolog prepared.

Reads ``<run_dir>/jobs/<id>/user/task.json``; prints nothing for jobs without one. When
MPS could not be set up the job is told on its stdout (``print`` lines) instead of silently
running without it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from slurm_colo.contracts.enums import Mechanism
from slurm_colo.contracts.placement import whole_in_limits
from slurm_colo.fsutil import read_small

from .common import env_int, guarded

#: ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` as the Prolog writes it (``format_mem_limit``)
_MEM_LIMIT = re.compile(r"0=[0-9]{1,9}[GM]")


def export_lines(task: dict[str, Any]) -> list[str]:
    out = []
    mps = task.get("mps")
    if task.get("mechanism") == Mechanism.MPS and mps:
        out.append(f"export CUDA_MPS_PIPE_DIRECTORY={mps['pipe_dir']}")
        out.append(f"export CUDA_MPS_LOG_DIRECTORY={mps['log_dir']}")
        if mps.get("thread_pct"):
            out.append(f"export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={int(mps['thread_pct'])}")
        if mps.get("mem_limit"):
            out.append(f"export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={mps['mem_limit']}")
    if task.get("mechanism") in (Mechanism.MPS, Mechanism.SHARD) and os.environ.get(
        "SLURM_SHARDS_ON_NODE"
    ):
        # Slurm 22.05 cannot give a job step the typed shard the job holds ("Invalid generic
        # resource"); a plain `srun` inside the job then asks for one untyped shard instead
        out.append("export SLURM_GRES=shard:1")
    if task.get("progress_file"):
        out.append(f"export SLURM_COLO_PROGRESS_FILE={task['progress_file']}")
    for msg in task.get("messages", []):
        # one line each: slurmstepd reads every line of this output as a command, and a
        # message may quote a tool's several lines of error text
        out.append("print slurm-colo: warning: " + " ".join(str(msg).split()))
    return out


def read_task(path: str) -> dict[str, Any]:
    """The task file, checked; ``FileNotFoundError`` when there is none, ``ValueError``
    saying what is wrong when it is not what the Prolog writes (the job's user owns the
    file: a FIFO, a huge file or a list in its place must not hang or break the step)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as e:  # another user's job: no way into its directory
        raise ValueError(e.strerror) from None
    raw = read_small(Path(path))
    if raw is None:
        raise ValueError("not a regular file of at most 1 MiB")
    try:
        task = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError("not JSON") from None
    if not isinstance(task, dict):
        raise ValueError("not a JSON object")
    mps = task.get("mps")
    if mps is not None:
        if not isinstance(mps, dict) or not all(
            isinstance(mps.get(k), str) for k in ("pipe_dir", "log_dir")
        ):
            raise ValueError("'mps' without its pipe and log directories")
        if mps.get("thread_pct") is not None:
            whole_in_limits(mps["thread_pct"], "thread_pct")
        if mps.get("mem_limit") is not None and not _MEM_LIMIT.fullmatch(str(mps["mem_limit"])):
            raise ValueError(f"mem_limit {mps['mem_limit']!r} is not like 0=12G")
    if not isinstance(task.get("messages", []), list):
        raise ValueError("'messages' is not a list")
    if not isinstance(task.get("progress_file") or "", str):
        raise ValueError("'progress_file' is not a path")
    return task


def main() -> int:
    from ..config import load_config

    job_id = env_int("SLURM_JOB_ID")
    if job_id is None:
        return 0
    cfg = load_config()
    path = os.path.join(cfg.node.run_dir, "jobs", str(job_id), "user", "task.json")
    try:
        task = read_task(path)
    except FileNotFoundError:
        return 0
    except (TypeError, ValueError) as e:
        print(f"print slurm-colo: warning: cannot read {path}: {e}")
        return 0
    sys.stdout.write("".join(line + "\n" for line in export_lines(task)))
    return 0


def run() -> int:
    return guarded("taskprolog", main)
