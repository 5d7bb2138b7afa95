"""Job traces for the simulator: a Philly-like generator and a ``sacct`` importer.

A trace is a list of :class:`SimJob` sorted by arrival. ``work_s`` is the job's run time
alone on one GPU (its *solo duration*); ``cls`` is one of the classes of the measured
throughput data, which decides how the job interferes with others.

Generator (:func:`philly_trace`; time limits, when wanted, from
:func:`with_time_limits`): durations and GPU counts drawn from the Philly job
distribution Gavel derived (``philly_job_distribution.csv``: ``duration_s,num_gpus``),
Poisson arrivals whose rate gives the chosen *load* (offered GPU-seconds per second over
the GPU count; above 1 jobs queue even with perfect packing of exclusive jobs), classes and
users drawn uniformly. Pure: it takes the rows, not the file (:func:`read_philly` reads it).

Importer (:func:`sacct_trace`): rows of ``sacct --parsable2`` output (``|``-separated, a
header line first). Columns used: ``JobID``, ``User``, ``Submit``, ``Start``, ``End``
(ISO times, as sacct prints them), the GPU count from ``AllocTRES`` (``gres/gpu=N``; falls
back to ``ReqTRES``), ``JobName`` for the class (see :func:`class_for_name`) and, when
the export has it, ``Timelimit`` (the job's time limit, :func:`slurm_duration_s`; none
for ``UNLIMITED``, ``Partition_Limit`` or a value it cannot read). Produce it with::

    SLURM_TIME_FORMAT=standard sacct --parsable2 --allocations --starttime 2026-01-01 \\
          --state CD,TO,F,CA \\
          --format JobID,User,JobName,Submit,Start,End,AllocTRES,ReqTRES,Timelimit > jobs.txt
"""

from __future__ import annotations

import csv
import io
import math
import random
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from slurm_colo.contracts.options import derive_class

from ..errors import ColoError
from ..fsutil import open_regular


class TraceError(ColoError):
    """A job trace file is missing, unreadable or lacks the columns the simulator needs."""


@dataclass(frozen=True)
class SimJob:
    id: int
    arrival: float
    work_s: float
    cls: str
    user: str
    uid: int
    gpus: int = 1
    mode: str = "auto"
    #: the job's time limit in seconds (None: none known); Slurm ends a job whose run
    #: lasts longer, unless the agent raises it (``placement.time_limit = "extend"``)
    limit_s: float | None = None

    @property
    def key(self) -> str:
        return f"sim{self.id}"


def read_philly(path: str | Path) -> list[tuple[float, int]]:
    """Rows ``(duration_s, num_gpus)`` of Gavel's Philly job distribution CSV."""
    try:
        with (
            open_regular(path, pipe=True) as b,
            io.TextIOWrapper(b, encoding="utf-8-sig", newline="") as f,
        ):
            rows = [(float(r["duration_s"]), int(r["num_gpus"])) for r in csv.DictReader(f)]
    except FileNotFoundError:
        raise TraceError(f"job distribution file {path} not found") from None
    except OSError as e:
        raise TraceError(f"cannot read job distribution file {path}: {e.strerror or e}") from None
    except (KeyError, ValueError) as e:
        raise TraceError(f"{path}: expected columns duration_s,num_gpus ({e})") from None
    if not rows:
        raise TraceError(f"{path}: no rows")
    return rows


def philly_trace(
    rows: Sequence[tuple[float, int]],
    classes: Sequence[str],
    *,
    jobs: int,
    gpus: int,
    load: float,
    seed: int,
    users: int = 16,
    multi_gpu: bool = False,
    max_duration_s: float | None = None,
    aggressive_share: float = 0.0,
) -> list[SimJob]:
    """Draw ``jobs`` jobs; arrival rate = ``load * gpus / mean(duration * num_gpus)``."""
    if jobs <= 0 or gpus <= 0 or load <= 0 or users <= 0:
        raise TraceError("jobs, gpus, load and users must be positive")
    pool = [
        (min(d, max_duration_s) if max_duration_s else d, n) for d, n in rows if multi_gpu or n == 1
    ]
    pool = [(d, n) for d, n in pool if n <= gpus and d > 0]
    if not pool or not classes:
        raise TraceError("no usable rows or no classes to draw from")
    rng = random.Random(seed)
    mean_gpu_s = sum(d * n for d, n in pool) / len(pool)
    rate = load * gpus / mean_gpu_s
    cls_sorted = sorted(classes)
    out: list[SimJob] = []
    t = 0.0
    for i in range(jobs):
        t += rng.expovariate(rate)
        d, n = pool[rng.randrange(len(pool))]
        u = rng.randrange(users)
        mode = "aggressive" if rng.random() < aggressive_share else "auto"
        out.append(
            SimJob(
                i,
                t,
                d,
                cls_sorted[rng.randrange(len(cls_sorted))],
                f"user{u:02d}",
                10000 + u,
                n,
                mode,
            )
        )
    return out


def jittered(trace: Sequence[SimJob], seconds: float, seed: int) -> list[SimJob]:
    """``trace`` with each arrival moved later by a seeded draw from ``[0, seconds)`` (and
    never before the job ahead of it, so the order and the ids stay): the same jobs,
    told apart only by when within a second or so each came. It measures how much one
    seed's figures owe to chance (``benchmarks/makespan_jitter.py``)."""
    if seconds < 0:
        raise TraceError(f"jitter {seconds:g} s: give 0 or more seconds")
    rng = random.Random(seed)
    out: list[SimJob] = []
    last = -math.inf
    for j in trace:
        last = max(last, j.arrival + rng.random() * seconds)
        out.append(replace(j, arrival=last))
    return out


def with_time_limits(trace: Sequence[SimJob], low: float, high: float, seed: int) -> list[SimJob]:
    """``trace`` with each job given a time limit of its solo duration times a seeded draw
    from ``[low, high]``, rounded up to whole minutes (as ``--time`` takes them): a
    generated trace's stand-in for the limits users set, which tell a long job from a
    short one only roughly. ``low`` is at least 1: a job's limit covers its run alone."""
    if not 1.0 <= low <= high:
        raise TraceError(f"time limit factors {low:g}-{high:g}: give 1 <= low <= high")
    rng = random.Random(seed)
    return [
        replace(j, limit_s=60.0 * math.ceil(j.work_s * rng.uniform(low, high) / 60.0))
        for j in trace
    ]


def class_for_name(job_name: str, classes: Sequence[str]) -> str:
    """A measured class for a job name: the name's class if it is one of ``classes``,
    else a class chosen by a stable hash of the name (same name, same class)."""
    c = derive_class(job_name)
    if c in classes:
        return c
    cs = sorted(classes)
    return cs[zlib.crc32(c.encode()) % len(cs)]


#: each number at most 9 digits: Slurm's longest limit is under 2^32 minutes, and a longer
#: run of digits (a corrupt export) is text it cannot read
_DURATION_RE = re.compile(r"(?:(\d{1,9})-)?(\d{1,9})(?::(\d{1,9}))?(?::(\d{1,9}))?")


def slurm_duration_s(text: str) -> float | None:
    """Seconds of a Slurm time limit as sacct and sbatch write it: ``M``, ``M:S``,
    ``H:M:S``, ``D-H``, ``D-H:M`` or ``D-H:M:S``. None for no limit (``UNLIMITED``,
    ``Partition_Limit``, empty) and for text it cannot read."""
    m = _DURATION_RE.fullmatch((text or "").strip())
    if m is None:
        return None
    days, a, b, c = m.groups()
    n = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:  # D-H, D-H:M, D-H:M:S
        h, mi, sec = (n + [0, 0])[:3]
    elif len(n) == 3:  # H:M:S
        h, mi, sec = n
    else:  # M or M:S
        h, mi, sec = 0, n[0], n[1] if len(n) > 1 else 0
    total = ((int(days or 0) * 24 + h) * 60 + mi) * 60 + sec
    return float(total) if total > 0 else None


_GPU_RE = re.compile(r"gres/gpu(?::[^=,]*)?=(\d+)")


def _gpus(tres: str) -> int:
    m = _GPU_RE.search(tres or "")
    if m is None:
        return 0
    digits = m.group(1)
    if len(digits) > 9:  # no site has a billion GPUs; int() fails past 4,300 digits
        raise ValueError(f"gres/gpu={digits[:12]}... ({len(digits)} digits) is not a GPU count")
    return int(digits)


#: what sacct prints for a time the job does not have (not started, still running)
_NO_TIME = ("", "Unknown", "None", "N/A")


def _time(s: str, column: str) -> float | None:
    """Seconds since the epoch of an ISO time; None for none. ValueError naming the
    column for a time in another format (``SLURM_TIME_FORMAT`` set otherwise when
    exporting) or out of range."""
    s = (s or "").strip()
    if s in _NO_TIME:
        return None
    try:
        return datetime.fromisoformat(s).timestamp()
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{column} {s[:40]!r}") from None


@dataclass
class SacctSkipped:
    """Lines of an sacct export the importer left out, by reason."""

    steps: int = 0
    short: int = 0
    no_gpu: int = 0
    unfinished: int = 0
    bad_time: int = 0
    #: where the first unreadable time is: ``line N: Start 'text'``
    first_bad_time: str = ""

    def text(self) -> str:
        """``12 job steps, 3 without GPUs, ...``; empty when nothing was left out."""
        parts = [
            (self.steps, "job steps"),
            (self.no_gpu, "without GPUs"),
            (self.unfinished, "that had not run or not ended"),
            (self.short, "with fewer fields than the header"),
            (self.bad_time, f"with a time it cannot read (first: {self.first_bad_time})"),
        ]
        return ", ".join(f"{n:,} {what}" for n, what in parts if n)


def sacct_trace(
    lines: Iterable[str], classes: Sequence[str], skipped: SacctSkipped | None = None
) -> list[SimJob]:
    """Jobs from ``sacct --parsable2`` lines (header first). GPU jobs that started and
    ended are kept; arrivals are shifted so the first submit is at 0; what is left out is
    counted in ``skipped``. Raises :class:`TraceError` when a needed column is missing or
    no job is left."""
    skip = skipped if skipped is not None else SacctSkipped()
    it = iter(lines)
    try:
        header = next(it).rstrip("\n").split("|")
    except StopIteration:
        raise TraceError("sacct export is empty") from None
    need = ["JobID", "User", "Submit", "Start", "End"]
    missing = [c for c in need if c not in header]
    if missing or not ({"AllocTRES", "ReqTRES"} & set(header)):
        raise TraceError(
            f"sacct export lacks column(s) {', '.join(missing or ['AllocTRES/ReqTRES'])}; "
            "use --parsable2 --format "
            "JobID,User,JobName,Submit,Start,End,AllocTRES,ReqTRES,Timelimit"
        )
    col = {c: i for i, c in enumerate(header)}
    uids: dict[str, int] = {}
    raw: list[tuple[float, float, str, str, int, str, float | None]] = []
    for no, line in enumerate(it, start=2):
        f = line.rstrip("\n").split("|")
        if len(f) < len(header):
            skip.short += line.strip() != ""
            continue
        jid = f[col["JobID"]]
        if "." in jid:  # job steps
            skip.steps += 1
            continue
        tres = f[col["AllocTRES"]] if "AllocTRES" in col else ""
        try:
            n = _gpus(tres) or (_gpus(f[col["ReqTRES"]]) if "ReqTRES" in col else 0)
        except ValueError as e:
            raise TraceError(f"sacct export line {no} (job {jid[:40]}): {e}") from None
        if n <= 0:
            skip.no_gpu += 1
            continue
        try:
            sub, start, end = (_time(f[col[c]], c) for c in ("Submit", "Start", "End"))
        except ValueError as e:
            if not skip.bad_time:
                skip.first_bad_time = f"line {no}: {e}"
            skip.bad_time += 1
            continue
        if sub is None or start is None or end is None or end <= start:
            skip.unfinished += 1
            continue
        user = f[col["User"]] or "unknown"
        name = f[col["JobName"]] if "JobName" in col else ""
        limit = slurm_duration_s(f[col["Timelimit"]]) if "Timelimit" in col else None
        raw.append((sub, end - start, user, name, n, jid, limit))
    if not raw:
        left = skip.text()
        hint = (
            "; sacct must print ISO times (2026-01-01T10:00:00): export with "
            "SLURM_TIME_FORMAT=standard"
            if skip.bad_time
            else ""
        )
        raise TraceError(
            "sacct export has no finished GPU jobs (gres/gpu in AllocTRES)"
            + (f"; left out: {left}" if left else "")
            + hint
        )
    raw.sort(key=lambda r: (r[0], r[5]))
    t0 = raw[0][0]
    out = []
    for i, (sub, dur, user, name, n, _, limit) in enumerate(raw):
        uid = uids.setdefault(user, 10000 + len(uids))
        cls = class_for_name(name, classes)
        out.append(SimJob(i, sub - t0, dur, cls, user, uid, n, limit_s=limit))
    return out


def read_sacct(
    path: str | Path, classes: Sequence[str], skipped: SacctSkipped | None = None
) -> list[SimJob]:
    try:
        with (
            open_regular(path, pipe=True) as b,
            io.TextIOWrapper(b, encoding="utf-8-sig", errors="replace") as f,
        ):
            return sacct_trace(f, classes, skipped)
    except TraceError as e:  # what is wrong in the export: say which file
        raise TraceError(f"{path}: {e.message}", hint=e.hint) from None
    except FileNotFoundError:
        raise TraceError(f"sacct export {path} not found") from None
    except OSError as e:  # a directory, a loop of links, a name too long
        raise TraceError(f"cannot read sacct export {path}: {e.strerror or e}") from None


def offered_load(trace: Sequence[SimJob], gpus: int) -> float:
    """GPU-seconds of work per second of arrivals, over ``gpus``."""
    if len(trace) < 2:
        return 0.0
    span = trace[-1].arrival - trace[0].arrival
    work = sum(j.work_s * j.gpus for j in trace)
    return work / span / gpus if span > 0 else math.inf
