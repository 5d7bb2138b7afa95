"""Per-job and per-cluster figures of a finished simulation. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slurm_colo.contracts.enums import Mode

from .engine import Sim


@dataclass
class Result:
    policy: str
    jobs: int
    makespan_h: float
    avg_jct_h: float
    p99_jct_h: float
    avg_slowdown: float
    worst_decile_slowdown: float
    gpu_hours: float
    colocated_share: float
    harmful_share: float
    max_stretch: float
    over_limit_jobs: int
    worst_class_slowdown: float
    worst_user_slowdown: float
    #: jobs whose last run on a GPU lasted longer than their time limit (Slurm ends them
    #: under ``placement.time_limit = "keep"``; the agent raises their limits under
    #: "extend"); None when no job of the trace has a limit
    past_limit_jobs: int | None = None
    retractions: int = 0
    explored: int = 0
    oom_starts: int = 0
    wall_s: float = 0.0
    #: per-job arrays (job id order): JCT (s), slowdown, stretch, class, user
    per_job: dict[str, Any] = field(default_factory=dict, repr=False)

    def row(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "per_job"}


def summarize(sim: Sim, max_slowdown: float = 1.5, wall_s: float = 0.0) -> Result:
    """JCT = end - arrival; slowdown = JCT / solo duration (queueing included);
    stretch = time running / solo duration (interference only); harmful share = part of
    the GPU time spent co-located in sets whose true combined normalised throughput is
    below 1; ``over_limit_jobs`` = non-aggressive jobs stretched beyond ``max_slowdown``;
    ``past_limit_jobs`` = jobs with a time limit whose last run (since their last start:
    a requeued job's clock starts again) lasted longer than it, or than their solo
    duration where that is longer (a job that ran to its limit)."""
    runs = sim.runs
    arrival = np.array([r.job.arrival for r in runs])
    end = np.array([r.end for r in runs], dtype=float)
    work = np.array([r.job.work_s for r in runs])
    jct = end - arrival
    slow = jct / work
    stretch = np.array([r.run_time for r in runs]) / work
    aggressive = np.array([r.job.mode == Mode.AGGRESSIVE for r in runs])
    cls = np.array([r.job.cls for r in runs])
    user = np.array([r.job.user for r in runs])
    k = max(1, len(runs) // 10)
    worst = np.sort(slow)[-k:]
    busy = sum(g.busy for g in sim.gpus)
    colo = sum(g.colo for g in sim.gpus)
    harm = sum(g.harmful for g in sim.gpus)

    def worst_group(labels: np.ndarray) -> float:
        return float(max(slow[labels == v].mean() for v in np.unique(labels)))

    limited = [r for r in runs if r.job.limit_s is not None]
    # a job that ran alone to its limit (sacct's TIMEOUT jobs) ran a little past it, as
    # Slurm ends a job some seconds after its limit: only running longer than that counts
    past = sum(
        1
        for r in limited
        if r.end is not None
        and r.end - r.seg_start > max(r.job.limit_s or 0.0, r.job.work_s) + 1e-6
    )
    s = sim.sched
    return Result(
        policy=s.name,
        jobs=len(runs),
        makespan_h=float((end.max() - arrival.min()) / 3600),
        avg_jct_h=float(jct.mean() / 3600),
        p99_jct_h=float(np.percentile(jct, 99) / 3600),
        avg_slowdown=float(slow.mean()),
        worst_decile_slowdown=float(worst.mean()),
        gpu_hours=float(busy / 3600),
        colocated_share=float(colo / busy) if busy else 0.0,
        harmful_share=float(harm / colo) if colo else 0.0,
        max_stretch=float(stretch[~aggressive].max()) if (~aggressive).any() else 0.0,
        over_limit_jobs=int(((stretch > max_slowdown + 1e-9) & ~aggressive).sum()),
        worst_class_slowdown=worst_group(cls),
        worst_user_slowdown=worst_group(user),
        past_limit_jobs=past if limited else None,
        retractions=int(getattr(s, "retractions", 0)),
        explored=int(getattr(s, "explored", 0)),
        oom_starts=sim.oom_starts,
        wall_s=wall_s,
        per_job={"jct_s": jct, "slowdown": slow, "stretch": stretch, "cls": cls, "user": user},
    )


COLUMNS = [
    ("policy", "policy", "{}"),
    ("makespan_h", "makespan h", "{:.0f}"),
    ("avg_jct_h", "avg JCT h", "{:.1f}"),
    ("p99_jct_h", "p99 JCT h", "{:.0f}"),
    ("avg_slowdown", "avg slowdown", "{:.2f}"),
    ("worst_decile_slowdown", "worst 10% slowdown", "{:.1f}"),
    ("gpu_hours", "GPU-hours", "{:.0f}"),
    ("colocated_share", "co-located", "{:.0%}"),
    ("harmful_share", "harmful co-loc.", "{:.2%}"),
    ("max_stretch", "max stretch", "{:.2f}"),
    ("over_limit_jobs", "jobs >1.5x", "{}"),
    ("worst_class_slowdown", "worst class slowdown", "{:.2f}"),
    ("retractions", "retractions", "{}"),
    ("explored", "explored", "{}"),
    ("wall_s", "sim s", "{:.1f}"),
]


#: shown after ``over_limit_jobs`` when the trace has time limits (a sacct export with
#: ``Timelimit``, or ``simulate --time-limits``)
PAST_LIMIT = ("past_limit_jobs", "past time limit", "{}")


def table(results: list[Result], markdown: bool = True) -> str:
    cols = COLUMNS
    if any(r.past_limit_jobs is not None for r in results):
        at = next(i for i, c in enumerate(cols) if c[0] == "over_limit_jobs") + 1
        cols = [*cols[:at], PAST_LIMIT, *cols[at:]]
    head = [c[1] for c in cols]
    rows = [[fmt.format(getattr(r, k)) for k, _, fmt in cols] for r in results]
    return render(head, rows, markdown)


def render(head: list[str], rows: list[list[str]], markdown: bool = True) -> str:
    """A table as Markdown, or as right-aligned plain text for a terminal."""
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)
    ]
    out = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def versus(results: list[Result], base: str = "exclusive-fifo") -> str:
    """One line per policy: makespan and average JCT change against ``base``."""
    b = next((r for r in results if r.policy == base), None)
    if b is None:
        return ""
    lines = []
    for r in results:
        lines.append(
            f"{r.policy}: makespan {100 * (r.makespan_h / b.makespan_h - 1):+.1f}%, "
            f"avg JCT {100 * (r.avg_jct_h / b.avg_jct_h - 1):+.1f}% vs {base}"
        )
    return "\n".join(lines)
