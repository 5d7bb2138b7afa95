"""Our placement policy inside the simulator: :func:`slurm_colo.placement.place`, the code
the agent runs, on a :class:`~slurm_colo.placement.ClusterView` mirrored from the engine.

Two ways to drive it (see docs/simulator.md):

* ``replan`` (``ours``, ``oracle``): waiting jobs are placed again whenever GPUs change,
  oldest first, and start as soon as a GPU takes them: the live agent where Slurm can
  change a pending job's GRES (23.11+, ``placement.replan = "auto"``), so the decision
  can wait for the job's turn. There a job requeued by an undo may go to any shared GPU
  (``retype_after_undo``).
* ``submit`` (``ours-submit``): like the live agent under Slurm 22.05, a job is placed once,
  at arrival: a shared GPU now; else, with ``hold`` (the agent's ``placement.unplaced =
  "hold"``), it waits held without a GPU request and is placed like a ``replan`` job,
  oldest first, on whichever GPU takes it (the agent sets its shard request when it
  releases it); without ``hold`` it keeps its own-GPU request and waits for a whole idle
  GPU (first come, first served). A job requeued by an undo keeps its shard type: Slurm
  22.05 cannot change the GRES of a pending job that has one.

Both keep the slowest-to-start job from starving (:mod:`.drain`, the agent's guard). Jobs
requeued by an undo are aimed again as the agent does (:mod:`.held`); the waiting jobs are
grouped by signature (:mod:`.waiting`).
With ``learn``, a new set is observed after ``placement.probe_s`` and judged by the agent's
code (:mod:`slurm_colo.placement.retract`); what a kept set showed is laid over the score
table at the first pass ``SimConfig.learn_interval_s`` after the last time it learned, as
the agent does at its next look at Slurm. A harmful set is undone as the agent's
``placement.undo`` says (``requeue``: the newcomer is requeued by Slurm, loses the work done
on that GPU and is held until a GPU takes it, of its own shard type or, with
``retype_after_undo``, any; ``off``: it runs on) and its observations are used at once.
"""

from __future__ import annotations

from typing import Any

from ..config import PlacementConfig
from ..contracts.placement import ANY_SHARED
from ..placement import ClusterView, Decision, GpuView, JobRequest, place
from ..placement.candidates import throughput_open
from ..placement.held import HeldJob, Newcomer, requeued, why_not_undone
from ..placement.policy import job_signature, occupant_for
from ..placement.retract import (
    RECURRING,
    Member,
    judge,
    recurring_only,
    with_pairs,
)
from ..placement.trend import QueueTrend
from ..scores import PairScore, ScoreTable
from .drain import StarvationGuard
from .engine import Sim
from .held import HeldJobs
from .passes import SchedulingPass
from .probes import ProbeWatch
from .waiting import Waiting


class PolicyScheduler(StarvationGuard, HeldJobs, SchedulingPass, ProbeWatch):
    def __init__(
        self,
        name: str,
        scores: ScoreTable,
        cfg: PlacementConfig,
        learn: bool = True,
        submit_time: bool = False,
        hold: bool = False,
        retype_after_undo: bool = False,
    ) -> None:
        self.name = name
        self.scores = scores
        self.cfg = cfg
        self.learn = learn
        self.submit_time = submit_time
        #: submit_time: a job no GPU takes at arrival waits held, for any GPU
        #: (placement.unplaced = "hold"), instead of waiting for a whole GPU
        self.hold = hold
        #: a job requeued by an undo may go to any GPU, its shard request set anew (the
        #: agent from Slurm 23.11, which can change a pending job's GRES); else only to a
        #: GPU of its old shard type (Slurm 22.05)
        self.retype_after_undo = retype_after_undo
        self.held: dict[str, dict[int, HeldJob]] = {}
        self._held_sig: dict[int, Any] = {}
        self.held_since: dict[int, float] = {}
        self._held_all = False
        #: whether the policy's throughput path was open at the last count of the queue
        self._throughput = True
        #: whether the throughput path was open when each running shared job was placed
        self._placed_open: dict[int, bool] = {}
        self.retractions = 0
        #: jobs undone once (the agent undoes a job at most once)
        self._undone: set[int] = set()
        self.explored = 0
        self.learn_folds = 0
        self.reservations = 0
        self._pending_obs: dict[tuple[str, str], PairScore] = {}
        self._last_learn = 0.0
        #: the classes the score set knows; jobs come per class it does not (up to
        #: RECURRING): only pairs of recurring classes are learnt, as the agent does
        self._known = scores.known_classes()
        self._came: dict[str, int] = {}

    @property
    def held_q(self) -> dict[str, list[int]]:
        """Held jobs by shard type (types with none left out)."""
        return {t: sorted(h) for t, h in self.held.items() if h}

    # ---- setup -----------------------------------------------------------------------
    def attach(self, sim: Sim) -> None:
        self.sim = sim
        c = sim.cfg
        self.view = ClusterView(
            [
                GpuView(
                    node=f"node{i // c.gpus_per_node:03d}",
                    index=i % c.gpus_per_node,
                    gres_type=f"{c.gpu_model}_s{i % c.gpus_per_node}",
                    memory_gib=c.gpu_memory_gib,
                    slots=c.slots,
                    model=c.gpu_model,
                )
                for i in range(c.gpus)
            ]
        )
        self.waiting = Waiting()
        self.changed: set[int] = set()
        self.reqs: dict[int, JobRequest] = {}
        self.reserved: dict[int, int] = {}  # GPU -> job it drains for
        self.trend = QueueTrend()
        self._watch_reset()

    def _req(self, jid: int) -> JobRequest:
        r = self.reqs.get(jid)
        if r is None:
            j = self.sim.runs[jid].job
            r = self.reqs[jid] = JobRequest(
                key=j.key, user=j.user, uid=j.uid, cls=j.cls, mode=j.mode, gpus_per_node=j.gpus
            )
        return r

    def _gres_type_of(self, jid: int) -> str:
        return self._req(jid).gres_type or ANY_SHARED

    def _gpus_of(self, jid: int) -> int:
        return self._req(jid).gpus_per_node

    def _sid(self, jid: int, whole: bool = False) -> int:
        w = self.waiting
        sid = w.job_sid.get(jid)
        if sid is None or (whole and not w.whole(w.sig_list[sid])):
            job = self._req(jid)
            if whole or job.gpus_per_node != 1 or job.mode == "off":
                sig: Any = ("whole", job.gpus_per_node)
            else:
                sig = job_signature(job, self.scores, self.cfg)
            sid = w.number(jid, sig)
        return sid

    def _enqueue(self, jid: int, whole: bool = False) -> None:
        self.waiting.enqueue(self._sid(jid, whole), self.sim.runs[jid].job.arrival, jid)

    # ---- engine events ---------------------------------------------------------------
    def _count_queue(self) -> None:
        """The agent's queue figures (``ClusterView.queue_per_gpu``, ``queue_drain_h``):
        jobs waiting or held, and how soon they will be gone. When they open the policy's
        throughput path, jobs refused before are placed again."""
        n = sum(len(q) for q in self.waiting.queues) + sum(len(h) for h in self.held.values())
        self.view.queue_per_gpu = n / len(self.view.gpus)
        self.trend.observe(self.sim.now, n)
        self.view.queue_drain_h = self.trend.hours_to_empty()
        was, self._throughput = self._throughput, throughput_open(self.view, self.cfg)
        if self._throughput and not was:
            self.waiting.fresh = set(range(len(self.waiting.queues)))
            self._held_all = True

    def arrive(self, sim: Sim, jid: int) -> None:
        cls = self._req(jid).cls
        if cls not in self._known:
            self._came[cls] = min(self._came.get(cls, 0) + 1, RECURRING)
        if self.submit_time and not self.waiting.whole(self.waiting.sig_list[self._sid(jid)]):
            if self._try(jid, hold_idle=False, since=sim.now) == "started":
                return
            # held (the agent releases it onto any GPU that takes it), or a whole GPU
            self._enqueue(jid, whole=not self.hold)
            return
        self._enqueue(jid)

    def finished(self, sim: Sim, jid: int, gpus: list[int]) -> None:
        key = sim.runs[jid].job.key
        self._watch_done(jid)
        self._placed_open.pop(jid, None)
        for i in gpus:
            g = self.view.gpus[i]
            if g.exclusive_job == jid:
                g.exclusive_job = None
                self.view.touch(g)
            else:
                self.view.remove_occupant(g, key)
                self._watch_left(i)
            self._gpu_changed(i)

    def _gpu_changed(self, i: int) -> None:
        self.changed.add(i)
        jid = self.reserved.get(i)
        if jid is not None and jid not in self.held_since and not self.sim.gpus[i].jobs:
            # drained for a waiting job: now idle, the oldest waiting job takes it (a GPU
            # drained for a held job stays closed to all others until that job runs)
            del self.reserved[i]
            g = self.view.gpus[i]
            g.closed_for = None
            self.view.touch(g)

    def probe(self, sim: Sim, jid: int, token: tuple[int, int]) -> None:
        if not self.learn:
            return
        members = sim.gpus[token[0]].jobs
        if len(members) < 2:
            self._watch_done(jid)
            return
        runs = sim.runs
        v = judge(
            runs[jid].job.key,
            [
                Member(runs[j].job.key, runs[j].job.cls, runs[j].job.mode, runs[j].rate)
                for j in members
            ],
            self.scores,
            self.cfg,
            self._placed_open.get(jid, True),
        )
        again = self._watch_judged(jid, kept=not v.undo)  # kept: it may judge a set left behind
        if not v.undo or self._runs_on(jid, again):
            self._pending_obs.update(v.observed)
            return
        key = runs[jid].job.key
        gpu = self.view.gpus[token[0]]
        for i in sim.evict(jid, keep_progress=False):
            self.view.remove_occupant(self.view.gpus[i], key)
            self._watch_left(i)
            self._gpu_changed(i)
        self.retractions += 1
        self._undone.add(jid)
        self._apply(v.observed)
        # placed again only where it keeps undone_floor, on a GPU of its shard type or any
        # (the agent's re-aim, placement/held.py); its GPU then takes no new partner
        gtype = "" if self.retype_after_undo else gpu.gres_type
        self.reqs[jid] = requeued(self._req(jid), gtype, self.cfg)
        if self._try(jid, hold_idle=False) != "started":
            self._wait_for_type(jid, gtype or ANY_SHARED)

    def _runs_on(self, jid: int, again: bool) -> bool:
        """Whether job ``jid``, the newest of a set its probe found harmful, is left running,
        as the agent decides (:func:`~slurm_colo.placement.held.why_not_undone`: with
        ``placement.undo = "off"``, a set left behind only with ``placement.left_behind =
        "undo"``, and a job requeued at most once)."""
        n = Newcomer(placed=True, undone=jid in self._undone, again=again)
        return why_not_undone(self.cfg, n) != ""

    # ---- learning --------------------------------------------------------------------
    def _apply(self, obs: dict[tuple[str, str], PairScore]) -> None:
        obs = {k: p for k, p in obs.items() if self.scores.pair(*k) != p}  # news only
        obs = recurring_only(obs, self._known, self._came)
        if not obs:
            return
        self.scores = with_pairs(self.scores, obs)
        self._held_sig.clear()
        self._held_all = True
        # signatures carry the table's memory estimate: re-key the waiting jobs
        waiting = self.waiting.jobs()
        self.waiting.reset()
        for _, jid, whole in waiting:
            self._enqueue(jid, whole=whole)

    # ---- starting jobs ---------------------------------------------------------------
    def _start_whole(self, jid: int, gpus: list[int]) -> None:
        self.sim.start_exclusive(jid, gpus)
        for i in gpus:
            g = self.view.gpus[i]
            g.exclusive_job = jid
            self.view.touch(g)
            self.changed.add(i)

    def _idle_for(self, k: int) -> list[int] | None:
        free = [i for i in sorted(self.sim.idle) if i not in self.reserved]
        return free[:k] if len(free) >= k else None

    def _try(self, jid: int, hold_idle: bool, since: float | None = None) -> str:
        """Place the job; "started", "refused" (no GPU takes it), "held", or "behind": a job
        waiting since ``since`` would take a GPU that a job waiting longer may want, and
        waits its turn (:meth:`_behind`, for that GPU's shard type)."""
        if since is not None and self._behind_queue(since):
            return "behind"  # a waiting job that may take any GPU: no placement needed
        return self._try_in_turn(jid, hold_idle, since)

    def _try_in_turn(self, jid: int, hold_idle: bool, since: float | None) -> str:
        """:meth:`_try` for a job known not to wait behind the waiting queue's oldest job."""
        self._count_queue()
        d = place(self._req(jid), self.view, self.scores, self.cfg)
        if since is not None and d.shared and self._behind(since, d.gres_type):
            return "behind"
        return self._start(jid, d, hold_idle)

    def _start(self, jid: int, d: Decision, hold_idle: bool) -> str:
        """Start the job where decision ``d`` puts it."""
        sim = self.sim
        job = self._req(jid)
        if not d.shared or d.node is None or d.index is None:
            return "refused"
        pos = self.view.position(d.node, d.index)
        assert pos is not None
        g = self.view.gpus[pos]
        if hold_idle and not g.occupants:
            return "held"
        if not sim.start_shared(jid, pos):  # out of memory: learn the pair at once
            self._apply(
                {
                    (job.cls, o.cls): PairScore(0.0, 0.0, 0.0, observed=True, never=True)
                    for o in g.occupants
                    if sim.truth.rates([job.cls, o.cls]) is None
                }
            )
            return "held"
        self._placed_open[jid] = d.throughput_open  # its set is judged by that rule
        self.view.add_occupant(g, occupant_for(job, d, sim.now, pending=False))
        self.changed.add(pos)
        if d.explored:
            self.explored += 1
        self._watch_start(jid, pos)  # its probe, after the agent's own probe_s
        return "started"

    # ---- the scheduling pass ---------------------------------------------------------
    def schedule(self, sim: Sim) -> None:
        due = sim.now - self._last_learn >= sim.cfg.learn_interval_s
        if self.learn and self._pending_obs and due:
            obs, self._pending_obs = self._pending_obs, {}
            self._last_learn = sim.now
            self.learn_folds += 1
            self._apply(obs)
        while True:
            dirty, self.changed = self.changed, set()
            if (dirty or self._held_all) and any(self.held.values()):
                self._held_pass(dirty)
            if not self._pass(dirty):
                break
        self._reserve(self.cfg.reserve_after_h)
