"""The nightly retrain end to end on SQLite: publish, validation, refusals, bad input."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from retrain_one import retrain
from sqlalchemy import text
from sqlalchemy.engine import Engine

from slurm_colo.config import Config, ScoresConfig
from slurm_colo.contracts.records import CoRunner, JobRecord
from slurm_colo.errors import ModelError, StoreError
from slurm_colo.scores import PairScore, load_scores
from slurm_colo.store import ingest_records, make_engine, upgrade
from slurm_colo.store.scoresets import list_score_sets, live_score_set
from slurm_colo.train import retrain as retrain_mod

NOW = 1_800_000_000.0
CLASSES = ["alpha-bs32", "alpha-bs64", "beta-bs16", "beta-bs32", "gamma", "delta"]
LOAD = {
    "alpha-bs32": 0.3,
    "alpha-bs64": 0.5,
    "beta-bs16": 0.6,
    "beta-bs32": 0.8,
    "gamma": 0.2,
    "delta": 0.9,
}


def truth(a: str, b: str) -> float:
    return 1.0 / (1.0 + LOAD[a] * LOAD[b] * 1.5)


def history(
    noise: float = 0.0, seed: int = 0, skip: set[tuple[str, str]] = frozenset(), start_id: int = 1
) -> list[JobRecord]:
    """Pairs of jobs sharing a GPU for an hour, with job-reported progress; solo runs too."""
    rng = np.random.default_rng(seed)
    recs: list[JobRecord] = []
    jid = start_id
    t = NOW - 20 * 86400
    for i, a in enumerate(CLASSES):
        for b in CLASSES[i:]:
            if (a, b) in skip:
                continue
            for _ in range(2):
                na = float(np.clip(truth(a, b) + rng.normal(0, noise), 0.05, 1.0))
                nb = float(np.clip(truth(b, a) + rng.normal(0, noise), 0.05, 1.0))
                t += 4000
                ja, jb = jid, jid + 1
                jid += 2
                common = dict(
                    node="n1", user="u", uid=1, start=t, end=t + 3600, gpus=[0], shared=True
                )
                recs.append(
                    JobRecord(
                        job_id=ja,
                        cls=a,
                        co_runners=[CoRunner(jb, b, "u", t, t + 3600)],
                        progress={"rate": 10 * na, "solo_rate": 10.0},
                        profile={"mem_peak_gib": 4.0 + LOAD[a]},
                        **common,
                    )
                )
                recs.append(
                    JobRecord(
                        job_id=jb,
                        cls=b,
                        co_runners=[CoRunner(ja, a, "u", t, t + 3600)],
                        progress={"rate": 10 * nb, "solo_rate": 10.0},
                        profile={"mem_peak_gib": 4.0 + LOAD[b]},
                        **common,
                    )
                )
    for c in CLASSES:  # solo runs: utilisation profiles
        t += 4000
        recs.append(
            JobRecord(
                job_id=jid,
                node="n2",
                user="u",
                uid=1,
                cls=c,
                start=t,
                end=t + 600,
                gpus=[0],
                profile={"sm_util_mean": LOAD[c], "mem_peak_gib": 4.0 + LOAD[c]},
                progress={"rate": 10.0},
            )
        )
        jid += 1
    return recs


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e)
    return e


def cfg(tmp_path: Path, **kw: object) -> Config:
    return Config(scores=ScoresConfig(path=str(tmp_path / "scores" / "live.json"), **kw))  # type: ignore[arg-type]


def test_retrain_publishes_and_records_the_live_set(engine: Engine, tmp_path: Path) -> None:
    ingest_records(engine, history(noise=0.01, skip={("alpha-bs32", "delta")}))
    res = retrain(engine, cfg(tmp_path), now=NOW)
    assert res.published and res.path == tmp_path / "scores" / "live.json"
    t = load_scores(res.path)
    live = live_score_set(engine, "")
    assert live is not None and live.id == t.id == res.table.id
    assert set(CLASSES) <= set(t.classes)
    assert t.classes["beta-bs32"].sm_util == pytest.approx(0.8)
    assert t.classes["delta"].memory_gib == pytest.approx(4.9)
    assert t.classes["gamma"].solo_rate == pytest.approx(10.0)  # progress of its solo runs
    # what a probe compares a new job's progress with (published in the jobs' own units)
    assert t.classes["gamma"].progress_rate == pytest.approx(10.0)
    # a pair never seen together is predicted from the structure of the others
    p = t.pair("alpha-bs32", "delta")
    assert not p.observed
    assert p.n_a == pytest.approx(truth("alpha-bs32", "delta"), abs=0.1)
    assert t.pair("beta-bs32", "delta").n_a == pytest.approx(truth("beta-bs32", "delta"), abs=0.05)
    assert res.info["episodes"] > 0 and res.table.metrics["holdout_mae"] < 0.1
    # a second night retires the first set
    res2 = retrain(engine, cfg(tmp_path), now=NOW + 86400)
    assert res2.published
    status = {s["id"]: s["status"] for s in list_score_sets(engine)}
    assert status == {t.id: "retired", res2.table.id: "live"}


def _pretend_live_is_perfect(engine: Engine) -> None:
    with engine.begin() as c:
        sid, raw = c.execute(
            text("SELECT id, table_json FROM score_sets WHERE status='live'")
        ).one()
        d = json.loads(raw)
        d["metrics"]["holdout_mae"] = 0.0
        c.execute(
            text("UPDATE score_sets SET table_json=:j WHERE id=:i"), {"j": json.dumps(d), "i": sid}
        )


def test_a_regressing_set_is_not_published_and_the_old_one_stays_live(
    engine: Engine, tmp_path: Path
) -> None:
    ingest_records(engine, history(noise=0.15, seed=1))
    c = cfg(tmp_path)
    first = retrain(engine, c, now=NOW)
    _pretend_live_is_perfect(engine)
    before = first.path.read_bytes()  # type: ignore[union-attr]
    with pytest.raises(ModelError, match="not published.*worse than the live set.*stays live"):
        retrain(engine, c, now=NOW + 86400)
    assert first.path.read_bytes() == before  # type: ignore[union-attr]
    assert live_score_set(engine, "").id == first.table.id  # type: ignore[union-attr]
    statuses = sorted(s["status"] for s in list_score_sets(engine))
    assert statuses == ["live", "rejected"]
    assert retrain(engine, c, now=NOW + 2 * 86400, force=True).published


def test_a_broken_set_is_never_published(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest_records(engine, history(noise=0.01))
    real = retrain_mod.fit_table

    def broken(*a: object, **kw: object):  # type: ignore[no-untyped-def]
        t = real(*a, **kw)  # type: ignore[arg-type]
        k = next(iter(t.pairs))
        t.pairs[k] = PairScore(math.nan, 0.5, 0.1)
        return t

    monkeypatch.setattr(retrain_mod, "fit_table", broken)
    with pytest.raises(ModelError, match="invalid"):
        retrain(engine, cfg(tmp_path), now=NOW)
    assert not (tmp_path / "scores" / "live.json").exists()
    assert live_score_set(engine, "") is None


def test_empty_history_is_a_clear_error(engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no training data.*live score set is unchanged"):
        retrain(engine, cfg(tmp_path), now=NOW)
    assert not (tmp_path / "scores" / "live.json").exists()


def test_old_history_outside_the_window_is_not_used(engine: Engine, tmp_path: Path) -> None:
    ingest_records(engine, history())
    with pytest.raises(ModelError, match="no training data"):
        retrain(engine, cfg(tmp_path, window_days=1.0), now=NOW)


def test_old_schema_is_refused(tmp_path: Path) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/old.db")
    upgrade(e, "0001")
    with pytest.raises(StoreError, match="slurm-colo db upgrade"):
        retrain(e, cfg(tmp_path), now=NOW)


def test_bad_rows_unknown_classes_and_skew_do_not_break_the_night(
    engine: Engine, tmp_path: Path
) -> None:
    recs = history(noise=0.01)
    t = NOW - 86400
    recs += [  # NaN and negative progress, a class nobody profiled, a co-runner from hours away
        JobRecord(
            job_id=900,
            node="n3",
            user="u",
            uid=1,
            cls="newcomer",
            start=t,
            end=t + 3600,
            gpus=[0],
            co_runners=[CoRunner(901, "gamma", "u", t, t + 3600)],
            progress={"rate": math.nan, "solo_rate": -5.0},
        ),
        JobRecord(
            job_id=901,
            node="n3",
            user="u",
            uid=1,
            cls="gamma",
            start=t,
            end=t + 3600,
            gpus=[0],
            co_runners=[CoRunner(900, "newcomer", "u", t - 90_000, t - 86_000)],
            progress={"rate": -1.0},
        ),
    ]
    ingest_records(engine, recs)
    res = retrain(engine, cfg(tmp_path), now=NOW)
    assert res.published
    assert res.info["skewed_intervals"] == 1
    t2 = load_scores(res.path)  # type: ignore[arg-type]
    p = t2.pair("newcomer", "gamma")
    assert math.isfinite(p.n_a) and 0 <= p.n_a <= 1 and p.sd > 0


def test_an_unwritable_destination_is_a_clear_error(engine: Engine, tmp_path: Path) -> None:
    ingest_records(engine, history(noise=0.01))
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = Config(scores=ScoresConfig(path=str(blocker / "live.json")))
    with pytest.raises(ModelError, match="cannot be written"):
        retrain(engine, c, now=NOW)
    assert live_score_set(engine, "") is None


def _hold_lock_in_child(engine: Engine) -> subprocess.Popen[bytes]:
    """A separate process that takes the store's retrain lock and keeps it until killed."""
    code = (
        "import sys, time\n"
        "from slurm_colo.store import make_engine\n"
        "from slurm_colo.train.lock import retrain_lock\n"
        "with retrain_lock(make_engine(sys.argv[1])):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(engine.url)], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline().strip() == b"held"
    return child


def test_a_second_retrain_stops_at_once_and_changes_nothing(engine: Engine, tmp_path: Path) -> None:
    ingest_records(engine, history(noise=0.01))
    child = _hold_lock_in_child(engine)
    try:
        with pytest.raises(ModelError, match=rf"another retrain is running .*pid {child.pid}"):
            retrain(engine, cfg(tmp_path), now=NOW)
        assert not (tmp_path / "scores" / "live.json").exists()
        assert list_score_sets(engine) == []
        with engine.connect() as c:  # not even the episodes were touched
            assert c.scalar(text("SELECT count(*) FROM episodes")) == 0
    finally:
        child.kill()
        child.wait()
    # the holder died: the kernel dropped its lock, the next night runs
    assert retrain(engine, cfg(tmp_path), now=NOW).published


def _one_off_jobs(n: int, start_id: int) -> list[JobRecord]:
    """Jobs named afresh for each run (``run-00042``), each sharing a GPU once with a job of
    a known class: a class of one job each."""
    recs = []
    t = NOW - 10 * 86400
    for k in range(n):
        t += 4000
        ja, jb = start_id + 2 * k, start_id + 2 * k + 1
        one, known = f"run-{k:05d}", CLASSES[k % len(CLASSES)]
        common = dict(node="n1", user="u", uid=1, start=t, end=t + 3600, gpus=[0], shared=True)
        for jid, cls, other, oid in ((ja, one, known, jb), (jb, known, one, ja)):
            recs.append(
                JobRecord(
                    job_id=jid,
                    cls=cls,
                    co_runners=[CoRunner(oid, other, "u", t, t + 3600)],
                    progress={"rate": 7.0, "solo_rate": 10.0},
                    profile={"mem_peak_gib": 4.0},
                    **common,
                )
            )
    return recs


def test_a_set_scores_the_classes_with_the_most_evidence_up_to_max_classes(
    engine: Engine, tmp_path: Path
) -> None:
    from slurm_colo.cli.retrain import set_lines

    ingest_records(engine, history(noise=0.01) + _one_off_jobs(30, start_id=10_000))
    res = retrain(engine, cfg(tmp_path, max_classes=len(CLASSES)), now=NOW)
    assert res.published
    t = load_scores(res.path)
    assert set(t.classes) == set(CLASSES)  # each run-NNNNN has one job's evidence
    assert len(t.pairs) == len(CLASSES) * (len(CLASSES) + 1) // 2
    assert res.info["classes_left_out"] == 30 and t.training["classes_left_out"] == 30
    assert t.pair("beta-bs32", "delta").n_a == pytest.approx(truth("beta-bs32", "delta"), abs=0.05)
    assert t.pair("run-00003", "gamma").n_a == t.prior_n  # left to the prior
    line = next(x for x in set_lines(res) if "30 class(es) with the least evidence left out" in x)
    assert 'class_name_numbers = "strip"' in line
    hint = next(x for x in set_lines(res) if "differ only in a number at their name's end" in x)
    assert hint.startswith("30 class(es) differ only") and "would make 1 class(es)" in hint
    assert "(run-00000, run-00001, ...)" in hint
    # the default keeps them all
    res = retrain(engine, cfg(tmp_path), now=NOW + 86400)
    assert len(res.table.classes) == len(CLASSES) + 30 and "classes_left_out" not in res.info


def test_max_classes_below_two_is_refused(tmp_path: Path) -> None:
    from slurm_colo.config import parse_config
    from slurm_colo.errors import ConfigError

    with pytest.raises(ConfigError, match="scores.max_classes must be at least 2"):
        parse_config("[scores]\nmax_classes = 1\n", "site.toml")


def test_retrain_says_nothing_of_numbered_names_once_they_are_stripped(
    engine: Engine, tmp_path: Path
) -> None:
    from slurm_colo.cli.retrain import set_lines
    from slurm_colo.config import PlacementConfig
    from slurm_colo.contracts.enums import ClassNumbers

    ingest_records(engine, history(noise=0.01) + _one_off_jobs(3, start_id=10_000))
    c = cfg(tmp_path)
    res = retrain(engine, c, now=NOW)
    assert res.info["numbered_classes"] == 3 and res.info["numbered_kinds"] == 1
    strip = dataclasses.replace(c, placement=PlacementConfig(class_name_numbers=ClassNumbers.STRIP))
    res = retrain(engine, strip, now=NOW + 86400)
    assert "numbered_classes" not in res.info  # the records made before keep their class
    assert not any("differ only in a number" in x for x in set_lines(res))


def test_numbered_classes_counts_names_that_differ_only_in_their_number() -> None:
    from slurm_colo.train.retrain import numbered_classes

    assert numbered_classes(["run-1", "run-2", "train_2026-11-25", "resnet50", "bert"]) == {
        "numbered_classes": 2,
        "numbered_kinds": 1,
        "numbered_examples": ["run-1", "run-2"],
    }
    assert numbered_classes(["resnet-50", "resnet50", "lr0.001", "lr0.01"]) == {}
