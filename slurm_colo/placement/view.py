"""The data placement works on: a job asking for a GPU, and the cluster's shared GPUs.

:class:`ClusterView` also carries the policy's per-GPU cache (placement/index.py). Change
occupants through :meth:`ClusterView.add_occupant` / :meth:`ClusterView.remove_occupant`,
or call :meth:`ClusterView.touch` after editing a :class:`GpuView` by hand
(:meth:`ClusterView.invalidate` after editing many) so the cache stays right. A view built
afresh needs nothing: the cache is built on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurm_colo.contracts.enums import Mechanism, Mode
from slurm_colo.contracts.placement import Placement


@dataclass(frozen=True)
class JobRequest:
    """A job being placed. ``key`` is the Slurm job id or, at submit time, a token."""

    key: str
    user: str
    uid: int
    cls: str
    mode: str = "auto"
    gpus_per_node: int = 1
    nodes: int = 1
    memory_gib: float | None = None
    partition: str = ""
    #: a job whose shard type is fixed already (a requeued job: Slurm 22.05 cannot change a
    #: pending job's GRES) may only go to GPUs of this GRES type; "" = any shared GPU
    gres_type: str = ""
    #: the lowest normalised throughput this job accepts next to others (0: only the
    #: policy's max_slowdown rule); a job requeued by an undo asks for more
    #: (:func:`slurm_colo.placement.retract.undone_floor`)
    rate_floor: float = 0.0

    @property
    def takes_no_partner(self) -> bool:
        """Once placed, no new job may join this one's GPU: its own rate floor holds only
        if its set does not grow."""
        return self.rate_floor > 0


@dataclass
class Occupant:
    """A job running on, or already placed on (``pending``), a shared GPU."""

    key: str
    user: str
    uid: int
    cls: str
    memory_gib: float
    thread_pct: int = 100
    mem_limit_gib: float = 0.0
    pending: bool = False
    job_id: int | None = None
    since: float = 0.0
    #: no new job may join this one's GPU while it runs (a job requeued by an undo: it has
    #: no slowdown to spare)
    no_partners: bool = False


@dataclass
class GpuView:
    node: str
    index: int
    gres_type: str
    memory_gib: float
    slots: int
    model: str = ""
    occupants: list[Occupant] = field(default_factory=list)
    #: an exclusive (gres:gpu) job holding this GPU, if any
    exclusive_job: int | None = None
    #: node usable (not down/drained)
    available: bool = True
    #: draining for this waiting whole-GPU job: no new partners (see placement/guard.py)
    closed_for: int | None = None

    @property
    def name(self) -> str:
        return f"{self.node}:{self.index}"

    @property
    def free_slots(self) -> int:
        return self.slots - len(self.occupants)

    def users(self) -> set[int]:
        return {o.uid for o in self.occupants}

    def used_memory_gib(self) -> float:
        return sum(o.mem_limit_gib or o.memory_gib for o in self.occupants)

    def open(self) -> bool:
        """Could take another shared job (ignoring memory and compatibility)."""
        return (
            self.available
            and self.closed_for is None
            and self.exclusive_job is None
            and self.free_slots > 0
            and not any(o.no_partners for o in self.occupants)
        )

    def state_key(self) -> tuple[Any, ...]:
        """What the policy looks at on this GPU; equal keys are interchangeable."""
        return (
            tuple(sorted(o.cls for o in self.occupants)),
            frozenset(o.uid for o in self.occupants),
            round(self.used_memory_gib(), 3),
            self.memory_gib,
        )


@dataclass
class ClusterView:
    gpus: list[GpuView] = field(default_factory=list)
    #: jobs waiting for a GPU (pending or held) per shared GPU of the site, as last counted;
    #: None: not known. The policy's throughput path is open only with a queue
    #: (``placement.throughput_queue``); a view of part of the site keeps the site's figure
    queue_per_gpu: float | None = None
    #: hours until no job waits if the queue keeps shrinking as it has lately
    #: (:class:`~slurm_colo.placement.trend.QueueTrend`); None: not shrinking, or not known
    #: (``placement.throughput_drain_h``); a view of part of the site keeps the site's figure
    queue_drain_h: float | None = None

    def part(self, gpus: list[GpuView]) -> ClusterView:
        """A view of some of this view's GPUs, with the site's queue figures."""
        out = ClusterView(gpus=gpus)
        out.queue_from(self)
        return out

    def queue_from(self, site: ClusterView) -> None:
        """Take ``site``'s queue figures: a view of part of the site judges by the site's
        queue, not the part's."""
        self.queue_per_gpu = site.queue_per_gpu
        self.queue_drain_h = site.queue_drain_h

    def __post_init__(self) -> None:
        self._pos: dict[tuple[str, int], int] | None = None
        self._by_type: tuple[int, dict[str, list[int]]] | None = None
        #: state the policy caches on the view (see placement/index.py); None = rebuild
        self.policy_state: Any = None
        #: positions of GPUs changed since the policy last looked
        self.dirty: set[int] = set()
        #: bumped on every change made through this view (add/remove/touch/invalidate), so
        #: a caller can tell whether an answer computed on it still holds
        self.version = 0

    def position(self, node: str, index: int) -> int | None:
        """Position of a GPU in ``gpus``."""
        if self._pos is None or len(self._pos) != len(self.gpus):
            self._pos = {(g.node, g.index): i for i, g in enumerate(self.gpus)}
        i = self._pos.get((node, index))
        if (
            i is not None
            and i < len(self.gpus)
            and self.gpus[i].node == node
            and self.gpus[i].index == index
        ):
            return i
        self._pos = None
        for k, g in enumerate(self.gpus):
            if g.node == node and g.index == index:
                return k
        return None

    def touch(self, gpu: GpuView) -> None:
        """Tell the policy's cache that ``gpu`` (one of ``self.gpus``) was changed by hand."""
        self.version += 1
        if self.policy_state is None:
            return
        i = self.position(gpu.node, gpu.index)
        if i is None:
            self.invalidate()
        else:
            self.dirty.add(i)

    def invalidate(self) -> None:
        """Forget cached policy state (after editing many GPUs by hand)."""
        self.version += 1
        self.policy_state = None
        self.dirty.clear()

    def add_occupant(self, gpu: GpuView, occ: Occupant) -> None:
        gpu.occupants.append(occ)
        self.touch(gpu)

    def remove_occupant(self, gpu: GpuView, key: str) -> Occupant | None:
        for k, o in enumerate(gpu.occupants):
            if o.key == key:
                del gpu.occupants[k]
                self.touch(gpu)
                return o
        return None

    def positions_of_type(self, gres_type: str) -> list[int]:
        """Positions of the GPUs whose shard GRES type is ``gres_type``."""
        if self._by_type is None or self._by_type[0] != len(self.gpus):
            by: dict[str, list[int]] = {}
            for i, g in enumerate(self.gpus):
                by.setdefault(g.gres_type, []).append(i)
            self._by_type = (len(self.gpus), by)
        return self._by_type[1].get(gres_type, [])

    def find(self, node: str, index: int) -> GpuView | None:
        i = self.position(node, index)
        return self.gpus[i] if i is not None else None


@dataclass(frozen=True)
class Decision:
    """What to do with a job.

    ``action``: ``share`` (aim the job at ``node``:``index`` through its shard type) or
    ``exclusive`` (leave the job's GPU request as submitted: it waits for a GPU of its own).
    ``explored``: the GPU's set includes a pair the model has never seen measured, tried
    on purpose (bounded by ``placement.explore_rate``) so history learns about it.
    """

    action: str
    reason: str
    node: str | None = None
    index: int | None = None
    gres_type: str | None = None
    mechanism: Mechanism | None = None
    thread_pct: int | None = None
    mem_limit_gib: float | None = None
    predicted_delta: float | None = None
    predicted_sd: float | None = None
    partners: tuple[str, ...] = ()
    memory_gib: float | None = None
    explored: bool = False
    #: predicted normalised throughput of this job in the set (1.0 alone)
    predicted_rate: float | None = None
    #: the policy's throughput path was open when the job was placed: its set is judged by
    #: the rule it was placed under (:func:`~slurm_colo.placement.retract.judge`)
    throughput_open: bool = True

    @property
    def shared(self) -> bool:
        return self.action == "share"

    def placement(
        self,
        token: str,
        cls: str,
        mode: str,
        *,
        undone: bool = False,
        held: str | None = None,
        model: str = "",
    ) -> Placement:
        """The decision as it travels (tag, JOBSTART reply, record)."""
        p = Placement(token, cls, Mode(mode), undone=undone, held=held, model=model)
        if not self.shared:
            return p
        return Placement(
            token,
            cls,
            Mode(mode),
            Mechanism(self.mechanism or Mechanism.SHARD),
            self.node,
            self.index,
            self.thread_pct,
            self.mem_limit_gib,
            self.memory_gib,
            self.predicted_delta,
            undone,
            held,
            model,
        )

    @classmethod
    def from_placement(cls, p: Placement, reason: str) -> Decision:
        """A shared placement read back (from a job's tag after an agent restart)."""
        return cls(
            "share",
            reason,
            node=p.node,
            index=p.gpu,
            mechanism=p.mechanism,
            thread_pct=p.thread_pct,
            mem_limit_gib=p.mem_limit_gib,
            predicted_delta=p.predicted_delta,
            memory_gib=p.memory_gib,
        )
