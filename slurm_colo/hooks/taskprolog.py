"""TaskProlog (job user, once per step): print the ``export`` lines the Prolog prepared.

Reads ``<run_dir>/jobs/<id>/user/task.json``; prints nothing for jobs without one. When
MPS could not be set up the job is told on its stdout (``print`` lines) instead of silently
running without it.
"""

from __future__ import annotations

import json
import os
import sys

from slurm_colo.contracts.enums import Mechanism

from .common import env_int, guarded


def export_lines(task: dict) -> list[str]:
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


def main() -> int:
    from ..config import load_config

    job_id = env_int("SLURM_JOB_ID")
    if job_id is None:
        return 0
    cfg = load_config()
    path = os.path.join(cfg.node.run_dir, "jobs", str(job_id), "user", "task.json")
    try:
        with open(path, "rb") as f:
            task = json.loads(f.read())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as e:
        print(f"print slurm-colo: warning: cannot read {path}: {e}")
        return 0
    sys.stdout.write("".join(line + "\n" for line in export_lines(task)))
    return 0


def run() -> int:
    return guarded("taskprolog", main)
