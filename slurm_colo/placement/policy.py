"""The placement policy: put a job where the predicted gain in GPU throughput is highest.

For a single-GPU job (``auto`` mode) a shared GPU is a candidate when it is up, not held
by an exclusive job, has a free slot and room in memory, and (under MPS,
``placement.cross_user = "never"``) holds jobs of the same user only. For the set the job
would join, the score table predicts each member's normalised throughput ``n_i``
(multiplicative composition for 3+ jobs) with a standard deviation. The set is accepted when

* no pair of it is marked *never* (out of memory, fatal MPS fault); and either
* every member keeps ``n_i >= 1 / max_slowdown`` (no job is given the worse half of a GPU)
  and Tabrizian's delta ``k * min(n_i)`` minus ``risk_aversion`` times its uncertainty is at
  least ``min_delta`` (the *delta path*: every member gains), or
* every member keeps ``n_i >= 1 / throughput_max_slowdown`` and the set's combined
  throughput ``sum(n_i)`` minus ``risk_aversion`` times its uncertainty is at least
  ``min_throughput`` and at least what the GPU did before the job joined (the *throughput
  path*: the GPU does more work than it would without the job, though a member may run at
  less than two thirds of its solo speed; a job only takes it when no idle GPU is there,
  that is when it would otherwise wait: time-slicing GPUs such as the K80 gain only this
  way; open only while jobs queue, ``throughput_queue`` waiting jobs per shared GPU,
  :func:`~.candidates.throughput_open`) --
* or, for a bounded share of jobs (``explore_rate``, drawn from the job key so it is
  reproducible), the *mean* delta or combined throughput passes, when a pair of the set has
  never been measured (exploration: history learns about it; pairs predicted harmful are
  never tried).

A job's memory is its request's, else its class's profile in the score set, else
``default_memory_share`` of each GPU's own memory (a GPU model's size, :mod:`.index`).

Among accepted GPUs the job goes where it adds most predicted throughput (sum of ``n``
after minus before, less the uncertainty). An idle GPU is taken instead when that gain is
below 1 (the job would do more alone). With neither, the job keeps a GPU of its own
(``exclusive``: it waits in Slurm's queue as submitted). ``aggressive`` jobs accept
``aggressive_min_delta``, unmeasured pairs and any slowdown.

Pure: everything comes from the arguments. The per-GPU predictions are cached on the view
(:mod:`slurm_colo.placement.index`) for as long as the same score table and config are used,
so one placement is a few vector operations over all GPUs.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_colo.contracts.enums import CrossUser, Mechanism, Mode

from ..config import PlacementConfig
from ..scores import ScoreTable
from .candidates import throughput_open, unprofiled_memory
from .index import PlacementIndex
from .mps import demand, mem_limit, thread_pct
from .view import ClusterView, Decision, GpuView, JobRequest, Occupant

# evaluation outcomes
_EMPTY, _OK, _REFUSE = 0, 1, 2


@dataclass(frozen=True)
class _Job:
    """What an evaluation depends on: jobs with equal ``_Job`` get equal evaluations."""

    cls: str
    uid: int | None  # None when users may mix (shard mechanism)
    #: memory estimate, GiB; None: no profile, each GPU assumes its own share
    est: float | None
    aggressive: bool
    explore: bool


def explore_draw(key: str) -> float:
    """A reproducible number in [0, 1) from the job key (CRC-32)."""
    return zlib.crc32(key.encode()) / 2**32


def _evaluate(
    j: _Job,
    key: tuple[Any, ...],
    scores: ScoreTable,
    cfg: PlacementConfig,
    throughput: bool = True,
) -> tuple[Any, ...]:
    """The rules for one GPU state (``GpuView.state_key``), written out with
    :meth:`ScoreTable.set_throughputs`; :func:`place` uses the cached, vectorised form in
    :mod:`.index` and this only to explain a refusal in words."""
    classes, uids, used, mem = key
    if j.uid is not None and uids and uids != {j.uid}:
        return (_REFUSE, "", "")  # MPS serves one user per GPU; not worth a message
    free = mem * (1.0 - cfg.memory_headroom) - used
    est = j.est if j.est is not None else unprofiled_memory(mem, cfg)
    if est > free:
        return (_REFUSE, "memory", f"memory ({est:.1f} GiB > {free:.1f} free)")
    if not classes:
        return (_EMPTY, free)
    members = [*classes, j.cls]
    n, sd_sum, never, known = scores.set_throughputs(members)
    label = "+".join(members)
    if never:
        return (_REFUSE, "never", f"{label} marked never (out of memory / fault)")
    if not known and not (j.aggressive or j.explore):
        return (_REFUSE, "nodata", f"no data for {label}")
    k = len(members)
    lo = min(n)
    delta = k * lo
    sd = k * sd_sum
    total = sum(n)
    before = sum(scores.set_throughputs(list(classes))[0]) if len(classes) > 1 else 1.0
    bar = max(before, cfg.min_throughput)
    min_n = 0.0 if j.aggressive else 1.0 / cfg.max_slowdown
    min_delta = cfg.aggressive_min_delta if j.aggressive else cfg.min_delta
    # the throughput path (auto mode): the set does more than the GPU did before
    t_ok = not j.aggressive and cfg.min_throughput > 0 and lo >= 1.0 / cfg.throughput_max_slowdown
    t_base = throughput and t_ok
    closed = "" if throughput or not t_ok else "; few jobs wait, so only sets where all gain"
    sure = lo >= min_n and delta - cfg.risk_aversion * sd >= min_delta
    t_sure = t_base and total - cfg.risk_aversion * sd >= bar
    unproven = not all(scores.pair(j.cls, c).observed for c in classes)
    if sure or t_sure:
        explored = not known and not j.aggressive
    elif (
        j.explore
        and unproven
        and ((lo >= min_n and delta >= min_delta) or (t_base and total >= bar))
    ):
        explored = True
    elif lo < min_n and not t_base:
        who = members[n.index(lo)]
        return (
            _REFUSE,
            "slowdown",
            f"{label}: {who} predicted at {lo:.2f}x solo speed{closed}",
        )
    else:
        return (
            _REFUSE,
            "delta",
            f"{label}: predicted delta {delta:.2f}±{sd:.2f} below {min_delta:.2f}"
            + (
                f", combined throughput {total:.2f}±{sd:.2f} less its uncertainty below {bar:.2f}"
                if t_base
                else closed
            ),
        )
    gain = total - before
    return (_OK, gain - cfg.risk_aversion * sd, delta, sd, n[-1], explored, free, gain)


def index_for(view: ClusterView, scores: ScoreTable, cfg: PlacementConfig) -> PlacementIndex:
    """The view's per-GPU cache for this score table and config, brought up to date."""
    idx = view.policy_state
    if (
        not isinstance(idx, PlacementIndex)
        or idx.gpus is not view.gpus
        or len(idx.open) != len(view.gpus)
        or (idx.cfg is not cfg and idx.cfg != cfg)
        or (idx.scores is not scores and not idx.rescore(scores))
    ):
        view.dirty.clear()
        idx = view.policy_state = PlacementIndex(view, scores, cfg)
    elif view.dirty:
        for i in view.dirty:
            idx.update(i)
        view.dirty.clear()
    idx.throughput = throughput_open(view, cfg)
    return idx


def memory_estimate(job: JobRequest, scores: ScoreTable, cfg: PlacementConfig) -> float | None:
    """The job's GPU memory, GiB: what it asked for, else its class's profile in the score
    set; None when neither is known (each GPU then assumes ``default_memory_share`` of its
    own memory, see :func:`~.index.unprofiled_memory`)."""
    if job.memory_gib is not None:
        return float(job.memory_gib)
    info = scores.classes.get(job.cls)
    if info is not None and info.memory_gib is not None:
        return float(info.memory_gib)
    return None if cfg.default_memory_share > 0 else float(cfg.default_memory_gib)


def job_signature(job: JobRequest, scores: ScoreTable, cfg: PlacementConfig) -> _Job:
    """What the policy's evaluation of a single-GPU job depends on (hashable): two jobs
    with equal signatures get the same decision from the same view."""
    return _Job(
        job.cls,
        job.uid if cfg.cross_user == CrossUser.NEVER else None,
        memory_estimate(job, scores, cfg),
        job.mode == Mode.AGGRESSIVE,
        explore_draw(job.key) < cfg.explore_rate,
    )


def gpu_outcome(
    sig: _Job, view: ClusterView, pos: int, scores: ScoreTable, cfg: PlacementConfig
) -> str:
    """How :func:`place` judges one GPU (``view.gpus[pos]``) for a job of signature ``sig``:
    ``"idle"`` (could be opened), ``"share"`` (an accepted set) or ``"no"``. A simulator
    uses it to skip re-placing a waiting job when none of the GPUs that changed can help."""
    idx = index_for(view, scores, cfg)
    return idx.outcome(idx.column(sig.cls), sig.uid, sig.est, sig.aggressive, sig.explore, pos)


def _why_not(
    j: _Job, view: ClusterView, idx: PlacementIndex, scores: ScoreTable, cfg: PlacementConfig
) -> str:
    """One line saying why no shared GPU was taken."""
    closed = idx.draining_for()
    note = (
        f"; shared GPU(s) kept free for job {','.join(map(str, closed))}, waiting for whole GPUs"
        if closed
        else ""
    )
    busy, unfit = idx.refusal_counts(j.uid, j.est)
    if busy == 0:
        off = int(idx.off.sum())
        return (
            "no shared GPU with a free slot"
            + (" for this user" if j.uid is not None else "")
            + note
            + (
                f"; {off} shared GPU(s) on nodes that are down, drained or closed to "
                "placement (slurm-colo status)"
                if off
                else ""
            )
        )
    if busy <= 3:
        mask = idx.open & (idx.count > 0)
        if j.uid is not None:
            mask &= idx.owner == j.uid
        parts = []
        for i in np.flatnonzero(mask):
            g = view.gpus[int(i)]
            ev = _evaluate(j, g.state_key(), scores, cfg, idx.throughput)
            parts.append(f"{g.name}: {ev[2] if ev[0] == _REFUSE else 'not accepted'}")
        return "; ".join(parts) + note
    return (
        f"none of {busy} shared GPUs with a free slot fits ({unfit} lack memory, "
        f"{busy - unfit} predicted too slow or too risky together)"
    ) + note


def place(job: JobRequest, view: ClusterView, scores: ScoreTable, cfg: PlacementConfig) -> Decision:
    """Decide where ``job`` goes. See the module docstring for the rules."""
    if job.mode == "off":
        return Decision("exclusive", "--colocate=off: job left as submitted")
    if job.nodes != 1 or job.gpus_per_node != 1:
        return Decision(
            "exclusive",
            f"multi-GPU/multi-node job ({job.nodes} node(s) x {job.gpus_per_node} GPU(s)) "
            "is never co-located; left as submitted",
        )
    mps = cfg.cross_user == "never"
    mechanism = Mechanism.MPS if mps else Mechanism.SHARD
    j = job_signature(job, scores, cfg)
    est = j.est
    if not view.gpus:
        return Decision("exclusive", "own GPU: no shared GPU configured", memory_gib=est)
    idx = index_for(view, scores, cfg)
    rows = None
    if job.gres_type:
        rows = idx.type_rows(view, job.gres_type)
    m = idx.candidates(idx.column(job.cls), j.uid, est, j.aggressive, j.explore, rows=rows)
    if job.rate_floor > 0:
        m = m.keep(m.rate >= job.rate_floor)
    k = m.best()
    first_idle = int(m.idle[0]) if m.idle.size else -1
    if k >= 0 and (first_idle < 0 or m.gain[k] >= 1.0):
        pos = int(m.busy[k])
        g = view.gpus[pos]
        delta, sd, rate = float(m.delta[k]), float(m.sd[k]), float(m.rate[k])
        explored = bool(m.explored[k])
        free = float(idx.free[pos])
        mem = float(idx.need_at(est, pos))
        partners = tuple(o.key for o in g.occupants)
        thread = None
        if mps:
            others = [o.cls for o in g.occupants]
            thread = thread_pct(
                demand(scores, job.cls, others), [demand(scores, c, [job.cls]) for c in others]
            )
        return Decision(
            "share",
            f"placed on GPU {g.index} of {g.node} with job(s) {', '.join(partners)}; "
            f"predicted delta {delta:.2f}±{sd:.2f}, this job at {rate:.2f}x solo speed"
            + ("; exploring a pair not measured yet" if explored else ""),
            node=g.node,
            index=g.index,
            gres_type=g.gres_type,
            mechanism=mechanism,
            thread_pct=thread,
            mem_limit_gib=mem_limit(mem, free) if mps else None,
            predicted_delta=round(delta, 3),
            predicted_sd=round(sd, 3),
            partners=partners,
            memory_gib=mem,
            explored=explored,
            predicted_rate=round(rate, 3),
            throughput_open=idx.throughput,
        )
    if first_idle >= 0:
        g = view.gpus[first_idle]
        mem = float(idx.need_at(est, first_idle))
        return Decision(
            "share",
            f"opened idle shared GPU {g.index} of {g.node}"
            + ("" if k < 0 else " (sharing a busy GPU would add less than running alone)"),
            node=g.node,
            index=g.index,
            gres_type=g.gres_type,
            mechanism=mechanism,
            thread_pct=100 if mps else None,
            mem_limit_gib=mem_limit(mem, float(idx.free[first_idle])) if mps else None,
            predicted_delta=1.0,
            predicted_sd=0.0,
            memory_gib=mem,
            predicted_rate=1.0,
        )
    if job.gres_type:
        return Decision(
            "exclusive",
            f"wait: no GPU of type {job.gres_type} takes this job now (its shard type is fixed)",
            memory_gib=est,
        )
    return Decision("exclusive", f"own GPU: {_why_not(j, view, idx, scores, cfg)}", memory_gib=est)


def occupant_for(job: JobRequest, d: Decision, now: float = 0.0, pending: bool = True) -> Occupant:
    """The occupant a shared decision adds to its GPU."""
    return Occupant(
        key=job.key,
        user=job.user,
        uid=job.uid,
        cls=job.cls,
        memory_gib=d.memory_gib if d.memory_gib is not None else 0.0,
        thread_pct=d.thread_pct or 100,
        mem_limit_gib=d.mem_limit_gib or 0.0,
        pending=pending,
        since=now,
        no_partners=job.takes_no_partner,
    )


def plan(
    jobs: Iterable[JobRequest],
    view: ClusterView,
    scores: ScoreTable,
    cfg: PlacementConfig,
    now: float = 0.0,
) -> list[Decision]:
    """Place jobs one after another; each shared decision becomes a pending occupant of
    its GPU in ``view`` (modified in place) so later jobs see it."""
    out: list[Decision] = []
    for job in jobs:
        d = place(job, view, scores, cfg)
        if d.shared and d.node is not None and d.index is not None:
            g = view.find(d.node, d.index)
            if g is not None:
                view.add_occupant(g, occupant_for(job, d, now))
        out.append(d)
    return out


def gpu_of(view: ClusterView, d: Decision) -> GpuView | None:
    return view.find(d.node, d.index) if d.node is not None and d.index is not None else None
