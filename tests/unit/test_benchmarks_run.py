"""Each benchmark that needs no Slurm lab runs at a small size and prints its figures: a
benchmark broken by a change of the code it measures fails here, not on the day someone
wants its figures. (``simulator_tables.py`` has its own tests; ``submit_latency.py`` and
``submit_rate.py`` submit jobs to a lab: ``tests/slurm/test_benchmarks_lab.py`` runs them. ``transport_bench.py`` starts
private munged instances, as the munge gate's tests do.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SMALL_SIM = ["--jobs", "200", "--gpus", "8", "--workers", "1", "--loads", "1.5"]

#: (script, arguments, a line the figures must include)
RUNS = [
    (
        "agent_bench.py",
        ["--nodes", "2", "--gpus", "2", "--jobs", "10", "--requests", "5"],
        r"PLACE handling, 5 requests .*median \d+ us",
    ),
    (
        "agent_bench.py",
        ["--nodes", "2", "--gpus", "2", "--jobs", "10", "--requests", "5", "--placed"],
        r"saving 10 time-limit accounts .*: \d+ ms",
    ),
    ("placement_bench.py", [], r"single placement over \d+ jobs: median [\d.]+ ms"),
    ("hooks_bench.py", ["--pairs", "1"], r"records spooled: 4 \(expected 4\)"),
    (
        "transport_bench.py",
        ["--n", "20", "--n-cli", "5"],
        r"round trip: tcp \+ munge, libmunge +median +[\d.]+ ms",
    ),
    ("sampler_bench.py", ["--seconds", "1", "--gpus", "1"], r"in-process: \d+ us CPU per tick"),
    ("sim_bench.py", ["--jobs", "200", "--gpus", "8"], r"ours: +[\d.]+ s for 200 jobs on 8 GPUs"),
    ("ingest_bench.py", ["--records", "200"], r"rebuild_episodes: 400 jobs -> 200 episodes"),
    (
        "retrain_bench.py",
        ["--episodes", "2000", "--classes", "10", "--tuples", "1000"],
        r"MAE of n vs the synthetic truth on 2000 random pairs: 0\.\d+",
    ),
    (
        "retrain_bench.py",
        ["--full-path", "400", "--classes", "10"],
        r"nightly retrain: 4 new records .*\n +retrain\(\) +[\d.]+ s .*published=True",
    ),
    (
        "makespan_jitter.py",
        ["--seeds", "1", "--campaigns", "synthetic", *SMALL_SIM],
        r"`ours` more than 3 % above the oracle: \d of 1 runs",
    ),
    (
        "seed_sensitivity.py",
        ["--seeds", "1", "--held-out-seeds", "2", "--drain-h", "", *SMALL_SIM],
        r"\| `ours` \| [−+]?[\d.]+ % \|",
    ),
]


@pytest.mark.parametrize(
    ("script", "args", "figure"),
    RUNS,
    ids=[f"{s}{' ' if a else ''}{' '.join(a)}" for s, a, _ in RUNS],
)
def test_the_benchmark_runs_and_prints_its_figures(
    script: str, args: list[str], figure: str
) -> None:
    r = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert re.search(figure, r.stdout), r.stdout[-3000:]
