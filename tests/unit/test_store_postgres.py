"""The history store on a real PostgreSQL server (tests/support/postgres.sh starts one).

Needs SLURM_COLO_TEST_PG_URL. Without it these tests fail under CI (CI=true) and are
skipped elsewhere, saying how to run them.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from retrain_one import retrain
from sqlalchemy import text
from sqlalchemy.engine import Engine
from test_store_episodes import check_stepped_records

from slurm_colo.config import Config, ScoresConfig
from slurm_colo.contracts.records import CoRunner, JobRecord
from slurm_colo.errors import ModelError, StoreError
from slurm_colo.gavel import bundled_path, load_gavel
from slurm_colo.scores import load_scores
from slurm_colo.spool.ingest import ingest_spool
from slurm_colo.store import (
    head_revision,
    ingest_records,
    make_engine,
    require_schema,
    upgrade,
)
from slurm_colo.store.episodes import load_episodes, rebuild_episodes
from slurm_colo.store.schema import Base
from slurm_colo.store.scoresets import import_gavel, live_score_set
from slurm_colo.train.lock import PG_LOCK_KEY

_PG_URL = os.environ.get("SLURM_COLO_TEST_PG_URL")
# Outside CI, without a server URL these tests are left out; under CI they always run.
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not _PG_URL and os.environ.get("CI") != "true",
        reason="no PostgreSQL: run tests/support/postgres.sh and export SLURM_COLO_TEST_PG_URL",
    ),
]


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh database on the test server for each test (dropped afterwards)."""
    base = os.environ.get("SLURM_COLO_TEST_PG_URL")
    if not base:
        pytest.fail(
            "SLURM_COLO_TEST_PG_URL is not set under CI: tests/support/postgres.sh must run first"
        )
    admin = make_engine(base)
    name = f"t_{uuid.uuid4().hex[:12]}"
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text(f"CREATE DATABASE {name}"))
    url = base.rsplit("/", 1)[0] + "/" + name
    try:
        yield url
    finally:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    e = make_engine(pg_url)
    yield e
    e.dispose()


def rec(i: int, partner: int, cls: str, pcls: str, rate: float) -> JobRecord:
    t = 1.8e9 + (i // 2) * 4000
    return JobRecord(
        job_id=i,
        node="n1",
        user="u",
        uid=1,
        cls=cls,
        start=t,
        end=t + 3600,
        gpus=[0],
        shared=True,
        co_runners=[CoRunner(partner, pcls, "u", t, t + 3600)],
        progress={"rate": rate, "solo_rate": 10.0},
        profile={"mem_peak_gib": 5.0},
    )


def test_migrations_run_and_old_schema_is_refused(engine: Engine) -> None:
    with pytest.raises(StoreError, match="slurm-colo db upgrade"):
        require_schema(engine)
    upgrade(engine, "0001")
    with pytest.raises(StoreError, match="older"):
        require_schema(engine)
    assert upgrade(engine) == ("0001", head_revision())
    require_schema(engine)


def test_ingest_is_idempotent_on_postgres(engine: Engine, tmp_path: Path) -> None:
    upgrade(engine)
    recs = [rec(i, i + 1, "x", "y", 6.0) for i in range(0, 200, 2)]
    assert ingest_records(engine, recs) == 100
    assert ingest_records(engine, recs) == 0
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a.json").write_text(json.dumps(rec(1001, 1000, "y", "x", 5.0).to_dict()))
    (spool / "b.json").write_text("not json")
    res = ingest_spool(engine, spool)
    assert res.ingested == 1 and [n for n, _ in res.bad] == ["b.json"]
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM jobs")).scalar() == 101


def test_a_large_directory_uid_is_stored_on_postgres(engine: Engine, tmp_path: Path) -> None:
    """Directory services hand out uids above 2^31 (SSSD/AD id mapping): such a record is
    stored, not failed with the batch, and reads back as the same number."""
    upgrade(engine)
    spool = tmp_path / "spool"
    spool.mkdir()
    big = rec(7, 8, "x", "y", 6.0).to_dict() | {"uid": 4294967294}
    (spool / "big.json").write_text(json.dumps(big))
    (spool / "small.json").write_text(json.dumps(rec(9, 10, "x", "y", 6.0).to_dict()))
    res = ingest_spool(engine, spool)
    assert res.bad == [] and res.ingested == 2
    with engine.connect() as c:
        uids = c.execute(text("SELECT job_id, uid FROM jobs ORDER BY job_id")).all()
    assert [tuple(r) for r in uids] == [(7, 4294967294), (9, 1)]


def test_a_record_too_big_for_a_column_is_set_aside_not_the_batch(
    engine: Engine, tmp_path: Path
) -> None:
    """PostgreSQL refuses a value longer than its column, and with it the whole batch: such
    a record goes to bad/ with its reason, the others are stored."""
    upgrade(engine)
    spool = tmp_path / "spool"
    spool.mkdir()
    many = rec(7, 8, "x", "y", 6.0).to_dict() | {"gpus": list(range(100))}
    (spool / "many.json").write_text(json.dumps(many))
    nul = rec(11, 12, "x", "y", 6.0).to_dict() | {"gpu_name": "Tesla\u0000V100"}
    (spool / "nul.json").write_text(json.dumps(nul))
    (spool / "ok.json").write_text(json.dumps(rec(9, 10, "x", "y", 6.0).to_dict()))
    res = ingest_spool(engine, spool)
    assert res.ingested == 1
    assert sorted((n, why.split()[0]) for n, why in res.bad) == [
        ("many.json", "gpus:"),
        ("nul.json", "gpu_name"),
    ]


def test_upgrade_to_0005_keeps_the_records_stored_before(engine: Engine) -> None:
    upgrade(engine, "0004")
    with engine.begin() as c:  # a record stored by the older version, uid a 32-bit column
        c.execute(
            text(
                'INSERT INTO jobs (record_id, cluster, job_id, node, "user", uid, cls, '
                "start_time, end_time, mode, shared, gpus, gpu_uuids, exit_code, state, "
                "mps_fault, version, ingested_at) VALUES ('c-5-n1-1', 'c', 5, 'n1', 'u', "
                "2147483647, 'x', 0, 10, 'auto', false, '0', '', 0, 'COMPLETED', false, 1, 0)"
            )
        )
    assert upgrade(engine) == ("0004", head_revision())
    assert ingest_records(engine, [rec(6, 7, "x", "y", 6.0)]) == 1
    with engine.begin() as c:
        c.execute(text("UPDATE jobs SET uid = 4294967294 WHERE job_id = 6"))
        uids = c.execute(text("SELECT job_id, uid FROM jobs ORDER BY job_id")).all()
    assert [tuple(r) for r in uids] == [(5, 2147483647), (6, 4294967294)]
    with engine.connect() as c:  # the migrated tables are the models' (types and indexes)
        assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []


def test_a_record_across_a_clock_step_gives_no_figures_on_postgres(engine: Engine) -> None:
    upgrade(engine)
    check_stepped_records(engine)


def test_retrain_end_to_end_on_postgres(engine: Engine, tmp_path: Path) -> None:
    upgrade(engine)
    import_gavel(engine, load_gavel(bundled_path(), "k80"))
    recs = []
    for i in range(0, 40, 2):
        recs += [rec(i, i + 1, "a3c", "newclass", 6.0), rec(i + 1, i, "newclass", "a3c", 4.0)]
    ingest_records(engine, recs)
    assert rebuild_episodes(engine).episodes == 20
    assert len(load_episodes(engine)) == 20
    cfg = Config(scores=ScoresConfig(path=str(tmp_path / "live.json")))
    res = retrain(engine, cfg, now=1.8e9 + 30 * 86400)
    assert res.published
    t = load_scores(tmp_path / "live.json")
    assert live_score_set(engine, "k80").id == t.id  # type: ignore[union-attr]
    assert t.pair("newclass", "a3c").observed
    assert t.pair("newclass", "a3c").n_a == pytest.approx(0.4, abs=0.1)


def test_a_second_retrain_on_postgres_stops_at_once(engine: Engine, tmp_path: Path) -> None:
    upgrade(engine)
    import_gavel(engine, load_gavel(bundled_path(), "k80"))
    cfg = Config(scores=ScoresConfig(path=str(tmp_path / "live.json")))
    with engine.connect() as other:  # another session, as another host's retrain would be
        assert other.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": PG_LOCK_KEY})
        backend = other.scalar(text("SELECT pg_backend_pid()"))
        with pytest.raises(ModelError, match=rf"another retrain is running .*pid {backend}\)"):
            retrain(engine, cfg, now=1.8e9)
        assert not (tmp_path / "live.json").exists()
        other.scalar(text("SELECT pg_advisory_unlock(:k)"), {"k": PG_LOCK_KEY})
    assert retrain(engine, cfg, now=1.8e9).published


def test_one_score_set_per_gpu_model_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    from test_retrain_by_model import CLASSES, NOW, cfg, history, k80, v100

    from slurm_colo.train.by_model import retrain_site

    engine = make_engine(pg_url)
    upgrade(engine, "0003")
    upgrade(engine)  # 0004 on PostgreSQL: the GPU model columns, the episodes emptied
    old = history("k1", "", k80, 10_000, CLASSES)  # written before records named the GPU
    ingest_records(engine, history("v1", "v100", v100, 1, CLASSES) + old)
    run = retrain_site(engine, cfg(tmp_path), now=NOW)
    assert run.filled == len(old) and run.mixed and not run.failed
    for model in ("", "k80", "v100"):
        live = live_score_set(engine, model)
        assert live is not None and live.gpu_model == model
    assert (tmp_path / "scores" / "live-k80.json").exists()
