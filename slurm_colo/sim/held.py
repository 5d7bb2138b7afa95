"""Jobs requeued by an undo, inside the simulator: the agent's re-aim
(:mod:`slurm_colo.placement.held`) made event-driven.

A requeued job keeps its shard type (Slurm 22.05 cannot change the GRES of a pending job
that has one), or, from Slurm 23.11 (``retype_after_undo``), is held for any shared GPU
(``*``), and asks for :func:`~slurm_colo.placement.held.requeued`'s rate floor. As in
the agent, held jobs are aimed oldest held first (:func:`~slurm_colo.placement.held.
oldest_first`), each with :func:`~slurm_colo.placement.held.place_held`, so a GPU the
starvation guard drained for one of them is open to it and to it only, until it runs.

One difference, for speed: a held job is tried only when a GPU of its type changed (it was
refused by every other one), and once a job is refused, held jobs of equal signature and
floor are skipped in the same pass (a start only adds to a GPU's set: it never makes the
GPU accept what it refused).
"""

from __future__ import annotations

from typing import Any

from ..config import PlacementConfig
from ..contracts.placement import ANY_SHARED
from ..placement import ClusterView, Decision, JobRequest
from ..placement.guard import Reservation
from ..placement.held import HeldJob, oldest_first, place_held
from ..placement.policy import index_for, job_signature
from ..scores import ScoreTable
from .engine import Sim


class HeldJobs:
    """Mixed into :class:`~.ours.PolicyScheduler`: the attributes below are its."""

    sim: Sim
    view: ClusterView
    scores: ScoreTable
    cfg: PlacementConfig
    reserved: dict[int, int]
    #: requeued jobs waiting for a GPU of their fixed shard type, by type (``*``: any)
    held: dict[str, dict[int, HeldJob]]
    #: when each was requeued (the guard serves the one held longest)
    held_since: dict[int, float]
    #: their signatures (cleared with new scores)
    _held_sig: dict[int, Any]
    #: the scores changed: every GPU may accept them now
    _held_all: bool

    def _req(self, jid: int) -> JobRequest:
        raise NotImplementedError

    def _start(self, jid: int, d: Decision, hold_idle: bool) -> str:
        raise NotImplementedError

    def _open(self, jid: int) -> None:
        raise NotImplementedError

    def _behind(self, since: float) -> bool:
        raise NotImplementedError

    def _count_queue(self) -> None:
        raise NotImplementedError

    def _wait_for_type(self, jid: int, gtype: str) -> None:
        """Hold requeued job ``jid`` for a GPU of shard type ``gtype``."""
        req = self._req(jid)
        self.held.setdefault(gtype, {})[jid] = HeldJob(
            jid, req.key, req, self.sim.now, "harmful after its probe"
        )
        self.held_since[jid] = self.sim.now

    def _reservation(self, jid: int) -> Reservation | None:
        """The GPU(s) the starvation guard closed for held job ``jid``, as the agent's
        :class:`~slurm_colo.placement.guard.Reservation`."""
        gpus = [self.view.gpus[i] for i, j in self.reserved.items() if j == jid]
        if not gpus:
            return None
        g = gpus[0]
        return Reservation(jid, g.node, (g.index,), self.held_since[jid], 0.0, g.gres_type)

    def _held_pass(self, changed: set[int]) -> None:
        """Held jobs of a type with a changed GPU try again, oldest held first."""
        self._count_queue()
        if self._held_all:
            changed = set(range(len(self.view.gpus)))
            self._held_all = False
        by_type: dict[str, list[int]] = {}
        for p in sorted(changed):
            by_type.setdefault(self.view.gpus[p].gres_type, []).append(p)
        if changed and self.held.get(ANY_SHARED):
            by_type[ANY_SHARED] = sorted(changed)  # held for any shared GPU
        for gtype, near in sorted(by_type.items()):
            waiting = self.held.get(gtype)
            if not waiting:
                continue
            refused: set[Any] = set()
            for h in oldest_first(list(waiting.values())):
                jid = h.job_id
                r = self._reservation(jid)
                if r is None and self._behind(h.since, gtype):
                    break  # the rest were requeued later still
                sig = self._held_sig.get(jid)
                if sig is None:
                    sig = self._held_sig[jid] = job_signature(h.request, self.scores, self.cfg)
                kind = (sig, h.request.rate_floor)  # an undone job asks for more
                if r is None and kind in refused:
                    continue
                idx = index_for(self.view, self.scores, self.cfg)
                c = idx.cix.get(sig.cls)
                if (
                    r is None
                    and c is not None
                    and not any(
                        idx.outcome(c, sig.uid, sig.est, sig.aggressive, sig.explore, p) != "no"
                        for p in near
                    )
                ):
                    refused.add(kind)
                    continue
                d = place_held(h, self.view, self.scores, self.cfg, r)
                if self._start(jid, d, False) == "started":
                    del waiting[jid]
                    del self._held_sig[jid]
                    del self.held_since[jid]
                    self._open(jid)
                else:
                    refused.add(kind)
