"""The placement policy: pick the shared GPU that gives the highest predicted speedup.

Among shared GPUs with a free slot and room in memory, not held by an exclusive job, and
(under MPS) used only by the same user, the job goes where the predicted Tabrizian delta of
the resulting set, minus ``risk_aversion`` times its uncertainty, is highest and at least
``min_delta``; no member may be predicted slower than ``1 / max_slowdown`` of its solo
speed (auto mode). Failing that, the job opens an empty shared GPU; failing that it keeps
a GPU of its own. Pure function: everything it needs is in its arguments.
"""

from __future__ import annotations

import math

from ..config import PlacementConfig
from ..scores import ScoreTable
from .view import ClusterView, Decision, GpuView, JobRequest


def _thread_pct(job_util: float | None, others: list[float | None]) -> int:
    """MPS active-thread percentage for a joining job, from the classes' SM utilisation.

    A job that barely uses the GPU next to a busy one gets a small share (the seeds show
    90/10 beats 100/100 for such pairs); unknown utilisation gives 100 (no limit).
    """
    if job_util is None or any(u is None for u in others) or not others:
        return 100
    total = job_util + sum(u for u in others if u is not None)
    if total <= 1.0:
        return 100
    share = job_util / total
    return int(max(10, min(100, math.ceil(share * 100 + 10))))


def _mem_limit(est: float, free: float) -> float:
    return round(min(free, max(est * 1.25, est + 1.0)), 2)


def place(job: JobRequest, view: ClusterView, scores: ScoreTable, cfg: PlacementConfig) -> Decision:
    if job.mode == "off":
        return Decision("exclusive", "--colocate=off: job left as submitted")
    if job.nodes != 1 or job.gpus_per_node != 1:
        return Decision(
            "exclusive",
            f"multi-GPU/multi-node job ({job.nodes} node(s) x {job.gpus_per_node} GPU(s)) "
            "is never co-located; left as submitted",
        )
    mechanism = "mps" if cfg.cross_user == "never" else "shard"
    est = job.memory_gib if job.memory_gib is not None else scores.memory_gib(
        job.cls, cfg.default_memory_gib)
    aggressive = job.mode == "aggressive"
    min_delta = cfg.aggressive_min_delta if aggressive else cfg.min_delta
    min_n = 0.0 if aggressive else 1.0 / cfg.max_slowdown

    best: tuple[float, GpuView, float, float, list[float]] | None = None
    empty: GpuView | None = None
    refusals: list[str] = []
    for g in view.gpus:
        if not g.available or g.exclusive_job is not None or g.free_slots <= 0:
            continue
        used = sum(o.mem_limit_gib or o.memory_gib for o in g.occupants)
        free = g.memory_gib * (1.0 - cfg.memory_headroom) - used
        if est > free:
            if g.occupants:
                refusals.append(f"{g.name}: memory ({est:.1f} GiB > {free:.1f} free)")
            continue
        if not g.occupants:
            if empty is None:
                empty = g
            continue
        if mechanism == "mps" and any(o.uid != job.uid for o in g.occupants):
            continue  # MPS serves one user per GPU; other users' clients would queue
        members = [o.cls for o in g.occupants] + [job.cls]
        n, sd_sum, never, known = scores.set_throughputs(members)
        if never:
            refusals.append(f"{g.name}: pair marked never (OOM/fault)")
            continue
        if not known and not aggressive:
            refusals.append(f"{g.name}: no data for {'+'.join(members)}")
            continue
        delta = len(members) * min(n)
        sd = len(members) * sd_sum
        score = delta - cfg.risk_aversion * sd
        if score < min_delta or min(n) < min_n:
            refusals.append(f"{g.name}: predicted delta {delta:.2f}±{sd:.2f} too low")
            continue
        if best is None or score > best[0]:
            best = (score, g, delta, sd, n)

    if best is not None:
        _, g, delta, sd, _ = best
        used = sum(o.mem_limit_gib or o.memory_gib for o in g.occupants)
        free = g.memory_gib * (1.0 - cfg.memory_headroom) - used
        utils = [_util(scores, o.cls) for o in g.occupants]
        partners = tuple(o.key for o in g.occupants)
        return Decision(
            "share",
            f"placed on GPU {g.index} of {g.node} with job(s) {', '.join(partners)}; "
            f"predicted delta {delta:.2f}±{sd:.2f}",
            node=g.node, index=g.index, gres_type=g.gres_type, mechanism=mechanism,
            thread_pct=_thread_pct(_util(scores, job.cls), utils) if mechanism == "mps" else None,
            mem_limit_gib=_mem_limit(est, free) if mechanism == "mps" else None,
            predicted_delta=round(delta, 3), predicted_sd=round(sd, 3),
            partners=partners, memory_gib=est,
        )
    if empty is not None:
        free = empty.memory_gib * (1.0 - cfg.memory_headroom)
        return Decision(
            "share",
            f"opened shared GPU {empty.index} of {empty.node} (no compatible partner running)",
            node=empty.node, index=empty.index, gres_type=empty.gres_type, mechanism=mechanism,
            thread_pct=100 if mechanism == "mps" else None,
            mem_limit_gib=_mem_limit(est, free) if mechanism == "mps" else None,
            predicted_delta=1.0, predicted_sd=0.0, memory_gib=est,
        )
    why = "; ".join(refusals[:3]) if refusals else "no shared GPU with a free slot"
    return Decision("exclusive", f"own GPU: {why}")


def _util(scores: ScoreTable, cls: str) -> float | None:
    info = scores.classes.get(cls)
    return info.sm_util if info else None
