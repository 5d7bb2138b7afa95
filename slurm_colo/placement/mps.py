"""What a shared decision tells MPS: the joining job's active-thread percentage and its
pinned memory limit. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..scores import ScoreTable


def thread_pct(job_util: float | None, others: list[float | None]) -> int:
    """MPS active-thread percentage for a joining job, from the classes' GPU demand.

    A job that barely uses the GPU next to a busy one gets a small share (the seeds show
    90/10 beats 100/100 for such pairs); unknown demand, or demands that fit together
    (sum <= 1), give 100 (no limit).
    """
    if job_util is None or any(u is None for u in others) or not others:
        return 100
    total = job_util + sum(u for u in others if u is not None)
    if total <= 1.0:
        return 100
    share = job_util / total
    return int(max(10, min(100, math.ceil(share * 100 + 10))))


def demand(scores: ScoreTable, cls: str, partners: Iterable[str]) -> float | None:
    """GPU demand of ``cls``: its SM utilisation if profiled, else how much it slows its
    partners according to the score table (1 - mean n(partner | cls))."""
    info = scores.classes.get(cls)
    if info is not None and info.sm_util is not None:
        return info.sm_util
    ps = [scores.pair(p, cls) for p in partners]
    if not ps or not all(p.known for p in ps):
        return None
    return max(0.0, 1.0 - sum(p.n_a for p in ps) / len(ps))


def mem_limit(est: float, free: float) -> float:
    """The MPS pinned memory limit of a job of estimate ``est``: 1.25 x the estimate (at
    least 1 GiB more), capped by what the GPU has free."""
    return round(min(free, max(est * 1.25, est + 1.0)), 2)
