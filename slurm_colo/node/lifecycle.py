"""A job's life on the node: what the Prolog and Epilog do, as plain functions.

The hooks (slurm_colo/hooks) only read the environment and call :func:`job_start` /
:func:`job_end`; tests call these directly. Neither raises for a problem it can handle.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
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
from ..fsutil import ensure_dir, locked, try_lock, unlock
from . import jobstate, journal, procs
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


@dataclass
class Handoff:
    """What an Epilog leaves to one detached helper (:mod:`.handoff`) once the records are
    spooled: stop the MPS daemons of the GPUs the last job left, then ingest the spool.
    One process for all of it instead of one per GPU plus one for the ingest."""

    stop_gpus: list[int] = field(default_factory=list)
    ingest: bool = False

    def args(self) -> list[str]:
        out = [a for g in self.stop_gpus for a in ("--stop", str(g))]
        return out + (["--ingest"] if self.ingest else [])


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
        jobstate.write_state(lay, state)  # first: the sampler reads the MPS outcome in it
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


def start_sampler(cfg: Config, job_id: int) -> int | None:
    """Start the job's NVML sampler as a detached process; its PID (None on failure)."""
    try:
        return _detached(cfg, "slurm_colo.node.sampler", str(job_id))
    except OSError as e:
        log.warning("job %d: sampler not started: %s", job_id, e)
        return None


def stop_sampler(lay: NodeLayout, job_id: int, pid: int | None, wait_s: float = 0.25) -> bool:
    """SIGTERM the sampler and wait (briefly) for its final summary in profile.json.

    Returns True when the final summary is there; otherwise the last periodic one is used.
    """
    from ..fsutil import read_json

    if not pid or not procs.alive(pid):
        return False
    if not procs.is_sampler_of(pid, job_id):
        log.warning("job %d: pid %d is not its sampler any more; not signalled", job_id, pid)
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    path = lay.job_dir(job_id) / "profile.json"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if (read_json(path) or {}).get("final"):
            return True
        if not procs.alive(pid):
            return bool((read_json(path) or {}).get("final"))
        time.sleep(0.002)
    return False


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
        st = _from_copy(lay, job_id, str(e))
        if st is None:
            set_aside(cfg, lay, job_id, (exit_code, sig), str(e), opener, detach_stop, handoff)
            return None
    if st is None and _restore(lay, epilog_of=job_id):  # e.g. run as the node returns
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
        exit_code, sig, end = -1, 0, _last_seen(lay, job_id, st.start)
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
    _close_stays(cfg, lay, st, float(ended["end"]), opener, failed=exit_code != 0 or sig != 0)
    rec = finish_record(cfg, lay, job_id)
    for g in st.gpus:
        _maybe_stop(cfg, lay, g, opener, detach_stop, handoff)
    return rec


def _from_copy(lay: NodeLayout, job_id: int, why: str) -> JobState | None:
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
    _close_stays(cfg, lay, JobState(job_id, gpus=gpus), float(ended["end"]), opener)
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
        _maybe_stop(cfg, lay, g, opener, detach_stop, handoff)


def _open_stay(lay: NodeLayout, g: int, job_id: int) -> bool:
    stay = journal.stays(journal.read(lay.journal(g))).get(job_id)
    return stay is not None and stay.end is None


def _close_stays(
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


def _maybe_stop(
    cfg: Config,
    lay: NodeLayout,
    g: int,
    opener: Callable[[int], Gpu],
    detach: bool = True,
    handoff: Handoff | None = None,
) -> None:
    """The last job left GPU ``g``: stop its MPS daemon and compact the journal.

    ``detach``: the stop (quit, process check, compute mode back to DEFAULT through NVML)
    runs in a detached process that takes the GPU lock, so the Epilog does not wait for it;
    a Prolog arriving meanwhile waits on the lock and then finds the GPU clean. With
    ``handoff`` the GPU is only noted there; :func:`start_handoff` starts that process.
    """
    if lay.gpu_files_problem(g) is not None:  # _close_stays said so
        return
    try:
        with locked(lay.gpu_lock(g), timeout_s=lock_wait(cfg)):
            # compact always (a GPU that is never idle would grow its journal forever);
            # a no-op while the journal is small and jobs are on the GPU
            journal.compact(lay.journal(g), set(jobstate.job_ids(lay)))
            if journal.active(journal.read(lay.journal(g))):
                return
            gm = gpu_mps(cfg, g, opener)
            if not gm.state():
                return
            if not detach:
                gm.stop()
                return
    except TimeoutError:
        log.warning(
            "GPU %d: lock busy; MPS stop left to the next hook or 'slurm-colo node cleanup'", g
        )
        return
    if handoff is not None:
        if g not in handoff.stop_gpus:
            handoff.stop_gpus.append(g)
        return
    try:
        _detached(cfg, "slurm_colo.node.gpu.mps_daemon", "stop", str(g))
    except OSError as e:
        log.warning("GPU %d: cannot start the MPS stop helper (%s); stopping inline", g, e)
        _stop_inline(cfg, lay, g, opener)


def _stop_inline(cfg: Config, lay: NodeLayout, g: int, opener: Callable[[int], Gpu]) -> None:
    try:
        with locked(lay.gpu_lock(g), timeout_s=lock_wait(cfg)):
            if not journal.active(journal.read(lay.journal(g))):
                gpu_mps(cfg, g, opener).stop()
    except TimeoutError:
        log.warning(
            "GPU %d: lock busy; MPS stop left to the next hook or 'slurm-colo node cleanup'", g
        )


def start_handoff(cfg: Config, handoff: Handoff) -> int | None:
    """Start the detached helper for ``handoff`` (nothing to do: None). If it cannot be
    started, the MPS stops run inline and the ingest is left to the next Epilog or
    ``slurm-colo spool ingest`` (the records are in the spool already)."""
    if not handoff.stop_gpus and not handoff.ingest:
        return None
    try:
        return _detached(cfg, "slurm_colo.node.handoff", *handoff.args())
    except OSError as e:
        log.warning("cannot start the detached helper (%s): MPS stop inline, ingest later", e)
        lay = NodeLayout.of_config(cfg)
        opener = LazyNvml(cfg)
        for g in handoff.stop_gpus:
            _stop_inline(cfg, lay, g, opener)
        return None


def _which(name: str) -> str | None:
    """``shutil.which`` without importing shutil (hook start-up time)."""
    for d in os.get_exec_path():
        path = os.path.join(d, name)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def _detached(cfg: Config, module: str, *args: str) -> int:
    """Start ``python -m module args`` in its own session at lower CPU priority (it must
    not slow the hook that started it or the job), detached from our stdio."""
    nice = _which("nice")
    prefix = [nice, "-n", "10"] if nice else []  # nice execs python: same PID
    p = subprocess.Popen(
        [*prefix, sys.executable, "-m", module, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env=_child_env(cfg),
    )
    return p.pid


def _child_env(cfg: Config) -> dict[str, str]:
    env = dict(os.environ)
    if os.path.exists(cfg.source):
        env["SLURM_COLO_CONFIG"] = cfg.source
    return env


def recover(cfg: Config, skip: int | None = None, handoff: Handoff | None = None) -> list[int]:
    """Spool records of jobs whose Epilog was killed, and of jobs that died with the node.

    Cheap when nothing is pending (one directory listing). A job is recovered when it
    has an ``ended.json`` whose Epilog process is gone, or when it is no longer alive
    (:func:`procs.job_alive`). Returns the recovered job ids. ``handoff``: as for
    :func:`job_end`.
    """
    lay = NodeLayout.of_config(cfg)
    done: list[int] = []
    restored = _restore(lay)
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


def _restore(lay: NodeLayout, epilog_of: int | None = None) -> list[int]:
    """:func:`jobstate.restore_copies`, logged: jobs the node's reboot ended, or (the
    job's own Epilog) whose run directory was emptied."""
    restored = jobstate.restore_copies(lay, procs.boot_id(), epilog_of)
    for job_id, rebooted in restored:
        log.warning(
            "job %d: %s (its state restored from %s)",
            job_id,
            "ran when the node went down; recorded as failed"
            if rebooted
            else "its state was gone from the run directory",
            lay.running_copy(job_id),
        )
    return [job_id for job_id, _ in restored]


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
        st = _from_copy(lay, job_id, str(e))
        if st is None:
            raise
    if st is None:
        return
    ended = jobstate.read_ended(lay, job_id)
    if ended is None:
        if procs.job_alive(job_id, st.boot_id, st.start, sampler_pid=st.sampler_pid):
            return  # still running (or its Epilog has not started yet)
        ended = jobstate.mark_ended(
            lay, job_id, exit_code=-1, signal=0, end=_last_seen(lay, job_id, st.start)
        )
    elif ended.get("epilog_pid") != os.getpid() and procs.alive(ended.get("epilog_pid")):
        return  # its Epilog is at work right now
    opener = LazyNvml(cfg)
    _close_stays(cfg, lay, st, float(ended["end"]), opener)
    if finish_record(cfg, lay, job_id) is None:
        return
    done.append(job_id)
    log.warning("job %d: record recovered after an interrupted Epilog", job_id)
    for g in st.gpus:
        _maybe_stop(cfg, lay, g, opener, handoff=handoff)


def _last_seen(lay: NodeLayout, job_id: int, start: float) -> float:
    try:
        return max(start, (lay.job_dir(job_id) / "profile.json").stat().st_mtime)
    except OSError:
        return start
