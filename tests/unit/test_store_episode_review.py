"""Review findings on the episode build and the ingest it reads from."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from slurm_colo.contracts.records import CoRunner, JobRecord
from slurm_colo.errors import StoreError
from slurm_colo.store import ingest_records, make_engine, upgrade
from slurm_colo.store.episode_build import JobView, build_episodes, shared_s
from slurm_colo.store.episodes import update_episodes
from slurm_colo.store.schema import Job


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e)
    return e


def test_shared_seconds_count_overlapping_co_runners_once() -> None:
    # x ran 1000 s; y and z were both on the GPU during [0, 500] (three jobs at once):
    # x shared 500 s, not 1000
    x = JobView(1, "n1", "0", "x", 0, 1000, [(2, "y", 0, 500), (3, "z", 0, 500)])
    assert shared_s(x) == 500
    assert (
        shared_s(JobView(1, "n1", "0", "x", 0, 1000, [(2, "y", 0, 400), (3, "z", 300, 600)])) == 600
    )
    assert (
        shared_s(JobView(1, "n1", "0", "x", 0, 1000, [(2, "y", 0, 400), (3, "z", 500, 600)])) == 500
    )


def test_n_of_a_job_sharing_with_two_at_once_counts_its_solo_stretch() -> None:
    # x at 3/4 of its solo rate over the run: 500 s solo (n=1) and 500 s shared -> n = 0.5
    x = JobView(
        1, "n1", "0", "x", 0, 1000, [(2, "y", 0, 500), (3, "z", 0, 500)], rate=7.5, solo_rate=10.0
    )
    eps, _ = build_episodes([x])
    assert len(eps) == 1
    n = {jid: n for jid, _, n, _ in eps[0].members}
    assert n[1] == pytest.approx(0.5)


def test_stored_members_carry_the_shared_seconds_once(engine: Engine) -> None:
    ingest_records(
        engine,
        [
            JobRecord(
                job_id=1,
                node="n1",
                user="u",
                uid=1,
                cls="x",
                start=0,
                end=1000,
                gpus=[0],
                co_runners=[CoRunner(2, "y", "u", 0, 500), CoRunner(3, "z", "u", 0, 500)],
                progress={"rate": 7.5, "solo_rate": 10.0},
            )
        ],
    )
    update_episodes(engine)
    with engine.connect() as c:
        assert (
            c.execute(text("SELECT shared_s FROM episode_members WHERE job_id = 1")).scalar() == 500
        )


def _limit(column: object) -> int:
    return int(column.type.length)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "field, column",
    [
        ("user", Job.user),
        ("cluster", Job.cluster),
        ("mode", Job.mode),
        ("mechanism", Job.mechanism),
    ],
)
def test_strings_longer_than_their_column_are_refused(
    engine: Engine, field: str, column: object
) -> None:
    # SQLite stores them anyway; PostgreSQL refuses the whole batch, again on every retry
    r = JobRecord(
        job_id=1, node="n1", user="u", uid=1, cls="x", start=0, end=10, gpus=[0], mechanism="mps"
    )
    setattr(r, field, "a" * (_limit(column) + 1))
    with pytest.raises(StoreError, match=field):
        ingest_records(engine, [r])
    setattr(r, field, "a" * _limit(column))
    assert ingest_records(engine, [r]) == 1


def test_a_record_id_longer_than_its_column_is_refused(engine: Engine) -> None:
    r = JobRecord(
        job_id=10**12,
        node="n" * 128,
        user="u",
        uid=1,
        cls="x",
        start=1.7e9,
        end=1.8e9,
        gpus=[0],
        cluster="c" * 64,
    )
    assert len(r.record_id) > _limit(Job.record_id)
    with pytest.raises(StoreError, match="record id"):
        ingest_records(engine, [r])
