"""History store: idempotent ingest of records and of the spool directory."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from slurm_colo.contracts.records import CoRunner, JobRecord
from slurm_colo.errors import StoreError
from slurm_colo.spool.ingest import ingest_spool
from slurm_colo.store import ingest_records, make_engine, upgrade


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    e = make_engine(f"sqlite:///{tmp_path}/h.db", busy_timeout_s=0.2)
    upgrade(e)
    return e


def rec(i: int, **kw: object) -> JobRecord:
    base: dict = dict(
        job_id=i,
        node="n1",
        user="alice",
        uid=1000,
        cls="resnet18-bs64",
        start=1000.0 + i,
        end=2000.0 + i,
        gpus=[0],
        shared=True,
        mechanism="mps",
        co_runners=[CoRunner(i + 10_000, "lm-bs20", "bob", 1000.0 + i, 1500.0 + i)],
        profile={"sm_util_mean": 0.5, "mem_peak_gib": 3.0, "pcie_mb_s": 10},
        progress={"iterations": 100, "rate": 7.5, "solo_rate": 10.0},
    )
    base.update(kw)
    return JobRecord(**base)  # type: ignore[arg-type]


def count(e: Engine, table: str) -> int:
    with e.connect() as c:
        return int(c.execute(text(f"SELECT count(*) FROM {table}")).scalar() or 0)


def test_ingest_twice_stores_once(engine: Engine) -> None:
    recs = [rec(i) for i in range(50)]
    assert ingest_records(engine, recs) == 50
    assert ingest_records(engine, recs) == 0
    assert ingest_records(engine, recs[:10] + [rec(50)]) == 1
    assert count(engine, "jobs") == 51
    assert count(engine, "profiles") == 51
    assert count(engine, "co_runners") == 51


def test_duplicates_inside_one_batch_are_stored_once(engine: Engine) -> None:
    assert ingest_records(engine, [rec(1), rec(1), rec(1)]) == 1
    assert count(engine, "jobs") == 1


def test_fields_are_stored(engine: Engine) -> None:
    ingest_records(engine, [rec(7)])
    with engine.connect() as c:
        row = c.execute(text("SELECT * FROM jobs")).mappings().one()
        prof = c.execute(text("SELECT * FROM profiles")).mappings().one()
    assert row["record_id"] == "default:7:n1:1007"
    assert row["progress_rate"] == 7.5 and row["progress_solo_rate"] == 10.0
    assert row["mechanism"] == "mps" and row["gpus"] == "0" and row["shared"]
    assert prof["mem_peak_gib"] == 3.0 and json.loads(prof["extra"]) == {"pcie_mb_s": 10}


def test_nan_and_negative_values_are_dropped_not_stored(engine: Engine) -> None:
    r = rec(
        1,
        profile={"sm_util_mean": math.nan, "mem_peak_gib": -4.0, "sm_util_p95": 85.0},
        progress={"rate": math.nan, "solo_rate": -1.0},
    )
    assert ingest_records(engine, [r]) == 1
    with engine.connect() as c:
        prof = c.execute(text("SELECT sm_util_mean, mem_peak_gib, sm_util_p95 FROM profiles")).one()
        job = c.execute(text("SELECT progress_rate, progress_solo_rate FROM jobs")).one()
    assert prof[0] is None and prof[1] is None
    assert prof[2] == pytest.approx(0.85)  # percent read as a fraction
    assert tuple(job) == (None, None)


@pytest.mark.parametrize(
    "kw, why",
    [
        ({"end": 500.0}, "before it starts"),
        ({"start": math.inf}, "epoch time"),
        ({"job_id": -3}, "job_id"),
        ({"cls": ""}, "cls"),
    ],
)
def test_invalid_records_are_refused_before_anything_is_written(
    engine: Engine, kw: dict, why: str
) -> None:
    with pytest.raises(StoreError, match=why):
        ingest_records(engine, [rec(1), rec(2, **kw)])
    assert count(engine, "jobs") == 0


def _write(spool: Path, name: str, content: str | bytes) -> Path:
    p = spool / name
    p.write_bytes(content.encode() if isinstance(content, str) else content)
    return p


def test_spool_moves_good_files_to_done_and_bad_ones_to_bad(engine: Engine, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    for i in range(5):
        _write(spool, f"job{i}.json", json.dumps(rec(i).to_dict()))
    _write(spool, "trunc.json", json.dumps(rec(9).to_dict())[:40])
    _write(spool, "list.json", "[1, 2]")
    _write(spool, "fields.json", json.dumps({"job_id": 3, "bogus": 1}))
    _write(spool, "skew.json", json.dumps(rec(8, end=10.0).to_dict()))
    _write(spool, ".job9.json.tmp", "partial")  # being written by the node side
    res = ingest_spool(engine, spool)
    assert res.ingested == 5 and res.duplicates == 0 and res.done_files == 5
    assert sorted(n for n, _ in res.bad) == ["fields.json", "list.json", "skew.json", "trunc.json"]
    assert sorted(p.name for p in (spool / "done").iterdir()) == [f"job{i}.json" for i in range(5)]
    bad = spool / "bad"
    assert "not JSON" in (bad / "trunc.json.reason").read_text()
    assert "before it starts" in (bad / "skew.json.reason").read_text()
    assert (spool / ".job9.json.tmp").exists()
    assert count(engine, "jobs") == 5


def test_spool_ingest_is_idempotent_and_can_delete(engine: Engine, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    _write(spool, "a.json", json.dumps(rec(1).to_dict()))
    ingest_spool(engine, spool)
    _write(spool, "a-again.json", json.dumps(rec(1).to_dict()))  # the same record re-sent
    res = ingest_spool(engine, spool, keep_done=False)
    assert (res.ingested, res.duplicates) == (0, 1)
    assert not (spool / "a-again.json").exists()
    assert count(engine, "jobs") == 1


def test_locked_database_leaves_the_spool_files_in_place(engine: Engine, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    _write(spool, "a.json", json.dumps(rec(1).to_dict()))
    db = engine.url.database
    holder = sqlite3.connect(db, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked"):
            ingest_spool(engine, spool)
    finally:
        holder.rollback()
        holder.close()
    assert (spool / "a.json").exists()
    assert ingest_spool(engine, spool).ingested == 1


def test_missing_spool_directory(engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        ingest_spool(engine, tmp_path / "nope")


@pytest.mark.parametrize(
    "patch, why",
    [
        ({"uid": "root"}, "uid"),
        ({"gpus": ["zero"]}, "gpus"),
        ({"gpus": [-1]}, "gpus"),
        ({"gpus": [True]}, "gpus"),
        # longer than the column: PostgreSQL would refuse the whole batch
        ({"gpus": list(range(100))}, "gpus: 100 GPU indexes do not fit"),
        # PostgreSQL's text cannot hold NUL: it would refuse the whole batch
        ({"user": "a\x00b"}, "user .* NUL"),
        ({"gpu_uuids": ["GPU-\x00"]}, "gpu_uuids .* NUL"),
        (
            {"co_runners": [{"job_id": 1, "cls": "a\x00", "user": "u", "start": 1, "end": 2}]},
            "co-runner 1 .* NUL",
        ),
        ({"progress": [1]}, "progress"),
        (
            {"co_runners": [{"job_id": "x", "cls": "a", "user": "u", "start": 1, "end": 2}]},
            "co-runner",
        ),
        ({"co_runners": [{"job_id": 1}]}, "fields"),
        ({"co_runners": None}, "fields|co_runners"),
        # too large for the database's integer columns: it would refuse the whole batch
        ({"job_id": 10**30}, "job_id .* 64-bit"),
        ({"exit_code": 2**31}, "exit_code .* 32-bit"),
        ({"version": "2"}, "version"),
        ({"thread_pct": 10**30}, "thread_pct .* percentage"),
        (
            {"co_runners": [{"job_id": 2**63, "cls": "a", "user": "u", "start": 1, "end": 2}]},
            "co-runner job id .* 64-bit",
        ),
    ],
)
def test_partial_or_mistyped_record_files_are_quarantined(
    engine: Engine, tmp_path: Path, patch: dict, why: str
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    d = rec(1).to_dict()
    d.update(patch)
    _write(spool, "x.json", json.dumps(d))
    _write(spool, "ok.json", json.dumps(rec(2).to_dict()))
    res = ingest_spool(engine, spool)
    assert res.ingested == 1
    assert [n for n, _ in res.bad] == ["x.json"]
    assert re.search(why, res.bad[0][1])


def test_a_deeply_nested_file_is_quarantined_and_huge_counts_are_dropped(
    engine: Engine, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    _write(spool, "deep.json", "[" * 100_000 + "]" * 100_000)
    d = rec(2).to_dict()
    d["profile"] = {**d["profile"], "samples": 1e30}
    d["progress"] = {"rate": 1.0, "iterations": 1e30}
    _write(spool, "huge.json", json.dumps(d))
    res = ingest_spool(engine, spool)
    assert [n for n, _ in res.bad] == ["deep.json"] and "nested too deeply" in res.bad[0][1]
    assert res.ingested == 1  # the record is kept, its out-of-range counts are not
    with engine.connect() as conn:
        row = conn.execute(text("SELECT samples FROM profiles")).one()
        job = conn.execute(text("SELECT progress_iterations FROM jobs")).one()
    assert row.samples is None and job.progress_iterations is None


def test_whole_numbers_too_large_for_a_float_are_dropped_or_refused(
    engine: Engine, tmp_path: Path
) -> None:
    """JSON integers beyond a float's range (10^400): a figure is dropped, a time or a
    co-runner's time makes the record bad; neither stops the ingest."""
    spool = tmp_path / "spool"
    spool.mkdir()
    d = rec(2).to_dict()
    d["profile"] = {**d["profile"], "mem_peak_gib": 10**400}
    d["progress"] = {"rate": 10**400, "solo_rate": 2.0}
    d["mem_limit_gib"] = 10**400
    _write(spool, "figures.json", json.dumps(d))
    _write(spool, "start.json", json.dumps(rec(3).to_dict() | {"start": 10**400}))
    co = {"job_id": 9, "cls": "a", "user": "u", "start": 10**400, "end": 2}
    _write(spool, "co.json", json.dumps(rec(4).to_dict() | {"co_runners": [co]}))
    res = ingest_spool(engine, spool)
    assert res.ingested == 1
    assert sorted((n, w.split()[0]) for n, w in res.bad) == [
        ("co.json", "co-runner"),
        ("start.json", "start"),
    ]
    with engine.connect() as conn:
        job = conn.execute(text("SELECT progress_rate, mem_limit_gib FROM jobs")).one()
        peak = conn.execute(text("SELECT mem_peak_gib FROM profiles")).scalar()
    assert tuple(job) == (None, None) and peak is None


def test_a_bad_file_is_never_set_aside_over_an_earlier_one(engine: Engine, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    _write(spool, "x.json", "first, not JSON")
    ingest_spool(engine, spool)
    _write(spool, "x.json", "second, not JSON either")  # the same name, a new bad record
    res = ingest_spool(engine, spool)
    assert [n for n, _ in res.bad] == ["x.json"]
    bad = spool / "bad"
    assert (bad / "x.json").read_text() == "first, not JSON"
    assert (bad / "x.json.1").read_text() == "second, not JSON either"
    assert "not JSON" in (bad / "x.json.1.reason").read_text()


def test_a_spool_path_that_is_a_file_is_named_so(engine: Engine, tmp_path: Path) -> None:
    f = tmp_path / "spool"
    f.write_text("")
    with pytest.raises(StoreError, match="spool directory .* is not a directory"):
        ingest_spool(engine, f)
