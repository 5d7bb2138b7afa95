"""Taking a job off its shared GPU: the agent's side of an undo and of a node closed to
placement. Each makes the job one of the held jobs of :class:`.held.HeldJobs`, which
releases it again (:meth:`~.held.HeldJobs.reaim`).

The node side measures a new shared set after ``placement.probe_s`` and sends the report
(``PROBE``, a :class:`~slurm_colo.contracts.probe.ProbeReport`, see
:mod:`slurm_colo.node.probe`). :func:`judge`

1. judges it with :func:`slurm_colo.placement.held.judge_probe` (the simulator's
   :func:`~slurm_colo.placement.retract.judge`) and lays what the set showed over the live
   scores at once (:meth:`.learned.LiveScores.learn`), so no later job is put into the same
   pair before the nightly retrain;
2. if the set is harmful and ``placement.undo = "requeue"``: forgets the newcomer's
   placement and asks Slurm to requeue it held (:class:`~.actions.Action`
   ``requeue_hold``). Its tag then carries ``held=<shard type>``, so an agent restart
   finds it again. It waits for a GPU of its own shard type on Slurm 22.05 (which cannot
   change a pending job's GRES); from Slurm 23.11
   (:attr:`~.held.HeldJobs.retype_after_undo`) for any shared GPU of the same GPU model,
   its shard request set anew (``held=*`` and ``model=`` in its tag).

A job placed on a node the agent later closes to placement (Slurm numbers the node's GPUs
otherwise than its devices, :attr:`.occupancy.Occupancy.gres_refused`) that has not started
is held the same way (:func:`withdraw`, ``withdraw``: its tag then says ``held=``, its
comment begins with :data:`~slurm_colo.placement.held.WITHDRAWN`), so it cannot start on
another GPU than the one it was placed on; it is released like a requeued job, but keeps
its own start time.

A job is undone at most once (``undone=1`` in its tag): a second bad set runs on and is
learnt. Jobs that Slurm cannot requeue (``--no-requeue``, interactive) are never undone, nor
jobs whose time limit ends them within ``probe_s`` anyway.
No I/O: actions are returned for the server to run outside its lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..contracts.placement import Placement
from ..contracts.probe import ProbeReport
from ..placement.held import (
    HeldJob,
    Newcomer,
    judge_probe,
    requeued,
    undo_comment,
    undo_tag,
    withdrawn_comment,
)
from ..placement.retract import members_from_report
from ..placement.view import Decision
from .actions import Action
from .held import HeldJobs
from .learned import LiveScores
from .ledger import Ledger
from .occupancy import Occupancy

log = logging.getLogger("slurm_colo.agent")

#: a job requeued by an undo is released no sooner than this after it: Slurm revokes the
#: requeued run's launch credential, to the second, and a run started on the same node
#: within that second is killed ("Job credential revoked"; seen on 24.11, where the job
#: may go at once to another GPU of the same node)
REQUEUE_SETTLE_S = 2.0


def judge(
    holds: HeldJobs,
    report: ProbeReport,
    now: float,
    ledger: Ledger,
    occ: Occupancy,
    live: LiveScores,
    rebuild: Callable[[], None],
) -> tuple[dict[str, Any], list[Action]]:
    """Judge one probe report; returns the reply for the node and what to do in Slurm
    (``rebuild`` rebuilds the view once the scores or the placements changed)."""
    job_id = report.job
    token = ledger.by_job.get(job_id)
    p = ledger.placements.get(token) if token else None
    modes = {}
    for m in report.members:
        q = ledger.placements.get(ledger.by_job.get(m.job, ""))
        if q is not None:
            modes[str(m.job)] = q.request.mode
    members = members_from_report(report.to_wire(), live.table, modes)
    sj = occ.jobs.get(job_id)
    tag = Placement.from_tag(sj.admin_comment) if sj else None
    newcomer = Newcomer(
        placed=p is not None and p.decision.shared and p.decision.node in occ.layouts,
        requeue=sj is None or sj.requeue,
        undone=bool(tag and tag.undone),
        ends_in_s=sj.end_time - now if sj is not None and sj.active else None,
        again=report.again,
    )
    j = judge_probe(
        str(job_id),
        members,
        live.table,
        holds.cfg.placement,
        newcomer,
        p is None or p.decision.throughput_open,
    )
    live.learn(j.observed, now, at_once=j.verdict != "keep")  # the view is rebuilt below
    rates = [m.n for m in members if m.measured and m.n > 0]
    if p is not None and p.decision.node and p.decision.index is not None and rates:
        jobs = [m.job for m in report.members]
        occ.observe(p.decision.node, p.decision.index, jobs, round(1 / min(rates), 3))
    what = "probe of the set left behind" if report.again else "probe"
    if j.verdict == "keep":
        ledger.probes["kept"] += 1
        log.info("job %s: %s %s", job_id, what, j.reason)
        return j.reply(), []
    if j.verdict == "harmful":
        rebuild()
        ledger.probes["harmful"] += 1
        log.warning("job %s: %s %s; left running: %s", job_id, what, j.reason, j.why_not)
        return j.reply(), []
    assert p is not None and token is not None
    gres_type, model = held_for(p.decision, occ, holds.retype_after_undo)
    ledger.drop(token)
    req = requeued(replace(p.request, key=str(job_id)), gres_type, holds.cfg.placement)
    h = HeldJob(
        job_id, token, req, now, j.reason, model=model, release_after=now + REQUEUE_SETTLE_S
    )
    holds.jobs[job_id] = h
    ledger.probes["undone"] += 1
    ledger.note(token, f"requeued after its {what}: {j.reason}")
    rebuild()
    log.warning(
        "job %s: %s %s; requeued, to be aimed again at %s",
        job_id,
        what,
        j.reason,
        h.waits_for(),
    )
    act = Action(
        "requeue_hold",
        job_id,
        undo_tag(token, req, j.reason, h.gres_type, model),
        undo_comment(holds.cfg.placement, j.reason),
        restore=(sj.admin_comment, sj.comment) if sj else ("", ""),
        array_task=sj.record_task if sj else None,
    )
    return j.reply(), [act]


def held_for(d: Decision, occ: Occupancy, retype_after_undo: bool) -> tuple[str, str]:
    """(shard type, GPU model) a job taken off ``d``'s GPU waits for, held: its own
    shard type; where Slurm can change a pending job's GRES, any shared GPU of the
    model (its shard request is set anew when it is released)."""
    ng = occ.layouts.get(d.node or "")
    if ng is not None and retype_after_undo:
        return "", ng.model
    return occ.shard_type(d), ""


def withdraw(holds: HeldJobs, now: float, ledger: Ledger, occ: Occupancy) -> list[Action]:
    """Hold the pending jobs placed on a node now closed to placement (Slurm numbers
    its GPUs otherwise than its devices: :attr:`.occupancy.Occupancy.gres_refused`),
    so none starts on another GPU than the one it was placed on. Each is then a held
    job like any other (:meth:`reaim`): on Slurm 22.05 it waits for a GPU of its own
    shard type, so for its node to open again; from 23.11 it may go to any shared GPU
    of its GPU model, its shard request set anew. Nothing of it is undone: it keeps
    its own start time and may still be undone once."""
    if not occ.gres_refused:
        return []
    out = []
    for job_id, token in list(ledger.by_job.items()):
        p = ledger.placements.get(token)
        sj = occ.jobs.get(job_id)
        node = p.decision.node if p is not None else None
        if (
            p is None
            or sj is None
            or sj.state != "PENDING"
            or not p.decision.shared
            or node not in occ.gres_refused
            or job_id in holds.jobs
        ):
            continue
        gres_type, model = held_for(p.decision, occ, holds.retype_after_undo)
        why = f"node {node} closed to placement"
        ledger.drop(token)
        req = replace(p.request, key=str(job_id), gres_type=gres_type)
        h = HeldJob(job_id, token, req, now, why, undone=False, model=model, withdrawn=True)
        holds.jobs[job_id] = h
        ledger.note(token, f"held: {why}")
        log.warning(
            "job %s: pending on GPU %s of %s, a node closed to placement; held, to be "
            "aimed again at %s",
            job_id,
            p.decision.index,
            node,
            h.waits_for(),
        )
        out.append(
            Action(
                "withdraw",
                job_id,
                undo_tag(token, req, why, h.gres_type, model, undone=False),
                withdrawn_comment(node or ""),
                restore=(sj.admin_comment, sj.comment),
                array_task=sj.record_task,
            )
        )
    return out
