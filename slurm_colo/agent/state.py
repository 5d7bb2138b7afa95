"""The agent's state, as the server sees it: one object holding the parts -- the live
scores (:mod:`.learned`), the view of the GPUs (:mod:`.occupancy`), the placements handed
out and their explanations (:mod:`.ledger`) and the held jobs (:mod:`.held`) -- and
answering the protocol's requests with them (PLACE in :mod:`.requests`). No I/O here: the
server feeds it Slurm snapshots and hook events, under one lock."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from ..config import Config
from ..contracts.enums import Replan, TimeLimit
from ..contracts.hook_notes import FALLBACK_NOTE
from ..contracts.options import DEFAULT_CLASS
from ..contracts.placement import Placement
from ..contracts.probe import ProbeReport
from ..placement.by_model import ModelViews, prepare
from ..placement.guard import Reservation
from ..placement.held import HeldJob, waits_behind
from ..scores import ScoreTable
from ..slurm.model import SlurmJob, SlurmNode
from . import undo
from .actions import Action
from .held import HeldJobs
from .learned import Learned, LiveScores
from .ledger import Ledger, PlacedJob, on_gpu
from .limits import SetSpeeds, limit_actions
from .occupancy import Occupancy
from .replan import move_waiting, waiting_jobs
from .report import status_report
from .requests import PlaceRequests
from .rights import RETRY_S as RIGHTS_RETRY_S
from .rights import Rights, is_refused_right
from .time_credit import GUARD_S, TimeCredit

__all__ = ["AgentState", "PlacedJob"]

log = logging.getLogger("slurm_colo.agent")


class AgentState(PlaceRequests):
    """The parts of the agent's state, and the requests that touch more than one of them
    (PLACE, JOBSTART, JOBEND, PROBE, a look at Slurm); each part's own work is in its
    module."""

    def __init__(self, cfg: Config, scores: ScoreTable | None = None) -> None:
        self.cfg = cfg
        self.live = LiveScores(scores)
        self.ledger = Ledger(cfg)
        #: the view, built lazily (by :meth:`rebuild`) before anything reads it after a
        #: hook's report left it behind
        self.occupancy = Occupancy(cfg, build=self.rebuild)
        self.holds = HeldJobs(cfg)
        #: see :class:`~slurm_colo.agent.requests.PlaceRequests`
        self._prepared = None
        self._model_views = ModelViews()
        #: time owed to shared jobs' limits (a few looks at Slurm before a job's end)
        self.credit = TimeCredit(guard_s=max(GUARD_S, 3 * cfg.agent.refresh_interval_s))
        #: whether Slurm lets the agent change jobs (agent/rights.py), and whose rights
        #: those are (the server's user, named in the log)
        self.rights = Rights()
        self.user = ""
        #: members' predicted speeds per (GPU model, classes), for the time-limit accounts
        self._set_speeds = SetSpeeds()
        #: each admin comment of the last snapshot and the tag parsed from it
        self._parsed_tags: dict[str, Placement | None] = {}
        #: jobs of the last snapshot that the Lua hook gave the fallback (counted once)
        self._fell_back: set[int] = set()
        #: holds of pending jobs on closed nodes the last snapshot called for, not yet
        #: handed to the server (:meth:`withdraw`)
        self._withdrawn: list[Action] = []

    # ---- the parts' state, by its usual names ------------------------------------------
    @property
    def scores(self) -> ScoreTable:
        """The live score set with what probes measured since it was made laid over it."""
        return self.live.table

    @scores.setter
    def scores(self, table: ScoreTable) -> None:
        self.live.load(table)

    @property
    def reservation(self) -> Reservation | None:
        return self.occupancy.reservation

    @property
    def stale(self) -> bool:
        """A hook's report left the view behind (built before it is next read)."""
        return self.occupancy.behind

    @property
    def held(self) -> dict[int, HeldJob]:
        return self.holds.jobs

    def shift_clock(self, step: float) -> None:
        """The wall clock stepped by ``step`` seconds (slurm_colo/clock.py): the times the
        parts keep themselves move with it. Not moved: Slurm's times (read afresh at each
        look), explanations' decision times (a record of the clock as it read), and the
        times of probe measurements, which are compared with a score set's creation."""
        self.ledger.shift(step)
        self.holds.shift(step)
        self.occupancy.shift(step)
        self.rights.shift(step)
        self.credit.shift(step)

    # ---- Slurm snapshots and the view --------------------------------------------------
    def apply_snapshot(
        self, jobs: list[SlurmJob], nodes: list[SlurmNode], now: float, asked: float | None = None
    ) -> None:
        """A new Slurm snapshot, taken at ``now``; ``asked``: when it was asked for."""
        occ = self.occupancy
        occ.take(jobs, nodes, now)
        tags = self._tags_of(jobs)
        self._count_fallbacks(jobs)
        self.ledger.sync(occ.jobs, tags, now, ended=occ.ended)
        occ.forget_reported(now, asked)
        self.holds.sync(occ.jobs, tags, self.ledger, now)
        # held before the view is built, so that it is built once (:meth:`withdraw`)
        self._withdrawn += self._hold_off_closed_nodes(now)
        self.live.apply()
        self.rebuild(plan_at=now)

    def _tags_of(self, jobs: list[SlurmJob]) -> dict[int, Placement]:
        """The placement tags of the snapshot's jobs, by job id. A tag's text is parsed once:
        the next snapshot lists the same comments (a Placement is immutable)."""
        last, seen = self._parsed_tags, {}
        tags: dict[int, Placement] = {}
        for j in jobs:
            text = j.admin_comment
            if not text:
                continue
            tag = last[text] if text in last else Placement.from_tag(text)
            seen[text] = tag
            if tag:
                tags[j.job_id] = tag
        self._parsed_tags = seen
        return tags

    def _count_fallbacks(self, jobs: list[SlurmJob]) -> None:
        """Count each job the Lua hook gave the fallback (its note in the job's comment:
        the agent was down, or did not answer in time) once, for ``fallbacks_total``."""
        fell_back = {j.job_id for j in jobs if FALLBACK_NOTE in j.comment}
        self.ledger.fallbacks["agent_unavailable"] += len(fell_back - self._fell_back)
        self._fell_back = fell_back

    def fresh(self) -> bool:
        """Build the view now if a hook's report left it behind (the agent's view thread:
        whatever reads the view first builds it anyway); whether it was built."""
        return self.occupancy.catch_up()

    def rebuild(self, plan_at: float | None = None) -> None:
        """The view afresh; with ``plan_at`` (a new snapshot) the starvation guard too."""
        self.occupancy.rebuild(
            self.ledger,
            self.scores,
            self.holds.jobs,
            self.holds.waits() if plan_at is not None else (),
            plan_at,
        )
        # a site with per-model score sets: each model's part of the view, indexed now
        prepare(self.view, self.book, self.cfg.placement, self._model_views)

    def job_started(
        self,
        job_id: int,
        tag_text: str | None,
        now: float,
        node: str = "",
        gpus: list[int] | None = None,
    ) -> dict[str, Any] | None:
        self.occupancy.ended.pop(job_id, None)  # a run after a requeue
        token = self.ledger.token_for(job_id, tag_text)
        placements = self.ledger.placements
        if token is None or token not in placements or not placements[token].decision.shared:
            if node and gpus:  # not ours: the GPU is taken whole until the job ends
                self.occupancy.report_unplaced(job_id, node, gpus, now)
                self.occupancy.mark_behind(members=True)
            return None
        p = placements[token]
        p.running, p.started = True, now
        # its partners are the jobs on its GPU in the view as it is: the flag just set
        # changes no GPU's jobs, and the view is built again later, once for a burst. A
        # placement linked to its job since the view was built is there by its token.
        d = p.decision
        g = on_gpu(self.occupancy.view_of_members(), d)
        partners = []
        for o in g.occupants if g else []:
            q = placements.get(o.key) if o.job_id is None else None
            other = q.job_id if q is not None else o.job_id
            if other and other != job_id:
                partners.append(other)
        self.occupancy.mark_behind(members=False)
        log.info(
            "job %s: started on GPU %s of %s with %s",
            job_id,
            d.index,
            d.node,
            partners or "no partner",
        )
        return replace(
            d.placement(token, p.request.cls, p.request.mode),
            partners=tuple(partners),
            probe_s=self.cfg.placement.probe_s,
        ).to_wire()

    def job_ended(self, job_id: int, now: float) -> None:
        token = self.ledger.by_job.get(job_id)
        p = self.ledger.placements.get(token) if token else None
        if p is not None and p.running:
            self.ledger.drop(token)  # type: ignore[arg-type]
        elif p is not None:  # the end of a run before a requeue: the new placement stays
            log.info("job %s: an earlier run ended; its new placement is kept", job_id)
        self.occupancy.job_ended(job_id, now)
        self.occupancy.mark_behind(members=True)
        log.info("job %s: ended", job_id)

    # ---- probes and held jobs ------------------------------------------------------------
    def probe(self, report: ProbeReport, now: float) -> tuple[dict[str, Any], list[Action]]:
        """Judge a probe report (agent/undo.py): the reply and what to do in Slurm."""
        return undo.judge(
            self.holds, report, now, self.ledger, self.occupancy, self.live, self.rebuild
        )

    def withdraw(self) -> list[Action]:
        """The holds of pending jobs placed on a node closed to placement that the last
        snapshot called for (agent/undo.py), each returned once, for Slurm. They are
        worked out in :meth:`apply_snapshot`, before it builds the view: holding them
        afterwards would build a large view twice in that look."""
        out, self._withdrawn = self._withdrawn, []
        return out

    def _hold_off_closed_nodes(self, now: float) -> list[Action]:
        """Hold the pending jobs placed on a node closed to placement; none while Slurm
        refuses the agent the right (they may then start there)."""
        if self.rights.holding_back(now):
            return []
        return undo.withdraw(self.holds, now, self.ledger, self.occupancy)

    def reaim(self, now: float) -> list[Action]:
        """Aim the held jobs a GPU takes now (agent/held.py); none while Slurm refuses
        the agent the right, until a change is to be tried again (agent/rights.py)."""
        if self.rights.holding_back(now):
            return []
        return self._count_tasks(self.holds.reaim(now, self.ledger, self.occupancy, self.book))

    def _count_tasks(self, actions: list[Action]) -> list[Action]:
        """Each task of an array released or moved is a job of its class, as a PLACE is
        (the learning's recurrence count, agent/learned.py); ``actions`` returned."""
        for a in actions:
            tag = Placement.from_tag(a.admin_comment) if a.task is not None else None
            if tag is not None:
                self.live.placed(tag.cls)
        return actions

    def replan(self, now: float) -> list[Action]:
        """Move ``--colocate`` jobs waiting for a whole GPU onto shared GPUs that take them
        (agent/replan.py): with ``placement.replan = "auto"`` where Slurm can change a
        pending job's GRES (:attr:`.held.HeldJobs.retype_after_undo`, 23.11+)."""
        if self.cfg.placement.replan != Replan.AUTO or not self.holds.retype_after_undo:
            return []
        if self.rights.holding_back(now):
            return []
        occ = self.occupancy
        tags = {}
        for j in occ.jobs.values():
            if j.state == "PENDING":
                tag = Placement.from_tag(j.admin_comment)
                if tag is not None:
                    tags[j.job_id] = tag
        models = {ng.model for ng in occ.layouts.values()}
        skip = set(self.holds.jobs)  # and jobs re-planned already, not yet seen so in Slurm
        skip |= {
            j for j, t in self.ledger.by_job.items() if self.ledger.placements[t].decision.shared
        }
        waiting = waiting_jobs(occ.jobs, tags, skip, models)
        # bounded queue jumping: no waiting job passes a held job that has waited too long
        # and may want the GPU it would take
        heads: dict[str | None, float | None] = {}

        def behind(since: float, gres_type: str | None) -> bool:
            if gres_type not in heads:
                heads[gres_type] = self._queue_head(now, gres_type)
            return waits_behind(since, heads[gres_type], now, self.cfg.placement)

        return self._count_tasks(
            move_waiting(self.cfg, now, waiting, self.ledger, occ, self.book, behind)
        )

    def extend_limits(self, now: float) -> list[Action]:
        """Add to the time limit of each job the agent placed on a shared GPU the time
        sharing cost it (agent/limits.py, agent/time_credit.py), with
        ``placement.time_limit = "extend"``."""
        if self.cfg.placement.time_limit != TimeLimit.EXTEND:
            return []
        return limit_actions(
            self.view,
            self.ledger.by_job,
            self.occupancy.jobs,
            self.credit,
            self._set_speeds,
            self.book,
            now,
        )

    def failed(self, action: Action, now: float, why: str = "", made: bool = True) -> None:
        """Slurm refused ``action``, saying ``why`` (logged here), or, ``made`` False, it was
        not made because Slurm refuses the agent the right (agent/rights.py). A re-aim or
        undo: see agent/held.py; a re-plan: the job keeps its whole-GPU request, and its
        placement is forgotten; a time limit: that job is not asked for again, unless the
        right was refused (its minutes are owed again)."""
        right = not made or is_refused_right(why)
        if made and right and self.rights.refuse(why, now):
            log.error(
                "Slurm refuses the agent the right to change jobs (%s of job %s: %s). It "
                "needs root, SlurmUser or the Operator level (sacctmgr -i add user %s "
                "adminlevel=Operator; admin guide). Until then it changes no job (one change "
                "is tried again every %d min), holds no new job, and raises no time limit.",
                action.kind,
                action.job_id,
                why,
                self.user or "USER",
                int(RIGHTS_RETRY_S // 60),
            )
        if not right:
            log.error("job %s: %s failed: %s", action.job_id, action.kind, why)
        if action.kind == "extend":
            if right:
                self.credit.not_given(action.job_id, action.minutes)
            else:
                self.credit.refused(action.job_id)
            return
        if action.kind == "retarget":
            # the placement the re-plan made (a task of an array has no job of its own yet)
            linked = self.ledger.by_job.get(action.job_id, "") if action.task is None else ""
            self.ledger.drop(linked or action.placement_token)
            self.rebuild()
            return
        self.holds.failed(action, now, self.ledger, self.occupancy, self.rebuild)

    def restore_learned(self, learned: Learned) -> None:
        """Measurements saved before a restart (agent/learned.py)."""
        self.live.restore(learned)

    # ---- reporting -----------------------------------------------------------------------
    def needs_lookup(self, job_id: int) -> bool:
        return self.ledger.needs_lookup(job_id)

    def explain(self, job_id: int, tag_text: str | None = None) -> dict[str, Any]:
        ex = self.ledger.explain(job_id, tag_text, self.view)
        cls = ex.get("cls")
        if ex.get("known") and cls != DEFAULT_CLASS and cls not in self.live.known_classes():
            ex["class_unknown"] = True  # its pairs were the score set's prior
        added = self.credit.given_min(job_id)
        if added:
            ex["time_limit_added_min"] = added
        return ex

    def status(self, now: float) -> dict[str, Any]:
        """The STATUS answer (:func:`.report.status_report`)."""
        return status_report(self, now)
