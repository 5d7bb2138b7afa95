"""Typed Slurm records shared by both backends, and pure parsers of Slurm's GRES strings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_DETAIL_RE = re.compile(r"^(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?:(?P<count>\d+)\(IDX:(?P<idx>[^)]*)\)$")


@dataclass(frozen=True)
class GresAlloc:
    """One allocated GRES item on one node, e.g. ``shard:v100_s1:1(IDX:1)``."""

    name: str
    type: str
    count: int
    indices: tuple[int, ...]


def _indices(text: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part or part == "N/A":
            continue
        a, _, b = part.partition("-")
        if a.isdigit() and (not b or b.isdigit()):
            out.extend(range(int(a), int(b or a) + 1))
    return tuple(out)


def parse_gres_detail(items: list[str] | None) -> list[GresAlloc]:
    """Parse squeue's ``gres_detail`` list; unknown shapes are skipped, never fatal."""
    out: list[GresAlloc] = []
    for raw in items or []:
        for item in re.split(r",(?![^()]*\))", str(raw)):
            m = _DETAIL_RE.match(item.strip())
            if m:
                out.append(GresAlloc(m["name"], m["type"] or "", int(m["count"]), _indices(m["idx"])))
    return out


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

    @property
    def active(self) -> bool:
        return self.state in ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED")

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
        return not any(w in s for w in ("DOWN", "DRAIN", "FAIL", "INVAL", "NOT_RESPONDING", "UNKNOWN"))
