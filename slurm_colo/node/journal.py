"""Per-GPU occupancy journal: which jobs used a GPU, when, and which MPS faults hit it.

One append-only JSON-lines file per GPU, ``<run_dir>/gpu/<index>/journal.jsonl``. Each
line is one event, appended with a single ``write`` under the GPU lock:

- ``{"ev": "start", "t": ..., "job": 12, "cls": "resnet50", "user": "ana", "uid": 1000}``
- ``{"ev": "end", "t": ..., "job": 12}``
- ``{"ev": "fault", "t": ..., "kind": "client_fatal" | "daemon_dead" | "daemon_hung",
  "detail": "..."}``

The pure functions below turn events into co-runner overlap intervals and fault flags; the
journal is truncated when the last job leaves the GPU and no record is still pending, all
but the faults of the last :data:`FAULTS_KEPT_S` (at most :data:`FAULTS_KEPT`), which
``slurm-colo node status`` shows.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_colo.fsutil import read_small

#: a journal larger than this is compacted (ended jobs older than every live job dropped)
MAX_BYTES = 256 * 1024
#: faults of this recent past survive compaction, for ``slurm-colo node status``
FAULTS_KEPT_S = 24 * 3600.0
FAULTS_KEPT = 20


@dataclass(frozen=True)
class Stay:
    """One job's time on the GPU; ``end`` is None while it still runs."""

    job: int
    cls: str
    user: str
    uid: int
    start: float
    end: float | None


def append(path: Path, event: dict[str, Any]) -> None:
    event.setdefault("t", time.time())
    line = (json.dumps(event, sort_keys=True) + "\n").encode()
    # O_NONBLOCK: a FIFO in its place fails here instead of blocking the hook for ever
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        size = st.st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # a torn line from a crash mid-append: start afresh
        os.write(fd, line)
    finally:
        os.close(fd)


def _well_formed(ev: Any) -> bool:
    """An event the readers below can use: its kind, and for a start, an end or a fault
    its job and time as numbers."""
    if not isinstance(ev, dict) or not isinstance(ev.get("ev"), str):
        return False
    try:
        if ev["ev"] in ("start", "end"):
            int(ev["job"])
            int(ev.get("uid", -1))
        if ev["ev"] in ("start", "end", "fault"):
            float(ev["t"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return False
    return True


def read(path: Path) -> list[dict[str, Any]]:
    """All well-formed events; a torn last line (node crash mid-append) or a damaged one
    is skipped."""
    raw = read_small(path, limit=None)  # a FIFO or a directory in its place: nothing
    if raw is None:
        return []
    out = []
    for line in raw.splitlines():
        try:
            ev = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if _well_formed(ev):
            out.append(ev)
    return out


def stays(events: list[dict[str, Any]]) -> dict[int, Stay]:
    """Each job's stay on the GPU (last start wins; an end closes it)."""
    out: dict[int, Stay] = {}
    for ev in events:
        if ev["ev"] == "start":
            out[int(ev["job"])] = Stay(
                int(ev["job"]),
                str(ev.get("cls", "default")),
                str(ev.get("user", "")),
                int(ev.get("uid", -1)),
                float(ev["t"]),
                None,
            )
        elif ev["ev"] == "end" and int(ev["job"]) in out:
            s = out[int(ev["job"])]
            out[s.job] = Stay(s.job, s.cls, s.user, s.uid, s.start, float(ev["t"]))
    return out


def active(events: list[dict[str, Any]]) -> list[Stay]:
    return [s for s in stays(events).values() if s.end is None]


def overlaps(
    events: list[dict[str, Any]], job: int, start: float, end: float
) -> list[tuple[Stay, float, float]]:
    """Other jobs that shared the GPU with ``job`` during [start, end], with the overlap."""
    out = []
    for s in stays(events).values():
        if s.job == job:
            continue
        lo = max(start, s.start)
        hi = min(end, s.end if s.end is not None else end)
        if hi > lo:
            out.append((s, lo, hi))
    return sorted(out, key=lambda x: (x[1], x[0].job))


def faults(
    events: list[dict[str, Any]], start: float, end: float, slack_s: float = 5.0
) -> list[dict[str, Any]]:
    """Fault events inside [start, end + slack]: a job that started after a fault was not
    hit by it; one whose clients died a moment before the fault was logged was."""
    return [ev for ev in events if ev["ev"] == "fault" and start <= float(ev["t"]) <= end + slack_s]


def shared_intervals(
    events: list[dict[str, Any]], job: int, start: float, end: float
) -> list[tuple[float, float]]:
    """Merged intervals of [start, end] during which at least one other job was present."""
    iv = sorted((lo, hi) for _, lo, hi in overlaps(events, job, start, end))
    merged: list[tuple[float, float]] = []
    for lo, hi in iv:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def recent_faults(events: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """The last :data:`FAULTS_KEPT` faults of the last :data:`FAULTS_KEPT_S`, oldest first."""
    return faults(events, now - FAULTS_KEPT_S, math.inf)[-FAULTS_KEPT:]


def compact(path: Path, keep_jobs: set[int], now: float | None = None) -> None:
    """Rewrite the journal keeping live stays, jobs in ``keep_jobs`` and recent faults.

    Called under the GPU lock. When nothing is live and nothing is kept, only the faults of
    the last day are left (:func:`recent_faults`); otherwise the file is rewritten only
    when it grew past :data:`MAX_BYTES`.
    """
    events = read(path)
    live = {s.job for s in active(events)} | keep_jobs
    if live and path.exists() and path.stat().st_size < MAX_BYTES:
        return
    now = time.time() if now is None else now
    if not live:
        _write(path, recent_faults(events, now))
        return
    all_stays = stays(events)
    oldest = min((s.start for s in all_stays.values() if s.job in live), default=time.time())

    def ends(job: int) -> float:
        s = all_stays.get(job)
        return float("inf") if s is None or s.end is None else s.end

    # keep what a live or pending job's record can still need: stays overlapping them
    shown = {id(ev) for ev in recent_faults(events, now)}
    kept = [
        ev
        for ev in events
        if (
            ev["ev"] in ("start", "end")
            and (int(ev["job"]) in live or ends(int(ev["job"])) >= oldest)
        )
        or (ev["ev"] == "fault" and (float(ev["t"]) >= oldest - 60 or id(ev) in shown))
    ]
    _write(path, kept)


def _write(path: Path, events: list[dict[str, Any]]) -> None:
    if not events:
        path.write_bytes(b"")
        return
    from ..fsutil import atomic_write_bytes

    atomic_write_bytes(
        path, b"".join((json.dumps(e, sort_keys=True) + "\n").encode() for e in events), fsync=False
    )
