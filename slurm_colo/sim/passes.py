"""The simulator's scheduling pass for :class:`~.ours.PolicyScheduler` (the part that
decides which waiting jobs to place again after GPUs changed).

Phase 1: while there are idle GPUs, the oldest waiting jobs get them (or a partner). Phase
2: signatures that a changed busy GPU may now accept, oldest first. Jobs with equal
signatures get equal decisions (:mod:`.waiting`), so a refused signature is not placed
again on the full view until something it could use has changed. A job newer than the one
waiting longest by more than ``placement.bypass_h`` waits its turn (:mod:`.drain`).
"""

from __future__ import annotations

from ..config import PlacementConfig
from ..placement import ClusterView
from ..placement.policy import index_for
from ..scores import ScoreTable
from .engine import Sim
from .waiting import Waiting


class SchedulingPass:
    """Mixed into :class:`~.ours.PolicyScheduler`: the attributes below are its."""

    sim: Sim
    view: ClusterView
    scores: ScoreTable
    cfg: PlacementConfig
    waiting: Waiting
    reserved: dict[int, int]
    _started: int
    _hold_idle: bool

    def _behind(self, since: float, gres_type: str | None = None) -> bool:
        raise NotImplementedError

    def _behind_queue(self, since: float) -> bool:
        raise NotImplementedError

    def _idle_for(self, k: int) -> list[int] | None:
        raise NotImplementedError

    def _start_whole(self, jid: int, gpus: list[int]) -> None:
        raise NotImplementedError

    def _try_in_turn(self, jid: int, hold_idle: bool, since: float | None) -> str:
        raise NotImplementedError

    def _count_queue(self) -> None:
        raise NotImplementedError

    def _free_idle(self) -> bool:
        return any(i not in self.reserved for i in self.sim.idle)

    def _pass(self, dirty: set[int]) -> int:
        """Start what can start. Phase 1: while there are idle GPUs, the oldest waiting jobs
        get them (or a partner). Phase 2: signatures that a changed busy GPU may now
        accept, oldest first. Refused signatures are not re-placed on the full view until
        something they could use has changed (equal signatures, equal decisions)."""
        self._count_queue()
        idx = index_for(self.view, self.scores, self.cfg)
        owners: dict[int, list[int]] = {}
        for p in sorted(dirty):
            if idx.open[p] and idx.count[p] > 0:
                owners.setdefault(int(idx.owner[p]), []).append(p)
        mps = self.cfg.cross_user == "never"
        self._started = 0
        self._hold_idle = False
        if self._free_idle():
            for _, jid in list(self.waiting.heads):
                if self._hold_idle or not self._free_idle():
                    break
                self._serve(self.waiting.job_sid[jid], jid, owners, mps, idle_phase=True)
        cand = set(self.waiting.fresh)
        if mps:
            for u in owners:
                cand |= self.waiting.sids_by_uid.get(u, set())
        elif owners:
            cand |= self.waiting.sids_by_uid.get(None, set())
        heads = sorted(self.waiting.queues[sid][0] for sid in cand if self.waiting.queues[sid])
        for _, jid in heads:
            self._serve(self.waiting.job_sid[jid], jid, owners, mps, idle_phase=False)
        return self._started

    def _serve(
        self, sid: int, head: int, owners: dict[int, list[int]], mps: bool, idle_phase: bool
    ) -> None:
        q = self.waiting.queues[sid]
        if not q or q[0][1] != head:
            return
        sig = self.waiting.sig_list[sid]
        while q:
            jid, since = q[0][1], q[0][0]
            if self.waiting.whole(sig):
                if self._behind(since):
                    return  # its turn comes after the job waiting longest
                if not idle_phase:
                    return
                free = None if self._hold_idle else self._idle_for(sig[1])
                if free is None:
                    self._hold_idle = True
                    return
                self.waiting.pop(sid)
                self._start_whole(jid, free)
                self._started += 1
                continue
            if self._behind_queue(since):
                return  # behind the job waiting longest, whatever GPU it would take
            if sid not in self.waiting.fresh:
                # refused on the full view before: only GPUs changed since can help
                idx = index_for(self.view, self.scores, self.cfg)
                c = idx.cix.get(sig.cls)
                if idle_phase:
                    may = not self._hold_idle and any(
                        self.sim.gpus[i].jobs == [] and idx.fits(i, sig.est)
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
            res = self._try_in_turn(jid, self._hold_idle, since)  # turn checked above
            if res == "started":
                self.waiting.pop(sid)
                self._started += 1
                continue
            if res == "refused":
                self.waiting.fresh.discard(sid)
            return
