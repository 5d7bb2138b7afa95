"""Per-job files under ``<run_dir>/jobs/<id>/`` (see layout.py): written by the Prolog,
completed by the Epilog, removed only once the job's record is safely spooled."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from slurm_colo.contracts.digits import decimal, number, whole
from slurm_colo.contracts.jobstate import PID_MAX, JobState
from slurm_colo.errors import ProtocolError
from slurm_colo.fsutil import atomic_write_json, chown_if_root, read_json

from .layout import NodeLayout

log = logging.getLogger("slurm_colo.node")


def write_state(layout: NodeLayout, state: JobState, copy: bool = True) -> None:
    """The job's ``state.json``, then (with ``copy``) its copy on disk under the spool
    directory: the run directory is a tmpfs, so after the node's reboot only the copy tells
    that the job ran (:func:`restore_copies`). The copy is flushed to disk, as a reboot is
    often a crash or a power cut; it is best effort."""
    d = layout.job_dir(state.job)
    d.mkdir(parents=True, exist_ok=True, mode=0o755)
    atomic_write_json(d / "state.json", state.to_json(), fsync=False)
    if not copy:
        return
    try:
        layout.running_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_json(layout.running_copy(state.job), state.to_json(), fsync=True)
    except OSError:
        pass  # the spool's disk full or unwritable: only a reboot would miss it


def _drop_copy(layout: NodeLayout, job_id: int) -> None:
    for path in (layout.running_copy(job_id), layout.running_profile(job_id)):
        with contextlib.suppress(OSError):
            os.unlink(path)


def copy_profile(layout: NodeLayout, job_id: int, profile: dict[str, Any]) -> None:
    """The sampler's summary on disk beside the state's copy, at each flush, which also
    marks the job seen alive now: after a reboot its record has that profile and ends at
    the copy's last change. Only while the state's copy is there (best effort)."""
    if not layout.running_copy(job_id).exists():
        return
    with contextlib.suppress(OSError):
        atomic_write_json(layout.running_profile(job_id), profile, fsync=False)
        os.utime(layout.running_copy(job_id))


def state_from_copy(layout: NodeLayout, job_id: int) -> JobState | None:
    """The job's state as its copy on disk holds it (written with every ``state.json``);
    None when there is no copy or it does not read."""
    try:
        return JobState.from_json(read_json(layout.running_copy(job_id)), job_id)
    except (ProtocolError, TypeError, ValueError):
        return None


def _job_entries(d: Path) -> list[tuple[int, str, Path]]:
    """(job id, what follows the first dot, path) of each entry of ``d`` named
    ``JOB.REST``."""
    try:
        names = [e.name for e in os.scandir(d)]
    except OSError:
        return []
    out = []
    for name in names:
        stem, dot, rest = name.partition(".")
        job = decimal(stem, 12)
        if job is not None and dot:
            out.append((job, rest, d / name))
    return out


def _journal_again(layout: NodeLayout, st: JobState) -> None:
    """The job's start in each of its GPUs' journals that lost it with the run directory:
    the jobs the reboot ended together on a GPU are each other's co-runners in their
    records (the recovery closes each stay at the job's last sign of life). A journal that
    still has the job's stay (only the job's directory was deleted) is left as it is."""
    from . import journal

    for g in st.gpus:
        with contextlib.suppress(OSError):
            if st.job in journal.stays(journal.read(layout.journal(g))):
                continue
            layout.gpu_dir(g).mkdir(parents=True, exist_ok=True, mode=0o700)
            journal.append(
                layout.journal(g),
                {"ev": "start", "job": st.job, "t": st.start, "cls": st.cls,
                 "user": st.user, "uid": st.uid},
            )  # fmt: skip


def orphan_copies(layout: NodeLayout) -> list[int]:
    """Jobs with a copy of their state on disk but no job directory: ended by a reboot
    (recorded by the next hook) or their run directory emptied by hand."""
    return sorted(
        job
        for job, ext, _ in _job_entries(layout.running_dir())
        if ext == "state" and not os.path.lexists(layout.job_dir(job))
    )


#: why :func:`restore_copies` wrote a job's state back: the node rebooted under it; it is
#: gone (its run directory emptied by hand, no Epilog came); its own Epilog asked
REBOOTED, GONE, OWN_EPILOG = "rebooted", "gone", "own epilog"


def restore_copies(
    layout: NodeLayout,
    boot_id: str,
    epilog_of: int | None = None,
    gone: Callable[[JobState], bool] | None = None,
) -> list[tuple[int, str]]:
    """Jobs whose copy on disk outlived their run directory: (job id, why) for each whose
    ``state.json`` is written back from the copy (``REBOOTED``, ``GONE``, ``OWN_EPILOG``).

    A copy from another boot (the tmpfs run directory went with the reboot) also gets an
    ``ended.json`` with exit code -1 at the copy's last change (the job was last seen
    alive then), so the recovery records the job as failed. A copy from this boot (the run
    directory emptied by hand) is restored by the job's own Epilog (``epilog_of``: that
    job only), which knows how the job ended; by any other hook only once ``gone(state)``
    says the job no longer runs, and then as failed, as after a reboot. A damaged copy is
    deleted."""
    restored = []
    for job in orphan_copies(layout):
        if epilog_of is not None and job != epilog_of:
            continue
        st = state_from_copy(layout, job)
        try:
            seen = os.stat(layout.running_copy(job)).st_mtime
        except OSError:
            st = None
        if st is None:
            _drop_copy(layout, job)
            continue
        if bool(st.boot_id) and st.boot_id != boot_id:
            why = REBOOTED
        elif epilog_of is not None:
            why = OWN_EPILOG
        elif gone is not None and gone(st):
            why = GONE
        else:
            continue  # it may still run: its Epilog records it
        try:
            write_state(layout, st)
            if why != OWN_EPILOG:
                mark_ended(layout, job, exit_code=-1, signal=0, end=max(st.start, seen))
                profile = read_json(layout.running_profile(job))
                if isinstance(profile, dict):
                    atomic_write_json(layout.job_dir(job) / "profile.json", profile, fsync=False)
        except OSError:
            continue  # the run directory's disk full: the copy waits for a later hook
        if why != OWN_EPILOG:
            _journal_again(layout, st)
        restored.append((job, why))
    return sorted(restored)


def read_state(layout: NodeLayout, job_id: int) -> JobState | None:
    """The job's state; None when missing. A damaged file (not JSON, not a regular file,
    a field of the wrong type) raises ProtocolError: the Epilog sets the job aside
    (``lifecycle.set_aside``), a recovery leaves it for its Epilog."""
    path = layout.job_dir(job_id) / "state.json"
    raw = read_json(path)
    if raw is None:
        if os.path.lexists(path):
            raise ProtocolError(f"{path}: not a readable JSON file")
        return None
    return JobState.from_json(raw, job_id)


def write_task(layout: NodeLayout, job_id: int, uid: int, task: dict[str, Any]) -> Path:
    """The TaskProlog's input, readable by the job's user only."""
    d = layout.user_dir(job_id)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = d / "task.json"
    atomic_write_json(path, task, mode=0o600, fsync=False)
    chown_if_root(path, uid)
    chown_if_root(d, uid)  # last: the user gets the directory once root is done in it
    return path


def read_task(layout: NodeLayout, job_id: int) -> dict[str, Any] | None:
    return read_json(layout.user_dir(job_id) / "task.json")


def mark_ended(
    layout: NodeLayout, job_id: int, exit_code: int, signal: int = 0, end: float | None = None
) -> dict[str, Any]:
    """First thing the Epilog writes; keeps the first end time if the Epilog is re-run."""
    path = layout.job_dir(job_id) / "ended.json"
    old = read_ended(layout, job_id)
    if old is not None:
        return old
    ended = {
        "end": end if end is not None else time.time(),
        "exit_code": exit_code,
        "signal": signal,
        "epilog_pid": os.getpid(),
    }
    if path.is_dir() and not path.is_symlink():  # made by hand: no file can replace it
        aside = path.with_name(f"ended.json.not-a-file.{time.time_ns()}")
        os.rename(path, aside)
        log.warning("job %d: a directory stood in place of %s; moved to %s", job_id, path, aside)
    atomic_write_json(path, ended, fsync=True)
    return ended


def read_ended(layout: NodeLayout, job_id: int) -> dict[str, Any] | None:
    """What :func:`mark_ended` wrote; None when missing or damaged (then written anew)."""
    ended = read_json(layout.job_dir(job_id) / "ended.json")
    if not isinstance(ended, dict):
        return None
    try:
        number(ended.get("end"), "end", 0, 2**40)
        whole(ended.get("exit_code", 0), "exit_code", -(2**31), 2**31)
        whole(ended.get("signal", 0), "signal", 0, 255)
        if ended.get("epilog_pid") is not None:
            whole(ended["epilog_pid"], "epilog_pid", 1, PID_MAX)
    except (TypeError, ValueError):
        return None
    return ended


def read_profile(layout: NodeLayout, job_id: int) -> dict[str, Any] | None:
    return read_json(layout.job_dir(job_id) / "profile.json")


def read_progress(layout: NodeLayout, job_id: int) -> dict[str, Any] | None:
    # written by the job: no symlinks followed, size capped (read_json does both)
    return read_json(layout.user_dir(job_id) / "progress.json")


def job_ids(layout: NodeLayout) -> list[int]:
    try:
        ids = (decimal(e.name, 12) for e in os.scandir(layout.jobs_dir()))
        return sorted(i for i in ids if i is not None)
    except OSError:
        return []


def remove(layout: NodeLayout, job_id: int) -> None:
    """Drop the job's directory (its record is spooled). It is renamed into
    ``<run_dir>/trash/`` (root only): one metadata operation, after which recovery, the
    sampler and the job user no longer see it; :func:`empty_trash` (the Epilog's detached
    helper) deletes it, so the Epilog does not wait for the deletion of every file, however
    many the job left in its ``user/`` directory. Deleted at once if the rename fails."""
    _drop_copy(layout, job_id)
    src = layout.job_dir(job_id)
    trash = layout.trash_dir()
    try:
        trash.mkdir(mode=0o700, exist_ok=True)
        os.rename(src, trash / f"{job_id}.{os.getpid()}.{time.time_ns()}")
        return
    except FileNotFoundError:
        if not src.exists():
            return
    except OSError:
        pass
    import shutil

    shutil.rmtree(src, ignore_errors=True)


def move_damaged(layout: NodeLayout, job_id: int) -> Path:
    """Move the job's directory to ``<run_dir>/damaged/`` (kept for a look, out of every
    hook's way); where it went (its old place if it cannot be moved)."""
    _drop_copy(layout, job_id)
    src = layout.job_dir(job_id)
    dst = layout.damaged_dir() / f"{job_id}.{time.time_ns()}"
    try:
        layout.damaged_dir().mkdir(mode=0o700, exist_ok=True)
        os.rename(src, dst)
    except OSError:
        return src
    return dst


#: how long ``<run_dir>/damaged/`` keeps a job's files (``slurm-colo node status`` lists them)
DAMAGED_KEEP_S = 30 * 86400


class Damaged(NamedTuple):
    job: int
    set_aside: float  # when, in seconds since the epoch
    path: Path


def damaged_jobs(layout: NodeLayout) -> list[Damaged]:
    """Each entry :func:`move_damaged` made, oldest first; an entry not named as it names
    them (put there by hand) is not listed."""
    out = []
    for job, ns, path in _job_entries(layout.damaged_dir()):
        t = decimal(ns, 20)
        if t is not None:
            out.append(Damaged(job, t / 1e9, path))
    return sorted(out, key=lambda d: d.set_aside)


def prune_damaged(layout: NodeLayout, now: float | None = None) -> list[int]:
    """Delete what :func:`move_damaged` set aside more than :data:`DAMAGED_KEEP_S` ago;
    the job ids deleted."""
    import shutil

    now = time.time() if now is None else now
    gone = []
    for d in damaged_jobs(layout):
        if now - d.set_aside > DAMAGED_KEEP_S:
            shutil.rmtree(d.path, ignore_errors=True)
            gone.append(d.job)
    return gone


def empty_trash(layout: NodeLayout) -> int:
    """Delete what :func:`remove` moved aside; the number of entries deleted."""
    import shutil

    try:
        entries = list(os.scandir(layout.trash_dir()))
    except OSError:
        return 0
    for e in entries:
        if e.is_dir(follow_symlinks=False):
            shutil.rmtree(e.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(e.path)
    return len(entries)


def last_seen(layout: NodeLayout, job_id: int, start: float) -> float:
    """When the job was last known alive: its sampler's last summary, else its start."""
    try:
        return max(start, (layout.job_dir(job_id) / "profile.json").stat().st_mtime)
    except OSError:
        return start
