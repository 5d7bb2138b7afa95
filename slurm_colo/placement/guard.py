"""Starvation guard: shared GPUs are drained for a job that has waited too long for them.

A job that asks for whole GPUs (``--gres=gpu:N``, untyped, on one node) can wait a long
time when every GPU it could use is shared and new ``--colocate`` jobs keep joining the
busy ones. Once such a job has waited ``placement.reserve_after_h``, the agent closes the
shared GPU(s) expected to drain first to new partners -- like a backfill reservation --
until the job has started: one job at a time, the oldest that draining can help. The
simulator's ``ours`` policies do the same.

A held job (``placement.unplaced = "hold"``: any shared GPU; or requeued by an undo: a GPU
of its shard type; see placement/held.py) could wait as long when no GPU it may use ever
accepts it. When no whole-GPU job needs the guard, the job held longest gets it once it has
waited ``reserve_after_h``: the busy GPU it may use expected to drain first takes no new
partner, and once it is idle the re-aim gives it to that job first.

Pure: works on the agent's Slurm snapshot and view (:mod:`slurm_colo.agent.occupancy`
plans it afresh at every refresh). The simulator's ``ours`` policies choose their GPUs with
the same :func:`drain_order` and :func:`held_drain`, with their own drain times (the
simulator knows each job's true remaining work).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from slurm_colo.contracts.placement import ANY_SHARED, held_for_text
from slurm_colo.gres_layout import tres_items
from slurm_colo.placement import ClusterView, GpuView
from slurm_colo.slurm.model import SlurmJob

#: pending reasons that mean "waiting for resources" (not held, not a dependency, not a
#: begin time): only such a job can be helped by draining GPUs
WAITING_REASONS = frozenset({"Resources", "Priority"})
#: drain time assumed for a GPU whose occupants' end is unknown (a placement not started)
UNKNOWN_END = float("inf")


@dataclass(frozen=True)
class Reservation:
    """Shared GPUs closed to new partners until ``job_id`` starts."""

    job_id: int
    node: str
    gpus: tuple[int, ...]
    waiting_since: float
    #: when the last of the closed GPUs is expected to be free (from the occupants' end times)
    drained_by: float
    #: for a held job (placement/held.py): the shard type it waits for, ``*`` for any shared
    #: GPU; "" for whole GPUs
    gres_type: str = ""

    def waits_for(self) -> str:
        return held_for_text(self.gres_type) if self.gres_type else "whole GPUs"


def whole_gpu_count(job: SlurmJob) -> int | None:
    """GPUs per node an untyped whole-GPU request asks for, else None.

    Typed requests (``gpu:a100:1``) cannot use a shared GPU, whose GRES type is its own;
    requests with shards or MPS are shared jobs themselves.
    """
    count = None
    for field in (job.tres_per_node, job.tres_per_job):
        for parts in tres_items(field):
            if parts[0] in ("shard", "mps"):
                return None
            if parts[0] != "gpu":
                continue
            if len(parts) != 2 or not parts[1].isdigit() or count is not None:
                return None  # typed, malformed, or asked for twice
            count = int(parts[1])
    return count if count else None


def starving_jobs(jobs: Iterable[SlurmJob], now: float, after_s: float) -> list[SlurmJob]:
    """Single-node jobs waiting at least ``after_s`` for whole GPUs, oldest first."""
    if after_s <= 0:
        return []
    waiting = [
        j
        for j in jobs
        if j.state == "PENDING"
        and j.state_reason in WAITING_REASONS
        and j.node_count <= 1
        and j.submit_time > 0
        and now - j.submit_time >= after_s
        and whole_gpu_count(j) is not None
    ]
    return sorted(waiting, key=lambda j: (j.submit_time, j.job_id))


def reserve(
    jobs: Iterable[SlurmJob],
    view: ClusterView,
    now: float,
    after_s: float,
    partitions: Mapping[str, tuple[str, ...]],
    skip: Collection[int] = (),
    tries: int = 20,
) -> Reservation | None:
    """The reservation for the oldest starving job that draining shared GPUs can help (the
    first ``tries`` of them are looked at; jobs in ``skip`` are passed over)."""
    jobs = list(jobs)
    ends = end_times(jobs)
    for job in [j for j in starving_jobs(jobs, now, after_s) if j.job_id not in skip][:tries]:
        r = plan(job, view, ends, partitions)
        if r is not None:
            return r
    return None


def end_times(jobs: Iterable[SlurmJob]) -> dict[int, float]:
    """Running jobs' expected ends (start + time limit, from Slurm)."""
    return {j.job_id: j.end_time for j in jobs if j.active}


class HeldWait(NamedTuple):
    """A held job as the starvation guard sees it."""

    job_id: int
    #: the shard type it waits for, or ``*`` for any shared GPU
    gres_type: str
    since: float
    #: the GPU model it asked for ("" any)
    model: str = ""
    #: the partitions it may run in, comma-separated ("" any)
    partition: str = ""


def reserve_held(
    held: Iterable[HeldWait],
    view: ClusterView,
    now: float,
    after_s: float,
    ends: Mapping[int, float],
    skip: Collection[int] = (),
    partitions: Mapping[str, tuple[str, ...]] | None = None,
) -> Reservation | None:
    """The same guard for held jobs: for the one held longest, once it has waited
    ``after_s``, the busy GPU it may use (its type or any shared one, its model, a node of
    its partitions; ``partitions`` maps node names to theirs) expected to drain first. None
    when an idle one is there (the re-aim gives it that) or none can be drained."""
    if after_s <= 0:
        return None
    drain_time = by_end_times(ends)
    for h in sorted(held, key=lambda h: (h.since, h.job_id)):
        if now - h.since < after_s:
            return None  # the rest waited less
        if h.job_id in skip:
            continue
        d = held_drain(h, view, drain_time, partitions)
        if d.idle:
            return None
        if d.busy:
            t, g = d.busy[0]
            return Reservation(h.job_id, g.node, (g.index,), h.since, t, h.gres_type)
    return None


def held_drain(
    h: HeldWait,
    view: ClusterView,
    drain_time: DrainTime,
    partitions: Mapping[str, tuple[str, ...]] | None = None,
) -> Drain:
    """The shared GPUs held job ``h`` may use (its shard type or any, its model, a node of
    its partitions), idle or by expected drain time. An idle one means the re-aim gives it
    one; else the first of ``busy`` is the one to drain for it."""
    wanted = _partitions(h.partition)
    parts = partitions or {}
    return drain_order(
        (
            g
            for g in usable(view.gpus)
            if (g.gres_type == h.gres_type or h.gres_type == ANY_SHARED)
            and (not h.model or g.model == h.model)
            and _in_partitions(g.node, wanted, parts)
        ),
        drain_time,
    )


def _partitions(text: str) -> set[str]:
    """A job's partitions (Slurm's comma-separated list); empty: any."""
    return set(text.split(",")) - {""}


def _in_partitions(node: str, wanted: set[str], partitions: Mapping[str, tuple[str, ...]]) -> bool:
    """Whether a job of partitions ``wanted`` may run on ``node`` (a node whose partitions
    are unknown may take any job)."""
    return not wanted or not partitions.get(node) or bool(wanted & set(partitions[node]))


#: when a GPU is expected to be free of its occupants
DrainTime = Callable[[GpuView], float]


class Drain(NamedTuple):
    """Shared GPUs a waiting job could be given: the idle ones, and the busy ones with
    when each is expected to drain, soonest first (equal times: in the order given, which
    for a view is node, then index)."""

    idle: list[GpuView]
    busy: list[tuple[float, GpuView]]


def usable(gpus: Iterable[GpuView]) -> list[GpuView]:
    """The GPUs draining can free: available, not held by a whole-GPU job."""
    return [g for g in gpus if g.available and g.exclusive_job is None]


def drain_order(gpus: Iterable[GpuView], drain_time: DrainTime) -> Drain:
    """Split ``gpus`` into idle ones and busy ones by expected drain time (stable sort)."""
    gpus = list(gpus)
    busy = sorted(((drain_time(g), g) for g in gpus if g.occupants), key=lambda x: x[0])
    return Drain([g for g in gpus if not g.occupants], busy)


def by_end_times(ends: Mapping[int, float]) -> DrainTime:
    """Drain times from the occupants' expected ends (``ends``: job id -> end, from Slurm);
    an occupant with no known end (a placement not started) drains never."""

    def drain_time(g: GpuView) -> float:
        times = [
            ends.get(o.job_id, 0.0) if o.job_id is not None and not o.pending else UNKNOWN_END
            for o in g.occupants
        ]
        return max((t if t > 0 else UNKNOWN_END for t in times), default=0.0)

    return drain_time


def plan(
    job: SlurmJob,
    view: ClusterView,
    ends: Mapping[int, float],
    partitions: Mapping[str, tuple[str, ...]],
) -> Reservation | None:
    """The shared GPUs to close for ``job``: on the node where its GPU count is expected to
    be free soonest, the idle shared GPUs there and the busy ones that drain first. None
    when the job could already start on idle shared GPUs (it then waits for something
    else: CPUs, memory, a limit) or no node has enough shared GPUs. ``ends`` maps running
    job ids to their end times (start + time limit); ``partitions`` maps node names to
    their partitions."""
    need = whole_gpu_count(job)
    if need is None:
        return None
    wanted = _partitions(job.partition)
    drain_time = by_end_times(ends)
    by_node: dict[str, list[GpuView]] = {}
    for g in usable(view.gpus):
        by_node.setdefault(g.node, []).append(g)
    best: tuple[float, str, tuple[int, ...]] | None = None
    for node, gpus in sorted(by_node.items()):
        if not _in_partitions(node, wanted, partitions):
            continue
        d = drain_order(gpus, drain_time)
        if len(d.idle) >= need:
            return None
        short = need - len(d.idle)
        if len(d.busy) < short:
            continue
        t = d.busy[short - 1][0]
        if best is None or t < best[0]:
            # idle ones too: a new partner must not take them while the others drain
            best = (
                t,
                node,
                tuple(sorted([*(g.index for g in d.idle), *(g.index for _, g in d.busy[:short])])),
            )
    if best is None:
        return None
    return Reservation(job.job_id, best[1], best[2], job.submit_time, best[0])


def kept(r: Reservation, view: ClusterView) -> list[GpuView]:
    """The GPUs of ``view`` that ``r`` keeps free."""
    return [g for g in view.gpus if g.node == r.node and g.index in r.gpus]


def drained(r: Reservation, view: ClusterView) -> bool:
    """True when every GPU kept for ``r`` is empty: the job could take them now."""
    return all(not g.occupants and g.exclusive_job is None for g in kept(r, view))
