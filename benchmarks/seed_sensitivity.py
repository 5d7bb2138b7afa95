"""How much one seed tells, measured: the two tables of docs/simulator.md's "How much one
seed tells" that compare single seeds with the oracle.

* ``drain``: V100 at load 2.0, seeds 1-10, with ``placement.throughput_drain_h`` an hour
  either side of its default; how far the means and single seeds move.
* ``oracle-error``: the oracle with every measured throughput off by a seeded factor within
  ±0.5 % and ±1 %, against the exact oracle, next to ``ours`` and ``ours-submit``, on V100,
  seeds 1-10 and the held-out seeds 21-30, both loads.

Prints both; ``--write`` puts each between its markers in docs/simulator.md
(``<!-- drain-setting -->``, ``<!-- oracle-error -->``)::

    .venv/bin/python benchmarks/seed_sensitivity.py --write       # ~20 min (2 cores)
    .venv/bin/python benchmarks/seed_sensitivity.py --seeds 1-2 --held-out-seeds 21 --jobs 2000 --gpus 64

The campaigns, trace and settings are :mod:`simulator_tables`' (same directory).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from simulator_tables import markers, prepared, processes, run_args, write_between

from slurm_colo.config import PlacementConfig
from slurm_colo.sim.metrics import render
from slurm_colo.sim.run import simulate
from slurm_colo.sim.spread import parse_seeds

BAR = 3.0  # per cent above the oracle
ERRORS = (0.005, 0.01)
OURS = ("ours", "ours-submit")
DEFAULT_DRAIN_H = PlacementConfig().throughput_drain_h


@dataclass(frozen=True)
class Task:
    load: float
    seed: int
    jobs: int
    gpus: int
    drain_h: float = DEFAULT_DRAIN_H
    campaign: str = "v100"


#: makespan h by policy name (the oracle with an error: "oracle-error 0.5")
Makespans = dict[str, float]


def error_name(e: float) -> str:
    return f"oracle-error {100 * e:g}"


def run(task: Task) -> tuple[Task, Makespans]:
    data, trace, setup = prepared(task.campaign, task.load, task.seed, task.jobs, task.gpus)
    setup = replace(setup, placement=replace(setup.placement, throughput_drain_h=task.drain_h))
    policies = ["exclusive-fifo", "oracle", *OURS]
    default = task.drain_h == DEFAULT_DRAIN_H
    out = {r.policy: r.makespan_h for r in simulate(trace, data, setup, policies)}
    for e in ERRORS if default else ():
        (r,) = simulate(trace, data, replace(setup, oracle_error=e), ["oracle-error"])
        out[error_name(e)] = r.makespan_h
    return task, out


def above(m: Makespans, p: str) -> float:
    """Per cent above the oracle's makespan on the same run."""
    return 100 * (m[p] / m["oracle"] - 1)


def vs_exclusive(m: Makespans, p: str) -> float:
    return 100 * (m[p] / m["exclusive-fifo"] - 1)


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def signed(x: float) -> str:
    """``x`` with its sign, one decimal; never "-0.0"; a minus sign, as the page writes it."""
    return (f"{x:+.1f}" if round(x, 1) != 0 else "+0.0").replace("-", "−")


def drain_table(runs: dict[Task, Makespans], load: float, seeds: list[int]) -> str:
    """One row per ``throughput_drain_h``; then how far one seed moved with it."""
    drains = sorted({t.drain_h for t in runs if t.load == load})
    head = [
        "`throughput_drain_h`",
        "mean makespan vs exclusive: `ours` / `ours-submit` / oracle",
        f"runs more than {BAR:g} % above the oracle (`ours` / `ours-submit`)",
        "worst seed above the oracle",
    ]
    body = []
    by_drain: dict[float, list[Makespans]] = {}
    for d in drains:
        ms = [runs[t] for t in runs if t.load == load and t.drain_h == d and t.seed in seeds]
        by_drain[d] = ms
        means = " / ".join(
            signed(mean([vs_exclusive(m, p) for m in ms])) for p in (*OURS, "oracle")
        )
        over = " / ".join(str(sum(above(m, p) > BAR for m in ms)) for p in OURS)
        worst = " / ".join(signed(max(above(m, p) for m in ms)) for p in OURS)
        name = f"**{d:g}**" if d == DEFAULT_DRAIN_H else f"{d:g}"
        body.append([name, f"{means} %", over, f"{worst} %"])
    lines = []
    for p in ("oracle", *OURS):
        spans = []
        for s in seeds:
            # in the order of ``drains``, as the line names them
            at = {t.drain_h: runs[t] for t in runs if t.load == load and t.seed == s}
            xs = [vs_exclusive(at[d], p) for d in drains]
            spans.append((max(xs) - min(xs), s, xs))
        most, s, xs = max(spans)
        lines.append(
            f"- `{p}`: one seed's makespan against exclusive moved by up to {most:.1f} points "
            f"(seed {s}: {', '.join(signed(x) + ' %' for x in xs)} at "
            f"{', '.join(f'{d:g}' for d in drains)} h); its mean by "
            f"{spread(by_drain, p):.1f} points at most"
        )
    return render(head, body) + "\n\n" + "\n".join(lines)


def spread(by_drain: dict[float, list[Makespans]], p: str) -> float:
    """How far ``p``'s mean makespan against exclusive moved between any two settings."""
    means = [mean([vs_exclusive(m, p) for m in ms]) for ms in by_drain.values()]
    return max(means) - min(means)


def oracle_error_table(
    runs: dict[Task, Makespans], loads: list[float], seed_sets: list[list[int]]
) -> str:
    defaults = {(t.load, t.seed): m for t, m in runs.items() if t.drain_h == DEFAULT_DRAIN_H}
    names = [*(error_name(e) for e in ERRORS), *OURS]
    cols = [
        f"mean makespan above the oracle, {fmt_seeds(ss)}, load "
        + " / ".join(f"{ld:.1f}" for ld in loads)
        for ss in seed_sets
    ]
    n_all = len(loads) * sum(len(ss) for ss in seed_sets)
    head = [
        "policy",
        *cols,
        f"runs more than {BAR:g} % above the oracle (of {n_all})",
        "worst run",
    ]
    body = []
    for p in names:
        cells = []
        for ss in seed_sets:
            cells.append(
                " / ".join(signed(mean([above(defaults[(ld, s)], p) for s in ss])) for ld in loads)
                + " %"
            )
        every = [
            (above(defaults[(ld, s)], p), ld, s) for ss in seed_sets for s in ss for ld in loads
        ]
        worst, ld, s = max(every)
        label = f"`oracle-error` ±{p.split()[1]} %" if p.startswith("oracle-error") else f"`{p}`"
        body.append(
            [
                label,
                *cells,
                str(sum(x > BAR for x, _, _ in every)),
                f"{signed(worst)} % (seed {s}, load {ld:.1f})",
            ]
        )
    return render(head, body)


def fmt_seeds(seeds: list[int]) -> str:
    """ "seeds 1–10" for a run of seeds, else each one ("seed 21", "seeds 1, 3")."""
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}–{seeds[-1]}"
    return "seed" + "s" * (len(seeds) > 1) + " " + ", ".join(map(str, seeds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1-10", help="the tables' seeds")
    ap.add_argument("--held-out-seeds", default="21-30", help="seeds no setting was chosen on")
    ap.add_argument("--loads", default="1.5,2.0", help="loads of the oracle-error table")
    ap.add_argument("--drain-load", type=float, default=2.0, help="load of the drain table")
    ap.add_argument("--drain-h", default="23,25", help="settings besides the default")
    ap.add_argument("--write", action="store_true", help="write both tables into --doc")
    run_args(ap)
    a = ap.parse_args()
    seeds, held = parse_seeds(a.seeds), parse_seeds(a.held_out_seeds)
    loads = [float(x) for x in a.loads.split(",")]
    others = [float(x) for x in a.drain_h.split(",") if x.strip()]
    tasks = [Task(ld, s, a.jobs, a.gpus) for ld in loads for s in [*seeds, *held]]
    if a.drain_load not in loads:
        tasks += [Task(a.drain_load, s, a.jobs, a.gpus) for s in seeds]
    tasks += [Task(a.drain_load, s, a.jobs, a.gpus, drain_h=d) for d in others for s in seeds]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        runs = dict(pool.map(run, tasks))
    minutes = (time.perf_counter() - t0) / 60
    args = " ".join(x for x in sys.argv[1:] if x != "--write")
    cmd = f"python benchmarks/seed_sensitivity.py{' ' + args if args else ''}"
    size = f"{a.jobs} jobs per seed on {a.gpus} GPUs, V100 data"
    drain = (
        f"Written by `{cmd}` ({minutes:.0f} min with {processes(a.workers)}, both tables): "
        f"{size}, load {a.drain_load:.1f}, {fmt_seeds(seeds)}.\n\n"
        + drain_table(runs, a.drain_load, seeds)
    )
    error = (
        f"Written by `{cmd}` (with the table above): {size}; each run against the exact "
        "oracle on the same seed.\n\n" + oracle_error_table(runs, loads, [seeds, held])
    )
    print(drain + "\n\n" + error)
    if a.write:
        write_between(a.doc, *markers("drain-setting"), drain)
        write_between(a.doc, *markers("oracle-error"), error)
        print(f"both tables written into {a.doc}", file=sys.stderr)


if __name__ == "__main__":
    main()
