"""Typed Slurm records shared by both backends, and pure parsers of Slurm's GRES strings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import SlurmError

# One item of a job's gres_detail, in the shapes Slurm prints (docs/slurm-versions.md):
#   gpu:v100_s0:1(IDX:0)   gpu:v100:2(IDX:2-3)   gpu:v100_s1:0(IDX:)   shard:1(IDX:1)  (22.05)
#   shard:1(0/4,1/4,0/0,0/0)  per GPU index, allocated/total, in index order        (24.11+)
#   nic(CNT:2)                a GRES without device files
_DETAIL_RE = re.compile(
    r"^(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?:(?P<count>\d+)\((?P<body>[^()]*)\)$"
)
_CNT_RE = re.compile(r"^(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?\(CNT:(?P<count>\d+)\)$")
_PER_INDEX_RE = re.compile(r"^(?:\d+|-)/\d+(?:,(?:\d+|-)/\d+)*$")


@dataclass(frozen=True)
class GresAlloc:
    """One allocated GRES item on one node, e.g. ``shard:v100_s1:1(IDX:1)``."""

    name: str
    type: str
    count: int
    indices: tuple[int, ...]


def parse_indices(text: str) -> tuple[int, ...]:
    """``0-1,3`` -> ``(0, 1, 3)`` (``N/A`` and empty parts: none); ValueError otherwise."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part or part == "N/A":
            continue
        a, _, b = part.partition("-")
        if not a.isdigit() or (b and not b.isdigit()):
            raise ValueError(part)
        out.extend(range(int(a), int(b or a) + 1))
    return tuple(out)


def _per_index(text: str) -> tuple[int, ...]:
    """``0/4,1/4,0/0`` -> the indices with something allocated: ``(1,)``. 26.05 prints an
    unused GPU's count as ``-`` in places (``-/4``)."""
    return tuple(
        i for i, part in enumerate(text.split(",")) if part.split("/")[0] not in ("-", "0")
    )


def parse_gres_item(item: str) -> GresAlloc:
    """One ``gres_detail`` item; a shape not listed above raises :class:`SlurmError`."""
    m = _DETAIL_RE.match(item)
    if m:
        body = m["body"]
        try:
            if body.startswith("IDX:"):
                return GresAlloc(
                    m["name"], m["type"] or "", int(m["count"]), parse_indices(body[4:])
                )
            if _PER_INDEX_RE.match(body):
                return GresAlloc(m["name"], m["type"] or "", int(m["count"]), _per_index(body))
        except ValueError:
            pass
    m = _CNT_RE.match(item)
    if m:
        return GresAlloc(m["name"], m["type"] or "", int(m["count"]), ())
    raise SlurmError(
        f"gres_detail item {item!r} is in a format slurm-colo does not know",
        hint="report it with your Slurm version (sinfo --version)",
    )


def parse_gres_detail(items: list[str] | None) -> list[GresAlloc]:
    """Parse squeue's ``gres_detail`` list (one string per node, items comma-separated).
    An item in an unknown format raises :class:`SlurmError`: a job on a GPU the agent
    cannot see must not be taken for a job on no GPU."""
    out: list[GresAlloc] = []
    for raw in items or []:
        if not isinstance(raw, str):
            raise SlurmError(f"gres_detail entry {raw!r} is not a string")
        for item in re.split(r",(?![^()]*\))", raw):
            if item.strip():
                out.append(parse_gres_item(item.strip()))
    return out


def scontrol_name(job_id: int, task: int | None = None) -> str:
    """A job as ``scontrol`` names it alone: ``123``, or ``123_7`` for task 7 of array 123."""
    return f"{job_id}_{task}" if task is not None else str(job_id)


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str
    user: str
    uid: int
    state: str  # PENDING, RUNNING, COMPLETING, ...
    nodes: str = ""
    node_count: int = 1
    gres: tuple[GresAlloc, ...] = ()
    tres_per_node: str = ""
    tres_per_job: str = ""
    comment: str = ""
    admin_comment: str = ""
    start_time: float = 0.0
    submit_time: float = 0.0
    #: running: start + time limit (Slurm's expected end); 0 when unknown
    end_time: float = 0.0
    #: why a pending job waits ("Resources", "Priority", "JobHeldUser", ...)
    state_reason: str = ""
    #: partition(s), comma-separated while pending
    partition: str = ""
    #: Slurm may requeue the job (batch job, not --no-requeue)
    requeue: bool = True
    #: the nodes the job must run on (``-w``) and may not run on (``-x``), host lists
    required_nodes: str = ""
    excluded_nodes: str = ""
    #: the record of a job array's tasks not started yet: their ids (``2-3,5``, Slurm's
    #: ``array_task_string``); "" for any other job, a task of its own included
    array_tasks: str = ""
    #: where this job's id is its array's own (Slurm's record of a job array, which runs or
    #: waits as one of its tasks): that task's id; None for any other job, a task split
    #: from its array included
    array_task: int | None = None
    #: what a pending job waits for before it may start at all, as Slurm lists it
    #: (``afterok:12(unfulfilled)``); "" once met (Slurm clears it) or when it has none
    dependency: str = ""
    #: when a pending job may start at the earliest (its ``--begin``); 0 when Slurm has not
    #: set it (no begin time, or a dependency not met yet)
    eligible_time: float = 0.0

    def waits_to_start(self, now: float) -> str:
        """What keeps this pending job from starting whatever GPU it had (its dependency,
        its begin time), in words; "" when nothing does."""
        if self.dependency:
            return f"its dependency ({self.dependency[:80]})"
        if self.eligible_time > now:
            return "its begin time"
        return ""

    @property
    def active(self) -> bool:
        return self.state in ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED")

    @property
    def record_task(self) -> int | None:
        """The task an array's record stands for once its other tasks are split off (none
        waits in it), else None. Slurm takes ``JobId=ARRAY`` for every task of the array (a
        requeue runs again those that ended; a node change is refused, "Job resizing not
        supported for job arrays"), so a change to that one task names it ``ARRAY_TASK``."""
        return None if self.array_tasks else self.array_task

    @property
    def scontrol_id(self) -> str:
        """The job as a change to it alone names it: ``123``, or ``123_7`` for an array's
        record standing for its last task (:attr:`record_task`)."""
        return scontrol_name(self.job_id, self.record_task)

    def gpus(self, name: str = "gpu") -> list[GresAlloc]:
        return [g for g in self.gres if g.name == name]


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str
    gres: str = ""
    gres_used: str = ""
    features: tuple[str, ...] = field(default_factory=tuple)
    partitions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def usable(self) -> bool:
        s = self.state.upper()
        return not any(
            w in s for w in ("DOWN", "DRAIN", "FAIL", "INVAL", "NOT_RESPONDING", "UNKNOWN")
        )
