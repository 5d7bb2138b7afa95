"""The agent's ledger: the placements it handed out (:class:`PlacedJob`), which Slurm job
each became, why each was made (``slurm-colo explain``) and the decision counters
(``slurm-colo status``). No I/O; the view is :mod:`.occupancy`'s."""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Container
from dataclasses import dataclass, replace
from typing import Any

from ..config import Config, PlacementConfig
from ..contracts.options import derive_class
from ..contracts.placement import Placement
from ..placement import ClusterView, Decision, GpuView, JobRequest, Occupant
from ..placement.retract import rate_floor
from ..scores import ScoreTable
from ..slurm.model import SlurmJob
from .arrays import array_token

log = logging.getLogger("slurm_colo.agent")
MAX_EXPLANATIONS = 20000


@dataclass
class PlacedJob:
    """A placement the agent handed out, and what became of it."""

    token: str
    request: JobRequest
    decision: Decision
    created: float
    job_id: int | None = None
    running: bool = False
    started: float | None = None


def request_from_tag(
    j: SlurmJob, tag: Placement, cfg: PlacementConfig, partition: str = "", gres_type: str = ""
) -> JobRequest:
    """The request of a job the agent knows from Slurm and its tag only (a restart, a held
    or waiting job): its user, class and mode, the rate floor of an undone job."""
    return JobRequest(
        key=str(j.job_id),
        user=j.user,
        uid=j.uid,
        cls=tag.cls,
        mode=tag.mode,
        partition=partition,
        gres_type=gres_type,
        rate_floor=rate_floor(cfg, tag.undone),
    )


def on_gpu(view: ClusterView, d: Decision) -> GpuView | None:
    """The GPU of ``view`` a shared decision names (None if it is not there)."""
    return view.find(d.node or "", d.index if d.index is not None else -1)


class Ledger:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.placements: dict[str, PlacedJob] = {}
        self.by_job: dict[int, str] = {}
        self.explanations: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.decisions: Counter[str] = Counter()
        self.fallbacks: Counter[str] = Counter()
        #: probe verdicts: kept, undone, harmful (harmful, not to be undone), undo_failed
        #: (Slurm refused the requeue)
        self.probes: Counter[str] = Counter()

    def shift(self, step: float) -> None:
        """The wall clock stepped by ``step`` seconds (slurm_colo/clock.py): the placements'
        times move with it, so one not seen in Slurm yet keeps its ``agent.pending_ttl_s``."""
        for p in self.placements.values():
            p.created += step
            if p.started is not None:
                p.started += step

    # ---- placements and jobs ---------------------------------------------------------
    def link(self, p: PlacedJob, job_id: int) -> None:
        p.job_id = job_id
        self.by_job[job_id] = p.token
        p.request = replace(p.request, key=str(job_id))
        ex = self.explanations.get(p.token)
        if ex is not None:
            ex["job_id"] = job_id
        log.info("job %s: is placement %s (%s)", job_id, p.token, p.decision.reason)

    def drop(self, token: str) -> None:
        p = self.placements.pop(token, None)
        if p and p.job_id is not None:
            self.by_job.pop(p.job_id, None)

    def of_job(self, job_id: int) -> PlacedJob | None:
        token = self.by_job.get(job_id)
        return self.placements.get(token) if token else None

    def needs_lookup(self, job_id: int) -> bool:
        return job_id not in self.by_job

    def token_for(self, job_id: int, tag_text: str | None) -> str | None:
        """The placement of ``job_id``; a job not linked yet is linked from its tag."""
        token = self.by_job.get(job_id)
        if token is None and tag_text:
            tag = Placement.from_tag(tag_text)
            if tag and tag.token in self.placements:
                token = tag.token
                self.link(self.placements[token], job_id)
        return token

    def sync(
        self,
        jobs: dict[int, SlurmJob],
        tags: dict[int, Placement],
        now: float,
        ended: Container[int] = (),
    ) -> None:
        """After a look at Slurm: rebuild placements known only from their tags (agent
        restart), link the new ones to their jobs, forget those of gone jobs and those
        never seen in Slurm within ``agent.pending_ttl_s``. ``ended``: jobs whose end a node
        hook reported that the look still lists running; their placements were dropped
        then and are not rebuilt (the look was asked for before the end, or the job is
        completing)."""
        for job_id, tag in tags.items():
            if not tag.token or job_id in ended:
                continue
            j = jobs[job_id]
            p = self.placements.get(tag.token)
            if (
                p is None
                and tag.shared
                and tag.node is not None
                and tag.gpu is not None
                and (j.active or j.state == "PENDING")
            ):
                req = request_from_tag(j, tag, self.cfg.placement)
                d = Decision.from_placement(
                    tag, "rebuilt from the job's tag after an agent restart"
                )
                p = PlacedJob(tag.token, req, d, created=j.submit_time or now)
                self.placements[p.token] = p
                log.info(
                    "job %s: placement rebuilt from Slurm (GPU %s of %s)",
                    j.job_id,
                    tag.gpu,
                    tag.node,
                )
            if p is not None and p.job_id is None:
                self.link(p, j.job_id)
            if p is not None:
                p.running = j.active
        for token, p in list(self.placements.items()):
            sj = jobs.get(p.job_id) if p.job_id is not None else None
            gone = p.job_id is not None and (sj is None or not (sj.active or sj.state == "PENDING"))
            stale = p.job_id is None and now - p.created > self.cfg.agent.pending_ttl_s
            if gone or stale:
                self.drop(token)

    def add(
        self,
        token: str,
        req: JobRequest,
        d: Decision,
        now: float,
        view: ClusterView,
        job_id: int | None = None,
    ) -> PlacedJob:
        """Record a shared placement and add it to its GPU of ``view``."""
        p = PlacedJob(token, req, d, created=now)
        self.placements[token] = p
        if job_id is not None:
            self.link(p, job_id)
        g = on_gpu(view, d)
        if g is not None:
            view.add_occupant(g, self.occupant(p))
        return p

    # ---- occupants -------------------------------------------------------------------
    def occupant(self, p: PlacedJob) -> Occupant:
        d = p.decision
        est = d.memory_gib if d.memory_gib is not None else self.cfg.placement.default_memory_gib
        return Occupant(
            key=str(p.job_id) if p.job_id else p.token,
            user=p.request.user,
            uid=p.request.uid,
            cls=p.request.cls,
            memory_gib=est,
            thread_pct=d.thread_pct or 100,
            mem_limit_gib=d.mem_limit_gib or 0.0,
            pending=not p.running,
            job_id=p.job_id,
            since=p.started or p.created,
            no_partners=p.request.takes_no_partner,
        )

    def occupant_key(self, j: SlurmJob, scores: ScoreTable) -> tuple[Any, ...]:
        """Everything :meth:`occupant_for_job` reads for ``j``: an equal key gives an equal
        occupant, so a view built again may reuse the last one (occupants are never
        changed once built)."""
        token = self.by_job.get(j.job_id)
        p = self.placements.get(token) if token else None
        if p is not None:
            return (
                p,
                p.request,
                p.decision,
                p.created,
                p.job_id,
                p.running,
                p.started,
                j.start_time,
            )
        return (None, j.job_id, j.name, j.user, j.uid, j.start_time, scores)

    def occupant_for_job(self, j: SlurmJob, scores: ScoreTable) -> Occupant:
        token = self.by_job.get(j.job_id)
        if token and token in self.placements:
            occ = self.occupant(self.placements[token])
            occ.pending = False
            occ.since = j.start_time or occ.since
            return occ
        # a shard job we did not place (fallback sharing, or asked for by hand)
        cls = derive_class(j.name, numbers=self.cfg.placement.class_name_numbers)
        return Occupant(
            key=str(j.job_id),
            user=j.user,
            uid=j.uid,
            cls=cls,
            memory_gib=scores.memory_gib(cls, self.cfg.placement.default_memory_gib),
            job_id=j.job_id,
            since=j.start_time,
        )

    # ---- explanations ----------------------------------------------------------------
    def remember(
        self,
        token: str,
        name: str,
        user: str,
        cls: str,
        mode: str,
        d: Decision,
        now: float,
        scores_id: str,
        scores_model: str | None = None,
    ) -> None:
        """Keep the explanation of a decision (``scores_model``: whose score set was used
        on a site with per-model sets, "" the site default; None: the site has one set)."""
        self.explanations[token] = {
            "token": token,
            "job_id": None,
            "name": name,
            "user": user,
            "cls": cls,
            "mode": mode,
            "action": d.action,
            "reason": d.reason,
            "node": d.node,
            "gpu": d.index,
            "partners": list(d.partners),
            "predicted_delta": d.predicted_delta,
            "predicted_sd": d.predicted_sd,
            "thread_pct": d.thread_pct,
            "mem_limit_gib": d.mem_limit_gib,
            "mechanism": d.mechanism,
            "time": now,
            "scores": scores_id,
            "scores_model": scores_model,
        }
        while len(self.explanations) > MAX_EXPLANATIONS:
            self.explanations.popitem(last=False)

    def note(self, token: str, reason: str) -> None:
        """Replace the reason ``slurm-colo explain`` shows for a placement."""
        ex = self.explanations.get(token)
        if ex is not None:
            ex["reason"] = reason

    def explain(self, job_id: int, tag_text: str | None, view: ClusterView) -> dict[str, Any]:
        token = self.by_job.get(job_id)
        if token is None and tag_text:
            t = Placement.from_tag(tag_text)
            token = t.token if t else None
        # a task split from its array without a placement of its own (released with its
        # own GPU request, or held again after a refused release): the array's answer
        ex = dict(
            self.explanations.get(token or "")
            or self.explanations.get(array_token(token or ""))
            or {}
        )
        if not ex:
            return {
                "job_id": job_id,
                "known": False,
                "reason": "no placement recorded: submitted without --colocate, or before the agent's memory",
            }
        ex["known"] = True
        ex["job_id"] = job_id
        ex["partners"] = [self._job_of(k) for k in ex.get("partners", [])]
        p = self.placements.get(token or "")
        if p and p.decision.shared:
            g = on_gpu(view, p.decision)
            if g is not None:
                ex["now_with"] = [o.job_id or o.key for o in g.occupants if o.job_id != job_id]
        return ex

    def _job_of(self, key: str) -> str:
        p = self.placements.get(key)
        return str(p.job_id) if p and p.job_id else key

    def pending_count(self) -> int:
        return sum(1 for p in self.placements.values() if not p.running)
