"""Retrain benchmark: 1 million co-location episodes over 500 classes (synthetic).

Prints the time and peak memory of everything the nightly retrain does after reading the
database: episodes -> observations (recency weights), held-out check, full fit, table.
Target: under 30 s and under 1 GiB on a 2-core machine.

    .venv/bin/python benchmarks/retrain_bench.py [--episodes 1000000] [--classes 500]

``--full-path RECORDS`` times the whole command from stored job records instead (SQLite):
the first retrain, which builds every episode (cold), and a nightly one after 1 % more
records arrived, which rebuilds only their episodes; each runs in its own process, as the
nightly job does, and reports its own time and peak memory.

    .venv/bin/python benchmarks/retrain_bench.py --full-path 2000000 [--classes 500] [--nightly-share 0.01]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from slurm_colo.model import Observations, fit_table
from slurm_colo.model.history import PairEpisodes, add_pair_episodes, pair_episodes
from slurm_colo.model.validate import holdout_mae


def synthetic(n_episodes: int, n_classes: int, seed: int = 0) -> tuple[PairEpisodes, np.ndarray]:
    """Classes in families with batch sizes; n(a|b) = 1 / (1 + u_a . v_b) plus noise."""
    rng = np.random.default_rng(seed)
    fams = max(1, n_classes // 10)
    names = [
        f"fam{i % fams}-bs{2 ** (3 + (i // fams) % 8)}" + (f"v{i}" if i >= fams * 8 else "")
        for i in range(n_classes)
    ]
    fam_u = rng.uniform(0.2, 1.0, (fams, 2))
    scale = np.array([0.6 + 0.1 * ((i // fams) % 8) for i in range(n_classes)])
    u = fam_u[np.arange(n_classes) % fams] * scale[:, None] + rng.normal(0, 0.05, (n_classes, 2))
    u = np.clip(u, 0.05, None)
    truth = 1.0 / (1.0 + 0.8 * u @ u.T)
    # sites run some pairs a lot and most pairs never: Zipf-like pair popularity
    a = rng.zipf(1.3, n_episodes) % n_classes
    b = rng.integers(0, n_classes, n_episodes)
    na = np.clip(truth[a, b] + rng.normal(0, 0.03, n_episodes), 0.02, 1.0)
    nb = np.clip(truth[b, a] + rng.normal(0, 0.03, n_episodes), 0.02, 1.0)
    nb[a == b] = na[a == b]
    hours = rng.exponential(2.0, n_episodes) + 0.05
    end = 1.8e9 - rng.uniform(0, 180 * 86400, n_episodes)
    q = np.where(rng.random(n_episodes) < 0.8, 1.0, 0.3)
    fault = rng.random(n_episodes) < 1e-4
    ep = PairEpisodes(
        names,
        a.astype(np.int64),
        b.astype(np.int64),
        na,
        nb,
        hours,
        end,
        q,
        q.copy(),
        fault,
        np.zeros(n_episodes, bool),
    )
    return ep, truth


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=1_000_000)
    ap.add_argument("--classes", type=int, default=500)
    ap.add_argument(
        "--tuples",
        type=int,
        default=100_000,
        help="also time the per-episode conversion of this many stored episodes",
    )
    ap.add_argument(
        "--full-path",
        type=int,
        default=0,
        metavar="RECORDS",
        help="instead: store this many job records (pairs sharing a GPU; --classes classes) in SQLite "
        "and time `retrain` end to end: the first (cold) run, then a nightly one",
    )
    ap.add_argument(
        "--nightly-share",
        type=float,
        default=0.01,
        help="with --full-path: new records before the nightly run, as a share",
    )
    ap.add_argument("--retrain-child", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--now", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--scores", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.retrain_child:
        _retrain_child(args.retrain_child, args.now, args.scores)
        return
    if args.full_path:
        full_path(args.full_path, args.nightly_share, args.classes)
        return
    ep, truth = synthetic(args.episodes, args.classes)
    t0 = time.perf_counter()
    obs = Observations()
    add_pair_episodes(obs, ep, now=1.8e9, half_life_days=30.0)
    t1 = time.perf_counter()
    mae, hidden, hyper = holdout_mae(obs, share=0.2, seed=0)
    t2 = time.perf_counter()
    table = fit_table(obs, seed=0, hyper=hyper)
    t3 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    names = ep.classes
    err = np.mean(
        [
            abs(table.pair(names[i], names[j]).n_a - truth[i, j])
            for i, j in np.random.default_rng(1).integers(0, len(names), (2000, 2))
        ]
    )
    print(
        f"episodes {args.episodes:,}, classes {args.classes}, ordered entries {table.training['entries']:,}, "
        f"pairs in table {len(table.pairs):,}"
    )
    print(f"observations {t1 - t0:6.2f} s")
    print(f"held-out fit {t2 - t1:6.2f} s  (MAE {mae:.4f} on {hidden:,} pairs)")
    print(f"full fit     {t3 - t2:6.2f} s")
    print(f"total        {t3 - t0:6.2f} s  (target < 30 s)")
    print(f"peak memory  {peak:6.0f} MiB (target < 1024 MiB)")
    print(f"MAE of n vs the synthetic truth on 2000 random pairs: {err:.4f}")
    if args.tuples:
        k = args.tuples
        rows = [
            (
                0.0,
                3600.0,
                [
                    (1, names[int(ep.a[i])], float(ep.n_a[i]), "progress"),
                    (2, names[int(ep.b[i])], float(ep.n_b[i]), "progress"),
                ],
                False,
                False,
            )
            for i in range(k)
        ]
        t4 = time.perf_counter()
        pair_episodes(rows)
        t5 = time.perf_counter()
        print(f"conversion of stored episodes to arrays: {k / (t5 - t4):,.0f} episodes/s")


def _retrain_child(url: str, now: float, scores: str) -> None:
    """Run one retrain in this process and print its figures as JSON (one line)."""
    from slurm_colo.config import Config, ScoresConfig
    from slurm_colo.store import make_engine
    from slurm_colo.train.by_model import retrain_site

    engine = make_engine(url)
    cfg = Config(scores=ScoresConfig(path=scores, window_days=10_000))
    t0 = time.perf_counter()
    run = retrain_site(engine, cfg, now=now, force=True)  # as `slurm-colo retrain` does
    t1 = time.perf_counter()
    res = run.outcomes[0].result
    if res is None:
        raise SystemExit(
            f"no score set trained: {run.outcomes[0].skipped or run.outcomes[0].error}"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(
        json.dumps(
            {
                "seconds": t1 - t0,
                "peak_mib": peak,
                "episodes": res.info["episodes"],
                "records_built": res.info["records_built"],
                "published": res.published,
            }
        )
    )


def _timed_retrain(url: str, now: float, scores: str) -> dict[str, Any]:
    """A retrain in a fresh process, as the nightly job runs: its own time and peak memory."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--retrain-child", url, "--now", repr(now), "--scores", scores],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    res: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    res["process_seconds"] = time.perf_counter() - t0
    return res


def _later(recs: list[Any], dt: float) -> list[Any]:
    """The records moved ``dt`` seconds later (the next day's jobs)."""
    for r in recs:
        r.start += dt
        r.end += dt
        for c in r.co_runners:
            c.start += dt
            c.end += dt
    return recs


def full_path(n_records: int, nightly_share: float, n_classes: int = 40) -> None:
    """Store ``n_records`` job records in SQLite, then time the first retrain (cold: every
    episode built) and a nightly one after ``nightly_share`` more records arrived (only
    their episodes rebuilt), each in its own process."""
    import tempfile

    from slurm_colo.store import ingest_records, make_engine, upgrade

    sys.path.insert(0, str(Path(__file__).parent))
    from ingest_bench import records  # type: ignore[import-not-found]

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/h.db"
        engine = make_engine(url)
        upgrade(engine)
        t0 = time.perf_counter()
        classes = [f"model{i}-bs{2 ** (4 + i % 5)}" for i in range(n_classes)]
        for s in range(0, n_records, 100_000):
            ingest_records(
                engine, records(min(100_000, n_records - s), first_id=1 + s, classes=classes)
            )
        t1 = time.perf_counter()
        span = n_records * 30.0 + 3600.0  # records() starts a pair every 60 s
        now = 1.8e9 + span + 86400.0
        cold = _timed_retrain(url, now, f"{tmp}/live.json")
        n_new = max(2, int(n_records * nightly_share))
        ingest_records(
            engine, _later(records(n_new, first_id=n_records + 1, classes=classes), span)
        )
        nightly = _timed_retrain(url, now + 86400.0, f"{tmp}/live.json")
        print(
            f"stored {n_records:,} job records (pairs sharing a GPU, 32 nodes, {n_classes} classes) "
            f"in {t1 - t0:.1f} s"
        )
        for name, what, r in (
            ("first retrain (cold)", f"every episode built from {n_records:,} records", cold),
            (
                "nightly retrain",
                (
                    f"{n_new:,} new records ({n_new / n_records:.1%}) ingested: "
                    "only their episodes rebuilt"
                ),
                nightly,
            ),
        ):
            print(
                f"{name}: {what}; {r['records_built']:,} records built, {r['episodes']:,} "
                f"episodes in the window"
            )
            print(
                f"  retrain() {r['seconds']:6.1f} s  (whole process incl. Python start "
                f"{r['process_seconds']:.1f} s), peak memory {r['peak_mib']:.0f} MiB, "
                f"published={r['published']}"
            )
        print("target for the nightly retrain: < 30 s and < 1024 MiB on a 2-core machine")


if __name__ == "__main__":
    main()
