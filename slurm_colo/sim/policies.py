"""Schedulers compared by the simulator, all driving the same :class:`~.engine.Sim`.

* ``exclusive-fifo``: one job per GPU, strict first-come-first-served.
* ``exclusive-backfill``: one job per GPU, EASY backfill (the queue head gets a
  reservation; later jobs may start if they do not delay it; run times known exactly).
* ``slurm-shard``: Slurm's untargeted sharing: every single-GPU job asks for one shard and
  gets the lowest-numbered GPU with a free shard (up to ``slots`` jobs per GPU).
* ``gandiva-random``: a job gets an idle GPU if there is one, else is paired with a random
  job running alone; after ``probe_s`` the pair is retracted (the newcomer goes back to the
  queue, progress kept) if its combined normalised throughput is below 1, and that class
  pair is not tried again. Under MPS (``placement.cross_user = "never"``) it pairs only
  one user's jobs, as MPS runs one server per user (a second user's jobs would queue).
* ``ours`` / ``ours-submit`` / ``oracle``: :func:`slurm_colo.placement.place` -- the
  agent's code -- in :mod:`slurm_colo.sim.ours`.

The baselines are given the benefit of the doubt on memory: they never start a pair that
cannot run together (out of memory in the measured data). Multi-GPU jobs always get whole
idle GPUs.
"""

from __future__ import annotations

import random
from collections import deque

from .engine import Sim


def _lowest_idle(sim: Sim, k: int) -> list[int] | None:
    if len(sim.idle) < k:
        return None
    return sorted(sim.idle)[:k]


class _QueuedPolicy:
    """Shared part of the baseline policies: a FIFO queue of waiting jobs and no-op hooks."""

    def __init__(self) -> None:
        self.queue: deque[int] = deque()

    def attach(self, sim: Sim) -> None:
        self.queue.clear()

    def arrive(self, sim: Sim, jid: int) -> None:
        self.queue.append(jid)

    def finished(self, sim: Sim, jid: int, gpus: list[int]) -> None:
        pass

    def probe(self, sim: Sim, jid: int, token: tuple[int, int]) -> None:
        pass


class ExclusiveFifo(_QueuedPolicy):
    def __init__(self, backfill: bool = False, depth: int = 200) -> None:
        super().__init__()
        self.backfill = backfill
        self.depth = depth
        self.name = "exclusive-backfill" if backfill else "exclusive-fifo"

    def schedule(self, sim: Sim) -> None:
        q = self.queue
        while q and sim.idle:
            k = sim.runs[q[0]].job.gpus
            free = _lowest_idle(sim, k)
            if free is None:
                break
            sim.start_exclusive(q.popleft(), free)
        if not self.backfill or not q or not sim.idle:
            return
        # EASY backfill: the head's reservation is when enough running jobs have ended
        need = sim.runs[q[0]].job.gpus
        ends = sorted(
            (sim.runs[g.jobs[0]].t + sim.runs[g.jobs[0]].remaining, 1) for g in sim.gpus if g.jobs
        )
        avail = len(sim.idle)
        shadow, extra = float("inf"), 0
        for t, n in ends:
            avail += n
            if avail >= need:
                shadow, extra = t, avail - need
                break
        for jid in list(q)[1 : self.depth]:
            if not sim.idle:
                break
            job = sim.runs[jid].job
            if job.gpus > len(sim.idle):
                continue
            if sim.now + job.work_s <= shadow or job.gpus <= extra:
                if sim.now + job.work_s > shadow:
                    extra -= job.gpus
                sim.start_exclusive(jid, _lowest_idle(sim, job.gpus) or [])
                q.remove(jid)


class SlurmShard(_QueuedPolicy):
    name = "slurm-shard"

    def schedule(self, sim: Sim) -> None:
        q = self.queue
        slots = sim.cfg.slots
        while q:
            r = sim.runs[q[0]]
            if r.job.gpus > 1:
                free = _lowest_idle(sim, r.job.gpus)
                if free is None:
                    return
                sim.start_exclusive(q.popleft(), free)
                continue
            for g in sim.gpus:
                if (
                    not g.exclusive
                    and len(g.jobs) < slots
                    and (
                        not g.jobs
                        or sim.truth.rates([*(sim.runs[j].job.cls for j in g.jobs), r.job.cls])
                        is not None
                    )
                ):
                    sim.start_shared(q.popleft(), g.idx)
                    break
            else:
                return


class GandivaRandom(_QueuedPolicy):
    name = "gandiva-random"

    def __init__(self, seed: int, same_user: bool = False) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.bad: set[tuple[str, str]] = set()
        self.retractions = 0
        #: pair only jobs of one user (sharing through MPS: one server per user)
        self.same_user = same_user

    def probe(self, sim: Sim, jid: int, token: tuple[int, int]) -> None:
        g = sim.gpus[token[0]]
        if len(g.jobs) != 2:
            return
        rates = sim.set_rates(g.idx)
        assert rates is not None
        if sum(sim.runs[j].rate for j in g.jobs) < 1.0:
            a, b = (sim.runs[j].job.cls for j in g.jobs)
            self.bad.add((min(a, b), max(a, b)))
            sim.evict(jid)
            self.retractions += 1
            self.queue.appendleft(jid)

    def schedule(self, sim: Sim) -> None:
        q = self.queue
        while q:
            r = sim.runs[q[0]]
            free = _lowest_idle(sim, r.job.gpus)
            if free is not None:
                jid = q.popleft()
                if r.job.gpus > 1:
                    sim.start_exclusive(jid, free)
                else:
                    sim.start_shared(jid, free[0])
                continue
            if r.job.gpus > 1:
                return
            c = r.job.cls
            cands = []
            for g in sim.gpus:
                if len(g.jobs) == 1 and not g.exclusive:
                    other = sim.runs[g.jobs[0]].job
                    if self.same_user and other.uid != r.job.uid:
                        continue
                    o = other.cls
                    if (min(c, o), max(c, o)) not in self.bad and sim.truth.pair(c, o) is not None:
                        cands.append(g.idx)
            if not cands:
                return
            jid = q.popleft()
            sim.start_shared(jid, cands[self.rng.randrange(len(cands))])
            sim.schedule_probe(jid, sim.cfg.probe_s)
