"""Held jobs: undoing a harmful placement, holding a job no GPU takes, releasing both.

The node side measures a new shared set after ``placement.probe_s`` and sends the report
(``PROBE``, see :mod:`slurm_colo.node.probe`). Here the agent

1. judges it with :func:`slurm_colo.placement.retract.judge`, the simulator's code, and
   lays what the set showed over the live scores at once (:meth:`AgentState.learn`), so no
   later job is put into the same pair before the nightly retrain;
2. if the set is harmful and ``placement.undo = "requeue"``: forgets the newcomer's
   placement and asks Slurm to requeue it held (:class:`Action` ``requeue_hold``). Its
   tag then carries ``held=<shard type>``, so an agent restart finds it again;
3. re-aims held jobs (:func:`reaim`, at every look at Slurm that shows them pending): Slurm 22.05
   cannot change a pending job's GRES, so the job may only go to a GPU of its own shard
   type; the policy picks one (sharing only where the set is accepted, or an idle one) and
   the job is released there (``aim``). Until a GPU fits it stays held.

Jobs held at submission (``placement.unplaced = "hold"``: no shared GPU took them then;
see :meth:`AgentState.decide`) are held *without* a GPU request (the Lua hook drops it):
Slurm 22.05 does set the GRES of a pending job that has none (checked on the lab), so such
a job may go to any shared GPU (of the GPU model it asked for, ``model=`` in its tag). Its
tag says ``held=*``; :func:`reaim` places it on the whole view and sets its shard request
when it releases it. Without a GPU request it must not start on its own, so the agent
turns the user's hold into an administrator's hold (``admin_hold``) at its first look.

A job is undone at most once (``undone=1`` in its tag): a second bad set runs on and is
learnt. Jobs that Slurm cannot requeue (``--no-requeue``, interactive) are never undone, nor
jobs whose time limit ends them within ``probe_s`` anyway.
Pure: actions are returned for the server to run outside its lock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..placement import ClusterView, Decision, JobRequest, place
from ..placement.retract import judge, members_from_report, rate_floor
from ..slurm.model import SlurmJob
from slurm_colo.contracts.placement import ANY_SHARED, Placement, held_for_text
from slurm_colo.placement.guard import kept

if TYPE_CHECKING:
    from .state import AgentState

log = logging.getLogger("slurm_colo.agent")

#: seconds before an administrator's hold that Slurm refused is tried again
LOCK_RETRY_S = 60.0


@dataclass
class Held:
    """A job held in Slurm until a GPU takes it: requeued by an undo (a GPU of its shard
    type), or held at submission (any shared GPU of its model)."""

    job_id: int
    token: str
    #: gres_type set: the requeued job's fixed shard type; empty: any shared GPU
    request: JobRequest
    since: float
    reason: str
    #: requeued after a harmful probe (else held at submission, placement.unplaced = "hold")
    undone: bool = True
    #: the GPU model the job asked for ("" any); for a job held without a GPU request
    model: str = ""
    #: its hold is the administrator's (a job without a GPU request must not start by hand)
    locked: bool = False
    #: after Slurm refused the administrator's hold: when to try it again
    lock_retry_at: float = 0.0

    @property
    def any_gpu(self) -> bool:
        """Held without a GPU request: its shard type is chosen when it is released."""
        return not self.request.gres_type

    @property
    def gres_type(self) -> str:
        """The type it waits for, as its tag says it (``*``: any shared GPU)."""
        return self.request.gres_type or ANY_SHARED

    def waits_for(self) -> str:
        return held_for_text(self.gres_type, self.model)


@dataclass(frozen=True)
class Action:
    """A change to make in Slurm: ``requeue_hold``, ``aim`` (set ReqNodeList, the shard
    request of a job held without one, release) or ``admin_hold``."""

    kind: str
    job_id: int
    admin_comment: str = ""
    comment: str = ""
    node: str = ""
    #: aim: the shard request to set (a job held without a GPU request), else ""
    gres: str = ""
    #: aim of a job held without a GPU request: the GPU model it asked for
    model: str = ""
    #: the job's comments before (put back if Slurm refuses the requeue)
    restore: tuple[str, str] = ("", "")


def probe(state: AgentState, report: dict[str, Any], now: float) -> tuple[dict[str, Any], list[Action]]:
    """Judge one probe report; returns the reply for the node and what to do in Slurm."""
    job_id = int(report["job"])
    token = state.by_job.get(job_id)
    p = state.placements.get(token) if token else None
    modes = {}
    for m in report.get("members") or []:
        q = state.placements.get(state.by_job.get(int(m["job"]), ""))
        if q is not None:
            modes[str(m["job"])] = q.request.mode
    members = members_from_report(report, state.scores, modes)
    v = judge(str(job_id), members, state.scores, state.cfg.placement)
    state.learn(v.observed, now, at_once=v.undo)  # the view is rebuilt below if harmful
    if not v.undo:
        state.probes["kept"] += 1
        log.info("job %s: probe %s", job_id, v.reason)
        return {"verdict": "keep", "reason": v.reason}, []
    sj = state.jobs.get(job_id)
    tag = Placement.from_tag(sj.admin_comment) if sj else None
    why_not = ""
    if state.cfg.placement.undo != "requeue":
        why_not = "placement.undo is off"
    elif p is None or not p.decision.shared or p.decision.node not in state.layouts:
        why_not = "the job was not placed by the agent"
    elif sj is not None and not sj.requeue:
        why_not = "Slurm may not requeue the job (--no-requeue)"
    elif tag is not None and tag.undone:
        why_not = "the job was requeued once already"
    elif sj is not None and sj.active and 0 < sj.end_time - now < state.cfg.placement.probe_s:
        why_not = "its time limit ends it sooner than a restart would help"
    if why_not:
        state.rebuild()
        state.probes["harmful"] += 1
        log.warning("job %s: probe %s; left running: %s", job_id, v.reason, why_not)
        return {"verdict": "harmful", "reason": f"{v.reason}; left running: {why_not}"}, []
    assert p is not None and token is not None
    gres_type = _shard_type(state, p.decision)
    state.drop_placement(token)
    req = replace(p.request, key=str(job_id), gres_type=gres_type,
                  rate_floor=rate_floor(state.cfg.placement, undone=True))
    state.held[job_id] = Held(job_id, token, req, now, v.reason)
    state.probes["undone"] += 1
    state.note(token, f"requeued after its probe: {v.reason}")
    state.rebuild()
    log.warning("job %s: probe %s; requeued, to be aimed again at a GPU of type %s",
                job_id, v.reason, gres_type)
    held_tag = Decision("exclusive", v.reason).placement(token, req.cls, req.mode, undone=True,
                                                         held=gres_type).to_tag()
    act = Action("requeue_hold", job_id, held_tag,
                 f"colo: requeued after {state.cfg.placement.probe_s:g}s together: {v.reason}",
                 restore=(sj.admin_comment, sj.comment) if sj else ("", ""))
    return {"verdict": "undo", "reason": v.reason}, [act]


def _shard_type(state: AgentState, d: Decision) -> str:
    """The shard GRES type of the GPU a shared decision names ("" if its node is unknown)."""
    ng = state.layouts.get(d.node or "")
    return ng.gres_type(d.index or 0) if ng is not None else ""


def reaim(state: AgentState, now: float) -> list[Action]:
    """Aim held jobs at a GPU that takes them (of their shard type, for a requeued job),
    oldest first; lock the hold of a job held without a GPU request that stays held."""
    out = []
    for h in sorted(state.held.values(), key=lambda h: h.since):
        sj = state.jobs.get(h.job_id)
        if sj is None or sj.state != "PENDING":
            continue  # still being requeued (Slurm changes a pending job only), or gone
        part = h.request.partition if "," not in h.request.partition else ""
        d = _place_held(state, h, state.candidate_view({"partition": part, "gpu_type": h.model}))
        if not d.shared or d.node is None:
            if (h.any_gpu and not h.locked and now >= h.lock_retry_at
                    and sj.state_reason != "JobHeldAdmin"):
                h.locked = True
                out.append(Action("admin_hold", h.job_id))
            continue
        del state.held[h.job_id]
        state.adopt(h.token, replace(h.request, gres_type=""), d, h.job_id, now)
        if h.undone:
            state.note(h.token, f"requeued after its probe ({h.reason}); then {d.reason}")
            comment = f"colo: requeued after a harmful pairing; now GPU {d.index} of {d.node}"
        else:
            state.note(h.token, f"held at submission; then {d.reason}")
            comment = f"colo: released onto GPU {d.index} of {d.node}: {d.reason}"
        log.info("job %s: released onto GPU %s of %s (%s): %s", h.job_id, d.index, d.node,
                 "after its undo" if h.undone else "held at submission", d.reason)
        gres = state.layouts[d.node].shard_request(d.index or 0) if h.any_gpu else ""
        out.append(Action("aim", h.job_id, d.placement(h.token, h.request.cls, h.request.mode,
                                                       undone=h.undone).to_tag(), comment, node=d.node,
                          gres=gres, model=h.model))
    return out


def _place_held(state: AgentState, h: Held, view: ClusterView) -> Decision:
    """:func:`place` for a held job; a GPU the starvation guard drained for it (drain.py)
    is open to it, and to it only."""
    r = state.reservation
    opened = [g for g in kept(r, view) if g.closed_for == h.job_id and not g.occupants] \
        if r is not None and r.job_id == h.job_id else []
    for g in opened:
        g.closed_for = None
        view.touch(g)
    try:
        return place(h.request, view, state.scores, state.cfg.placement)
    finally:
        for g in opened:  # closed again until Slurm shows the job running
            g.closed_for = h.job_id
            view.touch(g)


def sync_held(state: AgentState, tags: dict[int, dict[str, Any]], now: float) -> None:
    """After a look at Slurm (``tags``: the parsed tag of each job that has one): adopt held
    jobs known only from their tags (agent restart), forget those Slurm no longer holds for
    us (released by hand, cancelled, ended)."""
    grace = 3 * state.cfg.agent.refresh_interval_s
    for job_id, tag in tags.items():
        j = state.jobs[job_id]
        if (tag.held and j.state == "PENDING" and j.job_id not in state.held
                and j.job_id not in state.by_job):
            any_gpu = tag.held == ANY_SHARED
            req = JobRequest(key=str(j.job_id), user=j.user, uid=j.uid, cls=tag.cls,
                             mode=tag.mode, gres_type="" if any_gpu else tag.held,
                             partition=j.partition,
                             rate_floor=rate_floor(state.cfg.placement, tag.undone))
            why = "requeued after a harmful probe" if tag.undone else \
                f"held at submission until {held_for_text(tag.held, tag.model)} fits"
            state.held[j.job_id] = Held(j.job_id, tag.token or f"job{j.job_id}", req,
                                        j.submit_time or now, why, undone=tag.undone,
                                        model=tag.model,
                                        locked=j.state_reason == "JobHeldAdmin")
    for job_id, h in list(state.held.items()):
        sj = state.jobs.get(job_id)
        # a held job is always pending or (just before its requeue) running in Slurm:
        # missing means gone; running after a few looks means someone released it
        if sj is None or (now - h.since > grace and sj.state != "PENDING"):
            log.info("job %s: no longer held in Slurm; not aimed again", job_id)
            del state.held[job_id]


def failed(state: AgentState, action: Action, now: float) -> None:
    """Slurm refused ``action``. A failed requeue leaves the job running (it is forgotten
    here; the next look at Slurm finds it on its GPU again); a failed release puts the job
    back among the held ones, to be aimed again at the next look; a failed administrator's
    hold is tried again after :data:`LOCK_RETRY_S`."""
    if action.kind == "requeue_hold":
        state.held.pop(action.job_id, None)
        state.probes["undo_failed"] += 1
        return
    if action.kind == "admin_hold":
        h = state.held.get(action.job_id)
        if h is not None:  # it stays held by its user meanwhile
            h.locked, h.lock_retry_at = False, now + LOCK_RETRY_S
        return
    token = state.by_job.get(action.job_id)
    p = state.placements.get(token) if token else None
    if p is None or token is None:
        return
    state.drop_placement(token)
    # a job held without a GPU request may still go anywhere; a requeued one keeps its type
    gres_type = "" if action.gres else _shard_type(state, p.decision)
    tag = Placement.from_tag(action.admin_comment)
    state.held[action.job_id] = Held(action.job_id, token, replace(p.request, gres_type=gres_type),
                                     now, "its release failed", undone=bool(tag and tag.undone),
                                     model=action.model)
    state.rebuild()


def hold_unplaced(cfg: Config) -> bool:
    """placement.unplaced, with "auto" resolved: hold when every configured GPU is shared."""
    mode = cfg.placement.unplaced
    if mode == "auto":
        return bool(cfg.gpus) and all(len(ng.shared) == ng.count for ng in cfg.gpus)
    return mode == "hold"


def can_hold(state: AgentState, fields: dict[str, str]) -> bool:
    """Whether a job no shared GPU takes now may wait, held, for one
    (placement.unplaced = "hold"): some shared GPU it may use exists. Runs on the answer
    path: it stops at the first such GPU."""
    return any(g.available for g in state.candidate_view(fields).gpus)


@dataclass(frozen=True)
class HeldInSlurm:
    """A job Slurm holds for the agent, as its tag says (read from Slurm: works while the
    agent is down)."""

    job: SlurmJob
    #: the shard type it waits for, ``*`` for any shared GPU (no GPU request while held)
    gres_type: str
    model: str = ""

    def waits_for(self) -> str:
        return held_for_text(self.gres_type, self.model)

    def release_gres(self) -> str:
        """The GPU request to give it when it is released by hand: none for a requeued job
        (it keeps its shard type); else untargeted sharing (``shard:1``: Slurm's first GPU
        with a free shard, which also keeps a ``--cpus-per-gpu`` the hook turned into CPUs
        per shard valid), or a whole GPU of the model it asked for (there is no shard
        request for "any GPU of one model")."""
        if self.gres_type != ANY_SHARED:
            return ""
        return f"gres:gpu:{self.model}:1" if self.model else "gres:shard:1"

    def unheld_tag(self) -> str:
        """Its tag without ``held=``, so that the agent leaves it to Slurm."""
        return self.job.admin_comment.replace(f" held={self.gres_type}", "")


def held_in_slurm(jobs: list[SlurmJob]) -> list[HeldInSlurm]:
    """Pending jobs whose tag says they wait, held, for the agent to release them."""
    out = []
    for j in jobs:
        tag = Placement.from_tag(j.admin_comment)
        if tag and tag.held and j.state == "PENDING":
            out.append(HeldInSlurm(j, tag.held, tag.model))
    return sorted(out, key=lambda x: x.job.job_id)
