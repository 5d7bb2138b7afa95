"""Time a shared job loses to sharing, given back to its time limit.

Slurm ends a job at its time limit (``--time``) whatever its speed, and a job that shares
a GPU runs slower than it would alone. The agent therefore keeps, for each job running on
a shared GPU, the time sharing has cost it so far: the wall time it ran times one less its
predicted speed in its set (0.7 of its solo speed for an hour: 18 minutes), and adds that
to the job's time limit (``scontrol update JobId=N TimeLimit=+M``, whole minutes, rounded
up). It gives the time once ``step_s`` is owed, or sooner, whatever is owed, once the job's
end is within ``guard_s``, so a job is never ended for the time it lost. A job that runs
alone on a shared GPU, or faster than alone, owes nothing. When the same set turns out
slower than predicted (its probe measured it, or a new score set predicts it so), the time
the job ran in it so far is charged again at the lower speed; a higher speed counts from
then on (too much, never too little).

The accounts outlive the agent (:meth:`TimeCredit.accounts`, :meth:`TimeCredit.restore`,
saved by agent/time_owed.py). After a restart the time the agent was down is charged at the
speed last seen, and a job that started meanwhile is charged from its start: the accounts
are complete from the last look before the agent stopped.

Pure: the agent feeds it each snapshot's rates, start and end times and runs the updates it
asks for (agent/state.py, agent/server.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

#: give the time owed once this much is owed (fewer updates of long jobs)
STEP_S = 600.0
#: or once the job's end is this near, whatever is owed (Slurm checks limits every 30 s)
GUARD_S = 180.0
#: a job whose limit (Slurm's expected end less its start) is this long or longer has none:
#: Slurm puts the end of a job without a limit (UNLIMITED) a year after its start
UNLIMITED_S = 365 * 86400.0
#: how long a job that left the accounts is remembered (one that comes back, a requeued job
#: started again, is charged from then, not again from its start)
GONE_S = 86400.0
#: a job back in a new run whose limit differs from its last run's by this much or more is
#: another job under the same id (Slurm's state reset), not a requeue
SAME_LIMIT_S = 30.0


def has_limit(start: float, end: float) -> bool:
    """Whether Slurm will end a job started at ``start`` at ``end`` (0: not known)."""
    return start > 0 and end > start and end - start < UNLIMITED_S


@dataclass
class Account:
    #: the job's predicted speed (share of its solo speed) since ``since``
    rate: float
    since: float
    #: seconds owed and not yet given (negative: given ahead, by the rounding up)
    owed_s: float = 0.0
    #: minutes given so far
    given_min: int = 0
    #: Slurm refused an update: nothing more is asked for this job
    refused: bool = False
    #: when the job's run started in Slurm (0: not known)
    start: float = 0.0
    #: the jobs of its set at the last look (None: not known), and since when it ran in
    #: that set as seen: a new prediction for the same set is charged from then
    members: tuple[int, ...] | None = None
    set_since: float = 0.0
    #: the run's limit in Slurm (end less start) as last seen, with the minutes given since
    #: (0: not known): a job back in a new run with another limit is another job
    limit_s: float = 0.0

    def copy(self) -> Account:
        return Account(
            self.rate,
            self.since,
            self.owed_s,
            self.given_min,
            self.refused,
            self.start,
            self.members,
            self.set_since,
            self.limit_s,
        )


@dataclass
class Accounts:
    """The accounts as at a look, what outlives the agent (agent/time_owed.py)."""

    #: the time of that look (None before the first)
    at: float | None
    #: each running shared job's account, by job id
    jobs: dict[int, Account]
    #: jobs that left the accounts (ended, requeued) within ``GONE_S`` and carry what a
    #: new run of theirs keeps (minutes given, a refusal): job id -> (when it left, its
    #: account then)
    left: dict[int, tuple[float, Account]] = field(default_factory=dict)
    #: (the boot's id, the wall clock's offset from the boot-time clock) as the accounts
    #: were copied (slurm_colo/clock.py): the next agent of the same boot finds a step of
    #: the clock made while it was down; None when not known
    clock: tuple[str, float] | None = None


class TimeCredit:
    """The time each running shared job is owed, by job id."""

    def __init__(self, step_s: float = STEP_S, guard_s: float = GUARD_S) -> None:
        self.step_s = step_s
        self.guard_s = guard_s
        self.jobs: dict[int, Account] = {}
        #: the accounts hold every job's time from here on (the first look, or the last
        #: look before a restart); None before the first look
        self.complete_since: float | None = None
        #: the time of the last look (what the accounts are charged to)
        self.last_look: float | None = None
        #: job id -> (when it left the accounts (ended, requeued), its account then), for
        #: ``GONE_S``
        self._gone: dict[int, tuple[float, Account]] = {}
        self._pruned = 0.0

    def shift(self, step: float) -> None:
        """The wall clock stepped by ``step`` seconds (slurm_colo/clock.py): the accounts'
        times move with it, so the step is neither charged to the jobs as time owed (a
        step forward) nor taken from them (back). Each job's start is Slurm's and stays."""
        if self.complete_since is not None:
            self.complete_since += step
        if self.last_look is not None:
            self.last_look += step
        if self._pruned:
            self._pruned += step
        for acc in self.jobs.values():
            acc.since += step
            if acc.set_since:
                acc.set_since += step
        self._gone = {j: (t + step, acc) for j, (t, acc) in self._gone.items()}

    def observe(
        self,
        rates: Mapping[int, float],
        now: float,
        starts: Mapping[int, float] | None = None,
        sets: Mapping[int, tuple[int, ...]] | None = None,
        limits: Mapping[int, float] | None = None,
    ) -> None:
        """Each running job on a shared GPU and its predicted speed now. The time since the
        last look is charged at the speed seen then; jobs no longer listed are forgotten.
        ``starts``: when each job started in Slurm (its latest start). A job new to the
        accounts is charged from its start, or from when the accounts are complete if
        later; without a start, from now. ``sets``: the job ids of each job's set. A job
        whose set is the one of the last look but whose speed is lower (its probe measured
        the set slower than predicted, or a new score set predicts it so) has its time in
        that set charged again at the lower speed; a higher speed counts from now on
        (too much, never too little). ``limits``: each job's limit in Slurm (end less
        start), for the jobs that have one."""
        if self.complete_since is None:
            self.complete_since = now
        complete = self.complete_since
        for job_id in list(self.jobs):
            if job_id not in rates:
                self._gone[job_id] = (now, self.jobs.pop(job_id))
        if now - self._pruned >= 3600.0:
            self._gone = {j: g for j, g in self._gone.items() if now - g[0] < GONE_S}
            self._pruned = now
        starts, limits = starts or {}, limits or {}
        for job_id, rate in rates.items():
            start, limit = starts.get(job_id, 0.0), limits.get(job_id, 0.0)
            acc = self.jobs.get(job_id)
            if acc is not None and start > acc.start > 0:
                # started again since the last look (requeued, or another job with this
                # id): as if it had left then
                self._gone[job_id] = (acc.since, self.jobs.pop(job_id))
                acc = None
            opened = acc is None
            if acc is None:
                acc = self._open(job_id, rate, start, now, complete, limit)
                self.jobs[job_id] = acc
            since = acc.since
            if not opened and start > acc.start:
                # its start known now: charged from there if later (compared only then, as
                # a start from before a step of the clock back lies after the agent's times)
                acc.start = start
                since = max(since, min(start, now))
            if now > since:
                acc.owed_s += (now - since) * max(0.0, 1.0 - acc.rate)
            members = sets.get(job_id) if sets else None
            if members is None or members != acc.members:
                # charged at this set's speed from its start if new here, else from now
                acc.members, acc.set_since = members, since if opened else now
            elif rate < acc.rate:  # the same set, found slower: its time so far again
                lost_now, lost_then = max(0.0, 1.0 - rate), max(0.0, 1.0 - acc.rate)
                acc.owed_s += (now - acc.set_since) * (lost_now - lost_then)
            acc.rate, acc.since = rate, now
            if limit > 0:
                acc.limit_s = limit
        self.last_look = now

    def _open(
        self, job_id: int, rate: float, start: float, now: float, complete: float, limit: float
    ) -> Account:
        """The account of a job new to the accounts, charged from its start (from now when
        not known), but not before the accounts are complete (``complete``). A job back in
        the same run (the same start) takes up its account again, charged from when it
        left. A job back in a new run (requeued) keeps, from its last run, the minutes Slurm
        kept in its limit: time given ahead for this run (and a refusal), if its limit
        (``limit``) is the one its last run had with them. Otherwise it is taken for
        another job that reuses the id (Slurm's state was reset), with an account of its
        own: too much, never too little."""
        since = now
        gone = self._gone.pop(job_id, None)
        if start > 0:
            since = min(now, max(start, complete, gone[0] if gone else 0.0))
        if gone is None:
            return Account(rate=rate, since=since, start=start)
        left, before = gone
        if start > 0 and start == before.start:
            before.rate, before.since = rate, max(left, since)
            return before
        if not (limit > 0 and abs(limit - before.limit_s) < SAME_LIMIT_S):
            return Account(rate=rate, since=since, start=start)  # another job, this id
        return Account(
            rate=rate,
            since=since,
            owed_s=-60.0 * before.given_min,
            given_min=before.given_min,
            refused=before.refused,
            start=start,
        )

    def due(self, ends: Mapping[int, float], now: float) -> list[tuple[int, int]]:
        """(job id, minutes) to add now: a job owed ``step_s`` or more, or owed anything
        while its end is within ``guard_s``. ``ends``: Slurm's expected end (start + limit)
        of each job that has a limit (:func:`has_limit`); others are given nothing. The
        minutes are counted as given at once (:meth:`refused` stops a job whose update
        Slurm refused)."""
        out: list[tuple[int, int]] = []
        for job_id, acc in self.jobs.items():
            end = ends.get(job_id)
            if end is None or acc.refused or acc.owed_s <= 0:
                continue
            if acc.owed_s >= self.step_s or end - now <= self.guard_s:
                minutes = math.ceil(acc.owed_s / 60.0)
                acc.owed_s -= 60.0 * minutes
                acc.given_min += minutes
                if acc.limit_s > 0:
                    acc.limit_s += 60.0 * minutes
                out.append((job_id, minutes))
        return out

    def not_given(self, job_id: int, minutes: int) -> None:
        """``minutes`` :meth:`due` counted as given were not (the update was not made: the
        agent lacks the right for now): they are owed again."""
        acc = self.jobs.get(job_id)
        if acc is not None:
            acc.owed_s += 60.0 * minutes
            acc.given_min -= minutes
            if acc.limit_s > 0:
                acc.limit_s -= 60.0 * minutes

    def refused(self, job_id: int) -> None:
        acc = self.jobs.get(job_id)
        if acc is not None:
            acc.refused = True

    def accounts(self) -> Accounts:
        """What :meth:`restore` takes back after a restart: a copy of the accounts at the
        last look, with the jobs that left them lately and carry something (a requeued
        job pending across the restart keeps its minutes)."""
        at = self.last_look
        return Accounts(
            at,
            {j: a.copy() for j, a in self.jobs.items()},
            {
                j: (t, a.copy())
                for j, (t, a) in self._gone.items()
                if (at is None or at - t < GONE_S) and (a.given_min or a.refused)
            },
        )

    def restore(self, saved: Accounts) -> None:
        """The accounts as saved at a look, before the agent's first look. There, jobs no
        longer running leave them, and the others are charged for the time since at the
        speed seen then; a job that left before the save and runs again is taken up as
        :meth:`observe` would have."""
        self.jobs = dict(saved.jobs)
        self._gone = dict(saved.left)
        self.complete_since = self.last_look = saved.at

    def owed_s(self, job_id: int) -> float:
        """Seconds owed and not given yet (0 for a job not known)."""
        acc = self.jobs.get(job_id)
        return acc.owed_s if acc is not None else 0.0

    def given_min(self, job_id: int) -> int:
        """Minutes added to the job's time limit so far (0 for a job not known)."""
        acc = self.jobs.get(job_id)
        return acc.given_min if acc is not None else 0
