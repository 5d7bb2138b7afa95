"""The starvation guard inside the simulator (the part of :class:`~.ours.PolicyScheduler`
that closes shared GPUs for a job that has waited too long).

Once the oldest waiting job has waited ``placement.reserve_after_h``, the busy shared GPU(s)
expected to drain first are closed to new partners until they are idle (like a Slurm
backfill reservation); failing such a job, the same holds for the requeued job held longest
for its GPU type, with a GPU of that type, which then stays closed to every other job until
that job runs (:mod:`.held`). The GPUs are chosen by the agent's own
:func:`~slurm_colo.placement.guard.drain_order` and
:func:`~slurm_colo.placement.guard.held_drain`; the drain times are the simulator's (it
knows each job's true remaining work).
"""

from __future__ import annotations

from ..config import PlacementConfig
from ..contracts.placement import ANY_SHARED
from ..placement import ClusterView, GpuView
from ..placement.guard import HeldWait, drain_order, held_drain, usable
from ..placement.held import waits_behind
from .engine import Sim
from .waiting import Waiting


class StarvationGuard:
    """Mixed into :class:`~.ours.PolicyScheduler`: the attributes below are its."""

    sim: Sim
    view: ClusterView
    waiting: Waiting
    #: GPU -> the job it is closed for
    reserved: dict[int, int]
    #: held jobs -> when they were requeued
    held_since: dict[int, float]
    reservations: int
    cfg: PlacementConfig

    def _reserve(self, after_h: float) -> None:
        """Close the GPU(s) expected to drain first to new partners, for the oldest waiting
        job once it has waited ``after_h`` (here a job's GPUs may be on any node)."""
        sim = self.sim
        if self.reserved:
            return
        after = after_h * 3600.0
        if after <= 0:
            return
        heads = self.waiting.heads
        if not heads or sim.now - heads[0][0] < after:
            self._reserve_held(after)
            return
        jid = heads[0][1]
        d = drain_order(usable(self.view.gpus), self._drain_time)
        need = self._gpus_of(jid) - len(d.idle)
        if need <= 0:
            return
        self._close([self._pos(g) for _, g in d.busy[:need]], jid)

    def _reserve_held(self, after: float) -> None:
        """The same guard for the requeued job held longest for its GPU type (as the agent's
        ``reserve_held``): the busy GPU of its type expected to drain first takes no new
        partner; once idle it is open to that job only (:mod:`.held`)."""
        oldest = min(((t, j) for j, t in self.held_since.items()), default=None)
        if oldest is None or self.sim.now - oldest[0] < after:
            return
        jid = oldest[1]
        d = held_drain(
            HeldWait(jid, self._gres_type_of(jid), oldest[0]), self.view, self._drain_time
        )
        if d.idle:
            return  # an idle GPU of its type: the held pass gives it one
        if d.busy:
            self._close([self._pos(d.busy[0][1])], jid)

    def _behind(self, since: float, gres_type: str | None = None) -> bool:
        """A job waiting since ``since`` waits its turn behind the job waiting longest
        (:func:`~slurm_colo.placement.held.waits_behind`; every simulated GPU may take every
        job, so that one is always a job a GPU could take, as the agent requires). A job
        held for GPUs of one shard type (``gres_type``) waits only behind jobs that may take
        such a GPU: those held for the same type or for any shared GPU, and the waiting
        jobs."""
        held = (
            self.held_since.values()
            if gres_type is None
            else (self.held_since[j] for t in {gres_type, ANY_SHARED} for j in self.held.get(t, {}))
        )
        oldest = min(held, default=None)
        queue = self.waiting.oldest()
        if queue is not None and (oldest is None or queue < oldest):
            oldest = queue
        return waits_behind(since, oldest, self.sim.now, self.cfg)

    def _behind_queue(self, since: float) -> bool:
        """Whether a job waiting since ``since`` waits its turn behind the oldest job of the
        waiting queue alone: that one may take any GPU, so it is behind it whatever GPU it
        would take (:meth:`_behind` is then true for every shard type)."""
        return waits_behind(since, self.waiting.oldest(), self.sim.now, self.cfg)

    def _gres_type_of(self, jid: int) -> str:
        raise NotImplementedError

    def _gpus_of(self, jid: int) -> int:
        raise NotImplementedError

    def _pos(self, g: GpuView) -> int:
        i = self.view.position(g.node, g.index)
        assert i is not None
        return i

    def _drain_time(self, g: GpuView) -> float:
        """When GPU ``g`` is expected to be idle (the simulator knows the true remaining work)."""
        runs = self.sim.runs
        return max(runs[j].remaining / runs[j].rate for j in self.sim.gpus[self._pos(g)].jobs)

    def _close(self, gpus: list[int], jid: int) -> None:
        """Close ``gpus`` to new partners for job ``jid`` (one reservation)."""
        for i in gpus:
            self.reserved[i] = jid
            v = self.view.gpus[i]
            v.closed_for = jid
            self.view.touch(v)
        self.reservations += 1

    def _open(self, jid: int) -> None:
        """End the reservation of job ``jid`` (it started)."""
        for i in [i for i, j in self.reserved.items() if j == jid]:
            del self.reserved[i]
            v = self.view.gpus[i]
            v.closed_for = None
            self.view.touch(v)
