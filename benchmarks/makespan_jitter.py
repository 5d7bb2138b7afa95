"""How much one seed's makespan owes to chance: each run of docs/simulator.md's tables,
again with every job arriving up to a second later (:func:`slurm_colo.sim.trace.jittered`;
same jobs, same order, same model). Prints each policy's makespan both ways and the gap of
``ours`` and ``ours-submit`` to the oracle both ways; ``--write`` puts the table into
docs/simulator.md between its ``<!-- jitter -->`` markers::

    .venv/bin/python benchmarks/makespan_jitter.py                       # V100, ~17 min (2 cores)
    .venv/bin/python benchmarks/makespan_jitter.py --seeds 1-2 --jobs 2000 --gpus 64
    .venv/bin/python benchmarks/makespan_jitter.py --campaigns k80 --policies oracle --write

The campaigns, trace and settings are :mod:`simulator_tables`' (same directory).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import simulator_tables
from simulator_tables import label, markers, prepared, processes, run_args, write_between

from slurm_colo.sim.metrics import render
from slurm_colo.sim.run import simulate
from slurm_colo.sim.spread import parse_seeds
from slurm_colo.sim.trace import jittered

#: the seed of each run's jitter is this plus the trace seed
JITTER_SEED = 1000
BAR = 3.0  # per cent above the oracle


@dataclass(frozen=True)
class Task(simulator_tables.Task):
    """One run of the tables (campaign, load, seed, size) and what to measure on it."""

    jitter_s: float = 1.0
    policies: tuple[str, ...] = ()


#: makespan in hours of each policy: (as drawn, jittered)
Makespans = dict[str, tuple[float, float]]


def run(task: Task) -> tuple[Task, Makespans]:
    data, trace, setup = prepared(
        task.campaign, task.load, task.seed, task.jobs, task.gpus, task.gavel
    )
    moved = jittered(trace, task.jitter_s, JITTER_SEED + task.seed)
    a = {r.policy: r.makespan_h for r in simulate(trace, data, setup, task.policies)}
    b = {r.policy: r.makespan_h for r in simulate(moved, data, setup, task.policies)}
    return task, {p: (a[p], b[p]) for p in task.policies}


def signed(x: float) -> str:
    """``x`` with its sign, one decimal; never "-0.0"."""
    return f"{x:+.1f}" if round(x, 1) != 0 else "+0.0"


def gap(m: Makespans, p: str, k: int) -> float:
    """Per cent above the oracle's makespan, as drawn (k=0) or jittered (k=1)."""
    return 100 * (m[p][k] / m["oracle"][k] - 1)


def table(results: list[tuple[Task, Makespans]], policies: tuple[str, ...]) -> str:
    ours = [p for p in policies if p != "oracle" and "oracle" in policies]
    head = ["campaign", "load", "seed"]
    head += [f"{p} makespan h: as drawn → jittered" for p in policies]
    head += [f"{p} vs oracle: as drawn / jittered" for p in ours]
    body = []
    for t, m in results:
        row = [label(t.campaign), f"{t.load:.1f}", str(t.seed)]
        for p in policies:
            a, b = m[p]
            row.append(f"{a:.1f} → {b:.1f} ({signed(100 * (b / a - 1))} %)")
        row += [f"{signed(gap(m, p, 0))} / {signed(gap(m, p, 1))} %" for p in ours]
        body.append(row)
    lines = []
    for p in policies:
        moves = [(abs(100 * (m[p][1] / m[p][0] - 1)), t) for t, m in results]
        most, t = max(moves, key=lambda x: x[0])
        lines.append(
            f"- `{p}`: makespan moved by {most:.1f} % at most "
            f"({label(t.campaign)}, load {t.load:.1f}, seed {t.seed}), "
            f"{sum(x for x, _ in moves) / len(moves):.1f} % on average"
        )
    groups = sorted({(t.campaign, t.load) for t, _ in results})
    for p in ours:
        moves = [(abs(gap(m, p, 1) - gap(m, p, 0)), t) for t, m in results]
        most, t = max(moves, key=lambda x: x[0])
        means = []
        for c, ld in groups:
            ms = [m for t, m in results if (t.campaign, t.load) == (c, ld)]
            a, b = (sum(gap(m, p, k) for m in ms) / len(ms) for k in (0, 1))
            means.append(f"{label(c)} load {ld:.1f}: {signed(a)} / {signed(b)} %")
        lines.append(
            f"- `{p}` against the oracle: one run's gap moved by {most:.1f} points at most "
            f"({label(t.campaign)}, load {t.load:.1f}, seed {t.seed}); the mean over seeds, "
            f"as drawn / jittered: {'; '.join(means)}"
        )
    for p in ours:
        over = [
            [f"{t.load:.1f}/{t.seed}" for t, m in results if gap(m, p, k) > BAR] for k in (0, 1)
        ]
        lines.append(
            f"- `{p}` more than {BAR:g} % above the oracle: "
            f"{len(over[0])} of {len(results)} runs as drawn ({', '.join(over[0]) or 'none'}), "
            f"{len(over[1])} jittered ({', '.join(over[1]) or 'none'}) (load/seed)"
        )
    return render(head, body) + "\n\n" + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--loads", default="1.5,2.0")
    ap.add_argument("--campaigns", default="v100")
    ap.add_argument("--policies", default="oracle,ours,ours-submit")
    ap.add_argument("--jitter-s", type=float, default=1.0, help="most a job arrives later")
    ap.add_argument("--write", action="store_true", help="write the table into --doc")
    run_args(ap)
    a = ap.parse_args()
    policies = tuple(p.strip() for p in a.policies.split(",") if p.strip())
    tasks = [
        Task(c.strip(), float(ld), s, a.jobs, a.gpus, jitter_s=a.jitter_s, policies=policies)
        for c in a.campaigns.split(",")
        if c.strip()
        for ld in a.loads.split(",")
        for s in parse_seeds(a.seeds)
    ]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        results = list(pool.map(run, tasks))
    minutes = (time.perf_counter() - t0) / 60
    args = " ".join(sys.argv[1:])
    text = (
        f"Written by `python benchmarks/makespan_jitter.py{' ' + args if args else ''}` "
        f"({minutes:.0f} min with {processes(a.workers)}): each job arrives up to "
        f"{a.jitter_s:g} s later in the jittered run.\n\n" + table(results, policies)
    )
    print(text)
    if a.write:
        write_between(a.doc, *markers("jitter"), text.replace(" --write", ""))


if __name__ == "__main__":
    main()
