"""The data placement works on: a job asking for a GPU, and the cluster's shared GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field


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


@dataclass
class ClusterView:
    gpus: list[GpuView] = field(default_factory=list)

    def find(self, node: str, index: int) -> GpuView | None:
        for g in self.gpus:
            if g.node == node and g.index == index:
                return g
        return None


@dataclass(frozen=True)
class Decision:
    """What to do with a job.

    ``action``: ``share`` (aim the job at ``node``:``index`` through its shard type) or
    ``exclusive`` (leave the job's GPU request as submitted).
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

    @property
    def shared(self) -> bool:
        return self.action == "share"
