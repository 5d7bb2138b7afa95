"""Placement speed: one job against 2,000 GPUs holding 10,000 jobs, and a batch re-plan.

Prints figures; does not assert. Targets (issue 5): median single placement < 1 ms, batch
re-plan of 10,000 pending jobs < 1 s, on 2 cores (pin with ``taskset -c 0,1``).

    .venv/bin/python benchmarks/placement_bench.py [--cross-user never|shard] [--seed N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from slurm_colo.config import PlacementConfig
from slurm_colo.gavel import bundled_path, load_gavel
from slurm_colo.placement import ClusterView, GpuView, JobRequest, Occupant, place, plan
from slurm_colo.sim.truth import oracle_scores

NODES, GPUS_PER_NODE, SLOTS, MEM = 250, 8, 8, 80.0
USERS, JOBS = 64, 10_000


def build_view(rng: random.Random, classes: list[str], jobs: int, mixed_users: bool) -> ClusterView:
    """2,000 GPUs; ``jobs`` running or pending jobs spread at random, 1-12 GiB each. Under
    MPS a GPU holds one user's jobs (as the policy keeps it)."""
    gpus = [
        GpuView(
            node=f"gpu{n:03d}",
            index=i,
            gres_type=f"h100_s{i}",
            memory_gib=MEM,
            slots=SLOTS,
            model="h100",
        )
        for n in range(NODES)
        for i in range(GPUS_PER_NODE)
    ]
    owner = [rng.randrange(USERS) for _ in gpus]
    placed = 0
    while placed < jobs:
        g = rng.randrange(len(gpus))
        gv = gpus[g]
        if gv.free_slots <= 0 or gv.used_memory_gib() > MEM - 14:
            continue
        u = rng.randrange(USERS) if mixed_users else owner[g]
        gv.occupants.append(
            Occupant(
                key=f"r{placed}",
                user=f"u{u}",
                uid=1000 + u,
                cls=rng.choice(classes),
                memory_gib=rng.uniform(1, 12),
                pending=rng.random() < 0.3,
            )
        )
        placed += 1
    return ClusterView(gpus)


def requests(rng: random.Random, classes: list[str], n: int) -> list[JobRequest]:
    out = []
    for i in range(n):
        u = rng.randrange(USERS)
        out.append(
            JobRequest(
                key=f"new{i}",
                user=f"u{u}",
                uid=1000 + u,
                cls=rng.choice(classes),
                memory_gib=rng.uniform(1, 12),
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cross-user", default="never", choices=["never", "shard"])
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    data = load_gavel(bundled_path(), "v100")
    scores = oracle_scores(data)
    cfg = PlacementConfig(cross_user=a.cross_user)
    rng = random.Random(a.seed)
    mixed = a.cross_user == "shard"
    view = build_view(rng, data.classes, JOBS, mixed)
    open_gpus = sum(g.open() for g in view.gpus)
    print(
        f"view: {len(view.gpus)} GPUs, {sum(len(g.occupants) for g in view.gpus)} jobs, "
        f"{open_gpus} GPUs with a free slot, cross_user={a.cross_user}"
    )

    t0 = time.perf_counter()
    place(requests(rng, data.classes, 1)[0], view, scores, cfg)
    print(f"first placement (builds index + cache): {1000 * (time.perf_counter() - t0):.2f} ms")
    times = []
    shared = 0
    for job in requests(rng, data.classes, 2000):
        t = time.perf_counter()
        d = place(job, view, scores, cfg)
        times.append(time.perf_counter() - t)
        shared += d.shared
    times.sort()
    print(
        f"single placement over 2000 jobs: median {1000 * statistics.median(times):.3f} ms, "
        f"p90 {1000 * times[int(0.9 * len(times))]:.3f} ms, max {1000 * times[-1]:.2f} ms "
        f"({shared} shared)"
    )

    # the agent rebuilds its view from every Slurm snapshot: same state, new objects
    rebuilt = ClusterView(
        [
            GpuView(g.node, g.index, g.gres_type, g.memory_gib, g.slots, g.model, list(g.occupants))
            for g in view.gpus
        ]
    )
    t = time.perf_counter()
    place(requests(rng, data.classes, 1)[0], rebuilt, scores, cfg)
    print(
        f"first placement on a rebuilt view of the same state: "
        f"{1000 * (time.perf_counter() - t):.2f} ms"
    )

    # batch re-plan: 10,000 pending jobs placed one after another into a view that holds
    # the running ones (half of the jobs above), each decision visible to the next
    view2 = build_view(random.Random(a.seed + 1), data.classes, JOBS // 2, mixed)
    batch = requests(rng, data.classes, 10_000)
    t = time.perf_counter()
    ds = plan(batch, view2, scores, cfg)
    dt = time.perf_counter() - t
    print(
        f"batch re-plan of {len(batch)} pending jobs: {dt:.3f} s "
        f"({sum(d.shared for d in ds)} shared, {sum(not d.shared for d in ds)} own GPU)"
    )


if __name__ == "__main__":
    main()
