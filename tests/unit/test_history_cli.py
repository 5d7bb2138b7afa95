"""The history/model commands through the real command line entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run_cli as run

from slurm_colo.contracts.records import CoRunner, JobRecord


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    conf = tmp_path / "config.toml"
    conf.write_text(
        f'[store]\nurl = "sqlite:///{tmp_path}/h.db"\n'
        f'[scores]\npath = "{tmp_path}/live.json"\n'
        f'[node]\nspool_dir = "{tmp_path}/spool"\n'
    )
    monkeypatch.setenv("SLURM_COLO_CONFIG", str(conf))
    return tmp_path


def test_commands_refuse_an_unmigrated_database(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["history"], capsys)
    assert code == 2 and "slurm-colo db upgrade" in err
    code, out, err = run(["db", "status"], capsys)
    assert code == 2 and "schema (none)" in out
    # a mistyped path: said so, and no empty database (nor its directory) left there
    typo = site / "typo" / "history.db"
    code, out, err = run(["db", "status", "--url", f"sqlite:///{typo}"], capsys)
    assert code == 2 and f"no history database at {typo}" in err
    assert not typo.parent.exists()


def test_bootstrap_retrain_and_inspect(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["db", "upgrade"], capsys)[0] == 0
    code, out, _ = run(["history", "import", "--gpu", "k80"], capsys)
    assert code == 0 and "26 classes" in out
    code, out, _ = run(["retrain"], capsys)
    assert code == 0 and "published" in out and (site / "live.json").exists()

    code, out, _ = run(["scores", "export", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    k = 26
    assert len(doc["pairs"]) == k * (k + 1) // 2
    row = doc["pairs"][0]
    assert set(row) >= {"a", "b", "n_a", "n_b", "S", "delta", "sd"}
    assert row["S"] == pytest.approx(row["n_a"] + row["n_b"], abs=1e-3)
    assert any(r["never"] and r["delta"] == 0 for r in doc["pairs"])

    code, out, _ = run(["scores", "show", "--class", "a3c", "--limit", "3"], capsys)
    assert code == 0 and "a3c" in out and "best pairs" in out
    png = site / "heat.png"
    code, out, _ = run(["scores", "heatmap", "--out", str(png)], capsys)
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for bad in (site / "heat.txt", site / "plots"):
        code, _, err = run(["scores", "heatmap", "--out", str(bad)], capsys)
        assert code == 2 and f"--out {bad}: give a file name ending in .png" in err
        assert not bad.exists() and not (site / f"{bad.name}.png").exists()


def test_ingest_and_query_with_filters(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(["db", "upgrade"], capsys)
    spool = site / "spool"
    spool.mkdir()
    for i, (user, cls, node) in enumerate(
        [("alice", "x", "n1"), ("bob", "y", "n1"), ("alice", "y", "n2")]
    ):
        r = JobRecord(
            job_id=i + 1,
            node=node,
            user=user,
            uid=1,
            cls=cls,
            start=1.8e9 + i * 100,
            end=1.8e9 + i * 100 + 60,
            co_runners=[CoRunner(99, "z", "u", 1.8e9, 1.8e9 + 10)],
            gpu_model="k80" if node == "n2" else "",
        )
        (spool / f"{i}.json").write_text(json.dumps(r.to_dict()))
    (spool / "bad.json").write_text("{")
    code, out, err = run(["history", "ingest"], capsys)
    assert code == 0 and "3 new record(s)" in out and "bad.json" in err
    code, out, _ = run(["history", "--user", "alice", "--json"], capsys)
    rows = [json.loads(x) for x in out.splitlines()]
    assert sorted(r["job_id"] for r in rows) == [1, 3]
    code, out, _ = run(["history", "--class", "y", "--node", "n1", "--json"], capsys)
    assert [json.loads(x)["job_id"] for x in out.splitlines()] == [2]
    code, out, _ = run(
        ["history", "--since", "2027-01-15T08:03:00", "--until", "2027-01-15T08:04:00", "--json"],
        capsys,
    )
    assert [json.loads(x)["job_id"] for x in out.splitlines()] == [3]
    code, out, _ = run(["history", "--user", "alice"], capsys)
    assert code == 0 and "JOBID" in out and out.count("alice") == 2
    assert [ln.split()[4] for ln in out.splitlines()[1:]] == ["k80", "-"]  # GPU model column
    code, out, _ = run(["history", "--gpu", "k80", "--json"], capsys)
    assert [json.loads(x)["gpu_model"] for x in out.splitlines()] == ["k80"]
    code, _, err = run(["history", "--since", "last tuesday"], capsys)
    assert code == 2 and "cannot read time" in err


def test_retrain_with_no_data_fails_loudly(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(["db", "upgrade"], capsys)
    code, _, err = run(["retrain"], capsys)
    assert code == 2 and "no training data" in err
    assert not (site / "live.json").exists()


def test_model_evaluate_prints_model_and_baselines(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["model", "evaluate", "--gpu", "k80", "--seeds", "1", "--json"], capsys)
    assert code == 0
    res = json.loads(out)["results"]
    assert set(res) == {"model", "mean of observed pairs", "row effect + column effect"}
    assert res["model"]["mae_n"] < res["row effect + column effect"]["mae_n"]
    code, _, err = run(["model", "evaluate", "--gpu", "p100", "--seeds", "1"], capsys)
    assert code == 2 and "no GPU type 'p100'" in err


def test_any_gpu_key_of_a_gavel_file_is_imported_and_evaluated(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from slurm_colo.gavel import bundled_path

    # the bundled K80 measurements under a GPU key the bundled file does not have
    f = site / "campaign.json"
    f.write_text(json.dumps({"a100": json.loads(bundled_path().read_text())["k80"]}))
    run(["db", "upgrade"], capsys)
    code, out, err = run(["history", "import", "--gavel", str(f), "--gpu", "a100"], capsys)
    assert code == 0 and "imported gavel:a100: 26 classes" in out and "left out" not in err
    # a job type that did not run alone is left out, and named
    doc = json.loads(f.read_text())
    solo, doc["a100"]["('A3C', 1)"]["null"] = doc["a100"]["('A3C', 1)"]["null"], 0.0
    f.write_text(json.dumps(doc))
    code, out, err = run(["history", "import", "--gavel", str(f), "--gpu", "a100"], capsys)
    assert code == 0 and "imported gavel:a100: 25 classes" in out
    assert 'left out 1 job type without a solo rate ("null"): A3C' in err
    doc["a100"]["('A3C', 1)"]["null"] = solo
    f.write_text(json.dumps(doc))
    assert run(["history", "import", "--gavel", str(f), "--gpu", "a100"], capsys)[0] == 0
    code, out, _ = run(["retrain", "--gpu", "a100"], capsys)
    assert code == 0 and "published" in out
    assert json.loads((site / "live.json").read_text())["gpu_model"] == "a100"
    code, out, _ = run(
        ["model", "evaluate", "--gavel", str(f), "--gpu", "a100", "--seeds", "1", "--json"], capsys
    )
    assert code == 0 and json.loads(out)["gpu"] == "a100"
    for cmd in (["history", "import"], ["model", "evaluate"]):
        code, _, err = run([*cmd, "--gavel", str(f), "--gpu", "v100"], capsys)
        assert code == 2 and f"{f} has no GPU type 'v100'; the file has: a100" in err
    f.write_text('{"a100": {"(\'A3C\', 1)": {"null": 2.0, "(\'A3C\', 1)": 7}}}')
    for cmd in (["history", "import"], ["model", "evaluate"]):
        code, _, err = run([*cmd, "--gavel", str(f), "--gpu", "a100"], capsys)
        assert code == 2 and f"gavel data file {f}" in err and "expected [rate, other rate]" in err


def test_import_and_evaluate_help_say_any_gpu_key_works() -> None:
    from typer.main import get_command

    from slurm_colo.cli import app

    root = get_command(app)
    for group, cmd in (("history", "import"), ("model", "evaluate")):
        sub = root.commands[group].commands[cmd]  # type: ignore[attr-defined]
        opts = {o.name: o for o in sub.params}
        assert "any GPU key of the file" in opts["gpu"].help


def test_counts_and_waits_out_of_range_are_refused(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["history", "--limit", "99999999999999999999"], capsys)
    assert code == 2 and "--limit" in err and "Traceback" not in err
    code, _, err = run(["scores", "show", "--limit", "-3"], capsys)
    assert code == 2 and "--limit" in err
    code, _, err = run(["explain", "0"], capsys)
    assert code == 2 and "job_id" in err.replace("JOB_ID", "job_id")
    for v in ("nan", "inf", "-1"):
        code, _, err = run(["spool", "ingest", "--busy-timeout", v], capsys)
        assert code == 2 and f"--busy-timeout {v}: give seconds from 0 to 3600" in err


def test_model_evaluate_refuses_more_seeds_than_it_could_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Expected: ``--seeds 10^20`` is refused at once, like ``simulate --seeds`` (it trained
    one model after another until stopped)."""
    from cli_run import run_cli

    code, _, err = run_cli(["model", "evaluate", "--seeds", "99999999999999999999"], capsys)
    assert code == 2 and "--seeds must be from 1 to 100, got 99999999999999999999" in err, err
