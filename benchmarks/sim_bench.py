"""Simulator speed: 10,000 jobs on 256 GPUs, every policy; prints seconds per policy.

Target (issue 5): under 10 s per policy. The model fit (done once, shared by ``ours`` and
``ours-submit``) is timed separately.

    .venv/bin/python benchmarks/sim_bench.py [--jobs 10000] [--gpus 256] [--cross-user shard]
"""

from __future__ import annotations

import argparse
import time

from slurm_colo.config import PlacementConfig
from slurm_colo.gavel import bundled_path, load_gavel
from slurm_colo.sim.engine import SimConfig
from slurm_colo.sim.run import POLICIES, Setup, predicted_scores, simulate
from slurm_colo.sim.trace import philly_trace, read_philly
from slurm_colo.sim.truth import split_pairs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--load", type=float, default=1.5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cross-user", default="shard", choices=["never", "shard"])
    a = ap.parse_args()
    data = load_gavel(bundled_path(), "v100")
    trace = philly_trace(
        read_philly(bundled_path("philly_job_distribution.csv")),
        data.classes,
        jobs=a.jobs,
        gpus=a.gpus,
        load=a.load,
        seed=a.seed,
        max_duration_s=48 * 3600,
    )
    setup = Setup(SimConfig(gpus=a.gpus, seed=a.seed), PlacementConfig(cross_user=a.cross_user))
    t = time.perf_counter()
    train, _ = split_pairs(data, setup.hidden_share, a.seed)
    scores = predicted_scores(data, train, a.seed)
    print(f"model fit on {len(train)} pairs: {time.perf_counter() - t:.2f} s")
    for r in simulate(trace, data, setup, POLICIES, scores=scores):
        print(f"{r.policy:>20}: {r.wall_s:6.2f} s for {r.jobs} jobs on {a.gpus} GPUs")


if __name__ == "__main__":
    main()
