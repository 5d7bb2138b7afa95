"""Prolog (root, once per job per node): placement → MPS daemon → per-job files → sampler.

Exit 0 for everything it can handle; the time budget is 150 ms (MPS daemon start excluded).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from slurm_colo.contracts.placement import Placement

if TYPE_CHECKING:
    from slurm_colo.config import Config

from . import REFUSE
from .common import admin_comment_tag, env_int, guarded, job_gpus, job_uid, log, node_name


def placement_for(
    cfg: Config, job_id: int, node: str, gpus: list[int], user: str, uid: int
) -> Placement | None:
    """The agent's placement for the job; else, when the agent cannot be reached or could
    not read the job from Slurm, the tag it had written at submission (in the job's
    AdminComment, read from Slurm, which its user cannot change); else None. A tag in the
    job's Comment, which its user writes, is never taken.

    Only jobs submitted with --colocate are asked about at all.
    """
    if "SPANK_COLOCATE" not in os.environ:
        return None
    from slurm_colo.contracts.client import job_start_answer, placement_in

    answer = job_start_answer(cfg, job_id, node, gpus, user, uid)
    why = "agent unreachable"
    if answer is not None:
        placed = placement_in(answer)
        if placed is not None or answer.get("slurm_unreachable") is not True:
            return placed
        why = "the agent could not read the job from Slurm"
    tag = Placement.from_tag(admin_comment_tag(job_id))
    if tag is not None:
        log.info("job %d: %s, using the job's placement tag", job_id, why)
    return tag


def job_class(cfg: Config) -> str:
    """The class of a job without placement (``profile = "all"``): its --colocate-class,
    else derived from its name, as the agent does; never raises."""
    from slurm_colo.contracts.options import derive_class

    from ..errors import OptionError

    name = os.environ.get("SLURM_JOB_NAME")
    numbers = cfg.placement.class_name_numbers
    try:
        return derive_class(name, os.environ.get("SPANK_COLOCATE_CLASS"), numbers)
    except OptionError:
        return derive_class(name, numbers=numbers)


def shared_gpus_held(cfg: Config) -> tuple[str, list[int]] | None:
    """(node, GPUs) of a job holding a GPU of the node's shared pool, else None (a job we
    did not place can take an idle one with an untyped exclusive request)."""
    node = node_name()
    layout = cfg.layout_for(node)
    gpus = job_gpus()
    if layout is None or not any(layout.is_shared(g) for g in gpus):
        return None
    return node, gpus


def announce_if_on_shared_gpu(cfg: Config, job_id: int) -> None:
    """A job we did not place that holds a GPU of the shared pool: tell the agent at once,
    so it aims no new job there before its next look at Slurm (the Epilog tells it when
    the job ends, :func:`announce_end_if_on_shared_gpu`). Best effort, short time limit."""
    held = shared_gpus_held(cfg)
    if held is None:
        return
    from slurm_colo.contracts.client import job_start_answer

    job_start_answer(
        cfg,
        job_id,
        held[0],
        held[1],
        os.environ.get("SLURM_JOB_USER", ""),
        job_uid(),
        timeout_s=0.2,
    )


def announce_end_if_on_shared_gpu(cfg: Config, job_id: int, exit_code: int) -> None:
    """The end of such a job: the agent may place on its GPU at once, not only once its
    next look at Slurm no longer lists the job. Best effort, short time limit."""
    held = shared_gpus_held(cfg)
    if held is None:
        return
    from slurm_colo.contracts.client import job_ended

    job_ended(cfg, job_id, held[0], exit_code, timeout_s=0.2)


def pending_jobs(run_dir: str, spool_dir: str, job_id: int) -> bool:
    """Any other job's state on this node, or a copy of a job's state on disk (another
    job's, or this job's own from a run a reboot ended: Slurm requeues a batch job whose
    node failed, and it may land here again): a cheap check before importing the node
    side."""
    for d, own in ((os.path.join(run_dir, "jobs"), str(job_id)),
                   (os.path.join(spool_dir, "running"), None)):  # fmt: skip
        try:
            if any(e.name != own for e in os.scandir(d)):
                return True
        except OSError:
            pass
    return False


def main() -> int:
    from ..config import load_config

    t0 = time.monotonic()
    job_id = env_int("SLURM_JOB_ID")
    if job_id is None:
        log.warning("prolog: no SLURM_JOB_ID; nothing to do")
        return 0
    cfg = load_config()
    if pending_jobs(cfg.node.run_dir, cfg.node.spool_dir, job_id):
        from ..node.recovery import recover

        recover(cfg, skip=job_id)
    if "SPANK_COLOCATE" not in os.environ and cfg.node.profile != "all":
        announce_if_on_shared_gpu(cfg, job_id)
        return 0  # not a co-location job: untouched
    from ..node.lifecycle import JobInfo, job_start

    node = node_name()
    user = os.environ.get("SLURM_JOB_USER", "")
    uid = job_uid()
    gpus = job_gpus()
    p = placement_for(cfg, job_id, node, gpus, user, uid)
    if p and not gpus and p.gpu is not None:
        gpus = [p.gpu]
    info = JobInfo(
        job_id,
        user,
        uid,
        node,
        gpus,
        p,
        cls=job_class(cfg),
        cluster=os.environ.get("SLURM_CLUSTER_NAME") or "default",
    )
    res = job_start(cfg, info)
    if res.profiled:
        log.info(
            "job %d: prolog done in %.0f ms (mechanism %s)",
            job_id,
            (time.monotonic() - t0) * 1000,
            res.task.get("mechanism"),
        )
    if res.refuse:
        return REFUSE
    return 0


def run() -> int:
    return guarded("prolog", main)
