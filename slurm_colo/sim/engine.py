"""Event-driven cluster simulator: jobs arrive, run on GPUs (alone or shared), finish.

A job's progress is measured in solo-seconds: alone it does 1 solo-second per second; in a
shared set it does ``n`` per second, ``n`` from :class:`~slurm_colo.sim.truth.Truth`. When a
GPU's set changes, the members' progress is settled and their finish times recomputed
(lazy-deleted heap entries). A *scheduler* (see :mod:`slurm_colo.sim.policies`) decides
what starts where; the engine only moves time and keeps the books. Deterministic: ties are
broken by event kind and sequence number, randomness lives in seeded schedulers.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..config import AgentConfig
from ..errors import ColoError
from .trace import SimJob
from .truth import Truth


class SimError(ColoError):
    """The simulation cannot run (bad parameters, a job that can never start)."""


@dataclass(frozen=True)
class SimConfig:
    gpus: int = 256
    gpus_per_node: int = 8
    #: memory of each simulated GPU, GiB (V100-SXM2-32GB)
    gpu_memory_gib: float = 32.0
    #: the GPU model (the campaign's GPU name): the GPUs' model and shard type names
    gpu_model: str = "v100"
    #: jobs one GPU may hold at once (gres/shard count per GPU)
    slots: int = 4
    #: how long a new shared set runs before Gandiva-random observes it (our policies use
    #: the agent's placement.probe_s)
    probe_s: float = 600.0
    #: how soon what a kept set's probe measured is laid over the score table: the agent
    #: does so at its next look at Slurm (``agent.refresh_interval_s``); a harmful set's
    #: measurements are used at once
    learn_interval_s: float = AgentConfig.refresh_interval_s
    seed: int = 0


class Run:
    """Mutable state of one job in the simulation."""

    __slots__ = (
        "end",
        "evictions",
        "first_start",
        "gpus",
        "job",
        "joined",
        "rate",
        "remaining",
        "run_time",
        "seg_remaining",
        "seg_start",
        "t",
        "version",
    )

    def __init__(self, job: SimJob) -> None:
        self.job = job
        self.remaining = job.work_s
        self.rate = 0.0
        self.t = 0.0
        self.first_start: float | None = None
        self.seg_start = 0.0
        self.seg_remaining = job.work_s
        self.end: float | None = None
        self.gpus: list[int] = []
        self.version = 0
        self.run_time = 0.0
        self.evictions = 0
        self.joined = 0  # times it was started next to other jobs


class Gpu:
    __slots__ = (
        "busy",
        "colo",
        "exclusive",
        "harmful",
        "idx",
        "is_harmful",
        "jobs",
        "since",
        "version",
    )

    def __init__(self, idx: int) -> None:
        self.idx = idx
        self.jobs: list[int] = []
        self.exclusive = False
        self.since = 0.0
        self.busy = 0.0
        self.colo = 0.0
        self.harmful = 0.0
        self.is_harmful = False
        self.version = 0


class Scheduler(Protocol):
    name: str

    def attach(self, sim: Sim) -> None: ...
    def arrive(self, sim: Sim, jid: int) -> None: ...
    def finished(self, sim: Sim, jid: int, gpus: list[int]) -> None: ...
    def probe(self, sim: Sim, jid: int, token: tuple[int, int]) -> None: ...
    def schedule(self, sim: Sim) -> None: ...


_FINISH, _PROBE, _ARRIVE = 0, 1, 2


class Sim:
    def __init__(
        self, trace: Sequence[SimJob], truth: Truth, cfg: SimConfig, scheduler: Scheduler
    ) -> None:
        if cfg.gpus <= 0 or cfg.slots <= 0:
            raise SimError("gpus and slots must be positive")
        for j in trace:
            if j.gpus > cfg.gpus:
                raise SimError(f"job {j.id} asks for {j.gpus} GPUs, the cluster has {cfg.gpus}")
        self.cfg = cfg
        self.truth = truth
        self.trace = list(trace)
        self.runs = [Run(j) for j in self.trace]
        if any(j.id != i for i, j in enumerate(self.trace)):
            raise SimError("trace job ids must be 0..n-1 in order")
        self.gpus = [Gpu(i) for i in range(cfg.gpus)]
        self.idle: set[int] = set(range(cfg.gpus))
        self.now = 0.0
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.sched = scheduler
        self.events = 0
        self.oom_starts = 0

    # ---- event heap ------------------------------------------------------------------
    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, a, b))

    def schedule_probe(self, jid: int, delay: float) -> None:
        r = self.runs[jid]
        self._push(self.now + delay, _PROBE, jid, r.version)

    # ---- GPU bookkeeping -------------------------------------------------------------
    def _account(self, g: Gpu) -> None:
        dt = self.now - g.since
        if dt > 0 and g.jobs:
            g.busy += dt
            if len(g.jobs) > 1:
                g.colo += dt
                if g.is_harmful:
                    g.harmful += dt
        g.since = self.now

    def _settle(self, g: Gpu) -> None:
        self._account(g)
        for jid in g.jobs:
            r = self.runs[jid]
            r.remaining -= r.rate * (self.now - r.t)
            r.t = self.now

    def _rerate(self, g: Gpu) -> None:
        g.version += 1
        if not g.jobs:
            g.is_harmful = False
            self.idle.add(g.idx)
            return
        self.idle.discard(g.idx)
        rates = self.truth.rates([self.runs[j].job.cls for j in g.jobs])
        assert rates is not None
        total = 0.0
        for jid in g.jobs:
            r = self.runs[jid]
            r.rate = rates[r.job.cls]
            total += r.rate
            r.version += 1
            self._push(self.now + max(r.remaining, 0.0) / r.rate, _FINISH, jid, r.version)
        g.is_harmful = len(g.jobs) > 1 and total < 1.0

    def set_rates(self, gpu: int) -> dict[str, float] | None:
        """True per-class rates of the set now on ``gpu``."""
        return self.truth.rates([self.runs[j].job.cls for j in self.gpus[gpu].jobs])

    # ---- actions for schedulers ------------------------------------------------------
    def start_shared(self, jid: int, gpu: int) -> bool:
        """Start ``jid`` on ``gpu`` next to whatever runs there. False (job not started)
        when the set contains a pair that cannot run together (out of memory)."""
        g = self.gpus[gpu]
        if g.exclusive:
            raise SimError(f"GPU {gpu} is held by an exclusive job")
        if len(g.jobs) >= self.cfg.slots:
            raise SimError(f"GPU {gpu} has no free slot")
        r = self.runs[jid]
        if self.truth.rates([*(self.runs[j].job.cls for j in g.jobs), r.job.cls]) is None:
            self.oom_starts += 1
            return False
        self._settle(g)
        self._begin(r, [gpu])
        if g.jobs:
            r.joined += 1
        g.jobs.append(jid)
        self._rerate(g)
        return True

    def start_exclusive(self, jid: int, gpus: Sequence[int]) -> None:
        r = self.runs[jid]
        if len(gpus) != r.job.gpus:
            raise SimError(f"job {jid} needs {r.job.gpus} GPUs, given {len(gpus)}")
        self._begin(r, list(gpus))
        r.rate = 1.0
        for i in gpus:
            g = self.gpus[i]
            if g.jobs:
                raise SimError(f"GPU {i} is not idle")
            self._account(g)
            g.jobs.append(jid)
            g.exclusive = True
            g.version += 1
            self.idle.discard(i)
        r.version += 1
        self._push(self.now + r.remaining, _FINISH, jid, r.version)

    def _begin(self, r: Run, gpus: list[int]) -> None:
        if r.first_start is None:
            r.first_start = self.now
        r.seg_start = self.now
        r.seg_remaining = r.remaining
        r.t = self.now
        r.gpus = gpus

    def evict(self, jid: int, keep_progress: bool = True) -> list[int]:
        """Stop a shared job; it is not requeued here. ``keep_progress``: it resumes where it
        stopped (checkpointed), else it restarts from where this run on the GPU began (a
        Slurm requeue without a checkpoint)."""
        r = self.runs[jid]
        out = r.gpus
        for i in out:
            g = self.gpus[i]
            self._settle(g)
            g.jobs.remove(jid)
            self._rerate(g)
        r.run_time += self.now - r.seg_start
        if not keep_progress:
            r.remaining = r.seg_remaining
        r.gpus = []
        r.rate = 0.0
        r.version += 1
        r.evictions += 1
        return out

    def _finish(self, jid: int) -> None:
        r = self.runs[jid]
        gpus = r.gpus
        for i in gpus:
            g = self.gpus[i]
            if g.exclusive:
                self._account(g)
                g.jobs.clear()
                g.exclusive = False
                g.version += 1
                self.idle.add(i)
            else:
                self._settle(g)
                g.jobs.remove(jid)
                self._rerate(g)
        r.remaining = 0.0
        r.run_time += self.now - r.seg_start
        r.end = self.now
        r.gpus = []
        self.sched.finished(self, jid, gpus)

    # ---- main loop -------------------------------------------------------------------
    def run(self) -> Sim:
        self.sched.attach(self)
        for r in self.runs:
            self._push(r.job.arrival, _ARRIVE, r.job.id)
        heap = self._heap
        while heap:
            t = heap[0][0]
            self.now = t
            while heap and heap[0][0] == t:
                _, kind, _, a, b = heapq.heappop(heap)
                self.events += 1
                if kind == _FINISH:
                    if self.runs[a].version == b and self.runs[a].end is None:
                        self._finish(a)
                elif kind == _ARRIVE:
                    self.sched.arrive(self, a)
                else:
                    if self.runs[a].version == b and self.runs[a].gpus:
                        self.sched.probe(self, a, (self.runs[a].gpus[0], b))
            self.sched.schedule(self)
        for g in self.gpus:
            self._account(g)
        left = [r.job.id for r in self.runs if r.end is None]
        if left:
            raise SimError(
                f"{len(left)} job(s) never finished under {self.sched.name} "
                f"(first: job {left[0]}); the policy left them waiting"
            )
        return self
