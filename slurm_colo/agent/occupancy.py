"""Which job sits on which shared GPU: the agent's :class:`~slurm_colo.placement.ClusterView`,
built from the last Slurm snapshot, the node hooks' reports and the ledger's placements, with
the GPUs the starvation guard (:mod:`slurm_colo.placement.guard`) keeps free closed. No I/O."""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any

from ..config import Config
from ..gres_layout import NodeGpus, expand_hostlist
from ..placement import ClusterView, Decision, GpuView, Occupant
from ..placement.guard import HeldWait, Reservation, drained, end_times, kept, reserve, reserve_held
from ..placement.index import carry_index
from ..placement.policy import index_for
from ..placement.trend import QueueTrend
from ..scores import ScoreTable
from ..slurm.model import SlurmJob, SlurmNode
from .ledger import Ledger

log = logging.getLogger("slurm_colo.agent")
#: how long GPUs drained for a waiting job stay closed while Slurm has not started it yet
DRAINED_GRACE_S = 60.0
#: how long a reported end outweighs a Slurm snapshot that still lists the job running (at
#: least ten looks): a job completes within Slurm's epilog and kill timeouts
ENDED_KEEP_S = 600.0


def waiting_for_gpus(jobs: Iterable[SlurmJob], now: float) -> int:
    """Pending jobs that ask for GPUs or shards and may start (not those waiting for a
    dependency or a begin time); jobs held without a GPU request, as the agent holds them,
    are counted by the caller."""
    return sum(
        1
        for j in jobs
        if j.state == "PENDING"
        and any(t in f for f in (j.tres_per_node, j.tres_per_job) for t in ("gpu", "shard", "mps"))
        and not j.waits_to_start(now)
    )


def _unset_builder() -> None:
    raise RuntimeError("the view is behind and no builder was given (Occupancy(build=...))")


class Occupancy:
    """The view, built lazily: a hook's report (a job's end or start) only marks it behind
    (:meth:`mark_behind`), and it is built again before anything reads it (its ``view`` and
    ``reservation``), by ``build``, which must call :meth:`rebuild` with what the view is
    built from. A burst of reports (a job array ending) so costs one build, not one per job."""

    def __init__(self, cfg: Config, build: Callable[[], None] = _unset_builder) -> None:
        self.cfg = cfg
        self.jobs: dict[int, SlurmJob] = {}
        self.nodes: dict[str, SlurmNode] = {}
        self._view = ClusterView()
        self._build = build
        #: a report left the view behind; ``members_behind``: a GPU's jobs may differ too
        #: (an end, or a start we did not place), not only a placed job's running flag
        self.behind = False
        self.members_behind = False
        self.layouts: dict[str, NodeGpus] = {n: ng for ng in cfg.gpus for n in ng.node_names}
        #: nodes closed to placement because Slurm numbers their GPUs otherwise -> why
        self.gres_refused: dict[str, str] = {}
        #: each node's GRES as Slurm reported it at the last check, and what that check found
        self._gres_seen: dict[str, tuple[str, str | None]] = {}
        #: (node, GPU) -> the jobs of the set a probe measured there, and the slowdown of
        #: its slowest measured member (1 / its normalised throughput)
        self.observed: dict[tuple[str, int], tuple[frozenset[int], float]] = {}
        self.snapshot_time: float = 0.0
        #: each running shard job's occupant in the last view, with what it was built from
        self._occupants: dict[int, tuple[tuple[Any, ...], Occupant]] = {}
        #: GPUs that the node hooks reported as taken by jobs we did not place
        self.unplaced_gpus: dict[int, tuple[str, tuple[int, ...], float]] = {}
        #: jobs whose end a node hook reported (JOBEND) while Slurm still lists them
        #: running (a look asked for before the end, or the job completing) -> when
        self.ended: dict[int, float] = {}
        #: shared GPUs drained for a job waiting too long (placement/guard.py)
        self._reservation: Reservation | None = None
        #: waiting jobs the guard gave up on (GPUs drained, still not started) -> when
        self._gave_up: dict[int, float] = {}
        self._drained_since: float | None = None
        #: jobs waiting for a GPU at the last snapshot (pending with a GPU request, or held)
        self.queue = 0
        #: the queue's counts of the last hours: how soon it will be gone (placement/trend.py)
        self.trend = QueueTrend()

    def shift(self, step: float) -> None:
        """The wall clock stepped by ``step`` seconds (slurm_colo/clock.py): the times this view
        keeps itself move with it (the last snapshot, the GPUs reported taken, the guard's
        grace for drained GPUs and the jobs it gave up on, the reported ends, the queue's
        trend)."""
        if self.snapshot_time:  # 0.0: no snapshot yet
            self.snapshot_time += step
        self.unplaced_gpus = {j: (n, g, t + step) for j, (n, g, t) in self.unplaced_gpus.items()}
        self._gave_up = {j: t + step for j, t in self._gave_up.items()}
        self.ended = {j: t + step for j, t in self.ended.items()}
        if self._drained_since is not None:
            self._drained_since += step
        self.trend.shift(step)

    # ---- Slurm and the hooks ---------------------------------------------------------
    def take(self, jobs: list[SlurmJob], nodes: list[SlurmNode], now: float) -> None:
        """A new Slurm snapshot (``nodes`` empty: keep the last node list)."""
        self.jobs = {j.job_id: j for j in jobs}
        keep_s = max(ENDED_KEEP_S, 10 * self.cfg.agent.refresh_interval_s)
        self.ended = {
            k: t
            for k, t in self.ended.items()
            if k in self.jobs
            and self.jobs[k].active
            and now - t < keep_s
            and (self.jobs[k].start_time or 0.0) <= t  # not a run started since
        }
        if nodes:
            self.nodes = {n.name: n for n in nodes}
            self._check_gres()
        self.snapshot_time = now

    def _check_gres(self) -> None:
        """Close the nodes whose GRES Slurm numbers otherwise than their devices (an old
        ``Gres=`` order in slurm.conf): a job placed there would get another GPU."""
        refused, seen = {}, {}
        for name, sn in self.nodes.items():
            ng = self.layouts.get(name)
            if ng is None:
                continue
            last = self._gres_seen.get(name)
            # a node's GRES changes only with a restart of slurmctld: checked once per text
            why = last[1] if last is not None and last[0] == sn.gres else ng.gres_mismatch(sn.gres)
            seen[name] = (sn.gres, why)
            if why is not None:
                refused[name] = why
                if name not in self.gres_refused:
                    log.error("node %s: no job is placed there: %s", name, why)
        for name in self.gres_refused.keys() - refused.keys():
            log.info("node %s: its GRES is in device order again; placing there", name)
        self.gres_refused = refused
        self._gres_seen = seen

    def forget_reported(self, now: float, asked: float | None = None) -> None:
        """Forget reported jobs Slurm shows ended, or no longer shows at all: at once when
        the report is older than the snapshot, asked for at ``asked`` (it lists every
        running job), else after a grace period (the report may be newer than the
        snapshot)."""
        grace = 3 * self.cfg.agent.refresh_interval_s

        def gone(job_id: int, reported: float) -> bool:
            if job_id in self.jobs:
                return not self.jobs[job_id].active
            return (asked is not None and reported < asked) or now - reported > grace

        for job_id in [k for k, (_, _, t) in self.unplaced_gpus.items() if gone(k, t)]:
            del self.unplaced_gpus[job_id]

    def report_unplaced(self, job_id: int, node: str, gpus: Sequence[int], now: float) -> None:
        """A job we did not place started on ``gpus``: they are taken whole until it ends."""
        self.unplaced_gpus[job_id] = (node, tuple(gpus), now)

    def job_ended(self, job_id: int, now: float) -> None:
        """A node hook reported the job's end: until Slurm lists it ended (or requeued), a
        snapshot that still lists it running leaves it out of the view."""
        self.jobs.pop(job_id, None)
        self.unplaced_gpus.pop(job_id, None)
        self.ended[job_id] = now

    def shard_type(self, d: Decision) -> str:
        """The shard GRES type of the GPU a shared decision names ("" if its node is unknown)."""
        ng = self.layouts.get(d.node or "")
        return ng.gres_type(d.index or 0) if ng is not None else ""

    # ---- the view ----------------------------------------------------------------------
    @property
    def view(self) -> ClusterView:
        """The view, built first if a report left it behind."""
        self.catch_up()
        return self._view

    @property
    def reservation(self) -> Reservation | None:
        """The GPUs drained for a waiting job, as of the view (built first if behind)."""
        self.catch_up()
        return self._reservation

    def view_of_members(self) -> ClusterView:
        """The view with each GPU's jobs as they are, though a placed job's start since the
        last build may not show in its running flag yet: built first only if a GPU's jobs
        changed (what a start names as the job's partners needs no more)."""
        if self.members_behind:
            self.catch_up()
        return self._view

    def mark_behind(self, members: bool) -> None:
        """A report changed what the view is built from (``members``: which jobs a GPU has,
        not only a placed job's running flag)."""
        self.behind = True
        self.members_behind = self.members_behind or members

    def catch_up(self) -> bool:
        """Build the view if a report left it behind; whether it was built."""
        if not self.behind:
            return False
        self._build()
        return True

    def rebuild(
        self,
        ledger: Ledger,
        scores: ScoreTable,
        held: Container[int],
        waits: Sequence[HeldWait] = (),
        plan_at: float | None = None,
    ) -> None:
        """The view from the last snapshot, the hooks' reports and the ledger's placements
        (``held``: jobs being requeued, leaving their GPU); with ``plan_at`` (a new
        snapshot) the starvation guard is planned afresh too (``waits``: the held jobs)."""
        self.behind = self.members_behind = False
        gpus: dict[tuple[str, int], GpuView] = {}
        for node, ng in self.layouts.items():
            sn = self.nodes.get(node)
            for i in ng.shared:
                gpus[(node, i)] = GpuView(
                    node=node,
                    index=i,
                    gres_type=ng.gres_type(i),
                    memory_gib=ng.memory_gib,
                    slots=ng.shards_per_gpu,
                    model=ng.model,
                    available=(sn.usable and node not in self.gres_refused)
                    if sn
                    else not self.nodes,
                )
        placed: set[str] = set()
        built, now_built = self._occupants, {}
        for j in self.jobs.values():
            # a held job is being requeued, an ended one completing: each is leaving its GPU
            if (
                not j.active
                or j.nodes not in self.layouts
                or j.job_id in held
                or j.job_id in self.ended
            ):
                continue
            ng = self.layouts[j.nodes]
            for alloc in j.gres:
                if alloc.name == "gpu":
                    for i in alloc.indices:
                        if (j.nodes, i) in gpus:
                            gpus[(j.nodes, i)].exclusive_job = j.job_id
                elif alloc.name == "shard":
                    idx = alloc.indices[0] if alloc.indices else ng.index_for_type(alloc.type)
                    g = gpus.get((j.nodes, idx)) if idx is not None else None
                    if g is not None:
                        key = ledger.occupant_key(j, scores)
                        last = built.get(j.job_id)
                        occ = (
                            last[1]
                            if last is not None and last[0] == key
                            else ledger.occupant_for_job(j, scores)
                        )
                        g.occupants.append(occ)
                        now_built[j.job_id] = (key, occ)
                        token = ledger.by_job.get(j.job_id)
                        if token:
                            placed.add(token)
        self._occupants = now_built
        for job_id, (node, idxs, _) in self.unplaced_gpus.items():
            sj = self.jobs.get(job_id)
            if sj is not None and sj.active and any(g.indices for g in sj.gres):
                continue  # the snapshot already says which GPUs the job holds
            for i in idxs:
                if (node, i) in gpus and not gpus[(node, i)].occupants:
                    gpus[(node, i)].exclusive_job = job_id
        for p in ledger.placements.values():
            if p.token in placed or not p.decision.shared:
                continue
            g = gpus.get(
                (p.decision.node or "", p.decision.index if p.decision.index is not None else -1)
            )
            if g is not None:
                g.occupants.append(ledger.occupant(p))
        if plan_at is not None:
            held_ids = {w.job_id for w in waits}
            self.queue = len(waits) + waiting_for_gpus(
                (j for j in self.jobs.values() if j.job_id not in held_ids), plan_at
            )
            self.trend.observe(plan_at, self.queue)
        view = ClusterView(
            gpus=[gpus[k] for k in sorted(gpus)],
            queue_per_gpu=self.queue / len(gpus) if gpus else None,
            queue_drain_h=self.trend.hours_to_empty(),
        )
        if plan_at is not None:
            self._plan_reservation(view, plan_at, waits)
        self._close_reserved(view)
        carry_index(self._view, view)  # only the GPUs that changed are recomputed
        self._view = view
        index_for(view, scores, self.cfg.placement)  # built here, off the request path

    def _plan_reservation(self, view: ClusterView, now: float, waits: Sequence[HeldWait]) -> None:
        after_s = self.cfg.placement.reserve_after_h * 3600.0
        old = self._reservation
        sj = self.jobs.get(old.job_id) if old is not None else None
        if old is not None and sj is not None and sj.state == "PENDING" and drained(old, view):
            # its GPUs are free: keep them for it while Slurm gets round to starting it
            if self._drained_since is None:
                self._drained_since = now
            if now - self._drained_since < max(
                DRAINED_GRACE_S, 3 * self.cfg.agent.refresh_interval_s
            ):
                return
            # still not started: it waits for something else (CPUs, memory, a limit)
            log.warning(
                "job %s still waits (%s) although GPU(s) %s of %s were drained for it; "
                "they take partners again and the job is passed over for %.1f h",
                old.job_id,
                sj.state_reason or "no reason given",
                ",".join(map(str, old.gpus)),
                old.node,
                after_s / 3600.0,
            )
            self._gave_up[old.job_id] = now
        self._drained_since = None
        self._gave_up = {
            j: t for j, t in self._gave_up.items() if j in self.jobs and now - t < after_s
        }
        parts = {name: n.partitions for name, n in self.nodes.items()}
        new = reserve(self.jobs.values(), view, now, after_s, parts, skip=self._gave_up)
        if new is None and waits:
            new = reserve_held(
                waits,
                view,
                now,
                after_s,
                end_times(self.jobs.values()),
                skip=self._gave_up,
                partitions=parts,
            )
        if new is not None and (
            old is None or (old.job_id, old.node, old.gpus) != (new.job_id, new.node, new.gpus)
        ):
            log.info(
                "job %s has waited %.1f h for %s: GPU(s) %s of %s take no new partners "
                "until it starts",
                new.job_id,
                (now - new.waiting_since) / 3600.0,
                new.waits_for(),
                ",".join(map(str, new.gpus)),
                new.node,
            )
        elif new is None and old is not None:
            log.info("job %s: GPUs of %s open to partners again", old.job_id, old.node)
        self._reservation = new

    def _close_reserved(self, view: ClusterView) -> None:
        r = self._reservation
        if r is None:
            return
        sj = self.jobs.get(r.job_id)
        if sj is None or sj.state != "PENDING" or r.job_id in self.unplaced_gpus:
            log.info(
                "job %s: no longer waiting; GPUs of %s open to partners again", r.job_id, r.node
            )
            self._reservation = None
            return
        for g in kept(r, view):
            g.closed_for = r.job_id

    def candidate_view(self, fields: dict[str, str]) -> ClusterView:
        """The GPUs a request may use (GPU model, node lists, partition)."""
        gpus = self.view.gpus
        want_type = fields.get("gpu_type", "")
        if want_type:
            gpus = [g for g in gpus if g.model == want_type]
        if fields.get("req_nodes"):
            allowed = set(expand_hostlist(fields["req_nodes"]))
            gpus = [g for g in gpus if g.node in allowed]
        if fields.get("exc_nodes"):
            banned = set(expand_hostlist(fields["exc_nodes"]))
            gpus = [g for g in gpus if g.node not in banned]
        part = fields.get("partition", "")
        if part:
            gpus = [
                g
                for g in gpus
                if g.node not in self.nodes
                or not self.nodes[g.node].partitions
                or part in self.nodes[g.node].partitions
            ]
        if len(gpus) == len(self.view.gpus):
            return self.view  # nothing filtered out: keep the view and its placement index
        return self.view.part(gpus)

    def view_for_pending(self, job: SlurmJob, partition: str, gpu_model: str) -> ClusterView:
        """The GPUs a job pending in Slurm may be aimed at: ``partition`` (none chosen for
        a job pending in several), ``gpu_model`` ("" any), and the user's -w / -x, which
        hold for the new GPU too (Slurm keeps them on the job)."""
        return self.candidate_view(
            {
                "partition": partition if "," not in partition else "",
                "gpu_type": gpu_model,
                "req_nodes": job.required_nodes,
                "exc_nodes": job.excluded_nodes,
            }
        )

    # ---- reporting ---------------------------------------------------------------------
    def observe(self, node: str, index: int, jobs: Iterable[int], slowdown: float) -> None:
        """What a probe measured on GPU ``index`` of ``node``: shown while that set runs."""
        self.observed[(node, index)] = (frozenset(jobs), slowdown)

    def gpu_rows(self, scores: ScoreTable, now: float) -> list[dict[str, Any]]:
        """The GPUs as ``slurm-colo status`` shows them."""
        gpus = []
        for g in self.view.gpus:
            classes = [o.cls for o in g.occupants]
            delta = scores.delta(classes)[0] if len(classes) >= 2 else None
            seen = self.observed.get((g.node, g.index))
            running = frozenset(o.job_id for o in g.occupants if o.job_id and not o.pending)
            gpus.append(
                {
                    "node": g.node,
                    "index": g.index,
                    "gres_type": g.gres_type,
                    "available": g.available,
                    "closed_for": g.closed_for,
                    "exclusive_job": g.exclusive_job,
                    "slots": g.slots,
                    "predicted_delta": delta,
                    "observed_slowdown": seen[1] if seen and seen[0] == running else None,
                    "occupants": [
                        {
                            "job_id": o.job_id,
                            "key": o.key,
                            "user": o.user,
                            "cls": o.cls,
                            "pending": o.pending,
                            "thread_pct": o.thread_pct,
                            "mem_limit_gib": o.mem_limit_gib,
                            "since": o.since,
                            "together_s": max(0.0, now - o.since)
                            if not o.pending and o.since
                            else 0.0,
                            "no_partners": o.no_partners,
                        }
                        for o in g.occupants
                    ],
                }
            )
        return gpus

    def reservation_row(self, now: float) -> dict[str, Any] | None:
        r = self.reservation
        return (
            None
            if r is None
            else {
                "job_id": r.job_id,
                "node": r.node,
                "gpus": list(r.gpus),
                "waiting_s": now - r.waiting_since,
                "drained_by": r.drained_by,
                "gres_type": r.gres_type,
                "waits_for": r.waits_for(),
            }
        )
