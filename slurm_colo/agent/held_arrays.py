"""The tasks of a held job array, released one by one (agent/arrays.py).

A ``--colocate`` array held for the agent has no GPU request; Slurm lists its waiting
tasks on the array's record (``array_tasks``). At each look :meth:`HeldArrays.release`
takes them lowest first: a task a shared GPU takes is released there, its own placement
(token ``<array's>-<task>``) counted on its GPU at once; ``scontrol update
JobId=ARRAY_TASK`` splits it from the array into a job of its own. Where the site keeps a
job no shared GPU takes on a GPU of its own (``placement.unplaced`` resolving to
``own-gpu``: the array's way is ``held, else own GPU``), a task none takes is released with
its own GPU request instead, while fewer than :data:`~.arrays.OWN_GPU_WAITING` of the
array's tasks wait so in Slurm's queue; else the look stops at the first task none takes.
An array throttled with ``%N`` has at most N tasks released and not ended at once.

A task released at an earlier look and not yet split from the array in Slurm's answer is
not released again. The record, once its last task is released, is that task: it is no
longer held here (:meth:`HeldArrays.release` says so). No I/O.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from ..config import Config
from ..contracts.placement import ANY_SHARED, Placement, unheld
from ..placement.by_model import ScoreBook
from ..placement.held import HeldJob, judge_for, place_held, release
from ..scores import ScoreTable
from ..slurm.model import SlurmJob
from .actions import Action
from .arrays import (
    MAX_TASKS_PER_LOOK,
    OWN_GPU_TASK_NOTE,
    OWN_GPU_WAITING,
    array_throttle,
    array_token,
    task_token,
    waiting_tasks,
    whole_gpu_request,
)
from .ledger import Ledger
from .occupancy import Occupancy

log = logging.getLogger("slurm_colo.agent")

#: how long after a task's refused release a held job with its tag is released again
#: (:meth:`HeldArrays.stranded`): long enough for slurmctld to come back from a restart
REFUSED_KEEP_S = 900.0


def waiting_with_own_gpu(jobs: Iterable[SlurmJob]) -> Counter[str]:
    """Tasks of held arrays released with their own GPU request that still wait in Slurm's
    queue, by the array's token (their tag's, or the one in their own
    ``<array's>-<task>``: a task adopted after a refused release)."""
    out: Counter[str] = Counter()
    for j in jobs:
        if j.state == "PENDING" and j.comment == OWN_GPU_TASK_NOTE:
            tag = Placement.from_tag(j.admin_comment)
            if tag is not None and tag.token:
                out[array_token(tag.token) or tag.token] += 1
    return out


def split_off(jobs: Iterable[SlurmJob]) -> Counter[str]:
    """Tasks split from held arrays that are queued or running (released, not ended), by
    the array's token (their tag's, or the one in their own ``<array's>-<task>``)."""
    out: Counter[str] = Counter()
    for j in jobs:
        if j.array_tasks or not (j.state == "PENDING" or j.active):
            continue
        tag = Placement.from_tag(j.admin_comment)
        if tag is not None and tag.token:
            out[array_token(tag.token) or tag.token] += 1
    return out


def waiting_in(record: SlurmJob) -> SlurmJob | None:
    """A held array's record with the tasks that wait in it listed: as Slurm gives it, or,
    where Slurm shows the record left as its last task (22.05 and 24.11 list no task then,
    and give its ``array_task_id``) while its tag still says it is held, with that task;
    None once no task waits in it (its last task released)."""
    if record.array_tasks:
        return record
    tag = Placement.from_tag(record.admin_comment)
    if record.record_task is None or tag is None or not tag.held:
        return None
    return replace(record, array_tasks=str(record.record_task))


def own_gpu_request(array: SlurmJob, model: str) -> tuple[str, str]:
    """(tag, GPU request) of a task released with its own GPU: the array's tag without
    ``held=`` (the agent leaves the task to Slurm), a whole GPU of the model it asked for."""
    return unheld(array.admin_comment, ANY_SHARED), whole_gpu_request(model)


def held_task(array: SlurmJob, token: str) -> tuple[str, str]:
    """(tag, comment) that say a task split from held array ``array`` is held for the agent,
    as a job of its own (placement ``token``): what a task's comments become when Slurm
    refuses its release after the update that split it
    (:meth:`~slurm_colo.slurm.control.ScontrolControl.aim_and_release`), so the agent adopts
    it from its tag at its next look instead of leaving it held unseen."""
    tag = Placement.from_tag(array.admin_comment)
    return (replace(tag, token=token).to_tag() if tag else array.admin_comment), array.comment


class HeldArrays:
    """The held jobs seen as a job array's record, and the tasks each released with its own
    GPU request (by task id, when: not released again before Slurm splits them)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.records: set[int] = set()
        self.own_gpu: dict[int, dict[int, float]] = {}
        #: the tags of task releases Slurm refused: how many, when last (:meth:`stranded`)
        self.refused: dict[str, tuple[int, float]] = {}
        #: :func:`split_off` of one answer of Slurm's (only throttled arrays ask)
        self._split: tuple[object, Counter[str]] | None = None

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.records

    def forget(self, job_id: int) -> None:
        """No longer a held array here. The tasks it released with their own GPU request are
        remembered until :meth:`expire`: a late look that still shows the record held as its
        last task must not release that task again."""
        self.records.discard(job_id)

    def expire(self, now: float) -> None:
        """Forget the own-GPU releases older than three looks (Slurm shows them by then)."""
        grace = 3 * self.cfg.agent.refresh_interval_s
        self.own_gpu = {
            job_id: kept
            for job_id, released in self.own_gpu.items()
            if (kept := {t: at for t, at in released.items() if now - at < grace})
        }

    def shift(self, step: float) -> None:
        """The wall clock stepped by ``step`` seconds."""
        for released in self.own_gpu.values():
            for task in released:
                released[task] += step
        self.refused = {t: (n, at + step) for t, (n, at) in self.refused.items()}

    def release(
        self,
        h: HeldJob,
        sj: SlurmJob,
        now: float,
        ledger: Ledger,
        occ: Occupancy,
        book: ScoreBook,
        *,
        own_gpu: bool,
        behind: bool,
        waiting: Counter[str],
        limit: int = MAX_TASKS_PER_LOOK,
    ) -> tuple[list[Action], bool]:
        """The releases of held array ``h``'s tasks at this look (``limit`` at most: what is
        left of the look's :data:`~.arrays.MAX_TASKS_PER_LOOK` for all held arrays), and
        whether its last task is among them. ``own_gpu``: a task no shared GPU takes is
        released with its own GPU request; ``behind``: the array waits behind a job held
        longer, so none of its tasks goes to a shared GPU now; ``waiting``:
        :func:`waiting_with_own_gpu` of this look. An array throttled with ``%N`` has at
        most N tasks released and not ended at once (Slurm would run no more of them, and
        the others would hold their places on shared GPUs while they wait)."""
        self.records.add(h.job_id)
        out: list[Action] = []
        tasks = waiting_tasks(sj.array_tasks, MAX_TASKS_PER_LOOK + 1)
        # (those older than three looks were forgotten by this look's :meth:`expire`)
        released = self.own_gpu.setdefault(h.job_id, {})
        on_own_gpu = waiting[h.token] + sum(1 for t in released if t in tasks)
        throttle = array_throttle(sj.array_tasks)
        if throttle is not None:  # %N: no more released than may run
            out_now = self._split_off(occ.jobs)[h.token] + sum(
                1 for t in tasks if t in released or task_token(h.token, t) in ledger.placements
            )
            limit = min(limit, max(0, throttle - out_now))
        none_takes = behind
        for task in tasks:
            token = task_token(h.token, task)
            if token in ledger.placements or task in released:
                continue
            if len(out) >= limit:
                break
            if not none_takes:
                a = self._to_shared(h, sj, task, now, ledger, occ, book)
                if a is not None:
                    out.append(a)
                    continue
                none_takes = True  # the next task, of the same class, fits nowhere either
            if not own_gpu or on_own_gpu >= OWN_GPU_WAITING:
                break
            tag, gres = own_gpu_request(sj, h.model)
            again = held_task(sj, task_token(h.token, task))
            out.append(
                Action("aim", h.job_id, tag, OWN_GPU_TASK_NOTE, gres=gres, restore=again, task=task)
            )
            released[task] = now
            on_own_gpu += 1
            log.info(
                "job %s_%s: no shared GPU takes it; released with its own GPU request",
                h.job_id,
                task,
            )
        last = bool(out) and out[-1].task == tasks[-1] and len(tasks) <= MAX_TASKS_PER_LOOK
        return out, last

    def _split_off(self, jobs: dict[int, SlurmJob]) -> Counter[str]:
        """:func:`split_off` of this answer of Slurm's (each look's is a new dict), worked
        out once."""
        if self._split is None or self._split[0] is not jobs:
            self._split = (jobs, split_off(jobs.values()))
        return self._split[1]

    def failed(self, action: Action, ledger: Ledger) -> None:
        """Slurm refused the release of one task (``action.task``): forget its placement, or
        that it was released with its own GPU request; the array stays held."""
        if action.node:
            ledger.drop(action.placement_token)
        elif action.task is not None:
            self.own_gpu.get(action.job_id, {}).pop(action.task, None)

    def refused_release(self, action: Action, now: float) -> None:
        """Slurm refused a release that may have split a task from its array (``action``
        carries the comments that make it held again): remember the tag it gave the task,
        for :meth:`stranded`."""
        token = action.placement_token
        if token and any(action.restore):
            n, _ = self.refused.get(token, (0, now))
            self.refused[token] = (n + 1, now)

    def stranded(self, jobs: Iterable[SlurmJob], now: float) -> list[Action]:
        """The release of tasks stranded held: Slurm refused a task's release after the
        update that split it from its array and gave it its tag, and refused setting its
        comments back to a held tag too (slurmctld failing both calls), so it waits, held,
        with a tag that does not say so. Each pending held job with the tag of such a
        release (at most as many per tag as were refused, for
        :data:`REFUSED_KEEP_S` after the last) is released again, as it is."""
        if not self.refused:
            return []
        self.refused = {t: v for t, v in self.refused.items() if now - v[1] < REFUSED_KEEP_S}
        left = {token: n for token, (n, _) in self.refused.items()}
        out = []
        for j in sorted(jobs, key=lambda j: j.job_id):
            if j.state != "PENDING" or not j.state_reason.startswith("JobHeld") or j.array_tasks:
                continue
            tag = Placement.from_tag(j.admin_comment)
            if tag is None or tag.held or left.get(tag.token, 0) <= 0:
                continue
            left[tag.token] -= 1
            log.warning(
                "job %s: a task whose release Slurm refused is still held, its tag not set "
                "back; released again",
                j.job_id,
            )
            out.append(
                Action(
                    "aim",
                    j.job_id,
                    j.admin_comment,
                    j.comment,
                    model=tag.model,
                    array_task=j.record_task,
                )
            )
        return out

    def _to_shared(
        self,
        h: HeldJob,
        sj: SlurmJob,
        task: int,
        now: float,
        ledger: Ledger,
        occ: Occupancy,
        book: ScoreBook,
    ) -> Action | None:
        """Release ``task`` onto the shared GPU that takes it, its own placement; None when
        none takes it."""
        token = task_token(h.token, task)
        t = replace(h, token=token, request=replace(h.request, key=token))
        view = occ.view_for_pending(sj, t.request.partition, t.model)
        judge = judge_for(t, view, book)
        d = place_held(t, view, judge, self.cfg.placement, occ.reservation)
        if not d.shared or d.node is None:
            return None
        r = release(t, d)
        scores_id = judge.id if isinstance(judge, ScoreTable) else judge.default.id
        ledger.remember(
            token, sj.name, sj.user, t.request.cls, str(t.request.mode), d, now, scores_id
        )
        ledger.add(token, replace(t.request, gres_type=""), d, now, occ.view)
        ledger.note(token, r.note)
        log.info(
            "job %s_%s: released onto GPU %s of %s: %s", h.job_id, task, d.index, d.node, d.reason
        )
        gres = occ.layouts[d.node].shard_request(d.index or 0)
        return Action(
            "aim",
            h.job_id,
            r.tag,
            r.comment,
            node=d.node,
            gres=gres,
            model=h.model,
            restore=held_task(sj, token),
            task=task,
        )
