"""A job's life on the node: what the Prolog and Epilog do, as plain functions.

The hooks (slurm_colo/hooks) only read the environment and call :func:`job_start` /
:func:`job_end`; tests call these directly. Neither raises for a problem it can handle.
The processes they start are in :mod:`.detached`; the records of jobs whose Epilog never
finished, in :mod:`.recovery`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slurm_colo.contracts.enums import Mechanism, Mode
from slurm_colo.contracts.jobstate import GpuMpsStart, JobState
from slurm_colo.errors import ProtocolError
from slurm_colo.node.gpu.mps import format_mem_limit
from slurm_colo.node.gpu.mps_daemon import LazyNvml, MpsOutcome, gpu_mps, lock_wait
from slurm_colo.node.gpu.nvml import Gpu

from ..config import Config
from ..fsutil import ensure_dir, try_lock, unlock
from . import jobstate, journal, procs
from .detached import Handoff, start_sampler, stop_if_idle, stop_sampler
from .layout import NodeLayout

if TYPE_CHECKING:
    from slurm_colo.contracts.placement import Placement
    from slurm_colo.contracts.records import JobRecord

log = logging.getLogger("slurm_colo.node")


@dataclass
class JobInfo:
    job_id: int
    user: str
    uid: int
    node: str
    gpus: list[int]
    placement: Placement | None = None
    cls: str = "default"
    mode: Mode = Mode.OFF
    #: Slurm's cluster name: part of the record id, so it is fixed at the Prolog
    cluster: str = "default"


@dataclass
class StartResult:
    profiled: bool = False
    task: dict[str, Any] = field(default_factory=dict)
    mps: dict[int, MpsOutcome] = field(default_factory=dict)
    refuse: bool = False


def _profiled(cfg: Config, info: JobInfo) -> bool:
    shared = info.placement is not None and info.placement.shared
    return bool(info.gpus) and (shared or cfg.node.profile == "all")


def job_start(
    cfg: Config,
    info: JobInfo,
    launch_sampler: bool = True,
    open_gpu: Callable[[int], Gpu] | None = None,
) -> StartResult:
    """Prolog work for one job. Jobs without a placement are left alone (except profiling)."""
    lay = NodeLayout.of_config(cfg)
    res = StartResult()
    if not _profiled(cfg, info):
        return res
    res.profiled = True
    p = info.placement
    mech = p.mechanism if p is not None else None
    now = time.time()
    opener = open_gpu or LazyNvml(cfg)
    for g in info.gpus:
        with contextlib.suppress(OSError):  # a file in its place: gpu_files_problem says
            ensure_dir(lay.gpu_dir(g), 0o700)
    state = JobState(
        info.job_id,
        info.user,
        info.uid,
        info.node,
        list(info.gpus),
        p.cls if p else info.cls,
        p.mode if p else info.mode,
        now,
        procs.boot_id(),
        info.cluster,
        p,
        mech,
    )
    try:
        jobstate.write_state(lay, state)  # first: recovery can always find the job
    except OSError as e:  # a full disk: without its state the Epilog could not end it
        log.error(
            "job %d: cannot write its state in %s (%s); it runs without MPS or a record",
            info.job_id,
            lay.job_dir(info.job_id),
            e,
        )
        return StartResult()
    user_dir = lay.user_dir(info.job_id)
    task: dict[str, Any] = {
        "mechanism": mech,
        "progress_file": str(user_dir / "progress.json"),
        "messages": [],
    }
    for g in info.gpus:
        problem = lay.gpu_files_problem(g)
        if problem is not None:
            _unusable_gpu(info.job_id, g, problem, mech, res, state)
            continue
        token = try_lock(lay.gpu_lock(g), lock_wait(cfg))
        try:
            if mech == Mechanism.MPS:  # before the journal entry: faults found now predate the job
                if token is None:
                    out = MpsOutcome(
                        "broken",
                        f"GPU {g}: another slurm-colo hook held the GPU "
                        f"for over {lock_wait(cfg):.0f}s; job {info.job_id} runs "
                        "without MPS",
                    )
                elif info.uid < 0:  # an MPS server runs as one user: which one is unknown
                    out = MpsOutcome(
                        "refused",
                        f"GPU {g}: the job's uid is unknown (SLURM_JOB_UID missing or not "
                        f"a user id); job {info.job_id} runs without MPS",
                    )
                else:
                    out = gpu_mps(cfg, g, opener).ensure_daemon(info.job_id, info.uid)
                res.mps[g] = out
                state.mps[g] = GpuMpsStart(
                    out.state, out.log_offset, out.server_log_offset, out.message
                )
                st = gpu_mps(cfg, g, opener).state()
                if st.get("uuid"):
                    state.gpu_uuids.append(st["uuid"])
            now = max(now, time.time())
            # one O_APPEND write: safe even when the lock could not be had
            journal.append(
                lay.journal(g),
                {
                    "ev": "start",
                    "job": info.job_id,
                    "t": now,
                    "cls": state.cls,
                    "user": info.user,
                    "uid": info.uid,
                },
            )
        finally:
            unlock(token)
    state.start = now
    if mech == Mechanism.MPS:
        outs = [res.mps[g] for g in info.gpus]
        if all(o.state == "ok" for o in outs):
            task["mps"] = {
                "pipe_dir": outs[0].pipe_dir,
                "log_dir": outs[0].log_dir,
                "thread_pct": p.thread_pct if p else None,
                "mem_limit": (format_mem_limit(p.mem_limit_gib) if p and p.mem_limit_gib else None),
            }
        else:
            task["messages"] += [o.message for o in outs if o.state != "ok"]
            for o in outs:
                if o.state != "ok":
                    log.warning("job %d: %s", info.job_id, o.message)
                if not o.gpu_usable:
                    res.refuse = True
                    log.error(
                        "job %d: GPU left in EXCLUSIVE_PROCESS mode after an MPS failure "
                        "and NVML cannot reset it; refusing the job (the node will "
                        "drain: fix the GPU, then 'slurm-colo node cleanup')",
                        info.job_id,
                    )
    jobstate.write_task(lay, info.job_id, info.uid, task)
    if launch_sampler and cfg.node.profile != "none":
        # first: the sampler reads the MPS outcome in it (the copy: with the pid, below)
        jobstate.write_state(lay, state, copy=False)
        state.sampler_pid = start_sampler(cfg, info.job_id)
    jobstate.write_state(lay, state)
    res.task = task
    return res


def _unusable_gpu(
    job_id: int, g: int, problem: str, mech: Mechanism | None, res: StartResult, state: JobState
) -> None:
    """The Prolog on a GPU whose lock or journal someone replaced by hand: the job runs
    there without MPS and without a stay in the journal, and the admin is told how to mend
    it; the job's record is still written at its end."""
    message = (
        f"GPU {g}: {problem}; job {job_id} runs there without MPS and unrecorded in the "
        "GPU's journal (move it away, then run 'slurm-colo node cleanup')"
    )
    if mech != Mechanism.MPS:
        log.error("job %d: %s", job_id, message)
        return
    out = MpsOutcome("broken", message)
    res.mps[g] = out
    state.mps[g] = GpuMpsStart(out.state, out.log_offset, out.server_log_offset, out.message)


def job_end(
    cfg: Config,
    job_id: int,
    exit_code: int,
    sig: int = 0,
    open_gpu: Callable[[int], Gpu] | None = None,
    detach_stop: bool = True,
    handoff: Handoff | None = None,
) -> JobRecord | None:
    """Epilog work: mark ended, stop the sampler, note MPS faults, close the journal
    stay, stop MPS if the last job left, build and spool the record. Returns the record
    (None for jobs the Prolog did not handle). With ``handoff`` a detached MPS stop is
    noted there (for :func:`start_handoff`) instead of started at once."""
    lay = NodeLayout.of_config(cfg)
    opener = open_gpu or LazyNvml(cfg)
    try:
        st = jobstate.read_state(lay, job_id)
    except ProtocolError as e:
        st = state_from_damaged(lay, job_id, str(e))
        if st is None:
            set_aside(cfg, lay, job_id, (exit_code, sig), str(e), opener, detach_stop, handoff)
            return None
    if st is None and restore_from_copies(lay, epilog_of=job_id):  # e.g. run as the node returns
        st = jobstate.read_state(lay, job_id)
    if st is None:
        return None
    end = None
    if (
        st.sampler_pid
        and not procs.alive(st.sampler_pid)
        and procs.slurmd_restarted_since(st.start)
    ):
        # the job died with the node's slurmd and Slurm runs its Epilog as the node returns:
        # Slurm's exit code is 0, and now is not when the job ended
        log.warning("job %d: died with the node's slurmd; recorded as failed", job_id)
        exit_code, sig, end = -1, 0, jobstate.last_seen(lay, job_id, st.start)
    elif time.time() < st.start:
        # the clock stepped back since the Prolog (an NTP step, a clock set by hand): an
        # end before the start would have the record refused by the history
        end = jobstate.last_seen(lay, job_id, st.start)
        log.warning(
            "job %d: the clock is %.0f s behind the job's start (set back since its Prolog); "
            "its end is recorded as when it was last seen alive",
            job_id,
            st.start - time.time(),
        )
    try:
        ended = jobstate.mark_ended(lay, job_id, exit_code, sig, end)
    except OSError as e:  # a full disk: the state stays, and a later hook's recover ends it
        log.error(
            "job %d: cannot write its end in %s (%s); its record waits for a later hook",
            job_id,
            lay.job_dir(job_id),
            e,
        )
        return None
    stop_sampler(lay, job_id, st.sampler_pid)
    close_stays(cfg, lay, st, float(ended["end"]), opener, failed=exit_code != 0 or sig != 0)
    rec = finish_record(cfg, lay, job_id)
    for g in st.gpus:
        stop_if_idle(cfg, lay, g, opener, detach_stop, handoff)
    return rec


def state_from_damaged(lay: NodeLayout, job_id: int, why: str) -> JobState | None:
    """A damaged ``state.json`` written again from the job's copy on disk (the same
    content, written with it); None when the copy does not read either or the file
    cannot be written."""
    st = jobstate.state_from_copy(lay, job_id)
    if st is None:
        return None
    try:
        jobstate.write_state(lay, st)
    except OSError:
        return None  # e.g. a directory in its place: set aside
    log.warning(
        "job %d: state file damaged (%s); written again from %s",
        job_id,
        why,
        lay.running_copy(job_id),
    )
    return st


def set_aside(
    cfg: Config,
    lay: NodeLayout,
    job_id: int,
    exit_status: tuple[int, int],
    why: str,
    opener: Callable[[int], Gpu],
    detach_stop: bool = True,
    handoff: Handoff | None = None,
) -> None:
    """The Epilog of a job whose state file is damaged: no record can be built, but the
    GPUs must not stay taken. Its stays are closed in every GPU journal that has one open
    (no fault scan: where its MPS log began is in the lost state), its files are moved to
    ``<run_dir>/damaged/`` for a look (its sampler ends once they are gone), and each of
    those GPUs left without a job gets its MPS daemon stopped."""
    ended = jobstate.mark_ended(lay, job_id, *exit_status)
    gpus = [g for g in lay.gpu_indexes() if _open_stay(lay, g, job_id)]
    close_stays(cfg, lay, JobState(job_id, gpus=gpus), float(ended["end"]), opener)
    kept = jobstate.move_damaged(lay, job_id)
    log.error(
        "job %d: state file damaged (%s): no record; its stays on GPU(s) %s closed, "
        "its files moved to %s for a look",
        job_id,
        why,
        ",".join(map(str, gpus)) or "none",
        kept,
    )
    for g in gpus:
        stop_if_idle(cfg, lay, g, opener, detach_stop, handoff)


def _open_stay(lay: NodeLayout, g: int, job_id: int) -> bool:
    stay = journal.stays(journal.read(lay.journal(g))).get(job_id)
    return stay is not None and stay.end is None


def close_stays(
    cfg: Config,
    lay: NodeLayout,
    st: JobState,
    end: float,
    opener: Callable[[int], Gpu],
    failed: bool = False,
) -> None:
    """Close the job's stay in each GPU journal, after noting MPS faults there
    (``failed``: the job did not exit cleanly, so MPS servers are also asked for FAULT)."""
    job_id = st.job
    for g in st.gpus:
        problem = lay.gpu_files_problem(g)
        if problem is not None:  # changed by hand: no journal to close, no daemon to stop
            log.warning("GPU %d: %s; job %d's stay not closed", g, problem, job_id)
            continue
        token = try_lock(lay.gpu_lock(g), lock_wait(cfg))
        if token is None:
            log.warning(
                "GPU %d: lock busy; closing job %d's stay without the fault scan", g, job_id
            )
        try:
            events = journal.read(lay.journal(g))
            stay = journal.stays(events).get(job_id)
            if stay is not None and stay.end is not None:
                continue  # an Epilog re-run: this run's stay is closed already
            started = st.mps.get(g)
            if (
                st.mechanism == Mechanism.MPS
                and token is not None
                and started is not None
                and started.state == "ok"
            ):
                gpu_mps(cfg, g, opener).scan_faults(
                    started.log_offset, started.server_log_offset, query_servers=failed
                )
            journal.append(lay.journal(g), {"ev": "end", "job": job_id, "t": end})
        finally:
            unlock(token)


def finish_record(cfg: Config, lay: NodeLayout, job_id: int) -> JobRecord | None:
    """Build and spool the record of an ended job, then drop its state. If spooling fails
    everywhere the state stays, and the next hook run retries (nothing is lost)."""
    from slurm_colo.spool.directory import write_record

    from .record_build import build_minimal_record, build_record

    try:
        rec = build_record(lay, job_id, cfg.gpus)
    except Exception as e:  # a bug or a damaged file must not wedge the record forever
        log.error("job %d: full record could not be built (%s); writing a minimal one", job_id, e)
        rec = build_minimal_record(lay, job_id, f"{type(e).__name__}: {e}", cfg.gpus)
    if rec is None:
        return None
    try:
        write_record(lay.spool_dirs(), rec)
    except OSError as e:
        log.error(
            "job %d: record kept in %s until it can be spooled: %s", job_id, lay.job_dir(job_id), e
        )
        return rec
    jobstate.remove(lay, job_id)
    return rec


def restore_from_copies(lay: NodeLayout, epilog_of: int | None = None) -> list[int]:
    """:func:`jobstate.restore_copies`, logged: jobs the node's reboot ended, jobs gone
    after their run directory was emptied by hand, or (the job's own Epilog) a job whose
    run directory was emptied."""
    restored = jobstate.restore_copies(
        lay,
        procs.boot_id(),
        epilog_of,
        gone=lambda st: (
            not procs.job_alive(st.job, st.boot_id, st.start, sampler_pid=st.sampler_pid)
        ),
    )
    said = {
        jobstate.REBOOTED: "ran when the node went down; recorded as failed",
        jobstate.GONE: "its run directory was emptied and it is gone; recorded as failed",
        jobstate.OWN_EPILOG: "its state was gone from the run directory",
    }
    for job_id, why in restored:
        log.warning(
            "job %d: %s (its state restored from %s)", job_id, said[why], lay.running_copy(job_id)
        )
    return [job_id for job_id, _ in restored]
