"""`slurm-colo retrain` on a site with two GPU models: one score set per model next to the
site default, a model with too little data left to the default, --gpu, [scores] gpu_model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_run import run_cli as cli
from sqlalchemy.engine import Engine

from slurm_colo.config import Config, ScoresConfig
from slurm_colo.contracts.records import CoRunner, JobRecord
from slurm_colo.gavel import GavelData
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.scores import load_scores, model_scores_path
from slurm_colo.store import ingest_records, make_engine, upgrade
from slurm_colo.store.scoresets import import_gavel, list_score_sets, live_score_set
from slurm_colo.train.by_model import MIN_MODEL_PAIRS, retrain_site

NOW = 1_800_000_000.0
CLASSES = ["a", "b", "c", "d"]
LOAD = {"a": 0.2, "b": 0.5, "c": 0.7, "d": 0.9}


def v100(x: str, y: str) -> float:
    return 1.0 / (1.0 + LOAD[x] * LOAD[y])


def k80(x: str, y: str) -> float:  # the older GPU: sharing costs much more
    return 1.0 / (1.0 + 3.0 * LOAD[x] * LOAD[y])


def history(
    node: str, model: str, truth: Callable[[str, str], float], first: int, classes: list[str]
) -> list[JobRecord]:
    """Every pair of ``classes`` twice on ``node`` (progress reported), and solo runs."""
    recs: list[JobRecord] = []
    jid, t = first, NOW - 10 * 86400
    common = {"node": node, "user": "u", "uid": 1, "gpus": [0], "gpu_model": model}
    for i, a in enumerate(classes):
        for b in classes[i:]:
            for _ in range(2):
                t += 4000
                for me, other, cm, co in ((jid, jid + 1, a, b), (jid + 1, jid, b, a)):
                    recs.append(
                        JobRecord(
                            job_id=me,
                            cls=cm,
                            start=t,
                            end=t + 3600,
                            shared=True,
                            co_runners=[CoRunner(other, co, "u", t, t + 3600)],
                            progress={"rate": 10 * truth(cm, co)},
                            **common,  # type: ignore[arg-type]
                        )
                    )
                jid += 2
    for c in classes:
        t += 4000
        recs.append(
            JobRecord(
                job_id=jid,
                cls=c,
                start=t,
                end=t + 600,
                progress={"rate": 10.0},
                **common,  # type: ignore[arg-type]
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
    return Config(
        scores=ScoresConfig(path=str(tmp_path / "scores" / "live.json"), **kw),  # type: ignore[arg-type]
        gpus=(NodeGpus("v[1-2]", 2, "v100"), NodeGpus("k[1-2]", 2, "k80")),
    )


def two_models(engine: Engine, k80_classes: list[str] = CLASSES) -> None:
    ingest_records(engine, history("v1", "v100", v100, 1, CLASSES))
    ingest_records(engine, history("k1", "k80", k80, 10_000, k80_classes))


def test_each_model_gets_its_own_set_next_to_the_site_default(
    engine: Engine, tmp_path: Path
) -> None:
    two_models(engine)
    c = cfg(tmp_path)
    run = retrain_site(engine, c, now=NOW)
    assert run.mixed and not run.failed
    assert [o.gpu_model for o in run.outcomes] == ["", "k80", "v100"]
    live = Path(c.scores.path)
    files = {m: model_scores_path(live, m) for m in ("", "k80", "v100")}
    assert files["k80"] == live.with_name("live-k80.json")
    for o in run.outcomes:
        assert o.result is not None and o.result.published and o.result.path == files[o.gpu_model]
        t = load_scores(files[o.gpu_model])
        assert t.gpu_model == o.gpu_model and t.id == o.result.table.id
        db = live_score_set(engine, o.gpu_model)
        assert db is not None and db.id == t.id
    tv, tk = load_scores(files["v100"]), load_scores(files["k80"])
    for x, y in (("b", "c"), ("c", "d"), ("a", "d")):
        assert tv.pair(x, y).n_a == pytest.approx(v100(x, y), abs=0.05)
        assert tk.pair(x, y).n_a == pytest.approx(k80(x, y), abs=0.05)
    # each model's set learnt from its own GPUs only; the default from both
    assert tv.training["episode_gpu_models"] == {"v100": 20}
    assert tk.training["episode_gpu_models"] == {"k80": 20}
    assert load_scores(files[""]).training["episode_gpu_models"] == {"k80": 20, "v100": 20}


def test_a_model_with_too_little_data_keeps_the_default(engine: Engine, tmp_path: Path) -> None:
    two_models(engine, k80_classes=["a", "b"])  # 3 class pairs
    run = retrain_site(engine, cfg(tmp_path), now=NOW)
    by = {o.gpu_model: o for o in run.outcomes}
    assert by["k80"].pairs == 3 < MIN_MODEL_PAIRS
    assert by["k80"].result is None and "fewer than" in by["k80"].skipped
    assert not model_scores_path(tmp_path / "scores" / "live.json", "k80").exists()
    assert live_score_set(engine, "k80") is None
    assert by["v100"].result is not None and by["v100"].result.published
    assert by[""].result is not None and by[""].result.published


def test_an_imported_campaign_counts_for_its_model(engine: Engine, tmp_path: Path) -> None:
    ingest_records(engine, history("v1", "v100", v100, 1, CLASSES))
    solo = {c: 10.0 for c in CLASSES}
    pairs = {(x, y): (k80(x, y), k80(y, x)) for x in CLASSES for y in CLASSES}
    import_gavel(engine, GavelData(gpu="k80", solo=solo, pairs=pairs))
    run = retrain_site(engine, cfg(tmp_path), now=NOW)
    by = {o.gpu_model: o for o in run.outcomes}
    assert set(by) == {"", "k80", "v100"}
    r = by["k80"].result
    assert r is not None and r.info["campaign_pairs"] > 0 and r.info["episodes"] == 0
    assert by["v100"].result is not None and by["v100"].result.info["campaign_pairs"] == 0


def test_one_failing_model_does_not_stop_the_others(engine: Engine, tmp_path: Path) -> None:
    two_models(engine)
    c = cfg(tmp_path)
    blocker = model_scores_path(c.scores.path, "k80")
    blocker.mkdir(parents=True)  # a directory where the k80 file goes: cannot be written
    run = retrain_site(engine, c, now=NOW)
    assert [o.gpu_model for o in run.failed] == ["k80"]
    assert "cannot be written" in run.failed[0].error
    assert {o.gpu_model for o in run.outcomes if o.result and o.result.published} == {"", "v100"}


def test_gpu_trains_one_model_and_a_named_site_model_keeps_one_set(
    engine: Engine, tmp_path: Path
) -> None:
    two_models(engine)
    run = retrain_site(engine, cfg(tmp_path), gpu="k80", now=NOW)
    assert [o.gpu_model for o in run.outcomes] == ["k80"] and run.mixed
    assert run.outcomes[0].result is not None
    assert run.outcomes[0].result.path == tmp_path / "scores" / "live-k80.json"
    assert not (tmp_path / "scores" / "live.json").exists()
    assert [s["gpu_model"] for s in list_score_sets(engine)] == ["k80"]
    # [scores] gpu_model names the site's one model: one set from all the history, as before
    run = retrain_site(engine, cfg(tmp_path, gpu_model="v100"), now=NOW + 60)
    assert not run.mixed and [o.gpu_model for o in run.outcomes] == ["v100"]
    res = run.outcomes[0].result
    assert res is not None and res.path == tmp_path / "scores" / "live.json"
    assert res.info["episode_gpu_models"] == {"k80": 20, "v100": 20}
    assert run.also_in_history == ["k80"]


def test_a_single_model_site_trains_one_set_as_before(engine: Engine, tmp_path: Path) -> None:
    ingest_records(engine, history("v1", "v100", v100, 1, CLASSES))
    run = retrain_site(engine, cfg(tmp_path), now=NOW)
    assert not run.mixed and [o.gpu_model for o in run.outcomes] == [""]
    assert sorted(p.name for p in (tmp_path / "scores").iterdir()) == ["live.json"]
    # before, `retrain` noted "the history also has GPU model(s) v100; one set was trained
    # for all of them" on every run of a site with one model
    assert run.also_in_history == []


def test_old_records_are_trained_with_their_nodes_model(engine: Engine, tmp_path: Path) -> None:
    recs = history("v1", "", v100, 1, CLASSES) + history("k1", "", k80, 10_000, CLASSES)
    ingest_records(engine, recs)  # records from before the GPU model was recorded
    run = retrain_site(engine, cfg(tmp_path), now=NOW)
    assert run.filled == len(recs) and run.mixed
    assert [o.gpu_model for o in run.outcomes if o.result and o.result.published] == [
        "",
        "k80",
        "v100",
    ]


def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models: dict[str, str]) -> Engine:
    """A site config (one GPU a node, ``node -> model``) in $SLURM_COLO_CONFIG, and its
    upgraded, empty history database."""
    gpus = "".join(
        f'[[gpus]]\nnodes = "{n}"\ncount = 1\nmodel = "{m}"\n' for n, m in models.items()
    )
    conf = tmp_path / "config.toml"
    conf.write_text(
        f'[store]\nurl = "sqlite:///{tmp_path}/h.db"\n[scores]\npath = "{tmp_path}/live.json"\n'
        + gpus
    )
    monkeypatch.setenv("SLURM_COLO_CONFIG", str(conf))
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e)
    return e


def test_retrain_says_what_it_trained_per_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    e = site(tmp_path, monkeypatch, {"v1": "v100", "k1": "k80"})
    ingest_records(e, history("v1", "", v100, 1, CLASSES))
    ingest_records(e, history("k1", "k80", k80, 10_000, ["a", "b"]))
    code, out, err = cli(["retrain"], capsys)
    assert code == 0, err
    assert f"{len(history('v1', '', v100, 1, CLASSES))} older record(s) given the GPU model" in out
    assert "site default set: 10 measured class pair(s)" in out
    assert "GPU model k80: 3 measured class pair(s)" in out
    assert "fewer than 5: not trained; its GPUs keep their set (else the site default)" in out
    assert "GPU model v100: 10 measured class pair(s)" in out
    assert f"published -> {tmp_path}/live-v100.json (live)" in out
    assert f"published -> {tmp_path}/live.json (live)" in out
    assert json.loads((tmp_path / "live-v100.json").read_text())["gpu_model"] == "v100"
    (tmp_path / "live-v100.json").unlink()
    (tmp_path / "live-v100.json").mkdir()  # cannot be written: named, non-zero exit
    code, out, err = cli(["retrain"], capsys)
    assert code == 2 and "GPU model v100: score set v100-" in err and "cannot be written" in err


def test_a_mistyped_gpu_trains_nothing_and_leaves_the_live_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    e = site(tmp_path, monkeypatch, {"v1": "v100"})
    ingest_records(e, history("v1", "v100", v100, 1, CLASSES))
    code, out, err = cli(["retrain"], capsys)
    assert code == 0, err
    before = (tmp_path / "live.json").read_bytes()
    code, out, err = cli(["retrain", "--gpu", "v1OO"], capsys)
    assert code == 2 and "--gpu v1OO: no GPU model of that name" in err
    assert "(known: v100)" in err and "published" not in out
    assert (tmp_path / "live.json").read_bytes() == before
    assert not list(tmp_path.glob("live-*.json"))
    code, out, err = cli(["retrain", "--gpu", "v100"], capsys)  # the right name still works
    assert code == 0 and "published" in out, err


def test_scores_load_publishes_a_models_own_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from slurm_colo.scores import (
        ClassInfo,
        ScoreTable,
        load_scores,
        model_scores_path,
        publish_scores,
    )

    live = tmp_path / "live.json"
    conf = tmp_path / "site.toml"
    conf.write_text(
        f'[scores]\npath = "{live}"\n'
        '[[gpus]]\nnodes = "k1"\ncount = 2\nmodel = "k80"\nmemory_gib = 12.0\n'
    )
    empty = publish_scores(ScoreTable(id="nothing"), tmp_path / "empty.json")
    code, out, err = cli(["scores", "load", str(empty), "--config", str(conf)], capsys)
    assert code == 2 and "score set nothing has no classes and no pairs" in err
    assert not live.exists()
    src = publish_scores(
        ScoreTable(id="k80-by-hand", classes={"a": ClassInfo(memory_gib=2.0)}),
        tmp_path / "mine.json",
    )
    code, out, err = cli(
        ["scores", "load", str(src), "--gpu-model", "k80", "--config", str(conf)], capsys
    )
    assert code == 0, err
    assert "warning: score set k80-by-hand has no pairs: the agent judges every pair" in err
    assert load_scores(model_scores_path(live, "k80")).id == "k80-by-hand"
    assert "live-k80.json" in out
    assert not live.exists()  # the site default is left alone
    code, out, err = cli(
        ["scores", "load", str(src), "--gpu-model", "a100", "--config", str(conf)], capsys
    )
    assert code == 2 and "no [[gpus]] layout has model 'a100'" in err
    assert "models configured: k80" in err


def test_scores_load_takes_a_file_or_the_measured_data_not_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from slurm_colo.scores import ClassInfo, ScoreTable, publish_scores

    live = tmp_path / "live.json"
    conf = tmp_path / "site.toml"
    conf.write_text(f'[scores]\npath = "{live}"\n')
    src = publish_scores(ScoreTable(id="mine", classes={"a": ClassInfo()}), tmp_path / "m.json")
    argv = ["scores", "load", str(src), "--measured", "k80", "--config", str(conf)]
    code, out, err = cli(argv, capsys)
    assert code == 2 and "give a score FILE or --measured k80, not both" in err
    assert not live.exists()


def test_retrain_says_how_many_records_ran_across_a_step_of_their_nodes_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    e = site(tmp_path, monkeypatch, {"v1": "v100"})
    ingest_records(e, history("v1", "v100", v100, 1, CLASSES))
    code, out, err = cli(["retrain"], capsys)
    assert code == 0 and err == "", err  # a site of one model: no note of other models
    t = NOW - 5 * 86400
    stepped = {"sm_util_mean": 40.0, "clock_steps_s": [3600.0]}
    common = {"node": "v1", "user": "u", "uid": 1, "gpus": [0], "gpu_model": "v100"}
    ingest_records(
        e,
        [
            JobRecord(job_id=90_001, cls="a", start=t, end=t + 4200, profile=stepped, **common),  # type: ignore[arg-type]
            JobRecord(
                job_id=90_002,
                cls="b",
                start=t + 5000,
                end=t + 9200,
                shared=True,
                co_runners=[CoRunner(90_003, "c", "u", t + 5000, t + 9200)],
                profile=stepped,
                **common,  # type: ignore[arg-type]
            ),
        ],
    )
    code, out, err = cli(["retrain", "--force"], capsys)
    assert code == 0, err
    assert (
        "warning: 2 record(s) ran across a step of their node's clock: no figures taken "
        "from them" in err
    )
    training = json.loads((tmp_path / "live.json").read_text())["training"]
    assert training["clock_stepped_records"] == 2
