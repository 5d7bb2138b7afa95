"""Held jobs in Slurm: a hold at submission, the jobs taken off their GPU, their release.

:class:`HeldJobs` keeps the jobs Slurm holds for the agent until a GPU takes them: held
at submission, requeued by an undo or held off a node closed to placement (both made held
by :mod:`.undo`). It re-aims them (:meth:`HeldJobs.reaim`, at every look at Slurm that
shows them pending) with :func:`slurm_colo.placement.held.place_held`: a requeued job only
to a GPU of its own shard type on Slurm 22.05 (it cannot change a pending job's GRES);
from Slurm 23.11 (:attr:`HeldJobs.retype_after_undo`) to any shared GPU of the same GPU
model, its shard request set anew (``held=*`` and ``model=`` in its tag). The job is
released there (``aim``). Until a GPU fits it stays held. The tasks of a held job array
are released one by one (:mod:`.held_arrays`).

Jobs held at submission (``placement.unplaced = "hold"``: no shared GPU took them then;
see :meth:`.state.AgentState.decide`) are held *without* a GPU request (the Lua hook drops
it): Slurm 22.05 does set the GRES of a pending job that has none (checked on the lab), so
such a job may go to any shared GPU (of the GPU model it asked for, ``model=`` in its tag).
Its tag says ``held=*``; the re-aim places it on the whole view and sets its shard request
when it releases it. Without a GPU request it must not start on its own, so the agent
turns the user's hold into an administrator's hold (``admin_hold``) at its first look.
A job that may not start yet (a dependency, a begin time; the Lua hook's ``deferred=1``)
is held so at submission on any site, and is not aimed while Slurm lists it waiting for
either (:attr:`HeldJobs.to_start`); where jobs no shared GPU takes get their own GPU, it
then gets one when no shared GPU takes it.

An agent restart finds held jobs again from their tags (:meth:`HeldJobs.sync`).
No I/O: actions are returned for the server to run outside its lock.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..config import Config
from ..contracts.enums import Unplaced
from ..contracts.placement import ANY_SHARED, Placement, held_for_text, unheld
from ..placement.by_model import ScoreBook
from ..placement.guard import HeldWait
from ..placement.held import (
    WITHDRAWN,
    HeldJob,
    judge_for,
    must_lock,
    oldest_first,
    place_held,
    queue_heads,
    release,
    waits_behind,
)
from ..slurm.model import SlurmJob
from .actions import Action
from .arrays import (
    MAX_TASKS_PER_LOOK,
    OWN_GPU_TASK_NOTE,
    array_token,
    shard_type_asked,
    whole_gpu_asked,
    whole_gpu_request,
)
from .held_arrays import HeldArrays, waiting_in, waiting_with_own_gpu
from .ledger import Ledger, request_from_tag
from .occupancy import Occupancy

log = logging.getLogger("slurm_colo.agent")

#: seconds before an administrator's hold that Slurm refused is tried again
LOCK_RETRY_S = 60.0
#: why a job that may not start yet (a dependency, a begin time) is held at submission
HELD_TO_START = "held until it may start (a dependency or a begin time), then placed"
#: the comment of such a job that no shared GPU took once it could start
OWN_GPU_NOTE = "colo: no shared GPU took it once it could start; released with its own GPU request"


class HeldJobs:
    """The jobs held in Slurm until a GPU takes them, by job id."""

    def __init__(self, cfg: Config, retype_after_undo: bool = False) -> None:
        self.cfg = cfg
        self.jobs: dict[int, HeldJob] = {}
        #: Slurm can change a pending job's GRES (23.11+): an undone job may go to any shared
        #: GPU of its GPU model, not only to one of its old shard type
        self.retype_after_undo = retype_after_undo
        #: the held jobs seen as a job array's record (agent/held_arrays.py): its tasks
        #: are released one by one, and the record is never released as one job
        self.arrays = HeldArrays(cfg)
        #: held jobs Slurm would not start yet, whatever GPU they had (a dependency, a
        #: begin time) -> what they wait for; as of the last look
        self.to_start: dict[int, str] = {}

    def shift(self, step: float) -> None:
        """The wall clock stepped by ``step`` seconds (slurm_colo/clock.py): how long each job
        has been held, and when it may be released or locked again, move with it."""
        for h in self.jobs.values():
            h.since += step
            if h.release_after:
                h.release_after += step
            if h.lock_retry_at:
                h.lock_retry_at += step
        self.arrays.shift(step)

    def waiting_for_shared(self) -> list[HeldJob]:
        """The held jobs that wait for a shared GPU only: the ones the starvation guard
        drains a GPU for and newer jobs wait their turn behind (``placement.bypass_h``). Not
        a job Slurm would not start yet (:attr:`to_start`), nor one that gets a GPU of its
        own when no shared GPU takes it (:meth:`_own_gpu_else`: a held array's task, agent/
        arrays.py "held, else own GPU"; a job held until it may start)."""
        own_gpu = not hold_unplaced(self.cfg)
        return [
            h
            for h in self.jobs.values()
            if h.job_id not in self.to_start and not (own_gpu and self._own_gpu_else(h))
        ]

    def _own_gpu_else(self, h: HeldJob) -> bool:
        """Whether ``h`` gets a GPU of its own where no shared GPU takes it, at a site that
        keeps jobs no shared GPU takes on a GPU of their own (``placement.unplaced``; the
        caller checks that): a held array's task, or a job held at submission until it may
        start."""
        return h.job_id in self.arrays or (h.any_gpu and not h.undone and not h.withdrawn)

    def waits(self) -> list[HeldWait]:
        """The held jobs as the starvation guard sees them."""
        return [
            HeldWait(h.job_id, h.gres_type, h.since, h.model, h.request.partition)
            for h in self.waiting_for_shared()
        ]

    def reaim(self, now: float, ledger: Ledger, occ: Occupancy, book: ScoreBook) -> list[Action]:
        """Aim held jobs at a GPU that takes them (of their shard type, for a requeued job),
        oldest first, each behind the job held longest that may want the same GPUs
        (``placement.bypass_h``, :func:`~slurm_colo.placement.held.queue_heads`); lock the
        hold of a job held without a GPU request that stays held.
        A job bound to one GPU model (its shard type, or the model it asked for) is judged
        with that model's score set; a job held for any shared GPU has each GPU judged with
        its own model's set."""
        out: list[Action] = []
        # each waits behind the oldest job that may want the GPUs it may take
        heads = queue_heads(self.waiting_for_shared(), occ.view)
        # a held array's task no shared GPU takes gets its own GPU request where the site
        # keeps such jobs on a GPU of their own (agent/arrays.py: "held, else own GPU")
        own_gpu = not hold_unplaced(self.cfg)
        waiting: Counter[str] | None = None
        released = 0  # tasks of held arrays released at this look, of all arrays together
        out += self.arrays.stranded(occ.jobs.values(), now)
        self.arrays.expire(now)
        for h in oldest_first(self.jobs.values()):
            sj = occ.jobs.get(h.job_id)
            if sj is None or sj.state != "PENDING":
                continue  # still being requeued (Slurm changes a pending job only), or gone
            if now < h.release_after:
                continue  # its old run's credential may still be revoked
            if h.job_id in self.to_start:  # a place on a GPU now would wait unused
                out += self._lock(h, now, sj)
                continue
            behind = waits_behind(h.since, heads.get(h.gres_type), now, self.cfg.placement)
            record = waiting_in(sj) if h.job_id in self.arrays or sj.array_tasks else None
            if h.job_id in self.arrays and record is None:
                # the record of a held array is its last task once that is released
                self._forget(h.job_id)
                continue
            if record is not None:  # a held array: its tasks, one by one (agent/held_arrays.py)
                out += self._lock(h, now, sj)  # before any task is released
                if waiting is None:
                    waiting = waiting_with_own_gpu(occ.jobs.values()) if own_gpu else Counter()
                tasks, last = self.arrays.release(
                    h,
                    record,
                    now,
                    ledger,
                    occ,
                    book,
                    own_gpu=own_gpu,
                    behind=behind,
                    waiting=waiting,
                    limit=MAX_TASKS_PER_LOOK - released,
                )
                released += len(tasks)
                out += tasks
                if last:  # the array record is that task now
                    self._forget(h.job_id)
                continue
            if h.own_gpu and not self.retype_after_undo:  # 22.05: its request cannot change
                out.append(self._to_own_gpu(h, sj))
                continue
            view = occ.view_for_pending(sj, h.request.partition, h.model)
            # bound to one GPU model: that model's set; held for any shared GPU: each GPU
            # judged with its own model's set
            judge = judge_for(h, view, book)
            d = None if behind else place_held(h, view, judge, self.cfg.placement, occ.reservation)
            if d is None or not d.shared or d.node is None:
                if h.own_gpu:  # a held array's task that has its own GPU request
                    out.append(self._to_own_gpu(h, sj))
                elif own_gpu and self._own_gpu_else(h):  # held until it could start
                    out.append(self._to_own_gpu(h, sj, whole_gpu_request(h.model), OWN_GPU_NOTE))
                else:
                    out += self._lock(h, now, sj)
                continue
            del self.jobs[h.job_id]
            ledger.add(
                h.token,
                replace(h.request, gres_type="", key=str(h.job_id)),
                d,
                now,
                occ.view,
                job_id=h.job_id,
            )
            r = release(h, d)
            ledger.note(h.token, r.note)
            log.info(
                "job %s: released onto GPU %s of %s (%s): %s",
                h.job_id,
                d.index,
                d.node,
                "after its undo"
                if h.undone
                else "held while its node was closed"
                if h.withdrawn
                else h.reason
                if h.reason.startswith("its release failed") or h.reason == HELD_TO_START
                else "held at submission",
                d.reason,
            )
            gres = occ.layouts[d.node].shard_request(d.index or 0) if h.any_gpu else ""
            out.append(
                Action(
                    "aim",
                    h.job_id,
                    r.tag,
                    r.comment,
                    node=d.node,
                    gres=gres,
                    model=h.model,
                    start_now=h.undone,
                    withdrawn=h.withdrawn,
                    array_task=sj.record_task,
                )
            )
        return out

    def _to_own_gpu(
        self, h: HeldJob, sj: SlurmJob, gres: str = "", note: str = OWN_GPU_TASK_NOTE
    ) -> Action:
        """Release ``h`` with a GPU request of its own: ``gres``, or the one it already has
        (kept as it is), as its array's task would have been; if Slurm refuses, its
        comments say again that it is held, and the next look adopts it again."""
        self._forget(h.job_id)
        log.info("job %s: no shared GPU takes it; released with its own GPU request", h.job_id)
        return Action(
            "aim",
            h.job_id,
            unheld(sj.admin_comment, ANY_SHARED),
            note,
            gres=gres,
            model=h.model,
            restore=(sj.admin_comment, sj.comment),
            array_task=sj.record_task,
        )

    def _lock(self, h: HeldJob, now: float, sj: SlurmJob) -> list[Action]:
        """The administrator's hold of ``h`` where it is due (:func:`must_lock`: a job held
        without a GPU request must not be released by its user), else nothing."""
        if not must_lock(h, now, sj.state_reason):
            return []
        h.locked = True
        return [Action("admin_hold", h.job_id, array_task=sj.record_task)]

    def _forget(self, job_id: int) -> None:
        """No longer held here (released, gone, or an array's record that is its last task)."""
        del self.jobs[job_id]
        self.arrays.forget(job_id)

    def sync(
        self, jobs: dict[int, SlurmJob], tags: dict[int, Placement], ledger: Ledger, now: float
    ) -> None:
        """After a look at Slurm (``tags``: the parsed tag of each job that has one): adopt
        held jobs known only from their tags (agent restart), forget those Slurm no longer
        holds for us (released by hand, cancelled, ended)."""
        grace = 3 * self.cfg.agent.refresh_interval_s
        for job_id, tag in tags.items():
            j = jobs[job_id]
            if (
                tag.held
                and j.state == "PENDING"
                and j.job_id not in self.jobs
                and j.job_id not in ledger.by_job
            ):
                any_gpu = tag.held == ANY_SHARED
                # a held array's task whose release Slurm refused after the update that
                # gave it a GPU request: its own GPU, or a shard of one type, which 22.05
                # cannot change (it then waits for a GPU of that type, as a requeued job)
                asked = j.tres_per_node if any_gpu else ""
                typed = "" if self.retype_after_undo else shard_type_asked(asked)
                req = request_from_tag(
                    j,
                    tag,
                    self.cfg.placement,
                    partition=j.partition,
                    gres_type=typed if any_gpu else tag.held,
                )
                why = (
                    "requeued after a harmful probe"
                    if tag.undone
                    else "its node was closed to placement"
                    if j.comment.startswith(WITHDRAWN)
                    else "its release failed after it was split from its array"
                    if asked
                    else HELD_TO_START
                    if j.waits_to_start(now)
                    else f"held at submission until {held_for_text(tag.held, tag.model)} fits"
                )
                if j.array_tasks or (j.record_task is not None and not array_token(tag.token)):
                    # a held array's record (agent/held_arrays.py), its last task included
                    self.arrays.records.add(j.job_id)
                self.jobs[j.job_id] = HeldJob(
                    j.job_id,
                    tag.token or f"job{j.job_id}",
                    req,
                    j.submit_time or now,
                    why,
                    undone=tag.undone,
                    model=tag.model,
                    locked=j.state_reason == "JobHeldAdmin",
                    withdrawn=not tag.undone and j.comment.startswith(WITHDRAWN),
                    own_gpu=whole_gpu_asked(asked),
                )
        for job_id, h in list(self.jobs.items()):
            sj = jobs.get(job_id)
            # a held job is always pending or (just before its requeue) running in Slurm:
            # missing means gone; running after a few looks means someone released it
            if sj is None or (now - h.since > grace and sj.state != "PENDING"):
                log.info("job %s: no longer held in Slurm; not aimed again", job_id)
                self._forget(job_id)
        self._waiting_to_start(jobs, now)

    def _waiting_to_start(self, jobs: dict[int, SlurmJob], now: float) -> None:
        """Note the held jobs Slurm would not start yet (:attr:`to_start`). Their wait for a
        GPU (the starvation guard's, ``placement.bypass_h``) begins once they may start. A
        requeued job is left out: its release itself clears the wait Slurm put on it."""
        before, self.to_start = self.to_start, {}
        for job_id, h in self.jobs.items():
            sj = jobs.get(job_id)
            why = sj.waits_to_start(now) if sj is not None and not h.undone else ""
            if why:
                self.to_start[job_id] = why
                h.since = now
            elif job_id in before:
                log.info("job %s: may start now (it waited for %s)", job_id, before[job_id])

    def failed(
        self,
        action: Action,
        now: float,
        ledger: Ledger,
        occ: Occupancy,
        rebuild: Callable[[], None],
    ) -> None:
        """Slurm refused ``action``. A failed requeue leaves the job running (it is
        forgotten here; the next look at Slurm finds it on its GPU again); a failed release
        puts the job back among the held ones, to be aimed again at the next look; a failed
        administrator's hold is tried again after :data:`LOCK_RETRY_S`. A failed hold of a
        job pending on a closed node leaves it as it was (its comments put back): it is
        tried again at the next look, while the job waits. A task whose release failed after
        its split, with its comments not set back either, is released again when a look
        finds it held (:meth:`.held_arrays.HeldArrays.stranded`)."""
        if action.kind == "requeue_hold":
            self.jobs.pop(action.job_id, None)
            ledger.probes["undo_failed"] += 1
            return
        if action.kind == "withdraw":
            self.jobs.pop(action.job_id, None)
            return
        if action.kind == "admin_hold":
            h = self.jobs.get(action.job_id)
            if h is not None:  # it stays held by its user meanwhile
                h.locked, h.lock_retry_at = False, now + LOCK_RETRY_S
            return
        if action.kind == "aim":  # a task split from its array may be held, untagged
            self.arrays.refused_release(action, now)
        if action.task is not None:  # a task of a held array: the array stays held
            self.arrays.failed(action, ledger)
            rebuild()
            return
        token = ledger.by_job.get(action.job_id)
        p = ledger.placements.get(token) if token else None
        if p is None or token is None:
            return
        ledger.drop(token)
        # a job held without a GPU request may still go anywhere; a requeued one keeps its type
        gres_type = "" if action.gres else occ.shard_type(p.decision)
        tag = Placement.from_tag(action.admin_comment)
        self.jobs[action.job_id] = HeldJob(
            action.job_id,
            token,
            replace(p.request, gres_type=gres_type),
            now,
            "its release failed",
            undone=bool(tag and tag.undone),
            model=action.model,
            withdrawn=action.withdrawn,
        )
        rebuild()


def hold_unplaced(cfg: Config) -> bool:
    """placement.unplaced, with "auto" resolved: hold when every configured GPU is shared."""
    mode = cfg.placement.unplaced
    if mode == Unplaced.AUTO:
        return bool(cfg.gpus) and all(len(ng.shared) == ng.count for ng in cfg.gpus)
    return mode == Unplaced.HOLD


def can_hold(occ: Occupancy, fields: dict[str, str]) -> bool:
    """Whether a job no shared GPU takes now may wait, held, for one
    (placement.unplaced = "hold"): some shared GPU it may use exists. Runs on the answer
    path: it stops at the first such GPU."""
    return any(g.available for g in occ.candidate_view(fields).gpus)


@dataclass(frozen=True)
class HeldInSlurm:
    """A job Slurm holds for the agent, as its tag says (read from Slurm: works while the
    agent is down)."""

    job: SlurmJob
    #: the shard type it waits for, ``*`` for any shared GPU (no GPU request while held)
    gres_type: str
    model: str = ""
    #: requeued by an undo: its release clears the wait Slurm puts on a requeued job
    undone: bool = False

    def waits_for(self) -> str:
        return held_for_text(self.gres_type, self.model)

    def release_gres(self) -> str:
        """The GPU request to give it when it is released by hand: none for a requeued job
        (it keeps its shard type) or a held array's task that already has one (its own GPU
        or a shared GPU's shard: its release failed after the update that split it from the
        array; Slurm 22.05 cannot change it); else untargeted sharing (``shard:1``: Slurm's first GPU with a free shard, which also
        keeps a ``--cpus-per-gpu`` the hook turned into CPUs per shard valid), or a whole
        GPU of the model it asked for (there is no shard request for "any GPU of one
        model"); a job array's tasks a whole GPU each."""
        if self.gres_type != ANY_SHARED or self.has_gpu_request():
            return ""
        if self.model or self.job.array_tasks:  # untargeted shards would stack its tasks
            return whole_gpu_request(self.model)
        return "gres:shard:1"

    def has_gpu_request(self) -> bool:
        """Whether it already asks for a GPU of its own or a shard of one type."""
        t = self.job.tres_per_node
        return bool(whole_gpu_asked(t) or shard_type_asked(t))

    def unheld_tag(self) -> str:
        """Its tag without ``held=``, so that the agent leaves it to Slurm."""
        return unheld(self.job.admin_comment, self.gres_type)


def held_in_slurm(jobs: list[SlurmJob]) -> list[HeldInSlurm]:
    """Pending jobs whose tag says they wait, held, for the agent to release them."""
    out = []
    for j in jobs:
        tag = Placement.from_tag(j.admin_comment)
        if tag and tag.held and j.state == "PENDING":
            out.append(HeldInSlurm(j, tag.held, tag.model, tag.undone))
    return sorted(out, key=lambda x: x.job.job_id)
