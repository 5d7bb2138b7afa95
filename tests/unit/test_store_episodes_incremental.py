"""The incremental episode build equals a full rebuild, on randomised histories."""

from __future__ import annotations

import itertools
import math
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from slurm_colo.contracts.records import CoRunner, JobRecord
from slurm_colo.store import episode_sync, ingest_records, make_engine, upgrade
from slurm_colo.store.episode_build import Member, SoloRef, job_n
from slurm_colo.store.episode_read import SOURCES, member_n
from slurm_colo.store.episodes import (
    SKEW_TOLERANCE_S,
    load_episodes,
    read_window,
    rebuild_episodes,
    update_episodes,
)
from slurm_colo.train.retrain import gather

CLASSES = ["a-bs8", "a-bs16", "b", "c-bs32", "d"]


def _run(rng: random.Random, jid: int, node: str, gpu: int, start: float) -> dict[str, Any]:
    return {
        "job_id": jid,
        "node": node,
        "gpu": gpu,
        "cls": rng.choice(CLASSES),
        "start": start,
        "end": start + rng.uniform(50, 3000),
    }


def random_history(seed: int, n_runs: int = 160) -> list[JobRecord]:
    """Jobs on 3 nodes x 2 GPUs with overlapping runs; each record lists the runs that
    overlapped it, seen through its node's clock (skewed by up to a few seconds, now and
    then by hours), sometimes twice; some records are missing, some jobs requeued (same
    job id again), some without progress, out of memory or with an MPS fault."""
    rng = random.Random(seed)
    runs: list[dict[str, Any]] = []
    for i in range(n_runs):
        node, gpu = rng.choice(["n1", "n2", "n3"]), rng.randrange(2)
        runs.append(_run(rng, 1000 + i, node, gpu, rng.uniform(0, 40_000)))
        if rng.random() < 0.05:  # requeued: the same job id runs again later on that node
            runs.append(_run(rng, 1000 + i, node, gpu, runs[-1]["end"] + rng.uniform(10, 500)))
    recs = []
    for r in runs:
        if rng.random() < 0.08:
            continue  # the record never arrived
        skew = rng.choice([0.0, 0.0, 0.4, -2.5, 3.0])
        co = []
        for o in runs:
            if o is r or (o["node"], o["gpu"]) != (r["node"], r["gpu"]):
                continue
            s, e = max(r["start"], o["start"]), min(r["end"], o["end"])
            if e <= s:
                continue
            s, e = s + skew, e + skew
            if rng.random() < 0.03:
                s, e = s - 50_000, e - 50_000  # far outside: clock skew or corruption
            co.append(CoRunner(o["job_id"], o["cls"], "u", s, e))
            if rng.random() < 0.05:
                co.append(CoRunner(o["job_id"], o["cls"], "u", s + 0.25, e))  # listed twice
        progress = None
        if rng.random() < 0.6:
            progress = {"rate": rng.uniform(1, 10)}
            if rng.random() < 0.5:
                progress["solo_rate"] = 10.0
        recs.append(
            JobRecord(
                job_id=r["job_id"],
                node=r["node"],
                user="u",
                uid=1,
                cls=r["cls"],
                start=r["start"],
                end=r["end"],
                gpus=[r["gpu"]],
                shared=bool(co),
                co_runners=co,
                progress=progress,
                state="OUT_OF_MEMORY" if rng.random() < 0.03 else "COMPLETED",
                mps_fault=rng.random() < 0.03,
                profile={"mem_peak_gib": rng.uniform(1, 20), "sm_util_mean": rng.uniform(0.1, 0.9)},
            )
        )
    return recs


def dump(e: Engine) -> tuple[list[Any], list[Any]]:
    """Episodes with their members, and the built records, without the row ids."""
    with e.connect() as c:
        members: dict[int, list[Any]] = {}
        for row in c.execute(
            text(
                "SELECT episode_id, job_id, cls, rate, solo_rate, total_s, "
                "shared_s, end_time FROM episode_members"
            )
        ):
            members.setdefault(row[0], []).append(tuple(row[1:]))
        eps = sorted(
            (
                r.node,
                r.gpu,
                r.start_time,
                r.end_time,
                r.n_members,
                bool(r.mps_fault),
                bool(r.oom),
                tuple(sorted(members.get(r.id, []))),
            )
            for r in c.execute(text("SELECT * FROM episodes"))
        )
        sources = sorted(
            tuple(r)
            for r in c.execute(
                text(
                    "SELECT record_id, node, cls, start_time, end_time, rate, mem_peak_gib, solo, skewed "
                    "FROM episode_sources"
                )
            )
        )
    return eps, sources


def engine_at(path: Path) -> Engine:
    e = make_engine(f"sqlite:///{path}")
    upgrade(e)
    return e


@pytest.mark.parametrize(("seed", "batch"), [(1, 100_000), (2, 100_000), (3, 7)])
def test_incremental_build_equals_a_full_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, batch: int
) -> None:
    monkeypatch.setattr(episode_sync, "UPDATE_BATCH", batch)  # 7: a few nodes per transaction
    recs = random_history(seed)
    random.Random(seed).shuffle(recs)  # later batches hold records of built nodes, old times
    inc = engine_at(tmp_path / "inc.db")
    cuts = [0, len(recs) // 2, len(recs) * 3 // 4, len(recs) - 3, len(recs)]
    for i, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        ingest_records(inc, recs[lo:hi] + recs[:3])  # the first records again: duplicates
        assert update_episodes(inc).jobs == hi - lo
        full = engine_at(tmp_path / f"full{i}.db")
        ingest_records(full, recs[:hi])
        rebuild_episodes(full)
        got, want = dump(inc), dump(full)
        assert got[1] == want[1]
        assert got[0] == want[0]
    assert update_episodes(inc).jobs == 0  # nothing new: nothing rebuilt
    eps, _ = dump(inc)
    assert len(eps) > 50 and any(len(m) >= 3 for *_, m in eps)  # the history exercised sets
    assert any(m[3] is None for *_, ms in eps for m in ms)  # members without a record
    # what the retrain trains on is the same too, in any window
    for days in (1.0, 0.3):
        obs_i, info_i = gather(inc, "", now=50_000.0, window_days=days, half_life_days=0.5)
        obs_f, info_f = gather(full, "", now=50_000.0, window_days=days, half_life_days=0.5)
        for k in ("episodes", "history_entries", "skewed_intervals", "duration_proxy_cv"):
            assert info_i[k] == info_f[k], k
        assert obs_i.classes == obs_f.classes
        classes = sorted(obs_f.classes)
        a, b = obs_i.aggregate(classes), obs_f.aggregate(classes)
        assert np.array_equal(a.ia, b.ia) and np.array_equal(a.ib, b.ib)
        assert np.allclose(a.y, b.y) and np.allclose(a.w, b.w)
    assert info_i["episodes"] < len(eps)  # the shorter window left some out


_PG_URL = os.environ.get("SLURM_COLO_TEST_PG_URL")


@pytest.fixture
def pg_engines() -> Iterator[tuple[Engine, Engine]]:
    """Two fresh databases on the test server (tests/support/postgres.sh), dropped after."""
    if not _PG_URL:
        pytest.fail(
            "SLURM_COLO_TEST_PG_URL is not set under CI: tests/support/postgres.sh must run first"
        )
    admin = make_engine(_PG_URL)
    names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        for name in names:
            c.execute(text(f"CREATE DATABASE {name}"))
    engines = [make_engine(_PG_URL.rsplit("/", 1)[0] + "/" + name) for name in names]
    try:
        for e in engines:
            upgrade(e)
        yield engines[0], engines[1]
    finally:
        for e in engines:
            e.dispose()
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            for name in names:
                c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.mark.postgres
@pytest.mark.skipif(
    not _PG_URL and os.environ.get("CI") != "true",
    reason="no PostgreSQL: run tests/support/postgres.sh and export SLURM_COLO_TEST_PG_URL",
)
def test_incremental_build_equals_a_full_rebuild_on_postgres(
    pg_engines: tuple[Engine, Engine],
) -> None:
    inc, full = pg_engines
    recs = random_history(4)
    half = len(recs) // 2
    ingest_records(inc, recs[:half])
    update_episodes(inc)
    ingest_records(inc, recs[half:])
    assert update_episodes(inc).jobs == len(recs) - half
    ingest_records(full, recs)
    rebuild_episodes(full)
    assert dump(inc) == dump(full)
    assert len(read_window(inc, None)) == len(dump(full)[0])


def test_a_late_record_rebuilds_only_the_episodes_of_its_job(tmp_path: Path) -> None:
    e = engine_at(tmp_path / "h.db")
    a = JobRecord(
        job_id=1,
        node="n1",
        user="u",
        uid=1,
        cls="x",
        start=0,
        end=1000,
        gpus=[0],
        co_runners=[CoRunner(2, "y", "u", 200, 800)],
        progress={"rate": 5.0, "solo_rate": 10.0},
    )
    c = JobRecord(
        job_id=3,
        node="n1",
        user="u",
        uid=1,
        cls="x",
        start=5000,
        end=6000,
        gpus=[0],
        co_runners=[CoRunner(4, "z", "u", 5000, 6000)],
        progress={"rate": 5.0, "solo_rate": 10.0},
    )
    ingest_records(e, [a, c])
    update_episodes(e)
    before = {ep.start: ep for ep in load_episodes(e)}
    assert before[200].members[1] == (2, "y", None, "null")  # job 2's record is missing
    with e.connect() as conn:
        other = conn.execute(text("SELECT id FROM episodes WHERE start_time = 5000")).scalar()
    b = JobRecord(
        job_id=2,
        node="n1",
        user="u",
        uid=1,
        cls="y",
        start=199,
        end=801,
        gpus=[0],
        co_runners=[CoRunner(1, "x", "u", 199, 801)],
        progress={"rate": 3.0, "solo_rate": 6.0},
    )
    rep = update_episodes(e)
    assert rep.jobs == 0
    ingest_records(e, [b])
    rep = update_episodes(e)
    assert rep.jobs == 1 and rep.episodes == 1
    after = {ep.start: ep for ep in load_episodes(e)}
    assert (after[199].end, after[199].members[1][1:]) == (801, ("y", 0.5, "progress"))
    with e.connect() as conn:  # the episode of jobs 3 and 4 was not touched
        assert (
            conn.execute(text("SELECT id FROM episodes WHERE start_time = 5000")).scalar() == other
        )


def test_deleted_records_rebuild_their_node(tmp_path: Path) -> None:
    e = engine_at(tmp_path / "h.db")
    recs = random_history(7, n_runs=60)
    ingest_records(e, recs)
    update_episodes(e)
    with e.begin() as c:
        c.execute(text("DELETE FROM jobs WHERE node = 'n2' AND job_id % 3 = 0"))
    update_episodes(e)
    full = engine_at(tmp_path / "full.db")
    with e.connect() as c:
        kept = {r[0] for r in c.execute(text("SELECT record_id FROM jobs"))}
    ingest_records(full, [r for r in recs if r.record_id in kept])
    rebuild_episodes(full)
    assert dump(e) == dump(full)


def test_skew_is_counted_in_the_window(tmp_path: Path) -> None:
    e = engine_at(tmp_path / "h.db")
    ingest_records(
        e,
        [
            JobRecord(
                job_id=1,
                node="n",
                user="u",
                uid=1,
                cls="x",
                start=10_000,
                end=11_000,
                gpus=[0],
                co_runners=[CoRunner(2, "y", "u", 0, 50), CoRunner(3, "z", "u", 10_500, 10_900)],
            )
        ],
    )
    assert update_episodes(e).skewed_intervals == 1
    assert read_window(e, 0).skewed_intervals == 1
    assert read_window(e, 11_001).skewed_intervals == 0 and SKEW_TOLERANCE_S < 9000


def test_vectorised_n_equals_the_per_member_rule() -> None:
    rng = random.Random(5)
    ref = SoloRef(rate={"x": 8.0, "y": 3.0}, duration={"x": 500.0, "z": 100.0})
    classes = ["x", "y", "z", "w"]
    members = []
    for i in range(2000):
        total = rng.choice([None, 0.0, rng.uniform(1, 4000)])
        members.append(
            Member(
                i,
                rng.choice(classes),
                rng.choice([None, 0.0, rng.uniform(0.1, 9)]),
                rng.choice([None, rng.uniform(1, 10)]),
                total,
                None if total is None else rng.choice([0.0, rng.uniform(0, total or 1)]),
            )
        )
    cls = np.array([classes.index(m.cls) for m in members])
    figures = [
        np.array([np.nan if x is None else x for x in col], float)
        for col in zip(
            *[(m.rate, m.solo_rate, m.total_s, m.shared_s) for m in members], strict=True
        )
    ]
    n, src = member_n(
        cls,
        figures[0],
        figures[1],
        figures[2],
        figures[3],
        np.array([ref.rate.get(c, np.nan) for c in classes]),
        np.array([ref.duration.get(c, np.nan) for c in classes]),
    )
    for m, x, s in zip(members, n.tolist(), src.tolist(), strict=True):
        want_n, want_src = job_n(m, ref)
        assert SOURCES[s] == want_src
        assert (want_n is None and math.isnan(x)) or x == want_n
