"""Ingest benchmark: per-job records into SQLite (target: 10,000 records/s).

Measures ingest_records (records in memory, batches of 2,000), ingest_spool (one JSON file
per record, as the node side writes them, moved to done/ after) and the episode rebuild
that the nightly retrain runs first.

    .venv/bin/python benchmarks/ingest_bench.py [--records 50000] [--url sqlite:///...]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from slurm_colo.contracts.records import CoRunner, JobRecord
from slurm_colo.spool.ingest import ingest_spool
from slurm_colo.store import ingest_records, make_engine, upgrade
from slurm_colo.store.episodes import rebuild_episodes

CLASSES = [f"model{i}-bs{2 ** (4 + i % 5)}" for i in range(40)]


def records(n: int, first_id: int = 1, classes: list[str] | None = None) -> list[JobRecord]:
    classes = classes or CLASSES
    rng = random.Random(first_id)
    out = []
    for k in range(0, n, 2):
        t = 1.8e9 + k * 30.0
        a, b = first_id + k, first_id + k + 1
        ca, cb = rng.choice(classes), rng.choice(classes)
        for jid, cls, pid, pcls in ((a, ca, b, cb), (b, cb, a, ca)):
            out.append(
                JobRecord(
                    job_id=jid,
                    node=f"gpu{k % 64:03d}",
                    user=f"user{jid % 50}",
                    uid=1000 + jid % 50,
                    cls=cls,
                    start=t,
                    end=t + 3600,
                    gpus=[k % 4],
                    gpu_uuids=[f"GPU-{k % 4}"],
                    shared=True,
                    mechanism="mps",
                    thread_pct=50,
                    co_runners=[CoRunner(pid, pcls, "u", t + 60, t + 3000)],
                    profile={
                        "sm_util_mean": 0.6,
                        "sm_util_p95": 0.9,
                        "mem_used_mean_gib": 5.0,
                        "mem_peak_gib": 6.5,
                        "mem_bw_util_mean": 0.3,
                        "power_w_mean": 180.0,
                        "samples": 3600,
                        "solo_s": 660.0,
                    },
                    progress={"iterations": 36000, "rate": rng.uniform(5, 10), "solo_rate": 10.0},
                )
            )
    return out[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--url", default=None, help="database URL (default: a temporary SQLite file)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{tmp}/history.db"
        engine = make_engine(url)
        upgrade(engine)
        recs = records(args.records)
        t0 = time.perf_counter()
        new = ingest_records(engine, recs)
        t1 = time.perf_counter()
        again = ingest_records(engine, recs)
        t2 = time.perf_counter()
        print(
            f"ingest_records: {new:,} records in {t1 - t0:.2f} s = {new / (t1 - t0):,.0f} records/s "
            "(target 10,000/s)"
        )
        print(f"  re-ingest (all duplicates, {again} new): {len(recs) / (t2 - t1):,.0f} records/s")
        spool = Path(tmp) / "spool"
        spool.mkdir()
        n_files = min(args.records, 20_000)
        for r in records(n_files, first_id=10_000_000):
            (spool / f"{r.job_id}.json").write_text(json.dumps(r.to_dict()))
        t3 = time.perf_counter()
        res = ingest_spool(engine, spool)
        t4 = time.perf_counter()
        print(
            f"ingest_spool: {res.ingested:,} files in {t4 - t3:.2f} s = {res.ingested / (t4 - t3):,.0f} "
            "records/s (read, parse, check, store, move to done/)"
        )
        t5 = time.perf_counter()
        rep = rebuild_episodes(engine)
        t6 = time.perf_counter()
        print(
            f"rebuild_episodes: {rep.jobs:,} jobs -> {rep.episodes:,} episodes in {t6 - t5:.2f} s "
            f"= {rep.jobs / (t6 - t5):,.0f} jobs/s"
        )


if __name__ == "__main__":
    main()
