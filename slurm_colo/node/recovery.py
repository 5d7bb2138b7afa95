"""Records of jobs whose Epilog never finished: killed mid-way, or never run because the
job died with the node (its state restored from the copy on disk after a reboot, see
:func:`.jobstate.restore_copies`). Every hook runs :func:`recover` after its own work; it
is cheap when nothing is pending (one directory listing)."""

from __future__ import annotations

import logging
import os

from slurm_colo.errors import ProtocolError
from slurm_colo.node.gpu.mps_daemon import LazyNvml

from ..config import Config
from . import jobstate, procs
from .detached import Handoff, stop_if_idle
from .layout import NodeLayout
from .lifecycle import close_stays, finish_record, restore_from_copies, state_from_damaged

log = logging.getLogger("slurm_colo.node")


def recover(cfg: Config, skip: int | None = None, handoff: Handoff | None = None) -> list[int]:
    """Spool records of jobs whose Epilog was killed, and of jobs that died with the node.

    Cheap when nothing is pending (one directory listing). A job is recovered when it
    has an ``ended.json`` whose Epilog process is gone, or when it is no longer alive
    (:func:`procs.job_alive`). Returns the recovered job ids. ``handoff``: as for
    :func:`job_end`.
    """
    lay = NodeLayout.of_config(cfg)
    done: list[int] = []
    restored = restore_from_copies(lay)
    for job_id in jobstate.job_ids(lay):
        if job_id == skip and job_id not in restored:  # an earlier run's, ended by a reboot:
            continue  # recorded before the Prolog starts the job again
        try:
            _recover_job(cfg, lay, job_id, handoff, done)
        except Exception as e:  # one damaged job must not stop every later hook here
            log.error(
                "job %d: recovery failed (%s: %s); left in %s",
                job_id,
                type(e).__name__,
                e,
                lay.job_dir(job_id),
            )
    return done


def _recover_job(
    cfg: Config, lay: NodeLayout, job_id: int, handoff: Handoff | None, done: list[int]
) -> None:
    """:func:`recover` for one job; its id goes into ``done`` once its record is spooled.
    A damaged state file is written again from the job's copy on disk; when that is
    damaged too, it raises (``ProtocolError``): :func:`recover` logs it and leaves the job
    to its Epilog, which sets it aside."""
    try:
        st = jobstate.read_state(lay, job_id)
    except ProtocolError as e:
        st = state_from_damaged(lay, job_id, str(e))
        if st is None:
            raise
    if st is None:
        return
    ended = jobstate.read_ended(lay, job_id)
    if ended is None:
        if procs.job_alive(job_id, st.boot_id, st.start, sampler_pid=st.sampler_pid):
            return  # still running (or its Epilog has not started yet)
        ended = jobstate.mark_ended(
            lay, job_id, exit_code=-1, signal=0, end=jobstate.last_seen(lay, job_id, st.start)
        )
    elif ended.get("epilog_pid") != os.getpid() and procs.alive(ended.get("epilog_pid")):
        return  # its Epilog is at work right now
    opener = LazyNvml(cfg)
    close_stays(cfg, lay, st, float(ended["end"]), opener)
    if finish_record(cfg, lay, job_id) is None:
        return
    done.append(job_id)
    log.warning("job %d: record recovered after an interrupted Epilog", job_id)
    for g in st.gpus:
        stop_if_idle(cfg, lay, g, opener, handoff=handoff)
