"""Co-location episodes: intervals during which the set of jobs on one GPU is constant.

Rebuilt from the stored records: each record lists its co-runners with overlap intervals;
every record yields the segments of its own run, and segments seen from several records
(the same jobs on the same GPU) are merged, so each episode is stored once even when the
nodes' clocks disagree by a little. :func:`build_episodes` is pure; :func:`rebuild_episodes`
reads the jobs table and rewrites the episodes table.

Each member carries the job's normalised throughput while shared (``n``) and how it was
obtained (``source``):

- ``progress``: from job-reported progress: ``n_job = rate / solo_rate`` (the job's own
  ``solo_rate`` when it reports one, else the median rate of solo runs of its class); the
  shared part is ``n = (n_job * T - t_solo) / t_shared`` (solo stretches count as 1).
- ``duration``: proxy without progress: ``n_job = median solo duration of the class /
  duration``, then the same split. Its error is the spread of solo durations within a
  class (coefficient of variation, reported per retrain); it gets a lower weight.
- ``null``: nothing usable (no solo reference, or a co-runner whose record is missing).
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Engine

from .engine import db_errors, require_schema
from .schema import CoRunnerRow, Episode, Job

log = logging.getLogger("slurm_colo.store")

#: co-runner intervals reaching further than this outside the job's own run are clock
#: skew or corruption and are dropped (smaller excursions are clipped)
SKEW_TOLERANCE_S = 300.0
_OOM_STATES = ("OUT_OF_MEMORY", "OOM")


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


def _segments(j: JobView, rep: BuildReport) -> list[tuple[float, float, frozenset[int], dict[int, str]]]:
    ivs: list[tuple[float, float, int, str]] = []
    for cid, ccls, s, e in j.co_runners:
        if e < s - SKEW_TOLERANCE_S or e < j.start - SKEW_TOLERANCE_S or s > j.end + SKEW_TOLERANCE_S:
            rep.skewed_intervals += 1
            continue
        s2, e2 = max(s, j.start), min(e, j.end)
        if e2 > s2 and cid != j.job_id:
            ivs.append((s2, e2, cid, ccls))
    if not ivs:
        return []
    cuts = sorted({t for s, e, _, _ in ivs for t in (s, e)})
    names = {cid: c for _, _, cid, c in ivs}
    out = []
    for t0, t1 in zip(cuts, cuts[1:]):
        active = frozenset(cid for s, e, cid, _ in ivs if s <= t0 and e >= t1)
        if active:
            out.append((t0, t1, active | {j.job_id}, names))
    return out


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
        cv={c: statistics.pstdev(v) / statistics.mean(v) for c, v in durs.items()
            if len(v) >= 2 and statistics.mean(v) > 0})


def _shared_s(j: JobView) -> float:
    t = sum(max(0.0, min(e, j.end) - max(s, j.start)) for _, _, s, e in j.co_runners)
    return min(t, j.end - j.start)


def _job_n(jobs: list[JobView], ref: SoloRef) -> dict[int, tuple[float | None, str]]:
    """Per job: (n while shared, source)."""
    out: dict[int, tuple[float | None, str]] = {}
    for j in jobs:
        total = j.end - j.start
        sh = _shared_s(j)
        if total <= 0 or sh <= 0:
            continue
        solo = j.solo_rate or ref.rate.get(j.cls)
        if j.rate and solo:
            n_job, src = j.rate / solo, "progress"
        elif ref.duration.get(j.cls, 0.0) > 0:
            n_job, src = min(1.0, ref.duration[j.cls] / total), "duration"
        else:
            out[j.job_id] = (None, "null")
            continue
        n = (n_job * total - (total - sh)) / sh
        out[j.job_id] = (max(0.0, min(n, 1.5)), src)
    return out


def build_episodes(jobs: list[JobView], ref: SoloRef | None = None
                   ) -> tuple[list[EpisodeView], BuildReport]:
    """Pure: episodes (2+ jobs on one GPU) from job views. ``ref`` gives the classes' solo
    figures (default: from the solo runs among ``jobs``)."""
    if ref is None:
        ref = solo_reference((j.cls, j.rate, j.end - j.start) for j in jobs
                             if not j.oom and _shared_s(j) <= 0)
    rep = BuildReport(jobs=len(jobs))
    rep.proxy_cv = dict(ref.cv)
    nvals = _job_n(jobs, ref)
    by_id = {j.job_id: j for j in jobs}
    groups: dict[tuple[str, str, frozenset[int]], list[tuple[float, float]]] = {}
    names: dict[int, str] = {}
    for j in jobs:
        names[j.job_id] = j.cls
        for t0, t1, members, nm in _segments(j, rep):
            for cid, c in nm.items():
                names.setdefault(cid, c)
            groups.setdefault((j.node, j.gpu, members), []).append((t0, t1))
    eps: list[EpisodeView] = []
    for (node, gpu, members), ivs in groups.items():
        ivs.sort()
        merged: list[list[float]] = []
        for s, e in ivs:
            if merged and s <= merged[-1][1] + 1.0:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        mem = []
        for jid in sorted(members):
            n, src = nvals.get(jid, (None, "null"))
            mem.append((jid, names.get(jid, "unknown"), n, src))
        fault = any(by_id[m].mps_fault for m in members if m in by_id)
        oom = any(by_id[m].oom for m in members if m in by_id)
        for s, e in merged:
            eps.append(EpisodeView(node, gpu, s, e, mem, fault, oom))
    eps.sort(key=lambda x: (x.start, x.node, x.gpu))
    rep.episodes = len(eps)
    return eps, rep


def _views(engine: Engine, since: float | None, node: str) -> list[JobView]:
    q = (select(Job.record_id, Job.job_id, Job.node, Job.gpus, Job.gpu_uuids, Job.cls,
                Job.start_time, Job.end_time, Job.progress_rate, Job.progress_solo_rate,
                Job.mps_fault, Job.state)
         .where(Job.node == node))
    cq = (select(CoRunnerRow.record_id, CoRunnerRow.co_job_id, CoRunnerRow.co_cls,
                 CoRunnerRow.start_time, CoRunnerRow.end_time)
          .join(Job, Job.record_id == CoRunnerRow.record_id).where(Job.node == node))
    if since is not None:
        q = q.where(Job.end_time >= since)
        cq = cq.where(Job.end_time >= since)
    views: dict[str, JobView] = {}
    with db_errors(engine), engine.connect() as conn:
        # fetchall and plain tuples: several times faster than row-by-row attribute access
        for rid, jid, nd, gpus, uuids, cls, st, en, rate, solo, fault, state in conn.execute(q).all():
            views[rid] = JobView(jid, nd, uuids or gpus or "?", cls, st, en, rate=rate,
                                 solo_rate=solo, mps_fault=bool(fault),
                                 oom=str(state).upper() in _OOM_STATES)
        for rid, cid, ccls, st, en in conn.execute(cq).all():
            v = views.get(rid)
            if v is not None:
                v.co_runners.append((cid, ccls, st, en))
    return list(views.values())


def _db_solo_reference(engine: Engine, since: float | None) -> SoloRef:
    """Solo figures over all nodes: runs with no co-runner that did not run out of memory."""
    has_co = select(CoRunnerRow.id).where(CoRunnerRow.record_id == Job.record_id).exists()
    q = (select(Job.cls, Job.progress_rate, Job.start_time, Job.end_time)
         .where(~has_co, Job.state.not_in(_OOM_STATES)))
    if since is not None:
        q = q.where(Job.end_time >= since)
    with db_errors(engine), engine.connect() as conn:
        return solo_reference((cls, rate, en - st) for cls, rate, st, en in conn.execute(q).all())


def iter_rebuild(engine: Engine, since: float | None, rep: BuildReport) -> Iterator[list[EpisodeView]]:
    """Rewrite the episodes table node by node (episodes never span nodes), yielding each
    node's episodes; memory stays bounded by one node's history. ``rep`` is filled in."""
    require_schema(engine)
    ref = _db_solo_reference(engine, since)
    rep.proxy_cv = dict(ref.cv)
    nq = select(Job.node).distinct()
    if since is not None:
        nq = nq.where(Job.end_time >= since)
    with db_errors(engine), engine.begin() as conn:
        nodes = sorted(conn.scalars(nq))
        conn.execute(delete(Episode))
    for node in nodes:
        eps, r = build_episodes(_views(engine, since, node), ref)
        rep.jobs += r.jobs
        rep.episodes += r.episodes
        rep.skewed_intervals += r.skewed_intervals
        rows: list[dict[str, Any]] = [
            {"node": e.node, "gpu": e.gpu, "start_time": e.start, "end_time": e.end,
             "n_members": len(e.members), "members": json.dumps(e.members),
             "mps_fault": e.mps_fault, "oom": e.oom} for e in eps]
        if rows:
            with db_errors(engine), engine.begin() as conn:
                conn.execute(insert(Episode), rows)
        yield eps
    if rep.skewed_intervals:
        log.warning("%d co-runner interval(s) lie outside their job's run by more than %.0f s "
                    "(clock skew or corrupt records): ignored", rep.skewed_intervals, SKEW_TOLERANCE_S)


def rebuild_episodes(engine: Engine, since: float | None = None) -> BuildReport:
    """Recompute the episodes table from the jobs (ending at or after ``since``)."""
    rep = BuildReport()
    for _ in iter_rebuild(engine, since, rep):
        pass
    return rep


def load_episodes(engine: Engine, since: float | None = None) -> list[EpisodeView]:
    q = select(Episode)
    if since is not None:
        q = q.where(Episode.end_time >= since)
    out = []
    bad = 0
    with db_errors(engine), engine.connect() as conn:
        for r in conn.execute(q):
            try:
                members = [(int(m[0]), str(m[1]), None if m[2] is None else float(m[2]), str(m[3]))
                           for m in json.loads(r.members)]
            except (ValueError, TypeError, IndexError, KeyError):
                bad += 1
                continue
            out.append(EpisodeView(r.node, r.gpu, r.start_time, r.end_time, members,
                                   bool(r.mps_fault), bool(r.oom)))
    if bad:
        log.warning("%d corrupt episode row(s) skipped (slurm-colo retrain rebuilds them)", bad)
    return out
