"""The same comparison over several seeds: how much each policy's figures move with the
trace, the pair split and the random choices (``slurm-colo simulate --seeds 1-10``).

One seed's makespan is decided by the last few long jobs and who they happened to share a
GPU with, so a single run can land a point either side of a threshold. The spread says
which differences between policies hold on every seed. Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import ColoError
from .metrics import Result, render

#: at most this many seeds in one run (each is a full simulation of every policy)
MAX_SEEDS = 100


class SeedsError(ColoError):
    """A --seeds value that is not a list of seeds."""


def parse_seeds(text: str) -> list[int]:
    """``"1-10"``, ``"1,4,7"`` or ``"1-3,9"`` -> the seeds, in order, without repeats."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if dash else a
        except ValueError:
            raise SeedsError(
                f"--seeds {text!r}: {part!r} is not a seed or a range such as "
                "1-10 (non-negative whole numbers)"
            ) from None
        if a < 0 or b < a:
            raise SeedsError(
                f"--seeds {text!r}: {part!r} is not a range from low to high of non-negative seeds"
            )
        if b - a >= MAX_SEEDS:  # before the range is walked: 1-99999999999 would take hours
            raise SeedsError(f"--seeds {text!r}: more than {MAX_SEEDS} seeds")
        seeds.extend(s for s in range(a, b + 1) if s not in seeds)
        if len(seeds) > MAX_SEEDS:
            raise SeedsError(f"--seeds {text!r}: more than {MAX_SEEDS} seeds")
    return seeds


@dataclass(frozen=True)
class SeedRow:
    """One policy on one seed, relative to the baseline and the reference policy."""

    seed: int
    policy: str
    makespan_h: float
    avg_jct_h: float
    #: change against the baseline policy (exclusive FIFO), percent; None without it
    makespan_vs_base: float | None
    avg_jct_vs_base: float | None
    #: makespan above the reference policy's (the oracle), percent; None without it
    makespan_vs_ref: float | None
    p99_jct_h: float
    avg_slowdown: float
    worst_decile_slowdown: float
    worst_class_slowdown: float
    gpu_hours: float
    harmful_share: float
    over_limit_jobs: int
    max_stretch: float
    #: jobs whose last run took longer than their time limit; None when the trace has none
    past_limit_jobs: int | None = None


def _pct(a: float, b: float) -> float:
    return 100.0 * (a / b - 1.0)


def seed_rows(
    per_seed: Mapping[int, Sequence[Result]], base: str = "exclusive-fifo", ref: str = "oracle"
) -> list[SeedRow]:
    rows = []
    for seed, results in per_seed.items():
        by = {r.policy: r for r in results}
        b, o = by.get(base), by.get(ref)
        for r in results:
            rows.append(
                SeedRow(
                    seed=seed,
                    policy=r.policy,
                    makespan_h=r.makespan_h,
                    avg_jct_h=r.avg_jct_h,
                    makespan_vs_base=_pct(r.makespan_h, b.makespan_h) if b else None,
                    avg_jct_vs_base=_pct(r.avg_jct_h, b.avg_jct_h) if b else None,
                    makespan_vs_ref=_pct(r.makespan_h, o.makespan_h) if o else None,
                    p99_jct_h=r.p99_jct_h,
                    avg_slowdown=r.avg_slowdown,
                    worst_decile_slowdown=r.worst_decile_slowdown,
                    worst_class_slowdown=r.worst_class_slowdown,
                    gpu_hours=r.gpu_hours,
                    harmful_share=r.harmful_share,
                    over_limit_jobs=r.over_limit_jobs,
                    max_stretch=r.max_stretch,
                    past_limit_jobs=r.past_limit_jobs,
                )
            )
    return rows


def _band(values: list[float], fmt: str) -> str:
    """mean (best .. worst): every figure here is better lower"""
    if not values:
        return "-"
    return (
        f"{fmt.format(statistics.fmean(values))} "
        f"({fmt.format(min(values))} .. {fmt.format(max(values))})"
    )


def spread_table(
    rows: Sequence[SeedRow],
    base: str = "exclusive-fifo",
    ref: str = "oracle",
    markdown: bool = True,
) -> str:
    """Per policy: mean, best and worst seed of each figure; the jobs past their time limit
    per seed too when the traces have limits."""
    policies = list(dict.fromkeys(r.policy for r in rows))
    limits = any(r.past_limit_jobs is not None for r in rows)
    head = [
        "policy",
        "seeds",
        f"makespan vs {base}",
        f"avg JCT vs {base}",
        f"makespan vs {ref}",
        "worst 10% slowdown",
        "worst class slowdown",
        "jobs >1.5x (per seed)",
        *(["past time limit (per seed)"] if limits else []),
    ]
    body = []
    for p in policies:
        mine = [r for r in rows if r.policy == p]

        def vals(attr: str, rs: list[SeedRow] = mine) -> list[float]:
            return [v for v in (getattr(r, attr) for r in rs) if v is not None]

        over = [r.over_limit_jobs for r in mine]
        body.append(
            [
                p,
                str(len(mine)),
                _band(vals("makespan_vs_base"), "{:+.1f}%"),
                _band(vals("avg_jct_vs_base"), "{:+.1f}%"),
                _band(vals("makespan_vs_ref"), "{:+.1f}%"),
                _band(vals("worst_decile_slowdown"), "{:.1f}"),
                _band(vals("worst_class_slowdown"), "{:.2f}"),
                "/".join(str(v) for v in over),
                *(
                    [
                        "/".join(
                            "-" if r.past_limit_jobs is None else str(r.past_limit_jobs)
                            for r in mine
                        )
                    ]
                    if limits
                    else []
                ),
            ]
        )
    return render(head, body, markdown)


def per_seed_table(
    rows: Sequence[SeedRow], base: str = "exclusive-fifo", markdown: bool = True
) -> str:
    """One line per seed: each policy's makespan and average JCT change against ``base``."""
    policies = [p for p in dict.fromkeys(r.policy for r in rows) if p != base]
    seeds = list(dict.fromkeys(r.seed for r in rows))
    cell = {(r.seed, r.policy): r for r in rows}
    head = ["seed", *policies]
    body = []
    for s in seeds:
        line = [str(s)]
        for p in policies:
            r = cell.get((s, p))
            if r is None or r.makespan_vs_base is None or r.avg_jct_vs_base is None:
                line.append("-")
            else:
                line.append(f"{r.makespan_vs_base:+.1f}% / {r.avg_jct_vs_base:+.1f}%")
        body.append(line)
    return render(head, body, markdown)


#: the figures compared seed by seed (every one: lower is better)
COMPARED = (
    ("makespan_h", "makespan"),
    ("avg_jct_h", "avg JCT"),
    ("p99_jct_h", "p99 JCT"),
    ("avg_slowdown", "avg slowdown"),
    ("worst_decile_slowdown", "worst 10% slowdown"),
    ("gpu_hours", "GPU-hours"),
    ("harmful_share", "harmful co-loc."),
    ("worst_class_slowdown", "worst class slowdown"),
)


def head_to_head(rows: Sequence[SeedRow], policy: str, other: str) -> str | None:
    """One line: on how many seeds ``policy`` is strictly better than ``other`` on every
    compared figure, and which figures it is not better on, on how many seeds."""
    by = {(r.seed, r.policy): r for r in rows}
    seeds = [
        s for s in dict.fromkeys(r.seed for r in rows) if (s, policy) in by and (s, other) in by
    ]
    if not seeds:
        return None
    short: dict[str, int] = {}
    wins = 0
    for s in seeds:
        a, b = by[(s, policy)], by[(s, other)]
        lost = [label for attr, label in COMPARED if not getattr(a, attr) < getattr(b, attr)]
        wins += not lost
        for label in lost:
            short[label] = short.get(label, 0) + 1
    line = f"{policy} vs {other}: better on every figure on {wins} of {len(seeds)} seeds"
    if short:
        line += " (not better on: " + ", ".join(f"{k} {v}x" for k, v in short.items()) + ")"
    return line


def rows_json(rows: Sequence[SeedRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
