"""Schema 0003 (incremental episodes): migration both ways, models match the migrations,
`slurm-colo retrain --rebuild`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from cli_run import run_cli as run
from sqlalchemy import inspect, text

from slurm_colo.contracts.records import CoRunner, JobRecord
from slurm_colo.store import current_revision, head_revision, ingest_records, make_engine, upgrade
from slurm_colo.store.engine import _alembic_config
from slurm_colo.store.episodes import load_episodes, update_episodes
from slurm_colo.store.schema import Base


def pair(i: int) -> list[JobRecord]:
    t = 1.8e9 + i * 4000
    return [
        JobRecord(
            job_id=j,
            node="n1",
            user="u",
            uid=1,
            cls=c,
            start=t,
            end=t + 3600,
            gpus=[0],
            shared=True,
            co_runners=[CoRunner(p, pc, "u", t, t + 3600)],
            progress={"rate": r, "solo_rate": 10.0},
        )
        for j, c, p, pc, r in ((2 * i, "x", 2 * i + 1, "y", 6.0), (2 * i + 1, "y", 2 * i, "x", 4.0))
    ]


def test_upgrade_from_0002_replaces_the_derived_episodes_and_downgrade_restores_them(
    tmp_path: Path,
) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e, "0002")
    with e.begin() as c:  # an episode stored by the older version
        c.execute(
            text(
                "INSERT INTO episodes (node, gpu, start_time, end_time, n_members, members, "
                "mps_fault, oom) VALUES ('n1', '0', 0, 10, 2, '[]', 0, 0)"
            )
        )
    assert upgrade(e, "0003") == ("0002", "0003")
    assert upgrade(e) == ("0003", head_revision())
    assert load_episodes(e) == []  # derived data: dropped, built again from the records
    ingest_records(e, pair(1))
    assert update_episodes(e).episodes == 1
    assert [m[1:] for m in load_episodes(e)[0].members] == [
        ("x", 0.6, "progress"),
        ("y", 0.4, "progress"),
    ]
    with e.begin() as c:
        command.downgrade(_alembic_config(c), "0002")
    assert current_revision(e) == "0002"
    with e.connect() as c:
        assert "members" in {col["name"] for col in inspect(c).get_columns("episodes")}
        assert "episode_members" not in inspect(c).get_table_names()
        assert c.execute(text("SELECT count(*) FROM jobs")).scalar() == 2


def test_the_models_match_the_migrations(tmp_path: Path) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e)
    with e.connect() as c:
        diff = compare_metadata(MigrationContext.configure(c), Base.metadata)
    assert diff == []


def test_retrain_builds_new_records_only_and_rebuild_builds_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(
        f'[store]\nurl = "sqlite:///{tmp_path}/h.db"\n[scores]\npath = "{tmp_path}/live.json"\n'
    )
    monkeypatch.setenv("SLURM_COLO_CONFIG", str(conf))
    assert run(["db", "upgrade"], capsys)[0] == 0
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    ingest_records(e, [r for i in range(6) for r in pair(i)])
    code, out, _ = run(["retrain", "--dry-run"], capsys)
    assert code == 0 and "6 episodes (12 new record(s) built)" in out
    ingest_records(e, pair(6))
    code, out, _ = run(["retrain", "--dry-run"], capsys)
    assert code == 0 and "7 episodes (2 new record(s) built)" in out
    code, out, _ = run(["retrain", "--rebuild"], capsys)
    assert code == 0 and "7 episodes (14 new record(s) built)" in out and "published" in out
    assert json.loads((tmp_path / "live.json").read_text())["training"]["records_built"] == 14
