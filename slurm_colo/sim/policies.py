"""Schedulers compared by the simulator, all driving the same :class:`~.engine.Sim`.

* ``exclusive-fifo``: one job per GPU, strict first-come-first-served.
* ``exclusive-backfill``: one job per GPU, EASY backfill (the queue head gets a
  reservation; later jobs may start if they do not delay it; run times known exactly).
* ``slurm-shard``: Slurm's untargeted sharing: every single-GPU job asks for one shard and
  gets the lowest-numbered GPU with a free shard (up to ``slots`` jobs per GPU).
* ``gandiva-random``: a job gets an idle GPU if there is one, else is paired with a random
  job running alone; after ``probe_s`` the pair is retracted (the newcomer goes back to the
  queue, progress kept) if its combined normalised throughput is below 1, and that class
  pair is not tried again.
* ``ours`` / ``oracle``: :func:`slurm_colo.placement.place` -- the agent's code -- with the
  model's predicted scores or with the true ones.

The baselines are given the benefit of the doubt on memory: they never start a pair that
cannot run together (out of memory in the measured data). Multi-GPU jobs always get whole
idle GPUs.
"""

from __future__ import annotations

import bisect
import random
from collections import deque
from dataclasses import replace
from typing import Any

from ..config import PlacementConfig
from ..placement import ClusterView, GpuView, JobRequest, Occupant, place
from ..placement.policy import gpu_outcome, job_signature
from ..scores import PairScore, ScoreTable
from .engine import Sim


def _lowest_idle(sim: Sim, k: int) -> list[int] | None:
    if len(sim.idle) < k:
        return None
    return sorted(sim.idle)[:k]


class ExclusiveFifo:
    def __init__(self, backfill: bool = False, depth: int = 200) -> None:
        self.backfill = backfill
        self.depth = depth
        self.name = "exclusive-backfill" if backfill else "exclusive-fifo"
        self.queue: deque[int] = deque()

    def attach(self, sim: Sim) -> None:
        self.queue.clear()

    def arrive(self, sim: Sim, jid: int) -> None:
        self.queue.append(jid)

    def finished(self, sim: Sim, jid: int, gpus: list[int]) -> None:
        pass

    def probe(self, sim: Sim, jid: int, token: tuple[int, int]) -> None:
        pass

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
        ends = sorted((sim.runs[g.jobs[0]].t + sim.runs[g.jobs[0]].remaining, 1)
                      for g in sim.gpus if g.jobs)
        avail = len(sim.idle)
        shadow, extra = float("inf"), 0
        for t, n in ends:
            avail += n
            if avail >= need:
                shadow, extra = t, avail - need
                break
        for jid in list(q)[1:self.depth]:
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


class SlurmShard:
    name = "slurm-shard"

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
                if not g.exclusive and len(g.jobs) < slots and (
                        not g.jobs or sim.truth.rates(
                            [*(sim.runs[j].job.cls for j in g.jobs), r.job.cls]) is not None):
                    sim.start_shared(q.popleft(), g.idx)
                    break
            else:
                return


class GandivaRandom:
    name = "gandiva-random"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.queue: deque[int] = deque()
        self.bad: set[tuple[str, str]] = set()
        self.retractions = 0

    def attach(self, sim: Sim) -> None:
        self.queue.clear()

    def arrive(self, sim: Sim, jid: int) -> None:
        self.queue.append(jid)

    def finished(self, sim: Sim, jid: int, gpus: list[int]) -> None:
        pass

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
                    o = sim.runs[g.jobs[0]].job.cls
                    if (min(c, o), max(c, o)) not in self.bad and sim.truth.pair(c, o) is not None:
                        cands.append(g.idx)
            if not cands:
                return
            jid = q.popleft()
            sim.start_shared(jid, cands[self.rng.randrange(len(cands))])
            sim.schedule_probe(jid, sim.cfg.probe_s)


def _with_pairs(t: ScoreTable, obs: dict[tuple[str, str], PairScore]) -> ScoreTable:
    pairs = dict(t.pairs)
    for (a, b), p in obs.items():
        pairs.pop((b, a), None)
        pairs[(a, b)] = p
    return replace(t, pairs=pairs, id=f"{t.id}+{len(obs)}obs")


class PolicyScheduler:
    """Runs the agent's placement policy. Waiting jobs are (re)placed whenever GPUs
    change, oldest first; see docs/simulator.md for how this differs from the live agent
    (which decides once, at submit time)."""

    def __init__(self, name: str, scores: ScoreTable, cfg: PlacementConfig,
                 learn: bool = True) -> None:
        self.name = name
        self.scores = scores
        self.cfg = cfg
        self.learn = learn
        self.retractions = 0
        self.explored = 0
        self.relearns = 0
        self._pending_obs: dict[tuple[str, str], PairScore] = {}
        self._last_learn = 0.0

    # ---- setup -----------------------------------------------------------------------
    def attach(self, sim: Sim) -> None:
        self._sim = sim
        c = sim.cfg
        self.view = ClusterView([
            GpuView(node=f"node{i // c.gpus_per_node:03d}", index=i % c.gpus_per_node,
                    gres_type=f"v100_s{i % c.gpus_per_node}", memory_gib=c.gpu_memory_gib,
                    slots=c.slots, model="v100")
            for i in range(c.gpus)])
        self.queues: dict[Any, list[tuple[float, int]]] = {}
        self.refused: set[Any] = set()
        self.changed: set[int] = set()
        self.reqs: dict[int, JobRequest] = {}
        self.sigs: dict[int, Any] = {}

    def _req(self, sim: Sim, jid: int) -> JobRequest:
        r = self.reqs.get(jid)
        if r is None:
            j = sim.runs[jid].job
            r = self.reqs[jid] = JobRequest(key=j.key, user=j.user, uid=j.uid, cls=j.cls,
                                            mode=j.mode, gpus_per_node=j.gpus)
        return r

    def _sig(self, sim: Sim, jid: int) -> Any:
        s = self.sigs.get(jid)
        if s is None:
            job = self._req(sim, jid)
            if job.gpus_per_node != 1 or job.mode == "off":
                s = ("whole", job.gpus_per_node)
            else:
                s = job_signature(job, self.scores, self.cfg)
            self.sigs[jid] = s
        return s

    def _enqueue(self, sim: Sim, jid: int) -> None:
        q = self.queues.setdefault(self._sig(sim, jid), [])
        bisect.insort(q, (sim.runs[jid].job.arrival, jid))

    # ---- events ----------------------------------------------------------------------
    def arrive(self, sim: Sim, jid: int) -> None:
        self._enqueue(sim, jid)

    def finished(self, sim: Sim, jid: int, gpus: list[int]) -> None:
        key = sim.runs[jid].job.key
        for i in gpus:
            g = self.view.gpus[i]
            if g.exclusive_job == jid:
                g.exclusive_job = None
                self.view.touch(g)
            else:
                self.view.remove_occupant(g, key)
            self.changed.add(i)

    def probe(self, sim: Sim, jid: int, token: tuple[int, int]) -> None:
        if not self.learn:
            return
        gi = token[0]
        members = sim.gpus[gi].jobs
        if len(members) < 2:
            return
        rates = {j: sim.runs[j].rate for j in members}
        obs = self._observe(sim, jid, members, rates)
        maxs = self.cfg.max_slowdown
        harmful = sum(rates.values()) < 1.0 or any(
            rates[j] < 1.0 / maxs for j in members if sim.runs[j].job.mode != "aggressive")
        if harmful:
            self._evict(sim, jid)
            self.retractions += 1
            self._apply(obs)
        else:
            self._pending_obs.update(obs)

    def _observe(self, sim: Sim, new: int, members: list[int],
                 rates: dict[int, float]) -> dict[tuple[str, str], PairScore]:
        """Pair throughputs read from an observed set: exact for two jobs; for more, the
        newcomer's effect on each member is its observed rate over the predicted effect of
        the others, and the newcomer's own slowdown is split evenly (geometric mean)."""
        c = sim.runs[new].job.cls
        others = [j for j in members if j != new]
        out: dict[tuple[str, str], PairScore] = {}
        k = len(others)
        n_new = rates[new] ** (1.0 / k)
        for j in others:
            oc = sim.runs[j].job.cls
            pred = 1.0
            for o in others:
                if o != j:
                    pred *= self.scores.pair(oc, sim.runs[o].job.cls).n_a
            n_j = min(rates[j] / pred, 1.0) if pred > 0 else rates[j]
            out[(c, oc)] = PairScore(n_new, n_j, 0.02 if k == 1 else 0.05, observed=True)
        return out

    def _apply(self, obs: dict[tuple[str, str], PairScore]) -> None:
        if not obs:
            return
        self.scores = _with_pairs(self.scores, obs)
        self.sigs.clear()
        self.refused.clear()
        # re-key waiting jobs: a signature holds the scores' memory estimate
        old = self.queues
        self.queues = {}
        for q in old.values():
            for item in q:
                self.queues.setdefault(self._sig_from_item(item), []).append(item)
        for q in self.queues.values():
            q.sort()

    def _sig_from_item(self, item: tuple[float, int]) -> Any:
        return self._sig(self._sim, item[1])

    def _evict(self, sim: Sim, jid: int) -> None:
        key = sim.runs[jid].job.key
        for i in sim.evict(jid):
            self.view.remove_occupant(self.view.gpus[i], key)
            self.changed.add(i)
        self._enqueue(sim, jid)

    # ---- starting jobs ---------------------------------------------------------------
    def _start_whole(self, sim: Sim, jid: int, gpus: list[int]) -> None:
        sim.start_exclusive(jid, gpus)
        for i in gpus:
            g = self.view.gpus[i]
            g.exclusive_job = jid
            self.view.touch(g)
            self.changed.add(i)

    def _try(self, sim: Sim, jid: int, sig: Any, hold_idle: bool) -> str:
        """Place the job; returns "started", "refused" (no GPU fits) or "held"."""
        job = self._req(sim, jid)
        d = place(job, self.view, self.scores, self.cfg)
        if not d.shared or d.node is None or d.index is None:
            return "refused"
        pos = self.view.position(d.node, d.index)
        assert pos is not None
        g = self.view.gpus[pos]
        if hold_idle and not g.occupants:
            return "held"
        if not sim.start_shared(jid, pos):
            self._apply({(job.cls, o.cls): PairScore(0.0, 0.0, 0.0, observed=True, never=True)
                         for o in g.occupants
                         if sim.truth.rates([job.cls, o.cls]) is None})
            return "held"
        self.view.add_occupant(g, Occupant(
            key=job.key, user=job.user, uid=job.uid, cls=job.cls,
            memory_gib=d.memory_gib or 0.0, thread_pct=d.thread_pct or 100,
            mem_limit_gib=d.mem_limit_gib or 0.0, since=sim.now))
        self.changed.add(pos)
        if d.explored:
            self.explored += 1
        if g.occupants and len(g.occupants) > 1 and self.learn:
            sim.schedule_probe(jid, sim.cfg.probe_s)
        return "started"

    def schedule(self, sim: Sim) -> None:
        self._sim = sim
        if (self.learn and self._pending_obs
                and sim.now - self._last_learn >= sim.cfg.relearn_s):
            obs, self._pending_obs = self._pending_obs, {}
            self._last_learn = sim.now
            self.relearns += 1
            self._apply(obs)
        while True:
            dirty, self.changed = self.changed, set()
            started = self._pass(sim, dirty)
            if not started:
                break

    def _pass(self, sim: Sim, dirty: set[int]) -> int:
        heads = sorted((q[0], s) for s, q in self.queues.items() if q)
        started = 0
        hold_idle = False
        for (_, _), sig in heads:
            q = self.queues[sig]
            while q:
                jid = q[0][1]
                if isinstance(sig, tuple):
                    free = None if hold_idle else _lowest_idle(sim, sig[1])
                    if free is None:
                        hold_idle = True
                        break
                    q.pop(0)
                    self._start_whole(sim, jid, free)
                    started += 1
                    continue
                if sig in self.refused:
                    hits = [gpu_outcome(sig, self.view, i, self.scores, self.cfg)
                            for i in dirty]
                    if not any(h == "share" or (h == "idle" and not hold_idle) for h in hits):
                        break
                res = self._try(sim, jid, sig, hold_idle)
                if res == "started":
                    q.pop(0)
                    self.refused.discard(sig)
                    started += 1
                    continue
                if res == "refused":
                    self.refused.add(sig)
                break
        return started
