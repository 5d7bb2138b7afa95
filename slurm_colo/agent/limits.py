"""Time limits: the time sharing costs each job the agent placed, added to its Slurm limit
(``placement.time_limit = "extend"``). The accounts are agent/time_credit.py's; this module
reads each placed job's speed in the set on its GPU now from the view, for them."""

from __future__ import annotations

from collections.abc import Mapping

from ..placement import ClusterView
from ..placement.by_model import ScoreBook
from ..slurm.model import SlurmJob
from .actions import Action
from .time_credit import TimeCredit, has_limit

__all__ = ["SetSpeeds", "limit_actions"]

#: set speeds remembered at most (a site's sets repeat from look to look)
MAX_SETS = 50_000


class SetSpeeds:
    """Each member's predicted speed in a set on a GPU of a model, remembered for as long
    as the score sets stay the same."""

    def __init__(self) -> None:
        self._book: ScoreBook | None = None
        self._speeds: dict[tuple[str, tuple[str, ...]], list[float]] = {}

    def of(self, book: ScoreBook, model: str, classes: tuple[str, ...]) -> list[float]:
        if self._book is not book or len(self._speeds) > MAX_SETS:
            self._book, self._speeds = book, {}
        key = (model, classes)
        speeds = self._speeds.get(key)
        if speeds is None:
            table = book.table(book.model_for(model))
            speeds = self._speeds[key] = table.set_throughputs(list(classes))[0]
        return speeds


def limit_actions(
    view: ClusterView,
    placed: Mapping[int, str],
    jobs: Mapping[int, SlurmJob],
    credit: TimeCredit,
    speeds: SetSpeeds,
    book: ScoreBook,
    now: float,
) -> list[Action]:
    """Charge ``credit`` for the time since the last look of each running job the agent
    placed (``placed``: job id -> token) on a shared GPU of ``view``, at its predicted
    speed in the set running there now (measured, once the set's probe measured it: the
    set's time so far is then charged again at it; a job new to the accounts, started
    since the last look or while the agent was down, from its start), and return the
    raises now due. ``jobs``: Slurm's view of the jobs, for their starts and limits."""
    rates: dict[int, float] = {}
    sets: dict[int, tuple[int, ...]] = {}
    for g in view.gpus:
        running = [o for o in g.occupants if not o.pending and o.job_id is not None]
        mine = [
            (o.job_id, i)
            for i, o in enumerate(running)
            if o.job_id is not None and o.job_id in placed
        ]
        if not mine:
            continue  # no job of the agent's here (or the GPU is idle)
        set_speeds = [1.0]
        if len(running) > 1:
            set_speeds = speeds.of(book, g.model, tuple(o.cls for o in running))
        members = tuple(sorted(o.job_id for o in running if o.job_id is not None))
        for job_id, i in mine:
            rates[job_id] = set_speeds[i]
            sets[job_id] = members
    starts = {j: jobs[j].start_time for j in rates if j in jobs}
    ends = {
        j: jobs[j].end_time
        for j in rates
        if j in jobs and has_limit(jobs[j].start_time, jobs[j].end_time)
    }
    limits = {j: end - starts[j] for j, end in ends.items()}
    credit.observe(rates, now, starts, sets, limits)
    return [
        Action("extend", j, minutes=m, array_task=jobs[j].record_task)
        for j, m in credit.due(ends, now)
    ]
