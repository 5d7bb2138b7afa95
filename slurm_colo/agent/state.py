"""The agent's state, as the server sees it: one object holding the parts -- the live
scores (:mod:`.learned`), the view of the GPUs (:mod:`.occupancy`), the placements handed
out and their explanations (:mod:`.ledger`) and the held jobs (:mod:`.held`) -- and
answering the protocol's requests with them. No I/O here: the server feeds it Slurm
snapshots and hook events, under one lock."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..config import Config
from ..contracts.enums import Mode, Replan, TimeLimit
from ..contracts.hook_notes import FALLBACK_NOTE
from ..contracts.options import DEFAULT_CLASS, derive_class, parse_mode
from ..contracts.placement import ANY_SHARED, Placement
from ..contracts.probe import ProbeReport
from ..contracts.records import UID_MAX
from ..errors import OptionError
from ..placement import ClusterView, Decision, JobRequest
from ..placement.by_model import BookDecision, ModelViews, ScoreBook, place_by_model, prepare
from ..placement.guard import Reservation
from ..placement.held import HeldJob, queue_head, waits_behind, wanting
from ..scores import ScoreTable
from ..slurm.model import SlurmJob, SlurmNode
from .arrays import array_decision, array_reply
from .held import Action, HeldJobs, can_hold, hold_unplaced
from .learned import Learned, LiveScores
from .ledger import Ledger, PlacedJob, on_gpu
from .limits import SetSpeeds, limit_actions
from .occupancy import Occupancy
from .replan import move_waiting, waiting_jobs
from .report import status_report
from .rights import RETRY_S as RIGHTS_RETRY_S
from .rights import Rights, is_refused_right
from .time_credit import GUARD_S, TimeCredit

__all__ = ["AgentState", "PlacedJob", "nothing"]

log = logging.getLogger("slurm_colo.agent")


def _new_token() -> str:
    return "p" + secrets.token_hex(4)


def nothing() -> None:
    """The follow-up of a request that has nothing to record."""


def _partner_text(keys: tuple[str, ...]) -> str:
    """Job ids where known; a placement not yet seen in Slurm has only its token."""
    ids = [k for k in keys if k.isdigit()]
    fresh = len(keys) - len(ids)
    parts = [f"job(s) {','.join(ids)}"] if ids else []
    if fresh:
        parts.append(f"{fresh} just-submitted job(s)")
    return " and ".join(parts)


class AgentState:
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
        #: (request key, view, view version, score book, token, decision) prepared after
        #: the last placement for the next request of the same kind; see :meth:`decide`
        self._prepared: tuple[Any, ...] | None = None
        #: the view's parts per GPU model's score set, kept between requests
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
    def book(self) -> ScoreBook:
        """The site default set and the sets of the GPU models that have their own."""
        return self.live.book

    @property
    def view(self) -> ClusterView:
        return self.occupancy.view

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
        self.ledger.sync(occ.jobs, tags, now)
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

    # ---- requests ------------------------------------------------------------------------
    def place_request(self, fields: dict[str, str], now: float) -> dict[str, str]:
        """Decide and record in one go (see :meth:`decide` for the split form)."""
        reply, record = self.decide(fields, now)
        record()
        return reply

    def decide(
        self, fields: dict[str, str], now: float
    ) -> tuple[dict[str, str], Callable[[], None]]:
        """The answer to one PLACE request, and the bookkeeping to run once it is sent.

        The caller must run the returned ``record`` before deciding anything else (the
        agent holds its lock across both): it adds the placement to the view, writes the
        explanation and the log line, and prepares the answer to the next request of the
        same kind (same user, class, mode and filters), which :meth:`decide` then returns
        at once if nothing in the view, the scores or the config changed meanwhile -- the
        same decision :func:`~slurm_colo.placement.place` would compute, with its token
        drawn in advance.
        """
        try:
            uid = int(fields.get("uid", "-1"))
            if not -1 <= uid <= UID_MAX:  # -1: unknown; a larger one would break the index
                raise ValueError(f"uid {fields['uid'][:20]} is not a user id")
            mode = parse_mode(fields.get("mode"))
            cls = derive_class(
                fields.get("name"),
                fields.get("class") or None,
                self.cfg.placement.class_name_numbers,
            )
        except (OptionError, ValueError) as e:
            self.ledger.decisions["exclusive:bad-input"] += 1
            return {"action": "exclusive", "comment": f"colo: not shared ({e})"}, nothing
        if fields.get("array") == "1":
            return self._array(fields, cls, mode, now)
        key = (
            uid,
            fields.get("user", ""),
            cls,
            mode,
            fields.get("partition", ""),
            fields.get("gpu_type", ""),
            fields.get("req_nodes", ""),
            fields.get("exc_nodes", ""),
        )
        ready = self._prepared
        self._prepared = None
        if (
            ready is not None
            and ready[0] == key
            and ready[1] is self.view
            and ready[2] == self.view.version
            and ready[3] is self.book
        ):
            token, bd = ready[4], ready[5]
        else:
            token = _new_token()
            bd = self._place(token, key, fields)
        d = bd.decision
        oldest = self._queue_head(now, d.gres_type) if d.shared else None
        if d.shared and waits_behind(now, oldest, now, self.cfg.placement):
            d = Decision(
                "exclusive",
                "own GPU: waits its turn behind a job held for "
                f"{(now - (oldest or now)) / 3600:.1f} h (placement.bypass_h)",
                memory_gib=d.memory_gib,
            )
            bd = replace(bd, decision=d)
        tag = d.placement(token, cls, mode).to_tag()
        would_hold = not d.shared and hold_unplaced(self.cfg) and can_hold(self.occupancy, fields)
        # a held job waits for the agent's release: none while Slurm refuses it the right
        hold = would_hold and self.rights.refused is None
        if hold:
            # held without a GPU request: the agent sets it when it releases the job onto
            # whichever shared GPU fits it first (agent/held.py, HeldJobs.reaim)
            tag = d.placement(
                token, cls, mode, held=ANY_SHARED, model=fields.get("gpu_type", "")
            ).to_tag()
            reply = {
                "action": "hold",
                "gres": "none",
                "tag": tag,
                "comment": f"colo: held until a shared GPU fits ({d.reason.removeprefix('own GPU: ')})",
                "user_msg": "slurm-colo: held until a shared GPU fits; "
                "the job is released there by the placement agent",
            }
        elif not d.shared:
            why = f"colo: {d.reason}" + (
                "; not held: Slurm refuses the agent the right to release it" if would_hold else ""
            )
            reply = {"action": "exclusive", "comment": why, "tag": tag}
        else:
            short = f"colo: GPU {d.index} of {d.node}" + (
                f" with {_partner_text(d.partners)}, predicted delta {d.predicted_delta:.2f}"
                if d.partners
                else " (opened for sharing)"
            )
            reply = {
                "action": "share",
                "gres": self.occupancy.layouts[d.node or ""].shard_request(d.index or 0),
                "node": d.node or "",
                "comment": short,
                "tag": tag,
                "user_msg": f"slurm-colo: {short[6:]}",
            }

        def record() -> None:
            self._record(token, key, fields, bd, now, held=hold)
            if hold:
                self.ledger.note(token, reply["comment"][6:])

        return reply, record

    def _array(
        self, fields: dict[str, str], cls: str, mode: Mode, now: float
    ) -> tuple[dict[str, str], Callable[[], None]]:
        """A job array keeps its own-GPU request; where Slurm can change a waiting task's
        GRES its tag makes its waiting tasks re-planned one by one (agent/arrays.py)."""
        shared = self.cfg.placement.replan == Replan.AUTO and self.holds.retype_after_undo
        token = _new_token()
        d = array_decision(shared)
        reply = array_reply(shared, d.placement(token, cls, mode).to_tag())

        def record() -> None:
            user, name = fields.get("user", ""), fields.get("name", "")
            if shared:  # explained by its tag, which every task carries until moved
                self.ledger.remember(token, name, user, cls, str(mode), d, now, "")
            self.ledger.decisions["exclusive:job array"] += 1
            log.info("placement %s (%s, user %s, class %s): %s", token, name, user, cls, d.reason)

        return reply, record

    def _request(self, token: str, key: tuple[Any, ...]) -> JobRequest:
        uid, user, cls, mode, partition = key[:5]
        return JobRequest(key=token, user=user, uid=uid, cls=cls, mode=mode, partition=partition)

    def _place(self, token: str, key: tuple[Any, ...], fields: dict[str, str]) -> BookDecision:
        """The placement, each GPU judged with its own model's score set
        (:func:`~slurm_colo.placement.by_model.place_by_model`: one ``place`` call on the
        whole view when the site has one set)."""
        view = self.occupancy.candidate_view(fields)
        # the kept parts belong to the whole view; a filtered one is split afresh
        cache = self._model_views if view is self.view else None
        return place_by_model(self._request(token, key), view, self.book, self.cfg.placement, cache)

    def _record(
        self,
        token: str,
        key: tuple[Any, ...],
        fields: dict[str, str],
        bd: BookDecision,
        now: float,
        held: bool = False,
    ) -> None:
        req = self._request(token, key)
        self.live.placed(req.cls)
        led = self.ledger
        d = bd.decision
        led.remember(
            token,
            fields.get("name", ""),
            req.user,
            req.cls,
            req.mode,
            d,
            now,
            bd.scores.id,
            scores_model=bd.model if self.book.by_model else None,
        )
        log.info(
            "placement %s (%s, user %s, class %s): %s",
            token,
            fields.get("name"),
            req.user,
            req.cls,
            d.reason,
        )
        if held:
            led.decisions["hold:no partner now"] += 1
        elif not d.shared:
            led.decisions["exclusive:" + d.reason.split(":")[0]] += 1
        else:
            led.add(token, req, d, now, self.view)
            led.decisions["share:" + ("partner" if d.partners else "open")] += 1
        # the next job of a stream (job arrays, sweeps) usually asks the same question
        nxt = _new_token()
        self._prepared = (
            key,
            self.view,
            self.view.version,
            self.book,
            nxt,
            self._place(nxt, key, fields),
        )

    def job_started(
        self,
        job_id: int,
        tag_text: str | None,
        now: float,
        node: str = "",
        gpus: list[int] | None = None,
    ) -> dict[str, Any] | None:
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

    def job_ended(self, job_id: int) -> None:
        token = self.ledger.by_job.get(job_id)
        p = self.ledger.placements.get(token) if token else None
        if p is not None and p.running:
            self.ledger.drop(token)  # type: ignore[arg-type]
        elif p is not None:  # the end of a run before a requeue: the new placement stays
            log.info("job %s: an earlier run ended; its new placement is kept", job_id)
        self.occupancy.job_ended(job_id)
        self.occupancy.mark_behind(members=True)
        log.info("job %s: ended", job_id)

    # ---- probes and held jobs ------------------------------------------------------------
    def probe(self, report: ProbeReport, now: float) -> tuple[dict[str, Any], list[Action]]:
        """Judge a probe report (agent/held.py): the reply and what to do in Slurm."""
        return self.holds.probe(report, now, self.ledger, self.occupancy, self.live, self.rebuild)

    def withdraw(self) -> list[Action]:
        """The holds of pending jobs placed on a node closed to placement that the last
        snapshot called for (agent/held.py), each returned once, for Slurm. They are
        worked out in :meth:`apply_snapshot`, before it builds the view: holding them
        afterwards would build a large view twice in that look."""
        out, self._withdrawn = self._withdrawn, []
        return out

    def _hold_off_closed_nodes(self, now: float) -> list[Action]:
        """Hold the pending jobs placed on a node closed to placement; none while Slurm
        refuses the agent the right (they may then start there)."""
        if self.rights.holding_back(now):
            return []
        return self.holds.withdraw(now, self.ledger, self.occupancy)

    def reaim(self, now: float) -> list[Action]:
        """Aim the held jobs a GPU takes now (agent/held.py); none while Slurm refuses
        the agent the right, until a change is to be tried again (agent/rights.py)."""
        if self.rights.holding_back(now):
            return []
        return self.holds.reaim(now, self.ledger, self.occupancy, self.book)

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

        moves = move_waiting(self.cfg, now, waiting, self.ledger, occ, self.book, behind)
        for a in moves:
            if a.task is not None:  # a task of an array: each one a job of its class
                self.live.placed(tags[a.job_id].cls)
        return moves

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

    def _queue_head(self, now: float, gres_type: str | None = None) -> float | None:
        """:func:`~slurm_colo.placement.held.queue_head` among the held jobs that may want a
        GPU of shard type ``gres_type`` (None: any shared GPU), looked for only once a held
        job has waited ``placement.reserve_after_h`` (before that :func:`waits_behind` holds
        nobody up): the answer path pays nothing for it until then."""
        cfg, jobs = self.cfg.placement, self.holds.jobs
        if not jobs or cfg.bypass_h <= 0 or cfg.reserve_after_h <= 0:
            return None
        if now - min(h.since for h in jobs.values()) < cfg.reserve_after_h * 3600.0:
            return None
        held = list(jobs.values()) if gres_type is None else wanting(gres_type, jobs.values())
        return queue_head(held, self.view)

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
            tag = Placement.from_tag(action.admin_comment)
            token = self.ledger.by_job.get(action.job_id) if action.task is None else None
            token = token or (tag.token if tag is not None else None)
            if token is not None:
                self.ledger.drop(token)
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
