"""Our placement policy inside the simulator: :func:`slurm_colo.placement.place`, the code
the agent runs, on a :class:`~slurm_colo.placement.ClusterView` mirrored from the engine.

Two ways to drive it (see docs/simulator.md):

* ``replan`` (``ours``, ``oracle``): waiting jobs are placed again whenever GPUs change,
  oldest first, and start as soon as a GPU takes them. This is the policy's potential when
  the decision can wait for the job's turn.
* ``submit`` (``ours-submit``): like the live agent under Slurm 22.05, a job is placed once,
  at arrival: a shared GPU now; else, with ``hold`` (the agent's ``placement.unplaced =
  "hold"``), it waits held without a GPU request and is placed like a ``replan`` job,
  oldest first, on whichever GPU takes it (the agent sets its shard request when it
  releases it); without ``hold`` it keeps its own-GPU request and waits for a whole idle
  GPU (first come, first served). A job requeued by an undo keeps its shard type: Slurm
  22.05 cannot change the GRES of a pending job that has one.

Both keep the slowest-to-start job from starving: once the oldest waiting job has waited
``placement.reserve_after_h``, the busy shared GPU(s) expected to drain first are closed to new
partners until they are idle (like a Slurm backfill reservation); failing such a job, the
same holds for the requeued job held longest for its GPU type, with a GPU of that type.
With ``learn``, a new set is observed after ``placement.probe_s`` and judged by the agent's code
(:mod:`slurm_colo.placement.retract`); what it showed is folded into the score table every
``relearn_s`` (the nightly retrain). A harmful set is undone as ``undo`` says (see
:data:`UNDO`; the live agent's is ``requeue``) and its observations are used at once.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Any

from ..config import PlacementConfig
from ..placement import ClusterView, GpuView, JobRequest, place
from ..placement.guard import HeldWait, drain_order, held_drain, usable
from ..placement.held import requeued
from ..placement.policy import index_for, job_signature, occupant_for
from ..placement.retract import Member, judge, with_pairs
from ..scores import PairScore, ScoreTable
from .engine import Sim

#: what happens to a set judged harmful after its probe (placement/retract.py)
#: none: it runs on (learned at the next retrain); checkpoint: the newcomer is stopped with
#: its progress kept and placed again anywhere; requeue: the newcomer is requeued by Slurm,
#: loses the work done on this GPU and may only go to a GPU of its own shard type
UNDO = ("none", "checkpoint", "requeue")


class PolicyScheduler:
    def __init__(
        self,
        name: str,
        scores: ScoreTable,
        cfg: PlacementConfig,
        learn: bool = True,
        submit_time: bool = False,
        undo: str = "checkpoint",
        hold: bool = False,
    ) -> None:
        if undo not in UNDO:
            raise ValueError(f"undo must be one of {', '.join(UNDO)}")
        self.name = name
        self.scores = scores
        self.cfg = cfg
        self.learn = learn
        self.submit_time = submit_time
        self.undo = undo
        #: submit_time: a job no GPU takes at arrival waits held, for any GPU
        #: (placement.unplaced = "hold"), instead of waiting for a whole GPU
        self.hold = hold
        #: requeued jobs, waiting for a GPU of their fixed shard type: per type, by arrival
        self.held_q: dict[str, list[tuple[float, int]]] = {}
        self._held_sig: dict[int, Any] = {}  # their signatures (cleared with new scores)
        #: when each was requeued: the guard serves the longest
        self.held_since: dict[int, float] = {}
        #: GPU type -> the held job a GPU of that type was just drained for
        self._drained_for: dict[str, int] = {}
        self._held_all = False  # the scores changed: every GPU may accept them now
        self.retractions = 0
        self.explored = 0
        self.relearns = 0
        self.reservations = 0
        self._pending_obs: dict[tuple[str, str], PairScore] = {}
        self._last_learn = 0.0

    # ---- setup -----------------------------------------------------------------------
    def attach(self, sim: Sim) -> None:
        self.sim = sim
        c = sim.cfg
        self.view = ClusterView(
            [
                GpuView(
                    node=f"node{i // c.gpus_per_node:03d}",
                    index=i % c.gpus_per_node,
                    gres_type=f"v100_s{i % c.gpus_per_node}",
                    memory_gib=c.gpu_memory_gib,
                    slots=c.slots,
                    model="v100",
                )
                for i in range(c.gpus)
            ]
        )
        self._reset_queues()
        self.changed: set[int] = set()
        self.reqs: dict[int, JobRequest] = {}
        self.reserved: dict[int, int] = {}  # GPU -> job it drains for

    def _reset_queues(self) -> None:
        # jobs with equal signatures get equal decisions; signatures are numbered (sid)
        self.sid_of: dict[Any, int] = {}
        self.sig_list: list[Any] = []
        self.job_sid: dict[int, int] = {}
        self.queues: list[list[tuple[float, int]]] = []  # by sid, sorted by arrival
        self.sids_by_uid: dict[int | None, set[int]] = {}  # single-GPU signatures per user
        self.heads: list[tuple[float, int]] = []  # (arrival, jid) of each queue's head
        self.fresh: set[int] = set()  # sids whose head must be placed on the full view

    def _req(self, jid: int) -> JobRequest:
        r = self.reqs.get(jid)
        if r is None:
            j = self.sim.runs[jid].job
            r = self.reqs[jid] = JobRequest(
                key=j.key, user=j.user, uid=j.uid, cls=j.cls, mode=j.mode, gpus_per_node=j.gpus
            )
        return r

    def _sid(self, jid: int, whole: bool = False) -> int:
        sid = self.job_sid.get(jid)
        if sid is None or (whole and not isinstance(self.sig_list[sid], tuple)):
            job = self._req(jid)
            if whole or job.gpus_per_node != 1 or job.mode == "off":
                sig: Any = ("whole", job.gpus_per_node)
            else:
                sig = job_signature(job, self.scores, self.cfg)
            sid = self.sid_of.get(sig)
            if sid is None:
                sid = self.sid_of[sig] = len(self.sig_list)
                self.sig_list.append(sig)
                self.queues.append([])
                if not isinstance(sig, tuple):
                    self.sids_by_uid.setdefault(sig.uid, set()).add(sid)
            self.job_sid[jid] = sid
        return sid

    # ---- queues ----------------------------------------------------------------------
    def _enqueue(self, jid: int, whole: bool = False) -> None:
        sid = self._sid(jid, whole)
        q = self.queues[sid]
        item = (self.sim.runs[jid].job.arrival, jid)
        old = q[0] if q else None
        bisect.insort(q, item)
        if q[0] != old:
            if old is not None:
                self._drop_head(old)
            bisect.insort(self.heads, q[0])
            self.fresh.add(sid)

    def _drop_head(self, item: tuple[float, int]) -> None:
        i = bisect.bisect_left(self.heads, item)
        if i < len(self.heads) and self.heads[i] == item:
            del self.heads[i]

    def _pop(self, sid: int) -> None:
        q = self.queues[sid]
        self._drop_head(q.pop(0))
        if q:
            bisect.insort(self.heads, q[0])
            self.fresh.add(sid)

    # ---- engine events ---------------------------------------------------------------
    def arrive(self, sim: Sim, jid: int) -> None:
        if self.submit_time and not isinstance(self.sig_list[self._sid(jid)], tuple):
            if self._try(jid, hold_idle=False) == "started":
                return
            # held (the agent releases it onto any GPU that takes it), or a whole GPU
            self._enqueue(jid, whole=not self.hold)
            return
        self._enqueue(jid)

    def finished(self, sim: Sim, jid: int, gpus: list[int]) -> None:
        key = sim.runs[jid].job.key
        for i in gpus:
            g = self.view.gpus[i]
            if g.exclusive_job == jid:
                g.exclusive_job = None
                self.view.touch(g)
            else:
                self.view.remove_occupant(g, key)
            self._gpu_changed(i)

    def _gpu_changed(self, i: int) -> None:
        self.changed.add(i)
        if i in self.reserved and not self.sim.gpus[i].jobs:
            jid = self.reserved.pop(i)
            g = self.view.gpus[i]
            g.closed_for = None
            self.view.touch(g)
            if jid in self.held_since:  # a held job's turn first (cf. placement.held.place_held)
                self._drained_for[g.gres_type] = jid

    def probe(self, sim: Sim, jid: int, token: tuple[int, int]) -> None:
        if not self.learn:
            return
        members = sim.gpus[token[0]].jobs
        if len(members) < 2:
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
        )
        if not (v.undo and self.undo != "none"):
            self._pending_obs.update(v.observed)
            return
        key = runs[jid].job.key
        gpu = self.view.gpus[token[0]]
        for i in sim.evict(jid, keep_progress=self.undo == "checkpoint"):
            self.view.remove_occupant(self.view.gpus[i], key)
            self._gpu_changed(i)
        self.retractions += 1
        self._apply(v.observed)
        if self.undo == "checkpoint":
            self.arrive(sim, jid)
            return
        # placed again only where it keeps undone_floor, on a GPU of its shard type (as the
        # agent's re-aim, placement/held.py); its GPU then takes no new partner
        self.reqs[jid] = requeued(self._req(jid), gpu.gres_type, self.cfg)
        if self._try(jid, hold_idle=False) != "started":
            self._wait_for_type(jid, gpu.gres_type)

    def _wait_for_type(self, jid: int, gtype: str) -> None:
        self.reqs[jid] = replace(self._req(jid), gres_type=gtype)
        bisect.insort(self.held_q.setdefault(gtype, []), (self.sim.runs[jid].job.arrival, jid))
        self.held_since[jid] = self.sim.now

    def _held_pass(self, changed: set[int]) -> None:
        """Jobs of a fixed shard type try again, oldest first, when a GPU of their type
        changed. A waiting job was refused by every GPU of its type, so only a changed one
        can take it now (all of them after new scores). Equal signatures get equal
        decisions: once one is refused, the others are skipped for this pass (a start only
        adds to a GPU's set: never makes it accept what it refused).

        The simulator's own form of the agent's re-aim (placement/held.py): event-driven, by
        arrival within a type, and a GPU drained for a held job gives it the first turn
        (the agent keeps such a GPU closed to others until the job runs)."""
        if self._held_all:
            changed = set(range(len(self.view.gpus)))
            self._held_all = False
        by_type: dict[str, list[int]] = {}
        for p in sorted(changed):
            by_type.setdefault(self.view.gpus[p].gres_type, []).append(p)
        for gtype, near in sorted(by_type.items()):
            q = self.held_q.get(gtype)
            refused: set[Any] = set()
            first = self._drained_for.pop(gtype, None)
            items = sorted(q or (), key=lambda it: it[1] != first)  # its turn first (stable)
            for item in items:
                jid = item[1]
                sig = self._held_sig.get(jid)
                if sig is None:
                    sig = self._held_sig[jid] = job_signature(self._req(jid), self.scores, self.cfg)
                kind = (sig, self._req(jid).rate_floor)  # an undone job asks for more
                if kind in refused:
                    continue
                idx = index_for(self.view, self.scores, self.cfg)
                c = idx.cix.get(sig.cls)
                if c is not None and not any(
                    idx.outcome(c, sig.uid, sig.est, sig.aggressive, sig.explore, p) != "no"
                    for p in near
                ):
                    refused.add(kind)
                    continue
                if self._try(jid, False) == "started":
                    q.remove(item)  # type: ignore[union-attr]
                    del self._held_sig[jid]
                    del self.held_since[jid]
                else:
                    refused.add(kind)

    # ---- learning --------------------------------------------------------------------
    def _apply(self, obs: dict[tuple[str, str], PairScore]) -> None:
        if not obs:
            return
        self.scores = with_pairs(self.scores, obs)
        self._held_sig.clear()
        self._held_all = True
        # signatures carry the table's memory estimate: re-key the waiting jobs
        waiting = [item for q in self.queues for item in q]
        whole = {
            jid
            for sid, q in enumerate(self.queues)
            if isinstance(self.sig_list[sid], tuple)
            for _, jid in q
        }
        self._reset_queues()
        for _, jid in sorted(waiting):
            self._enqueue(jid, whole=jid in whole)

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

    def _try(self, jid: int, hold_idle: bool) -> str:
        """Place the job; "started", "refused" (no GPU takes it) or "held"."""
        sim = self.sim
        job = self._req(jid)
        d = place(job, self.view, self.scores, self.cfg)
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
        self.view.add_occupant(g, occupant_for(job, d, sim.now, pending=False))
        self.changed.add(pos)
        if d.explored:
            self.explored += 1
        if len(g.occupants) > 1 and self.learn and self.cfg.probe_s > 0:
            sim.schedule_probe(jid, self.cfg.probe_s)  # the agent's own setting
        return "started"

    # ---- the scheduling pass ---------------------------------------------------------
    def schedule(self, sim: Sim) -> None:
        if self.learn and self._pending_obs and sim.now - self._last_learn >= sim.cfg.relearn_s:
            obs, self._pending_obs = self._pending_obs, {}
            self._last_learn = sim.now
            self.relearns += 1
            self._apply(obs)
        while True:
            dirty, self.changed = self.changed, set()
            if (dirty or self._held_all) and any(self.held_q.values()):
                self._held_pass(dirty)
            if not self._pass(dirty):
                break
        self._reserve()

    def _free_idle(self) -> bool:
        return any(i not in self.reserved for i in self.sim.idle)

    def _pass(self, dirty: set[int]) -> int:
        """Start what can start. Phase 1: while there are idle GPUs, the oldest waiting jobs
        get them (or a partner). Phase 2: signatures that a changed busy GPU may now
        accept, oldest first. Refused signatures are not re-placed on the full view until
        something they could use has changed (equal signatures, equal decisions)."""
        idx = index_for(self.view, self.scores, self.cfg)
        owners: dict[int, list[int]] = {}
        for p in sorted(dirty):
            if idx.open[p] and idx.count[p] > 0:
                owners.setdefault(int(idx.owner[p]), []).append(p)
        mps = self.cfg.cross_user == "never"
        self._started = 0
        self._hold_idle = False
        if self._free_idle():
            for _, jid in list(self.heads):
                if self._hold_idle or not self._free_idle():
                    break
                self._serve(self.job_sid[jid], jid, owners, mps, idle_phase=True)
        cand = set(self.fresh)
        if mps:
            for u in owners:
                cand |= self.sids_by_uid.get(u, set())
        elif owners:
            cand |= self.sids_by_uid.get(None, set())
        heads = sorted(self.queues[sid][0] for sid in cand if self.queues[sid])
        for _, jid in heads:
            self._serve(self.job_sid[jid], jid, owners, mps, idle_phase=False)
        return self._started

    def _serve(
        self, sid: int, head: int, owners: dict[int, list[int]], mps: bool, idle_phase: bool
    ) -> None:
        q = self.queues[sid]
        if not q or q[0][1] != head:
            return
        sig = self.sig_list[sid]
        while q:
            jid = q[0][1]
            if isinstance(sig, tuple):
                if not idle_phase:
                    return
                free = None if self._hold_idle else self._idle_for(sig[1])
                if free is None:
                    self._hold_idle = True
                    return
                self._pop(sid)
                self._start_whole(jid, free)
                self._started += 1
                continue
            if sid not in self.fresh:
                # refused on the full view before: only GPUs changed since can help
                idx = index_for(self.view, self.scores, self.cfg)
                c = idx.cix.get(sig.cls)
                if idle_phase:
                    may = not self._hold_idle and any(
                        self.sim.gpus[i].jobs == [] and idx.free[i] >= sig.est
                        for i in self.sim.idle
                        if i not in self.reserved
                    )
                else:
                    near = (
                        owners.get(sig.uid, [])
                        if mps
                        else [p for ps in owners.values() for p in ps]
                    )
                    may = c is not None and any(
                        idx.outcome(c, sig.uid, sig.est, sig.aggressive, sig.explore, p) == "share"
                        for p in near
                    )
                if not may:
                    return
            res = self._try(jid, self._hold_idle)
            if res == "started":
                self._pop(sid)
                self._started += 1
                continue
            if res == "refused":
                self.fresh.discard(sid)
            return

    def _reserve(self) -> None:
        """Close the GPU(s) expected to drain first to new partners, for the oldest waiting
        job once it has waited ``placement.reserve_after_h`` (the agent's guard,
        :mod:`slurm_colo.placement.guard`; here a job's GPUs may be on any node)."""
        sim = self.sim
        if self.reserved:
            return
        after = self.cfg.reserve_after_h * 3600.0
        if after <= 0:
            return
        if not self.heads or sim.now - self.heads[0][0] < after:
            self._reserve_held(after)
            return
        jid = self.heads[0][1]
        d = drain_order(usable(self.view.gpus), self._drain_time)
        need = sim.runs[jid].job.gpus - len(d.idle)
        if need <= 0:
            return
        self._close([self._pos(g) for _, g in d.busy[:need]], jid)

    def _reserve_held(self, after: float) -> None:
        """The same guard for the requeued job held longest for its GPU type
        (:func:`~slurm_colo.placement.guard.held_drain`, as the agent's ``reserve_held``):
        the busy GPU of its type expected to drain first takes no new partner until it is
        idle; the held pass, oldest first, then offers it to that job."""
        oldest = min(((t, j) for j, t in self.held_since.items()), default=None)
        if oldest is None or self.sim.now - oldest[0] < after:
            return
        jid = oldest[1]
        d = held_drain(
            HeldWait(jid, self._req(jid).gres_type, oldest[0]), self.view, self._drain_time
        )
        if d.idle:
            return  # an idle GPU of its type: the held pass gives it one
        if d.busy:
            self._close([self._pos(d.busy[0][1])], jid)

    def _pos(self, g: GpuView) -> int:
        i = self.view.position(g.node, g.index)
        assert i is not None
        return i

    def _drain_time(self, g: GpuView) -> float:
        """When GPU ``g`` is expected to be idle (the simulator knows the true remaining work)."""
        runs = self.sim.runs
        return max(runs[j].remaining / runs[j].rate for j in self.sim.gpus[self._pos(g)].jobs)

    def _close(self, gpus: list[int], jid: int) -> None:
        """Close ``gpus`` to new partners until idle, for job ``jid`` (one reservation)."""
        for i in gpus:
            self.reserved[i] = jid
            v = self.view.gpus[i]
            v.closed_for = jid
            self.view.touch(v)
        self.reservations += 1
