"""The result tables of docs/simulator.md, measured afresh: every campaign, load and seed.

Runs exclusive FIFO, Gandiva-random, ``ours``, ``ours-submit`` and the oracle on the V100
and K80 data of the bundled Gavel file and on a synthetic campaign with few gaining pairs
(:func:`slurm_colo.model.evaluate.synthetic_like` of the V100 data, scaled by
:func:`slurm_colo.sim.campaigns.low_gain`), at loads 1.5 and 2.0, seeds 1-10; prints the
tables and writes them into docs/simulator.md between its ``<!-- tables -->`` markers (the
rest of the page is left alone), so the figures there are always the code's::

    .venv/bin/python benchmarks/simulator_tables.py                 # the full grid, ~18 min (2 cores)
    .venv/bin/python benchmarks/simulator_tables.py --seeds 1-2 --jobs 2000 --gpus 64 --no-write
    .venv/bin/python benchmarks/simulator_tables.py --gavel FILE --campaigns p100 --summary-into p100
    .venv/bin/python benchmarks/simulator_tables.py --check --seeds 1 --loads 1.5

``--held-out`` runs seeds 21-30 (no setting was chosen on them) and writes only the
summary, between the ``<!-- held-out -->`` markers; ``--summary-into NAME`` does the same
for any run, between ``<!-- NAME -->`` markers (the P100 line above: a Gavel file with a
GPU model the bundled data lacks). ``benchmarks/simulator_doc.py`` runs every writer of the
page at once.

``--check`` writes nothing: it measures the seeds asked for and exits 1, naming the rows,
when a per-seed row the page holds for them is not what the code gives now (the test suite
runs it for seed 1, so a change to the policy or the simulator that leaves the page stale
fails there).

Each GPU has its model's memory (slurm_colo.sim.campaigns.GPU_MEMORY_GIB); users may share
a GPU (``placement.cross_user = "shard"``); the placement settings are the defaults.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_colo.config import PlacementConfig
from slurm_colo.contracts.enums import CrossUser
from slurm_colo.gavel import GavelData, bundled_path, load_gavel
from slurm_colo.model.evaluate import synthetic_like
from slurm_colo.sim.campaigns import gpu_memory_gib, low_gain
from slurm_colo.sim.engine import SimConfig
from slurm_colo.sim.metrics import render
from slurm_colo.sim.run import Setup, simulate
from slurm_colo.sim.spread import parse_seeds
from slurm_colo.sim.trace import SimJob, philly_trace, read_philly

DOC = Path(__file__).resolve().parent.parent / "docs" / "simulator.md"
POLICIES = ("exclusive-fifo", "gandiva-random", "ours", "ours-submit", "oracle")
OURS = ("ours", "ours-submit")
#: the synthetic campaign: seed of synthetic_like, share of its pairs that gain
SYNTHETIC_SEED, GAIN_SHARE = 2, 0.2
#: (figure, heading, format); lower is better for every one
FIGURES = (
    ("makespan_h", "makespan h", "{:.1f}"),
    ("avg_jct_h", "avg JCT h", "{:.2f}"),
    ("p99_jct_h", "p99 JCT h", "{:.1f}"),
    ("avg_slowdown", "avg slowdown", "{:.2f}"),
    ("worst_decile_slowdown", "worst 10% slowdown", "{:.2f}"),
    ("worst_class_slowdown", "worst class", "{:.2f}"),
    ("gpu_hours", "GPU-hours", "{:.0f}"),
    ("harmful_share", "harmful", "{:.3%}"),
)
SHORT = {
    "makespan_h": "makespan",
    "avg_jct_h": "avg JCT",
    "p99_jct_h": "p99 JCT",
    "avg_slowdown": "avg slowdown",
    "worst_decile_slowdown": "worst 10%",
    "worst_class_slowdown": "worst class",
    "gpu_hours": "GPU-hours",
    "harmful_share": "harmful",
}


def campaign(name: str, gavel: str = "") -> GavelData:
    """A campaign by name: ``synthetic``, or a GPU key of the Gavel-format file ``gavel``
    (the bundled V100/K80 file when empty)."""
    if name == "synthetic":
        base = synthetic_like(load_gavel(bundled_path(), "v100"), SYNTHETIC_SEED, "contention")
        return low_gain(base, GAIN_SHARE)
    return load_gavel(Path(gavel) if gavel else bundled_path(), name)


@dataclass(frozen=True)
class Task:
    campaign: str
    load: float
    seed: int
    jobs: int
    gpus: int
    gavel: str = ""


def prepared(
    name: str, load: float, seed: int, jobs: int, gpus: int, gavel: str = ""
) -> tuple[GavelData, list[SimJob], Setup]:
    """One run's campaign, trace and setup: Philly-like jobs capped at 48 h, each GPU its
    model's memory, users may share a GPU, the default placement settings."""
    data = campaign(name, gavel)
    trace = philly_trace(
        read_philly(bundled_path("philly_job_distribution.csv")),
        data.classes,
        jobs=jobs,
        gpus=gpus,
        load=load,
        seed=seed,
        max_duration_s=48 * 3600,
    )
    setup = Setup(
        SimConfig(
            gpus=gpus, gpu_memory_gib=gpu_memory_gib(data.gpu), gpu_model=data.gpu, seed=seed
        ),
        PlacementConfig(cross_user=CrossUser.SHARD),
    )
    return data, trace, setup


def run(task: Task) -> tuple[Task, list[dict[str, Any]], float]:
    data, trace, setup = prepared(
        task.campaign, task.load, task.seed, task.jobs, task.gpus, task.gavel
    )
    t0 = time.perf_counter()
    results = simulate(trace, data, setup, POLICIES)
    return task, [r.row() for r in results], time.perf_counter() - t0


def losses(ours: dict[str, Any], gandiva: dict[str, Any]) -> list[str]:
    """The figures where ``ours`` is worse than Gandiva (harmful sharing: not strictly
    better, unless neither shares harmfully at all)."""
    out = [SHORT[f] for f, _, _ in FIGURES if f != "harmful_share" and ours[f] > gandiva[f]]
    h, hg = ours["harmful_share"], gandiva["harmful_share"]
    if h > hg or (h == hg and hg > 0):
        out.append("harmful")
    return out


def pct(a: float, b: float) -> str:
    return f"{100 * (a / b - 1):+.1f} %"


def per_seed_table(rows: dict[int, dict[str, dict[str, Any]]]) -> str:
    head = ["seed", "policy", "vs exclusive", "vs oracle"] + [h for _, h, _ in FIGURES]
    head.append("worse than Gandiva on")
    body = []
    for seed in sorted(rows):
        by = rows[seed]
        ex, orc, gd = by["exclusive-fifo"], by["oracle"], by["gandiva-random"]
        for p in ("gandiva-random", *OURS, "oracle"):
            r = by[p]
            cells = [str(seed), p, pct(r["makespan_h"], ex["makespan_h"])]
            cells.append(pct(r["makespan_h"], orc["makespan_h"]))
            cells += [fmt.format(r[f]) for f, _, fmt in FIGURES]
            cells.append("" if p == "gandiva-random" else (", ".join(losses(r, gd)) or "none"))
            body.append(cells)
    return render(head, body)


def summary_table(grid: dict[tuple[str, float], dict[int, dict[str, dict[str, Any]]]]) -> str:
    head = [
        "campaign",
        "load",
        "policy",
        "seeds ≥ Gandiva on every figure",
        "makespan vs exclusive (mean, worst)",
        "Gandiva's",
        "makespan vs oracle (mean, worst)",
        "figures lost to Gandiva (seeds)",
    ]
    body = []
    for (name, load), rows in grid.items():
        for p in (*OURS, "oracle"):
            wins, lost, vs_ex, vs_or, g_ex = 0, {}, [], [], []
            for seed in sorted(rows):
                by = rows[seed]
                ls = losses(by[p], by["gandiva-random"])
                wins += not ls
                for f in ls:
                    lost[f] = lost.get(f, 0) + 1
                ex = by["exclusive-fifo"]["makespan_h"]
                vs_ex.append(100 * (by[p]["makespan_h"] / ex - 1))
                g_ex.append(100 * (by["gandiva-random"]["makespan_h"] / ex - 1))
                vs_or.append(100 * (by[p]["makespan_h"] / by["oracle"]["makespan_h"] - 1))
            n = len(rows)
            body.append(
                [
                    name,
                    f"{load:.1f}",
                    p,
                    f"{wins} of {n}",
                    f"{sum(vs_ex) / n:+.1f} % ({max(vs_ex):+.1f})",
                    f"{sum(g_ex) / n:+.1f} %",
                    f"{sum(vs_or) / n:+.1f} % ({max(vs_or):+.1f})",
                    ", ".join(f"{f} ({k})" for f, k in lost.items()) or "none",
                ]
            )
    return render(head, body)


def missed(grid: dict[tuple[str, float], dict[int, dict[str, dict[str, Any]]]]) -> str:
    """In words: every seed where ``ours`` or ``ours-submit`` is worse than Gandiva on a
    figure (by how much) or more than 3 % above the oracle's makespan."""
    lines = []
    for (name, load), rows in grid.items():
        for p in OURS:
            for seed in sorted(rows):
                by = rows[seed]
                r, g, o = by[p], by["gandiva-random"], by["oracle"]
                what = [
                    f"{SHORT[f]} {fmt.format(r[f])} against {fmt.format(g[f])}"
                    for f, _, fmt in FIGURES
                    if SHORT[f] in losses(r, g)
                ]
                over = 100 * (r["makespan_h"] / o["makespan_h"] - 1)
                if over > 3.0:
                    what.append(f"makespan {over:+.1f} % above the oracle's")
                if what:
                    lines.append(
                        f"- {name}, load {load:.1f}, seed {seed}, `{p}`: {'; '.join(what)}"
                    )
    return "\n".join(lines) or "- none"


def section(doc: str, name: str, load: float) -> list[str]:
    """The lines of ``doc``'s per-seed table for campaign ``name`` at ``load`` (empty when
    the page has no such table)."""
    head = f"### {label(name)}, load {load:.1f}\n"
    at = doc.find(head)
    if at < 0:
        return []
    body = doc[at + len(head) :]
    ends = [i for i in (body.find("\n### "), body.find(markers("tables")[1])) if i >= 0]
    return body[: min(ends)].splitlines() if ends else body.splitlines()


def stale_rows(
    doc: str, grid: dict[tuple[str, float], dict[int, dict[str, dict[str, Any]]]]
) -> list[str]:
    """Each per-seed row measured now that ``doc`` does not hold word for word, with the
    row the page has for that campaign, load, seed and policy (or that it has none)."""
    out = []
    for (name, load), rows in grid.items():
        have = section(doc, name, load)
        for line in per_seed_table(rows).splitlines()[2:]:
            if line in have:
                continue
            key = "| " + " | ".join(c.strip() for c in line.strip("|").split("|")[:2]) + " |"
            old = next((h for h in have if h.startswith(key)), "(no such row)")
            out.append(f"{name}, load {load:.1f}:\n  page: {old}\n  now:  {line}")
    return out


def label(name: str) -> str:
    if name == "synthetic":
        return (
            f"synthetic campaign with few gaining pairs (V100 shape, `synthetic_like` seed "
            f"{SYNTHETIC_SEED}, contention, {GAIN_SHARE:.0%} of pairs gaining)"
        )
    return f"{name.upper()} data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default=None, help="default 1-10; 21-30 with --held-out")
    ap.add_argument("--loads", default="1.5,2.0")
    ap.add_argument("--campaigns", default="v100,k80,synthetic")
    run_args(ap)
    ap.add_argument(
        "--gavel",
        default="",
        metavar="FILE",
        help="Gavel-format file the campaigns other than 'synthetic' come from (default: the "
        "bundled V100/K80 data); e.g. a GPU model the policy was never tuned on with "
        "--campaigns p100 --summary-into p100",
    )
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the page's rows for these seeds are not what the code "
        "gives now",
    )
    ap.add_argument(
        "--held-out",
        action="store_true",
        help="seeds no setting was chosen on (21-30 unless --seeds): write only the summary and "
        "the runs worse than Gandiva or the oracle, between the page's held-out markers",
    )
    ap.add_argument(
        "--summary-into",
        default="",
        metavar="NAME",
        help="write only the summary and the runs worse than Gandiva or the oracle, between the "
        "page's <!-- NAME: begin/end --> markers (--held-out: 'held-out'); e.g. p100 with "
        "--gavel FILE --campaigns p100",
    )
    a = ap.parse_args()
    if a.held_out and a.check:
        ap.error("--check compares the per-seed tables: not with --held-out")
    if a.summary_into and a.check:
        ap.error("--check compares the per-seed tables: not with --summary-into")
    if a.held_out and a.summary_into not in ("", "held-out"):
        ap.error("--held-out writes between the held-out markers: not with --summary-into")
    summary_only = a.summary_into or ("held-out" if a.held_out else "")
    a.seeds = a.seeds or ("21-30" if a.held_out else "1-10")
    seeds = parse_seeds(a.seeds)
    loads = [float(x) for x in a.loads.split(",")]
    names = [c.strip() for c in a.campaigns.split(",") if c.strip()]
    tasks = [Task(c, ld, s, a.jobs, a.gpus, a.gavel) for c in names for ld in loads for s in seeds]
    grid: dict[tuple[str, float], dict[int, dict[str, dict[str, Any]]]] = {
        (c, ld): {} for c in names for ld in loads
    }
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        for task, rows, wall in pool.map(run, tasks):
            grid[(task.campaign, task.load)][task.seed] = {r["policy"]: r for r in rows}
            print(
                f"{task.campaign} load {task.load:g} seed {task.seed}: {wall:.0f} s",
                file=sys.stderr,
            )
    minutes = (time.perf_counter() - t0) / 60
    if a.check:
        stale = stale_rows(a.doc.read_text(encoding="utf-8"), grid)
        for line in stale:
            print(line)
        if stale:
            sys.exit(
                f"{a.doc}: {len(stale)} row(s) stale; write the page again (every block "
                "comes from the same code): python benchmarks/simulator_doc.py"
            )
        print(f"{a.doc}: every row of these seeds is what the code gives ({minutes:.1f} min)")
        return
    cmd = (
        "python benchmarks/simulator_tables.py"
        + " --held-out" * a.held_out
        + (f" --summary-into {a.summary_into}" if a.summary_into and not a.held_out else "")
        + "".join(
            f" --{k} {v}"
            for k, v, d in (
                ("seeds", a.seeds, "21-30" if a.held_out else "1-10"),
                ("loads", a.loads, "1.5,2.0"),
                ("campaigns", a.campaigns, "v100,k80,synthetic"),
                ("jobs", a.jobs, 10_000),
                ("gpus", a.gpus, 256),
                ("gavel", Path(a.gavel).name if a.gavel else "", ""),
            )
            if v != d
        )
    )
    parts = [
        (
            f"Written by `{cmd}` ({minutes:.0f} min with {processes(a.workers)}): "
            f"{a.jobs} single-GPU jobs per seed on {a.gpus} GPUs, users may share a GPU, "
            "each GPU its model's memory, default placement settings."
        ),
        # a summary on its own sits under the page's own paragraph: no heading
        ("" if summary_only else "### Summary\n\n") + summary_table(grid),
        "Where `ours` or `ours-submit` is worse than Gandiva-random on a figure, or more than "
        "3 % above the oracle's makespan (Gandiva's value, or the oracle's, second):\n\n"
        + missed(grid),
    ]
    per_seed = [
        f"### {label(name)}, load {load:.1f}\n\n" + per_seed_table(rows)
        for (name, load), rows in grid.items()
    ]
    print("\n\n".join(parts + per_seed))
    if a.no_write:
        return
    if summary_only:  # the summary only: the per-seed rows were printed
        begin, end = markers(summary_only)
        write_between(a.doc, begin, end, "\n\n".join(parts))
    else:
        write_between(a.doc, *markers("tables"), "\n\n".join(parts + per_seed))
    print(f"tables written into {a.doc}", file=sys.stderr)


def run_args(ap: argparse.ArgumentParser, size: bool = True) -> None:
    """The options every writer of docs/simulator.md takes: the size of each run (unless
    ``size`` False), the processes at once, the page."""
    if size:
        ap.add_argument("--jobs", type=int, default=10_000)
        ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2, help="processes at once")
    ap.add_argument("--doc", type=Path, default=DOC, help="the page (default: docs/simulator.md)")


def processes(n: int) -> str:
    """How many processes a run took, in words: "2 processes", "1 process"."""
    return f"{n} process" + "es" * (n != 1)


def markers(name: str) -> tuple[str, str]:
    """The page's markers of the block ``name``."""
    return f"<!-- {name}: begin -->", f"<!-- {name}: end -->"


def write_between(path: Path, begin: str, end: str, text: str) -> None:
    doc = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(doc):
        sys.exit(f"{path}: no {begin} ... {end} markers to write between")
    path.write_text(pattern.sub(lambda _: f"{begin}\n{text}\n{end}", doc), encoding="utf-8")


if __name__ == "__main__":
    main()
