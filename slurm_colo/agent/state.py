"""The agent's live view: which job sits on which shared GPU, the placements it has handed
out, and the scores. No I/O here: the server feeds it Slurm snapshots and hook events."""

from __future__ import annotations

import logging
import secrets
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..config import Config
from ..errors import OptionError
from ..gres_layout import NodeGpus, expand_hostlist
from slurm_colo.contracts.options import derive_class, parse_mode
from ..placement import ClusterView, Decision, GpuView, JobRequest, Occupant, place
from ..placement.policy import index_for
from ..placement.retract import rate_floor, with_pairs
from ..scores import PairScore, ScoreTable
from ..slurm.model import SlurmJob, SlurmNode
from slurm_colo.contracts.placement import ANY_SHARED, Placement
from slurm_colo.placement.guard import HeldWait, Reservation, drained, end_times, kept, reserve, reserve_held
from .held import Held, can_hold, hold_unplaced, sync_held

log = logging.getLogger("slurm_colo.agent")
MAX_EXPLANATIONS = 20000
#: how long GPUs drained for a waiting job stay closed while Slurm has not started it yet
DRAINED_GRACE_S = 60.0


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


def _timestamp(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


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
    def __init__(self, cfg: Config, scores: ScoreTable | None = None) -> None:
        self.cfg = cfg
        #: pair throughputs probes measured since the score set was made, laid over it
        self.learned: dict[tuple[str, str], tuple[PairScore, float]] = {}
        self._learned_pending = False
        #: bumped whenever ``learned`` gains a measurement (the agent then saves it)
        self.learned_changes = 0
        self.scores = scores or ScoreTable()
        self.scores_error: str | None = None
        #: jobs held in Slurm until a GPU takes them (held.py): requeued ones (a GPU of
        #: their shard type), held at submission (any shared GPU)
        self.held: dict[int, Held] = {}
        #: probe verdicts: kept, undone, harmful (harmful, not to be undone), undo_failed
        #: (Slurm refused the requeue)
        self.probes: Counter[str] = Counter()
        self.placements: dict[str, PlacedJob] = {}
        self.by_job: dict[int, str] = {}
        self.jobs: dict[int, SlurmJob] = {}
        self.nodes: dict[str, SlurmNode] = {}
        self.view = ClusterView()
        self.layouts: dict[str, NodeGpus] = {n: ng for ng in cfg.gpus for n in ng.node_names}
        self.explanations: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.decisions: Counter[str] = Counter()
        self.fallbacks: Counter[str] = Counter()
        self.snapshot_time: float = 0.0
        #: GPUs that the node hooks reported as taken by jobs we did not place
        self.unplaced_gpus: dict[int, tuple[str, tuple[int, ...], float]] = {}
        #: (request key, view, view version, scores, token, decision) prepared after the
        #: last placement for the next request of the same kind; see :meth:`decide`
        self._prepared: tuple[Any, ...] | None = None
        #: shared GPUs drained for a job waiting too long for whole GPUs (see drain.py)
        self.reservation: Reservation | None = None
        #: waiting jobs the guard gave up on (GPUs drained, still not started) -> when
        self._gave_up: dict[int, float] = {}
        self._drained_since: float | None = None

    # ---- scores ---------------------------------------------------------------------------
    @property
    def scores(self) -> ScoreTable:
        """The live score set with what probes measured since it was made laid over it."""
        return self._scores

    @scores.setter
    def scores(self, table: ScoreTable) -> None:
        self._base_scores = table
        made = _timestamp(table.created)
        self.learned = {k: v for k, v in self.learned.items() if made is None or v[1] > made}
        self._scores = with_pairs(table, {k: v[0] for k, v in self.learned.items()})

    def learn(self, observed: dict[tuple[str, str], PairScore], now: float,
              at_once: bool = False) -> None:
        """Use pair throughputs a probe measured (until a newer score set): ``at_once`` (a
        harmful set: the caller rebuilds the view), else from the next look at Slurm, so a
        kept set costs no rebuild of the placement cache on a hook's request."""
        if not observed:
            return
        for (a, b), ps in observed.items():
            self.learned.pop((b, a), None)
            self.learned[(a, b)] = (ps, now)
        self._learned_pending = True
        self.learned_changes += 1
        if at_once:  # the caller rebuilds the view
            self.apply_learned()

    def restore_learned(self, learned: dict[tuple[str, str], tuple[PairScore, float]]) -> None:
        """Measurements saved before a restart (agent/learned.py), laid over the score set
        unless it was made after them."""
        self.learned = dict(learned)
        self.scores = self._base_scores

    def apply_learned(self) -> None:
        """Lay the pairs probes measured over the score set."""
        if self._learned_pending:
            self._learned_pending = False
            self.scores = self._base_scores

    # ---- Slurm snapshots ---------------------------------------------------------------
    def apply_snapshot(self, jobs: list[SlurmJob], nodes: list[SlurmNode], now: float) -> None:
        self.jobs = {j.job_id: j for j in jobs}
        if nodes:
            self.nodes = {n.name: n for n in nodes}
        self.snapshot_time = now
        tags: dict[int, dict[str, Any]] = {}
        for j in jobs:
            tag = Placement.from_tag(j.admin_comment)
            if tag:
                tags[j.job_id] = tag
            if not tag or not tag.token:
                continue
            p = self.placements.get(tag.token)
            if (p is None and tag.shared and tag.node is not None and tag.gpu is not None
                    and (j.active or j.state == "PENDING")):
                req = JobRequest(key=str(j.job_id), user=j.user, uid=j.uid, cls=tag.cls, mode=tag.mode,
                                 rate_floor=rate_floor(self.cfg.placement, tag.undone))
                d = Decision.from_placement(tag, "rebuilt from the job's tag after an agent restart")
                p = PlacedJob(tag.token, req, d, created=j.submit_time or now)
                self.placements[p.token] = p
                log.info("job %s: placement rebuilt from Slurm (GPU %s of %s)", j.job_id, tag.gpu, tag.node)
            if p is not None and p.job_id is None:
                self._link(p, j.job_id)
            if p is not None:
                p.running = j.active
        for token, p in list(self.placements.items()):
            sj = self.jobs.get(p.job_id) if p.job_id is not None else None
            gone = p.job_id is not None and (sj is None or not (sj.active or sj.state == "PENDING"))
            stale = p.job_id is None and now - p.created > self.cfg.agent.pending_ttl_s
            if gone or stale:
                self.drop_placement(token)
        # forget reported jobs Slurm shows ended, or no longer shows at all (after a grace
        # period: the report may be newer than the snapshot)
        grace = 3 * self.cfg.agent.refresh_interval_s
        for job_id in [k for k, (_, _, t) in self.unplaced_gpus.items()
                       if (k in self.jobs and not self.jobs[k].active)
                       or (k not in self.jobs and now - t > grace)]:
            del self.unplaced_gpus[job_id]
        sync_held(self, tags, now)
        self.apply_learned()
        self.rebuild(plan_at=now)

    def _link(self, p: PlacedJob, job_id: int) -> None:
        p.job_id = job_id
        self.by_job[job_id] = p.token
        p.request = replace(p.request, key=str(job_id))
        ex = self.explanations.get(p.token)
        if ex is not None:
            ex["job_id"] = job_id
        log.info("job %s: is placement %s (%s)", job_id, p.token, p.decision.reason)

    def drop_placement(self, token: str) -> None:
        p = self.placements.pop(token, None)
        if p and p.job_id is not None:
            self.by_job.pop(p.job_id, None)

    # ---- the view ------------------------------------------------------------------------
    def rebuild(self, plan_at: float | None = None) -> None:
        """The view from the last snapshot, the hooks' reports and our placements; with
        ``plan_at`` (a new snapshot) the starvation guard is planned afresh too."""
        gpus: dict[tuple[str, int], GpuView] = {}
        for node, ng in self.layouts.items():
            sn = self.nodes.get(node)
            for i in ng.shared:
                gpus[(node, i)] = GpuView(node=node, index=i, gres_type=ng.gres_type(i),
                                          memory_gib=ng.memory_gib, slots=ng.shards_per_gpu,
                                          model=ng.model, available=sn.usable if sn else not self.nodes)
        placed: set[str] = set()
        for j in self.jobs.values():
            if not j.active or j.nodes not in self.layouts or j.job_id in self.held:
                continue  # (a held job is being requeued: it is leaving its GPU)
            ng = self.layouts[j.nodes]
            for alloc in j.gres:
                if alloc.name == "gpu":
                    for i in alloc.indices:
                        if (j.nodes, i) in gpus:
                            gpus[(j.nodes, i)].exclusive_job = j.job_id
                elif alloc.name == "shard":
                    idx = alloc.indices[0] if alloc.indices else ng.index_for_type(alloc.type)
                    g = gpus.get((j.nodes, idx)) if idx is not None else None
                    if g is not None:
                        g.occupants.append(self._occupant_for_job(j))
                        token = self.by_job.get(j.job_id)
                        if token:
                            placed.add(token)
        for job_id, (node, idxs, _) in self.unplaced_gpus.items():
            if job_id in self.jobs and self.jobs[job_id].active:
                continue  # the snapshot already knows this job
            for i in idxs:
                if (node, i) in gpus and not gpus[(node, i)].occupants:
                    gpus[(node, i)].exclusive_job = job_id
        for p in self.placements.values():
            if p.token in placed or not p.decision.shared:
                continue
            g = gpus.get((p.decision.node or "", p.decision.index if p.decision.index is not None else -1))
            if g is not None:
                g.occupants.append(self._occupant_for_placement(p))
        view = ClusterView(gpus=[gpus[k] for k in sorted(gpus)])
        if plan_at is not None:
            self._plan_reservation(view, plan_at)
        self._close_reserved(view)
        self.view = view
        index_for(self.view, self.scores, self.cfg.placement)  # built here, off the request path

    def _plan_reservation(self, view: ClusterView, now: float) -> None:
        after_s = self.cfg.placement.reserve_after_h * 3600.0
        old = self.reservation
        sj = self.jobs.get(old.job_id) if old is not None else None
        if old is not None and sj is not None and sj.state == "PENDING" and drained(old, view):
            # its GPUs are free: keep them for it while Slurm gets round to starting it
            if self._drained_since is None:
                self._drained_since = now
            if now - self._drained_since < max(DRAINED_GRACE_S, 3 * self.cfg.agent.refresh_interval_s):
                return
            # still not started: it waits for something else (CPUs, memory, a limit)
            log.warning("job %s still waits (%s) although GPU(s) %s of %s were drained for it; "
                        "they take partners again and the job is passed over for %.1f h", old.job_id,
                        sj.state_reason or "no reason given", ",".join(map(str, old.gpus)), old.node,
                        after_s / 3600.0)
            self._gave_up[old.job_id] = now
        self._drained_since = None
        self._gave_up = {j: t for j, t in self._gave_up.items() if j in self.jobs and now - t < after_s}
        parts = {name: n.partitions for name, n in self.nodes.items()}
        new = reserve(self.jobs.values(), view, now, after_s, parts, skip=self._gave_up)
        if new is None and self.held:
            waits = (HeldWait(h.job_id, h.gres_type, h.since, h.model, h.request.partition)
                     for h in self.held.values())
            new = reserve_held(waits, view, now, after_s, end_times(self.jobs.values()),
                               skip=self._gave_up, partitions=parts)
        if new is not None and (old is None or (old.job_id, old.node, old.gpus) != (new.job_id, new.node, new.gpus)):
            log.info("job %s has waited %.1f h for %s: GPU(s) %s of %s take no new partners "
                     "until it starts", new.job_id, (now - new.waiting_since) / 3600.0,
                     new.waits_for(), ",".join(map(str, new.gpus)), new.node)
        elif new is None and old is not None:
            log.info("job %s: GPUs of %s open to partners again", old.job_id, old.node)
        self.reservation = new

    def _close_reserved(self, view: ClusterView) -> None:
        r = self.reservation
        if r is None:
            return
        sj = self.jobs.get(r.job_id)
        if sj is None or sj.state != "PENDING" or r.job_id in self.unplaced_gpus:
            log.info("job %s: no longer waiting; GPUs of %s open to partners again", r.job_id, r.node)
            self.reservation = None
            return
        for g in kept(r, view):
            g.closed_for = r.job_id

    def _occupant_for_placement(self, p: PlacedJob) -> Occupant:
        d = p.decision
        est = d.memory_gib if d.memory_gib is not None else self.cfg.placement.default_memory_gib
        return Occupant(key=str(p.job_id) if p.job_id else p.token, user=p.request.user, uid=p.request.uid,
                        cls=p.request.cls, memory_gib=est, thread_pct=d.thread_pct or 100,
                        mem_limit_gib=d.mem_limit_gib or 0.0, pending=not p.running,
                        job_id=p.job_id, since=p.started or p.created,
                        no_partners=p.request.takes_no_partner)

    def _occupant_for_job(self, j: SlurmJob) -> Occupant:
        token = self.by_job.get(j.job_id)
        if token and token in self.placements:
            occ = self._occupant_for_placement(self.placements[token])
            occ.pending = False
            occ.since = j.start_time or occ.since
            return occ
        # a shard job we did not place (fallback sharing, or asked for by hand)
        cls = derive_class(j.name)
        return Occupant(key=str(j.job_id), user=j.user, uid=j.uid, cls=cls,
                        memory_gib=self.scores.memory_gib(cls, self.cfg.placement.default_memory_gib),
                        job_id=j.job_id, since=j.start_time)

    # ---- requests ------------------------------------------------------------------------
    def candidate_view(self, fields: dict[str, str]) -> ClusterView:
        gpus = self.view.gpus
        want_type = fields.get("gpu_type", "")
        if want_type:
            gpus = [g for g in gpus if g.model == want_type]
        if fields.get("req_nodes"):
            allowed = set(expand_hostlist(fields["req_nodes"]))
            gpus = [g for g in gpus if g.node in allowed]
        if fields.get("exc_nodes"):
            banned = set(expand_hostlist(fields["exc_nodes"]))
            gpus = [g for g in gpus if g.node not in banned]
        part = fields.get("partition", "")
        if part:
            gpus = [g for g in gpus if g.node not in self.nodes
                    or not self.nodes[g.node].partitions or part in self.nodes[g.node].partitions]
        if len(gpus) == len(self.view.gpus):
            return self.view  # nothing filtered out: keep the view and its placement index
        return ClusterView(gpus=gpus)

    def place_request(self, fields: dict[str, str], now: float) -> dict[str, str]:
        """Decide and record in one go (see :meth:`decide` for the split form)."""
        reply, record = self.decide(fields, now)
        record()
        return reply

    def decide(self, fields: dict[str, str], now: float) -> tuple[dict[str, str], Callable[[], None]]:
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
            mode = parse_mode(fields.get("mode"))
            cls = derive_class(fields.get("name"), fields.get("class") or None)
        except (OptionError, ValueError) as e:
            self.decisions["exclusive:bad-input"] += 1
            return {"action": "exclusive", "comment": f"colo: not shared ({e})"}, nothing
        key = (uid, fields.get("user", ""), cls, mode, fields.get("partition", ""),
               fields.get("gpu_type", ""), fields.get("req_nodes", ""), fields.get("exc_nodes", ""))
        ready = self._prepared
        self._prepared = None
        if ready is not None and ready[0] == key and ready[1] is self.view \
                and ready[2] == self.view.version and ready[3] is self.scores:
            token, d = ready[4], ready[5]
        else:
            token = _new_token()
            d = self._place(token, key, fields)
        tag = d.placement(token, cls, mode).to_tag()
        hold = not d.shared and hold_unplaced(self.cfg) and can_hold(self, fields)
        if hold:
            # held without a GPU request: the agent sets it when it releases the job onto
            # whichever shared GPU fits it first (held.reaim)
            tag = d.placement(token, cls, mode, held=ANY_SHARED,
                              model=fields.get("gpu_type", "")).to_tag()
            reply = {"action": "hold", "gres": "none", "tag": tag,
                     "comment": f"colo: held until a shared GPU fits ({d.reason.removeprefix('own GPU: ')})",
                     "user_msg": "slurm-colo: held until a shared GPU fits; "
                                 "the job is released there by the placement agent"}
        elif not d.shared:
            reply = {"action": "exclusive", "comment": f"colo: {d.reason}", "tag": tag}
        else:
            short = f"colo: GPU {d.index} of {d.node}" + (
                f" with {_partner_text(d.partners)}, predicted delta {d.predicted_delta:.2f}" if d.partners
                else " (opened for sharing)")
            reply = {"action": "share", "gres": self.layouts[d.node or ""].shard_request(d.index or 0),
                     "node": d.node or "", "comment": short, "tag": tag, "user_msg": f"slurm-colo: {short[6:]}"}

        def record() -> None:
            self._record(token, key, fields, d, now, held=hold)
            if hold:
                self.note(token, reply["comment"][6:])
        return reply, record

    def _request(self, token: str, key: tuple[Any, ...]) -> JobRequest:
        uid, user, cls, mode, partition = key[:5]
        return JobRequest(key=token, user=user, uid=uid, cls=cls, mode=mode, partition=partition)

    def _place(self, token: str, key: tuple[Any, ...], fields: dict[str, str]) -> Decision:
        return place(self._request(token, key), self.candidate_view(fields), self.scores, self.cfg.placement)

    def _record(self, token: str, key: tuple[Any, ...], fields: dict[str, str], d: Decision, now: float,
                held: bool = False) -> None:
        req = self._request(token, key)
        self._remember(token, fields.get("name", ""), req.user, req.cls, req.mode, d, now)
        log.info("placement %s (%s, user %s, class %s): %s", token, fields.get("name"), req.user, req.cls, d.reason)
        if held:
            self.decisions["hold:no partner now"] += 1
        elif not d.shared:
            self.decisions["exclusive:" + d.reason.split(":")[0]] += 1
        else:
            p = PlacedJob(token, req, d, created=now)
            self.placements[token] = p
            g = self.view.find(d.node or "", d.index if d.index is not None else -1)
            if g is not None:
                self.view.add_occupant(g, self._occupant_for_placement(p))
            self.decisions["share:" + ("partner" if d.partners else "open")] += 1
        # the next job of a stream (job arrays, sweeps) usually asks the same question
        nxt = _new_token()
        self._prepared = (key, self.view, self.view.version, self.scores, nxt, self._place(nxt, key, fields))

    def _remember(self, token: str, name: str, user: str, cls: str, mode: str, d: Decision, now: float) -> None:
        self.explanations[token] = {
            "token": token, "job_id": None, "name": name, "user": user, "cls": cls, "mode": mode,
            "action": d.action, "reason": d.reason, "node": d.node, "gpu": d.index,
            "partners": list(d.partners), "predicted_delta": d.predicted_delta,
            "predicted_sd": d.predicted_sd, "thread_pct": d.thread_pct,
            "mem_limit_gib": d.mem_limit_gib, "mechanism": d.mechanism, "time": now,
            "scores": self.scores.id,
        }
        while len(self.explanations) > MAX_EXPLANATIONS:
            self.explanations.popitem(last=False)

    def job_started(self, job_id: int, tag_text: str | None, now: float,
                    node: str = "", gpus: list[int] | None = None) -> dict[str, Any] | None:
        token = self.by_job.get(job_id)
        if token is None and tag_text:
            tag = Placement.from_tag(tag_text)
            if tag and tag.token in self.placements:
                token = tag.token
                self._link(self.placements[token], job_id)
        if token is None or token not in self.placements or not self.placements[token].decision.shared:
            if node and gpus:  # not ours: the GPU is taken whole until the job ends
                self.unplaced_gpus[job_id] = (node, tuple(gpus), now)
                self.rebuild()
            return None
        p = self.placements[token]
        p.running, p.started = True, now
        self.rebuild()
        d = p.decision
        g = self.view.find(d.node or "", d.index if d.index is not None else -1)
        partners = [o.job_id for o in (g.occupants if g else []) if o.job_id and o.job_id != job_id]
        log.info("job %s: started on GPU %s of %s with %s", job_id, d.index, d.node, partners or "no partner")
        return replace(d.placement(token, p.request.cls, p.request.mode),
                       partners=tuple(partners)).to_wire()

    def job_ended(self, job_id: int) -> None:
        token = self.by_job.get(job_id)
        p = self.placements.get(token) if token else None
        if p is not None and p.running:
            self.drop_placement(token)  # type: ignore[arg-type]
        elif p is not None:  # the end of a run before a requeue: the new placement stays
            log.info("job %s: an earlier run ended; its new placement is kept", job_id)
        self.jobs.pop(job_id, None)
        self.unplaced_gpus.pop(job_id, None)
        self.rebuild()
        log.info("job %s: ended", job_id)

    def adopt(self, token: str, req: JobRequest, d: Decision, job_id: int, now: float) -> None:
        """Record a placement made by the agent itself for an existing job (a re-aim)."""
        p = PlacedJob(token, replace(req, key=str(job_id)), d, created=now)
        self.placements[token] = p
        self._link(p, job_id)
        g = self.view.find(d.node or "", d.index if d.index is not None else -1)
        if g is not None:
            self.view.add_occupant(g, self._occupant_for_placement(p))

    def note(self, token: str, reason: str) -> None:
        """Replace the reason ``slurm-colo explain`` shows for a placement."""
        ex = self.explanations.get(token)
        if ex is not None:
            ex["reason"] = reason

    def needs_lookup(self, job_id: int) -> bool:
        return job_id not in self.by_job

    # ---- reporting -----------------------------------------------------------------------
    def explain(self, job_id: int, tag_text: str | None = None) -> dict[str, Any]:
        token = self.by_job.get(job_id)
        if token is None and tag_text:
            t = Placement.from_tag(tag_text)
            token = t.token if t else None
        ex = dict(self.explanations.get(token or "", {}))
        if not ex:
            return {"job_id": job_id, "known": False,
                    "reason": "no placement recorded: submitted without --colocate, or before the agent's memory"}
        ex["known"] = True
        ex["job_id"] = job_id
        ex["partners"] = [self._job_of(k) for k in ex.get("partners", [])]
        p = self.placements.get(token or "")
        if p and p.decision.shared:
            g = self.view.find(p.decision.node or "", p.decision.index if p.decision.index is not None else -1)
            if g is not None:
                ex["now_with"] = [o.job_id or o.key for o in g.occupants if o.job_id != job_id]
        return ex

    def _job_of(self, key: str) -> str:
        p = self.placements.get(key)
        return str(p.job_id) if p and p.job_id else key

    def status(self, now: float) -> dict[str, Any]:
        gpus = []
        for g in self.view.gpus:
            classes = [o.cls for o in g.occupants]
            delta = self.scores.delta(classes)[0] if len(classes) >= 2 else None
            gpus.append({
                "node": g.node, "index": g.index, "gres_type": g.gres_type, "available": g.available,
                "closed_for": g.closed_for, "exclusive_job": g.exclusive_job, "slots": g.slots, "predicted_delta": delta,
                "observed_slowdown": None,
                "occupants": [{"job_id": o.job_id, "key": o.key, "user": o.user, "cls": o.cls,
                               "pending": o.pending, "thread_pct": o.thread_pct,
                               "mem_limit_gib": o.mem_limit_gib, "since": o.since,
                               "together_s": max(0.0, now - o.since) if not o.pending and o.since else 0.0,
                               "no_partners": o.no_partners}
                              for o in g.occupants],
            })
        return {
            "gpus": gpus,
            "pending_placements": sum(1 for p in self.placements.values() if not p.running),
            "reservation": None if self.reservation is None else {
                "job_id": self.reservation.job_id, "node": self.reservation.node,
                "gpus": list(self.reservation.gpus), "waiting_s": now - self.reservation.waiting_since,
                "drained_by": self.reservation.drained_by, "gres_type": self.reservation.gres_type,
                "waits_for": self.reservation.waits_for()},
            "scores": {"id": self.scores.id, "created": self.scores.created, "error": self.scores_error},
            "decisions": dict(self.decisions),
            "probes": dict(self.probes),
            "learned_pairs": len(self.learned),
            "held": [{"job_id": h.job_id, "gres_type": h.gres_type, "waits_for": h.waits_for(),
                      "cls": h.request.cls, "waiting_s": now - h.since, "reason": h.reason}
                     for h in sorted(self.held.values(), key=lambda h: h.since)],
            "fallbacks": dict(self.fallbacks),
            "snapshot_age_s": now - self.snapshot_time if self.snapshot_time else None,
        }
