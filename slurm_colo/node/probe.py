"""The probe of a new shared set: what each member's job-reported progress shows.

When a job has shared a GPU for ``placement.probe_s``, its sampler measures the set (this
module), sends the measurement to the agent (``PROBE``), and the agent judges it
(:mod:`slurm_colo.placement.retract`): keep it, or requeue the newcomer.

Measured per member, from the progress points the job writes (:mod:`slurm_colo.progress`):

* ``rate``: progress per second since the set formed (after ``warmup_s``);
* ``rate_before`` (members that were there before the newcomer): progress per second over
  the stretch before the newcomer arrived during which the GPU's set did not change, and
  ``before``: the classes it shared the GPU with then. For a set left behind (``since``: a
  job left), the stretch before that job left, and the classes then, the leaver's included.

Only a set that has not changed since the newcomer started is measured: a later arrival is
judged by its own probe. :func:`measure` is pure (journal events and progress points in);
:func:`read_set` reads them from the node's files. The report is a
:class:`~slurm_colo.contracts.probe.ProbeReport`, the agent's side of the contract too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from slurm_colo.contracts import client
from slurm_colo.contracts.probe import PROBE_LOOKS, ProbeMember, ProbeReport

from ..config import Config
from . import journal
from .jobstate import read_progress
from .layout import NodeLayout
from .record_build import progress_points

log = logging.getLogger("slurm_colo.node")
#: at least this many progress points inside a window for its rate to count
MIN_POINTS = 3


def rate_between(points: list[tuple[float, float]], t0: float, t1: float) -> float | None:
    """Progress per second from the points inside [t0, t1]; None with too few of them or a
    counter that went backwards (the job restarted its count)."""
    inside = [p for p in points if t0 <= p[0] <= t1]
    if len(inside) < MIN_POINTS or inside[-1][0] - inside[0][0] <= 0:
        return None
    gained = inside[-1][1] - inside[0][1]
    if gained < 0:
        return None
    return gained / (inside[-1][0] - inside[0][0])


def measure(
    events: list[dict[str, Any]],
    job: int,
    now: float,
    warmup_s: float,
    points_of: Callable[[int], list[tuple[float, float]]],
    since: float | None = None,
) -> ProbeReport | None:
    """The probe report for ``job`` on one GPU, or None when there is nothing to judge (the
    job is alone, not on this GPU, or the set changed after it started). ``since``: judge
    the set as it has been since then (a member left after the job came), the job its
    newcomer."""
    st = journal.stays(events)
    me = st.get(job)
    if me is None or me.end is not None:
        return None
    live = [s for s in st.values() if s.end is None]
    if len(live) < 2:
        return None
    t0 = me.start if since is None else max(me.start, since)
    if any(s.start > t0 for s in st.values() if s.job != job) or any(
        s.end is not None and s.end > t0 for s in st.values()
    ):
        return None  # the set changed since this job came: the later change is judged
    # the stretch before t0 in which the set did not change: before the newcomer came, or
    # (a set left behind) before the job left whose leaving made this set
    changes = [s.start for s in st.values() if s.start < t0] + [
        s.end for s in st.values() if s.end is not None and s.end < t0
    ]
    before_from = max(changes, default=t0)
    members = []
    for s in sorted(live, key=lambda s: s.start):
        pts = points_of(s.job)
        rate = rate_between(pts, t0 + warmup_s, now)
        if s.job == job:
            members.append(ProbeMember(s.job, s.cls, rate))
            continue
        members.append(
            ProbeMember(
                s.job,
                s.cls,
                rate,
                rate_before=rate_between(pts, before_from + warmup_s, t0),
                before=tuple(
                    sorted(
                        o.cls
                        for o in st.values()
                        if o.job != s.job
                        and o.start <= before_from
                        and (o.end is None or o.end >= t0)
                    )
                ),
            )
        )
    return ProbeReport(job, t0, round(now - t0 - warmup_s, 1), tuple(members))


def next_look(events: list[dict[str, Any]], job: int, t0: float) -> tuple[str, float]:
    """What became of ``job``'s set since ``t0``: ``("alone", t0)`` (the job has ended, or
    nobody shares its GPU now), ``("same", t0)`` (unchanged), ``("arrived", t)`` (the last
    change was a job arriving at ``t``: that job's own probe judges the set) or
    ``("left", t)`` (the last change was a job leaving at ``t``, and this job is the
    newest of those left: it judges the set once the set has run ``probe_s`` unchanged).
    A job leaving a set in which this job is not the newest is ``("alone", t0)`` for it:
    the newest one judges."""
    st = journal.stays(events)
    me = st.get(job)
    live = [s for s in st.values() if s.end is None]
    if me is None or me.end is not None or len(live) < 2:
        return ("alone", t0)
    arrived = max((s.start for s in st.values() if s.job != job and s.start > t0), default=None)
    left = max((s.end for s in st.values() if s.end is not None and s.end > t0), default=None)
    if arrived is None and left is None:
        return ("same", t0)
    if left is None or (arrived is not None and arrived >= left):
        return ("arrived", arrived if arrived is not None else t0)
    if any(s.start > me.start for s in live if s.job != job):
        return ("alone", t0)
    return ("left", left)


def read_set(
    layout: NodeLayout,
    gpu: int,
    job: int,
    now: float,
    warmup_s: float,
    since: float | None = None,
    events: list[dict[str, Any]] | None = None,
) -> ProbeReport | None:
    """:func:`measure` on the node's journal of ``gpu`` and the members' progress files."""
    report = measure(
        journal.read(layout.journal(gpu)) if events is None else events,
        job,
        now,
        warmup_s,
        lambda j: progress_points(read_progress(layout, j)),
        since,
    )
    return report.with_gpu(gpu) if report is not None else None


#: the first part of the probe window is not measured (start-up: data loading, compilation)
WARMUP_SHARE = 0.2


class Prober:
    """The sampler's probe: at ``placement.probe_s`` after the job started on its (single)
    GPU, measure the set and ask the agent to judge it. When the set changed meanwhile it
    looks again (at most ``PROBE_LOOKS`` times): after a job *arrived* it waits two probe
    windows to see whether that job stays (its own probe judges the set then, and may undo
    it meanwhile); after a job *left* (undone by its
    probe, or ended) and this job is the newest of those left, it judges the set left
    behind once that has run ``probe_s`` unchanged -- else such a set, whose own probe was
    overtaken, would run unjudged. A verdict that *kept* the set is not the last word: when
    a job later leaves the set and this job is the newest of two or more left, it judges
    the set left behind once more, the same way (a pair that ran well next to a third job
    may not run well once that job is gone, and no probe of its own judged it).
    ``result`` holds what happened, for the job's profile (``again``: the second verdict).
    """

    def __init__(
        self,
        cfg: Config,
        layout: NodeLayout,
        job_id: int,
        gpus: list[int],
        probe_s: float | None = None,
    ) -> None:
        self.cfg, self.layout, self.job_id = cfg, layout, job_id
        self.gpu = gpus[0] if len(gpus) == 1 else None
        #: the agent's setting (from the JOBSTART reply) where it sent one, else the node's
        self.probe_s = cfg.placement.probe_s if probe_s is None else probe_s
        #: since when the set to judge has run (the job's start, then the last change)
        self.start: float | None = None
        #: None: the set the job joined; else the set left behind when another job left
        self.since: float | None = None
        #: the last change was a job arriving: its own probe judges an unchanged set
        self.after_arrival = False
        self.looks = 0
        self.result: dict[str, Any] | None = None
        #: the set was kept: watching for a job to leave it (``since`` None until one does)
        self.again = False
        self._journal_size = -1

    @property
    def pending(self) -> bool:
        return (self.result is None or self.again) and self.gpu is not None and self.probe_s > 0

    def _none(self, reason: str) -> bool:
        self.result = {"verdict": "none", "reason": reason}
        return True

    def clock_stepped(self, step: float) -> bool:
        """The node's wall clock stepped by ``step`` seconds (slurm_colo/clock.py). The
        journal's times and the jobs' progress points from either side of a step do not
        compare: a window across it would give the set rates off by the step (a step
        forward reads as a slowdown, and the newcomer would be undone). The probe gives
        the window up: no verdict (True: recorded in ``result``); a verdict already
        given stands, and the watch for a set left behind ends."""
        if not self.pending:
            return False
        log.warning(
            "job %s: the node's clock stepped %+.1f s while its set was watched: the "
            "probe window is given up",
            self.job_id,
            step,
        )
        if self.again:
            self.again = False
            return False
        return self._none(f"the node's clock stepped {step:+.1f} s in the probe window")

    def maybe(self, now: float) -> bool:
        """Look at the set if it is time; True when a verdict (or why there is none) was
        recorded in ``result``."""
        if not self.pending or self.gpu is None:
            return False
        if self.again:
            return self._look_again(now)
        if self.start is None:
            stay = journal.stays(journal.read(self.layout.journal(self.gpu))).get(self.job_id)
            if stay is None:
                return False
            self.start = stay.start
        # after an arrival: a second window, for that job's probe and its undo to happen
        if now < self.start + self.probe_s * (2 if self.after_arrival else 1):
            return False
        events = journal.read(self.layout.journal(self.gpu))
        kind, t = next_look(events, self.job_id, self.start)
        if kind == "alone":
            return self._none("alone, or a newer job of the set judges it")
        if kind != "same":
            if self.looks >= PROBE_LOOKS:
                return self._none("the set kept changing")
            self.looks += 1
            self.start = t
            self.since = t if kind == "left" else self.since
            self.after_arrival = kind == "arrived"
            return False
        if self.after_arrival:
            return self._none("a job that came later judges the set")
        report = self._read(now, events)
        if report is None:
            return self._none("alone, or the set changed since the job came")
        self.result = self._judge(report)
        if self.result["verdict"] == "keep":
            # watch on: a job leaving may leave this one the newest of a set to judge
            self.again, self.start, self.since, self.looks = True, now, None, 0
        return True

    def _look_again(self, now: float) -> bool:
        """After a verdict that kept the set: when a job leaves it and this job is the
        newest of those left, judge the set left behind once it has run ``probe_s``
        unchanged (a job arriving judges the set it makes; looking at most ``PROBE_LOOKS``
        times). Ends when the job is alone, not the newest, or has judged again."""
        assert self.gpu is not None and self.start is not None and self.result is not None
        if self.since is not None and now < self.since + self.probe_s:
            return False
        path = self.layout.journal(self.gpu)
        try:
            size = path.stat().st_size
        except OSError:
            size = -1
        if self.since is None and size == self._journal_size:
            return False  # nothing happened on the GPU since the last look
        self._journal_size = size
        events = journal.read(path)
        kind, t = next_look(events, self.job_id, self.start)
        if kind == "alone" or (kind == "left" and self.looks >= PROBE_LOOKS):
            self.again = False
            return False
        if kind != "same":
            self.looks += kind == "left"
            self.start, self.since = t, (t if kind == "left" else None)
            return False
        if self.since is None:
            return False
        report = self._read(now, events)
        self.again = False
        if report is None:
            return False
        self.result["again"] = self._judge(replace(report, again=True))
        return True

    def _read(self, now: float, events: list[dict[str, Any]]) -> ProbeReport | None:
        assert self.gpu is not None
        return read_set(
            self.layout,
            self.gpu,
            self.job_id,
            now,
            WARMUP_SHARE * self.probe_s,
            since=self.since,
            events=events,
        )

    def _judge(self, report: ProbeReport) -> dict[str, Any]:
        """Send ``report`` to the agent; what it answered, for the job's profile."""
        wire = report.to_wire()
        reply = client.probe(self.cfg, wire)
        if reply is None:
            out = {"verdict": "unjudged", "reason": "the agent could not be reached"}
            log.warning("job %s: probe not judged, the agent could not be reached", self.job_id)
        else:
            out = {"verdict": str(reply.get("verdict")), "reason": str(reply.get("reason"))}
            log.info("job %s: probe %s: %s", self.job_id, out["verdict"], out["reason"])
        out["members"] = wire["members"]
        return out
