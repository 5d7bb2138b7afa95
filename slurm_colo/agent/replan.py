"""Re-planning ``--colocate`` jobs that wait in Slurm's queue for a whole GPU (Slurm 23.11+).

At submission the agent places a ``--colocate`` job on a shared GPU if one takes it then;
otherwise (``placement.unplaced = "own-gpu"``) the job keeps its own-GPU request and waits
in Slurm's queue. Slurm 22.05 cannot change the GRES of such a pending job, so it waits for
a whole GPU even when a shared GPU that suits it frees first. From Slurm 23.11 (see
:func:`slurm_colo.slurm.version.can_change_pending_gres`) the agent looks again at every
look at Slurm: the oldest waiting jobs first, each placed with the policy the Lua hook's
request gets (:func:`slurm_colo.placement.place`) on the shared GPUs its partition, GPU model
and ``-w``/``-x`` allow; a job a shared GPU takes is re-aimed there (``retarget``: its
``TresPerNode`` becomes that GPU's shard request, its node that GPU's node, its tag and
comment say so). It is not released or held: Slurm starts it on the shard as soon as it can.
This is the simulator's ``ours`` (re-plan) form, as far as a live cluster allows it.
The waiting tasks of a ``--colocate`` job array are re-planned the same way, task by task,
each its own placement (agent/arrays.py).

No I/O: actions are returned for the server to run outside its lock.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..config import Config
from ..contracts.enums import Mode
from ..contracts.placement import Placement
from ..placement.by_model import ScoreBook, place_by_model
from ..slurm.model import SlurmJob
from .actions import Action
from .arrays import task_token, waiting_tasks
from .ledger import Ledger, request_from_tag
from .occupancy import Occupancy

log = logging.getLogger("slurm_colo.agent")

#: one whole GPU, any form Slurm writes it in: gres:gpu:1, gres/gpu:v100:1
_ONE_GPU_RE = re.compile(r"^gres[:/]gpu(?::([A-Za-z0-9_.-]+))?:1$")
#: why a pending job waits, when it waits for GPUs (not for a dependency, a hold, a time)
_WAITING_FOR_GPUS = ("Resources", "Priority", "None", "")
#: jobs looked at per look at Slurm, oldest first, and jobs or tasks of arrays moved at
#: most (placing one takes well under 1 ms)
MAX_PER_PASS = 32


@dataclass(frozen=True)
class Waiting:
    """A ``--colocate`` job waiting for a whole GPU, and the GPU model it asked for."""

    job: SlurmJob
    tag: Placement
    model: str


def one_gpu_model(job: SlurmJob, models: set[str]) -> str | None:
    """The GPU model a single-GPU request asks for ("" any); None when the request is not
    one whole GPU on one node, or names a type that is no GPU model of the cluster."""
    if job.node_count != 1 or job.tres_per_job:
        return None
    m = _ONE_GPU_RE.match(job.tres_per_node.strip())
    if m is None:
        return None
    kind = m.group(1) or ""
    return kind if not kind or kind in models else None


def waiting_jobs(
    jobs: dict[int, SlurmJob], tags: dict[int, Placement], skip: set[int], models: set[str]
) -> list[Waiting]:
    """The ``--colocate`` jobs that wait in Slurm's queue with their own-GPU request, oldest
    first (``skip``: jobs the agent handles otherwise, e.g. held ones)."""
    out = []
    for job_id, tag in tags.items():
        j = jobs.get(job_id)
        if (
            j is None
            or j.state != "PENDING"
            or job_id in skip
            or tag.mode == Mode.OFF
            or tag.shared
            or tag.held
            or j.state_reason not in _WAITING_FOR_GPUS
        ):
            continue
        model = one_gpu_model(j, models)
        if model is not None:
            out.append(Waiting(j, tag, model))
    out.sort(key=lambda w: (w.job.submit_time, w.job.job_id))
    return out


def move_waiting(
    cfg: Config,
    now: float,
    waiting: list[Waiting],
    ledger: Ledger,
    occ: Occupancy,
    book: ScoreBook,
    behind: Callable[[float, str | None], bool] | None = None,
) -> list[Action]:
    """Re-aim the waiting jobs a shared GPU takes now; each one placed is counted on its GPU
    at once, so the next one sees it. Each GPU is judged with its model's score set. A job
    for which ``behind(submitted, shard type of the GPU it would take)`` is true waits its
    turn (bounded queue jumping: a held job waiting longer may want that GPU)."""
    p = _Pass(cfg, now, ledger, occ, book, behind)
    out: list[Action] = []
    for w in waiting[:MAX_PER_PASS]:  # an array is one of them, its tasks moved up to the cap
        if len(out) >= MAX_PER_PASS:
            break
        if w.job.array_tasks:
            out += _move_tasks(p, w, MAX_PER_PASS - len(out))
            continue
        moved = _move(p, w, w.tag.token or f"job{w.job.job_id}")
        if moved is not None:
            out.append(moved)
    return out


@dataclass(frozen=True)
class _Pass:
    """What one pass of :func:`move_waiting` moves jobs with."""

    cfg: Config
    now: float
    ledger: Ledger
    occ: Occupancy
    book: ScoreBook
    behind: Callable[[float, str | None], bool] | None


def _move_tasks(p: _Pass, w: Waiting, most: int) -> list[Action]:
    """The waiting tasks of an array that shared GPUs take now, lowest task first, each its
    own placement (agent/arrays.py); a task moved at an earlier look, not yet split from
    the array in Slurm's answer, is not moved again. Stops at the first task none takes."""
    out: list[Action] = []
    for task in waiting_tasks(w.job.array_tasks, MAX_PER_PASS * 4):
        token = task_token(w.tag.token or f"job{w.job.job_id}", task)
        if token in p.ledger.placements:
            continue
        moved = _move(p, w, token, task)
        if moved is None:
            break
        out.append(moved)
        if len(out) >= most:
            break
    return out


def _move(p: _Pass, w: Waiting, token: str, task: int | None = None) -> Action | None:
    """Re-aim one waiting job (or one task of an array) if a shared GPU takes it now."""
    cfg, now, ledger, occ, book = p.cfg, p.now, p.ledger, p.occ, p.book
    j, tag = w.job, w.tag
    part = j.partition if "," not in j.partition else ""
    view = occ.view_for_pending(j, part, w.model)
    req = request_from_tag(j, tag, cfg.placement, partition=part)
    if task is not None:  # not the array's record: a job of its own once split
        req = replace(req, key=token)
    bd = place_by_model(req, view, book, cfg.placement)
    d = bd.decision
    if not d.shared or d.node is None or d.node not in occ.layouts:
        return None
    if p.behind is not None and p.behind(j.submit_time or now, d.gres_type):
        return None
    who = f"job {j.job_id}" if task is None else f"job {j.job_id}_{task}"
    ledger.drop(token)
    ledger.remember(
        token,
        j.name,
        j.user,
        tag.cls,
        str(tag.mode),
        d,
        now,
        bd.scores.id,
        scores_model=bd.model if book.by_model else None,
    )
    # a task has no job id of its own until Slurm splits it: linked by its tag then
    ledger.add(token, req, d, now, occ.view, job_id=j.job_id if task is None else None)
    ledger.note(token, f"waited for a whole GPU; then {d.reason}")
    new_tag = d.placement(token, tag.cls, tag.mode, undone=tag.undone).to_tag()
    comment = f"colo: re-planned onto GPU {d.index} of {d.node}: {d.reason}"
    log.info("%s: re-planned onto GPU %s of %s: %s", who, d.index, d.node, d.reason)
    gres = occ.layouts[d.node].shard_request(d.index or 0)
    return Action(
        "retarget",
        j.job_id,
        new_tag,
        comment,
        node=d.node,
        gres=gres,
        task=task,
        array_task=j.record_task,
    )
