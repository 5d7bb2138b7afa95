"""The jobs waiting in the simulator's ``ours`` policies, grouped by what their placement
depends on (:func:`slurm_colo.placement.policy.job_signature`): jobs with equal signatures
get equal decisions from the same view, so only the oldest of each group (its *head*) needs
to be placed, and a group refused on the full view is tried again only when a GPU that could
take it changed. Pure bookkeeping."""

from __future__ import annotations

import bisect
from typing import Any


class Waiting:
    """Queues by signature number (sid), each sorted by arrival, and their heads."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.sid_of: dict[Any, int] = {}
        self.sig_list: list[Any] = []
        self.job_sid: dict[int, int] = {}
        self.queues: list[list[tuple[float, int]]] = []  # by sid, sorted by arrival
        self.sids_by_uid: dict[int | None, set[int]] = {}  # single-GPU signatures per user
        self.heads: list[tuple[float, int]] = []  # (arrival, jid) of each queue's head
        self.fresh: set[int] = set()  # sids whose head must be placed on the full view

    @staticmethod
    def whole(sig: Any) -> bool:
        """A signature of jobs that take whole GPUs (a tuple ``("whole", count)``)."""
        return isinstance(sig, tuple)

    def number(self, jid: int, sig: Any) -> int:
        """The sid of signature ``sig``, given to job ``jid``."""
        sid = self.sid_of.get(sig)
        if sid is None:
            sid = self.sid_of[sig] = len(self.sig_list)
            self.sig_list.append(sig)
            self.queues.append([])
            if not self.whole(sig):
                self.sids_by_uid.setdefault(sig.uid, set()).add(sid)
        self.job_sid[jid] = sid
        return sid

    def oldest(self) -> float | None:
        """When the job waiting longest arrived (None: nothing waits)."""
        return self.heads[0][0] if self.heads else None

    def enqueue(self, sid: int, arrival: float, jid: int) -> None:
        q = self.queues[sid]
        item = (arrival, jid)
        old = q[0] if q else None
        bisect.insort(q, item)
        if q[0] != old:
            if old is not None:
                self.drop_head(old)
            bisect.insort(self.heads, q[0])
            self.fresh.add(sid)

    def drop_head(self, item: tuple[float, int]) -> None:
        i = bisect.bisect_left(self.heads, item)
        if i < len(self.heads) and self.heads[i] == item:
            del self.heads[i]

    def pop(self, sid: int) -> None:
        """Remove the head of queue ``sid`` (it started)."""
        q = self.queues[sid]
        self.drop_head(q.pop(0))
        if q:
            bisect.insort(self.heads, q[0])
            self.fresh.add(sid)

    def jobs(self) -> list[tuple[float, int, bool]]:
        """Every waiting job: (arrival, job, whole-GPU signature), by arrival."""
        return sorted(
            (arrival, jid, self.whole(self.sig_list[sid]))
            for sid, q in enumerate(self.queues)
            for arrival, jid in q
        )
