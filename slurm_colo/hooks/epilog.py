"""Epilog (root, once per job per node): record first, then cleanup and notifications.

Order: mark ended → stop sampler → MPS fault scan and journal → record to the spool
(atomic) → stop the GPU's MPS daemon if the last job left → detached ingest → tell the
agent. A locked database or a dead agent never fails the Epilog.
"""

from __future__ import annotations

import os

from .common import env_int, exit_status, guarded, log


def main() -> int:
    from ..config import load_config
    from ..node.lifecycle import job_end, kick_ingest, recover

    job_id = env_int("SLURM_JOB_ID")
    if job_id is None:
        log.warning("epilog: no SLURM_JOB_ID; nothing to do")
        return 0
    cfg = load_config()
    code, sig = exit_status()
    rec = job_end(cfg, job_id, code, sig, cluster=os.environ.get("SLURM_CLUSTER_NAME", "default"))
    recovered = recover(cfg, skip=job_id)
    if rec is not None or recovered:
        kick_ingest(cfg)
    if rec is not None or "SPANK_COLOCATE" in os.environ:
        from ..agent.client import job_ended

        node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
        job_ended(cfg, job_id, node, code)
    return 0


def run() -> int:
    return guarded("epilog", main)
