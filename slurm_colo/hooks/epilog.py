"""Epilog (root, once per job per node): record first, then cleanup and notifications.

Order: mark ended → stop sampler → MPS fault scan and journal → record to the spool
(atomic) → recover interrupted jobs → one detached helper (:mod:`..node.handoff`) stops
the GPU's MPS daemon if the last job left and ingests the spool → tell the agent. A locked
database or a dead agent never fails the Epilog, and it waits for neither.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .common import env_int, exit_status, guarded, log, node_name

if TYPE_CHECKING:
    from slurm_colo.config import Config


def main() -> int:
    from ..config import load_config
    from .prolog import pending_jobs

    job_id = env_int("SLURM_JOB_ID")
    if job_id is None:
        log.warning("epilog: no SLURM_JOB_ID; nothing to do")
        return 0
    cfg = load_config()
    mine = os.path.isdir(os.path.join(cfg.node.run_dir, "jobs", str(job_id))) or (
        os.path.exists(os.path.join(cfg.node.spool_dir, "running", f"{job_id}.state"))
    )  # the copy alone: the job ran when the node went down, and this Epilog is its own
    if not mine and not pending_jobs(cfg.node.run_dir, cfg.node.spool_dir, job_id):
        _tell_agent(cfg, job_id, exit_status()[0], recorded=False, mine=False)
        return 0  # a job the Prolog left alone, and nothing to recover
    from ..node.detached import Handoff, start_handoff
    from ..node.lifecycle import job_end
    from ..node.recovery import recover

    code, sig = exit_status()
    handoff = Handoff()
    rec = job_end(cfg, job_id, code, sig, handoff=handoff)
    recovered = recover(cfg, skip=job_id, handoff=handoff)
    handoff.ingest = rec is not None or bool(recovered)
    start_handoff(cfg, handoff)
    _tell_agent(cfg, job_id, code, recorded=rec is not None, mine=mine)
    return 0


def _tell_agent(cfg: Config, job_id: int, code: int, recorded: bool, mine: bool) -> None:
    """The job's end, to the agent: a ``--colocate`` job's or a recorded one's; and a job
    we did not place that held a shared GPU whole (the Prolog announced its start)."""
    if recorded or "SPANK_COLOCATE" in os.environ:
        from slurm_colo.contracts.client import job_ended

        job_ended(cfg, job_id, node_name(), code)
    elif not mine:
        from .prolog import announce_end_if_on_shared_gpu

        announce_end_if_on_shared_gpu(cfg, job_id, code)


def run() -> int:
    return guarded("epilog", main)
