"""The data placement works on: a job asking for a GPU, and the cluster's shared GPUs.

:class:`ClusterView` keeps a lazily built index of the GPUs that can take another job,
grouped by their *state* (occupant classes, users, memory in use). GPUs in the same state
are interchangeable for the policy, so a placement evaluates each state once instead of
every GPU. Change occupants through :meth:`ClusterView.add_occupant` /
:meth:`ClusterView.remove_occupant` (or call :meth:`ClusterView.touch` after editing a
:class:`GpuView` by hand) so the index stays right.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
        return self.available and self.exclusive_job is None and self.free_slots > 0

    def state_key(self) -> tuple[Any, ...]:
        """What the policy looks at on this GPU; equal keys are interchangeable."""
        return (
            tuple(sorted(o.cls for o in self.occupants)),
            frozenset(o.uid for o in self.occupants),
            round(self.used_memory_gib(), 3),
            self.memory_gib,
        )


def _owner(key: tuple[Any, ...]) -> int | None:
    """The single user of a state key, None for an idle GPU, -1 for mixed users."""
    uids = key[1]
    if not uids:
        return None
    if len(uids) == 1:
        return next(iter(uids))
    return -1


class _Index:
    """Open GPUs bucketed by state key; positions are indices into ``ClusterView.gpus``."""

    def __init__(self, gpus: list[GpuView]) -> None:
        self.n = len(gpus)
        self.key_of: dict[int, tuple[Any, ...]] = {}
        self.buckets: dict[tuple[Any, ...], set[int]] = {}
        #: uid -> state keys of open GPUs whose occupants are all that user (None: idle GPUs)
        self.by_uid: dict[int | None, set[tuple[Any, ...]]] = {}
        self.pos: dict[tuple[str, int], int] = {}
        for i, g in enumerate(gpus):
            self.pos[(g.node, g.index)] = i
            self.update(i, g)
        #: evaluation cache, owned by the policy; reset when scores or config change
        self.cache: dict[Any, Any] = {}
        self.cache_owner: tuple[Any, Any] | None = None

    def _drop(self, i: int) -> None:
        key = self.key_of.pop(i, None)
        if key is None:
            return
        b = self.buckets[key]
        b.discard(i)
        if not b:
            del self.buckets[key]
            s = self.by_uid.get(_owner(key))
            if s is not None:
                s.discard(key)

    def update(self, i: int, g: GpuView) -> None:
        self._drop(i)
        if not g.open():
            return
        key = g.state_key()
        self.key_of[i] = key
        b = self.buckets.get(key)
        if b is None:
            self.buckets[key] = b = set()
            owner = _owner(key)
            if owner != -1:
                self.by_uid.setdefault(owner, set()).add(key)
        b.add(i)


@dataclass
class ClusterView:
    gpus: list[GpuView] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._index: _Index | None = None

    # ---- index -----------------------------------------------------------------------
    def index(self) -> _Index:
        """The open-GPU index (built on first use, rebuilt if GPUs were added/removed)."""
        if self._index is None or self._index.n != len(self.gpus):
            self._index = _Index(self.gpus)
        return self._index

    def touch(self, gpu: GpuView) -> None:
        """Tell the index that ``gpu`` (one of ``self.gpus``) was changed by hand."""
        if self._index is None:
            return
        i = self._index.pos.get((gpu.node, gpu.index))
        if i is None:
            self._index = None
        else:
            self._index.update(i, gpu)

    def invalidate(self) -> None:
        """Forget the index (after editing many GPUs by hand)."""
        self._index = None

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

    def find(self, node: str, index: int) -> GpuView | None:
        i = self.index().pos.get((node, index))
        if i is not None and i < len(self.gpus):
            g = self.gpus[i]
            if g.node == node and g.index == index:
                return g
        for g in self.gpus:
            if g.node == node and g.index == index:
                return g
        return None


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
    mechanism: str | None = None  # "mps" or "shard" (time-sliced, no MPS)
    thread_pct: int | None = None
    mem_limit_gib: float | None = None
    predicted_delta: float | None = None
    predicted_sd: float | None = None
    partners: tuple[str, ...] = ()
    memory_gib: float | None = None
    explored: bool = False
    #: predicted normalised throughput of this job in the set (1.0 alone)
    predicted_rate: float | None = None

    @property
    def shared(self) -> bool:
        return self.action == "share"
