"""Co-location episodes from job views. Pure: no I/O (see :mod:`.episodes` for the rules).

:func:`build_groups` gives the structure of the episodes (intervals, member jobs and the
figures of their records); :func:`job_n` turns a member's figures into its normalised
throughput against a solo reference, and :func:`build_episodes` does both.

Everything an episode holds depends only on the records, on its node, of its own member
jobs: its segments come from the records of its members, and a member's class, figures,
MPS fault and out-of-memory flags come from that job's record on the node. When a job has
several records on one node (a requeued job) the one that started last counts. A member
whose record is missing gets the class the episode's first record (earliest start) gives
it. This locality is what lets :mod:`.episode_sync` rebuild only the episodes that contain
a job with a new record.

A record whose node's clock stepped while the job ran (``clock_steps_s`` in its profile)
gives its episodes their structure, its class and its fault flags, but no figures: its
duration and shared seconds are off by the step, so its member's throughput is unknown,
and it is no solo run.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

#: co-runner intervals reaching further than this outside the job's own run are clock
#: skew or corruption and are dropped (smaller excursions are clipped)
SKEW_TOLERANCE_S = 300.0
#: segments of one set of jobs closer than this (seconds) merge into one episode
MERGE_GAP_S = 1.0
OOM_STATES = ("OUT_OF_MEMORY", "OOM")


@dataclass
class JobView:
    job_id: int
    node: str
    gpu: str
    cls: str
    start: float
    end: float
    co_runners: list[tuple[int, str, float, float]] = field(default_factory=list)
    rate: float | None = None
    solo_rate: float | None = None
    mps_fault: bool = False
    oom: bool = False
    record_id: str = ""
    #: peak GPU memory of the run (sampler profile), stored for the class profiles
    mem_peak: float | None = None
    #: the model of the GPU the record ran on ("" = unknown)
    gpu_model: str = ""
    #: the node's clock stepped while the job ran: its start, end and overlaps are off
    clock_stepped: bool = False


class Member(NamedTuple):
    """A job of an episode with the figures of its record (``total_s`` None: no record)."""

    job_id: int
    cls: str
    rate: float | None = None
    solo_rate: float | None = None
    total_s: float | None = None
    shared_s: float | None = None


@dataclass
class EpisodeRow:
    """The structure of an episode, as stored: members carry figures, not ``n``."""

    node: str
    gpu: str
    start: float
    end: float
    members: tuple[Member, ...]
    mps_fault: bool = False
    oom: bool = False
    #: the GPU's model: that of the last of its records that names one ("" = unknown)
    gpu_model: str = ""


@dataclass
class EpisodeView:
    node: str
    gpu: str
    start: float
    end: float
    #: (job_id, class, n, source) per member
    members: list[tuple[int, str, float | None, str]]
    mps_fault: bool = False
    oom: bool = False

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class BuildReport:
    jobs: int = 0
    episodes: int = 0
    skewed_intervals: int = 0
    proxy_cv: dict[str, float] = field(default_factory=dict)


@dataclass
class SoloRef:
    """Per class, from its solo runs: median progress rate, median duration, and the
    coefficient of variation of durations (the error of the duration proxy)."""

    rate: dict[str, float] = field(default_factory=dict)
    duration: dict[str, float] = field(default_factory=dict)
    cv: dict[str, float] = field(default_factory=dict)


def solo_reference(solo_runs: Iterable[tuple[str, float | None, float]]) -> SoloRef:
    """(class, progress rate or None, duration) of solo runs -> :class:`SoloRef`."""
    rates: dict[str, list[float]] = {}
    durs: dict[str, list[float]] = {}
    for cls, rate, dur in solo_runs:
        if dur <= 0:
            continue
        if rate:
            rates.setdefault(cls, []).append(rate)
        durs.setdefault(cls, []).append(dur)
    return SoloRef(
        rate={c: statistics.median(v) for c, v in rates.items()},
        duration={c: statistics.median(v) for c, v in durs.items()},
        cv={
            c: statistics.pstdev(v) / statistics.mean(v)
            for c, v in durs.items()
            if len(v) >= 2 and statistics.mean(v) > 0
        },
    )


def _far_outside(j: JobView, s: float, e: float) -> bool:
    return (
        e < s - SKEW_TOLERANCE_S or e < j.start - SKEW_TOLERANCE_S or s > j.end + SKEW_TOLERANCE_S
    )


def skewed_intervals(j: JobView) -> int:
    """How many of the record's co-runner intervals are ignored as clock skew."""
    return sum(1 for _, _, s, e in j.co_runners if _far_outside(j, s, e))


def shared_s(j: JobView) -> float:
    """Seconds of the run with a co-runner listed (the union of the overlaps: two
    co-runners at once count once)."""
    ivs = sorted((max(s, j.start), min(e, j.end)) for _, _, s, e in j.co_runners)
    t, hi = 0.0, j.start
    for s, e in ivs:
        if e > hi and e > s:
            t += e - max(s, hi)
            hi = e
    return min(t, j.end - j.start)


def member_of(j: JobView) -> Member:
    if j.clock_stepped:
        return Member(j.job_id, j.cls)
    return Member(j.job_id, j.cls, j.rate, j.solo_rate, j.end - j.start, shared_s(j))


def is_solo_run(j: JobView) -> bool:
    """The record counts as a solo run of its class: no co-runner, no out-of-memory end
    and a clock that did not step under it."""
    return not j.co_runners and not j.oom and not j.clock_stepped


Segment = tuple[float, float, frozenset[int], dict[int, str]]


def segments(j: JobView) -> list[Segment]:
    """The record's run cut where its set of co-runners changes: (start, end, jobs on the
    GPU including this one, co-runner classes) per segment with at least one co-runner."""
    ivs: list[tuple[float, float, int, str]] = []
    for cid, ccls, s, e in j.co_runners:
        if _far_outside(j, s, e):
            continue
        s2, e2 = max(s, j.start), min(e, j.end)
        if e2 > s2 and cid != j.job_id:
            ivs.append((s2, e2, cid, ccls))
    if not ivs:
        return []
    names = {cid: c for _, _, cid, c in ivs}
    if len(ivs) == 1:
        s, e, cid, _ = ivs[0]
        return [(s, e, frozenset((cid, j.job_id)), names)]
    cuts = sorted({t for s, e, _, _ in ivs for t in (s, e)})
    out = []
    for t0, t1 in itertools.pairwise(cuts):
        active = frozenset(cid for s, e, cid, _ in ivs if s <= t0 and e >= t1)
        if active:
            out.append((t0, t1, active | {j.job_id}, names))
    return out


def _merge(ivs: list[tuple[float, float]]) -> list[list[float]]:
    ivs.sort()
    merged: list[list[float]] = []
    for s, e in ivs:
        if merged and s <= merged[-1][1] + MERGE_GAP_S:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return merged


def precedence(j: JobView) -> tuple[float, float, str]:
    """Order of a node's records: of several records of one job, the last one counts."""
    return (j.start, j.end, j.record_id)


def build_groups(jobs: Sequence[JobView], only: Collection[int] | None = None) -> list[EpisodeRow]:
    """Episodes (2+ jobs on one GPU) of the records of one node; with ``only``, just the
    episodes that contain one of these jobs (built from the records of their members,
    which ``jobs`` must include)."""
    order = sorted(jobs, key=precedence)
    by_id = {j.job_id: j for j in order}
    groups: dict[tuple[str, str, frozenset[int]], list[tuple[float, float]]] = {}
    names: dict[tuple[str, str, frozenset[int]], dict[int, str]] = {}
    models: dict[tuple[str, str, frozenset[int]], str] = {}
    for j in order:
        if (
            only is not None
            and j.job_id not in only
            and not any(c[0] in only for c in j.co_runners)
        ):
            continue
        for t0, t1, members, nm in segments(j):
            if only is not None and members.isdisjoint(only):
                continue
            key = (j.node, j.gpu, members)
            ivs = groups.get(key)
            if ivs is None:
                groups[key] = ivs = []
                names[key] = nm
                models[key] = ""
            ivs.append((t0, t1))
            if j.gpu_model:
                models[key] = j.gpu_model
    figures: dict[int, Member] = {}
    out: list[EpisodeRow] = []
    for key, ivs in groups.items():
        node, gpu, ids = key
        mem = []
        for jid in sorted(ids):
            m = figures.get(jid)
            if m is None:
                rec = by_id.get(jid)
                m = (
                    member_of(rec)
                    if rec is not None
                    else Member(jid, names[key].get(jid, "unknown"))
                )
                if rec is not None:
                    figures[jid] = m
            mem.append(m)
        row = tuple(mem)
        fault = any(by_id[i].mps_fault for i in ids if i in by_id)
        oom = any(by_id[i].oom for i in ids if i in by_id)
        model = models[key]
        out.extend(EpisodeRow(node, gpu, s, e, row, fault, oom, model) for s, e in _merge(ivs))
    out.sort(key=lambda r: (r.start, r.node, r.gpu, r.end, [m.job_id for m in r.members]))
    return out


def job_n(m: Member, ref: SoloRef) -> tuple[float | None, str]:
    """A member's normalised throughput while shared and its source (``progress``,
    ``duration`` or ``null``); :func:`.episode_read.member_n` is the same on arrays."""
    total, sh = m.total_s, m.shared_s
    if total is None or sh is None or total <= 0 or sh <= 0:
        return None, "null"
    solo = m.solo_rate or ref.rate.get(m.cls)
    if m.rate and solo:
        n_job, src = m.rate / solo, "progress"
    elif ref.duration.get(m.cls, 0.0) > 0:
        n_job, src = min(1.0, ref.duration[m.cls] / total), "duration"
    else:
        return None, "null"
    n = (n_job * total - (total - sh)) / sh
    return max(0.0, min(n, 1.5)), src


def to_view(r: EpisodeRow, ref: SoloRef) -> EpisodeView:
    return EpisodeView(
        r.node,
        r.gpu,
        r.start,
        r.end,
        [(m.job_id, m.cls, *job_n(m, ref)) for m in r.members],
        r.mps_fault,
        r.oom,
    )


def build_episodes(
    jobs: list[JobView], ref: SoloRef | None = None
) -> tuple[list[EpisodeView], BuildReport]:
    """Episodes (2+ jobs on one GPU) from job views. ``ref`` gives the classes' solo
    figures (default: from the solo runs among ``jobs``)."""
    if ref is None:
        ref = solo_reference(
            (j.cls, j.rate, j.end - j.start)
            for j in jobs
            if not j.oom and not j.clock_stepped and shared_s(j) <= 0
        )
    rep = BuildReport(
        jobs=len(jobs),
        proxy_cv=dict(ref.cv),
        skewed_intervals=sum(skewed_intervals(j) for j in jobs),
    )
    eps = [to_view(r, ref) for r in build_groups(jobs)]
    rep.episodes = len(eps)
    return eps, rep
