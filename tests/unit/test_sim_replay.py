"""The command line ``slurm-colo simulate --out`` writes beside its figures (results.md,
seeds.md) gives the same figures when run again: every option that shaped them is in it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from cli_run import run_cli
from test_sim_inputs import gavel_doc, score_doc
from test_sim_ours import write_sacct_export


def written_command(md: Path) -> list[str]:
    """The arguments of the command in the first code block of ``md``."""
    m = re.search(r"```\n(slurm-colo simulate .*)\n```", md.read_text())
    assert m, md.read_text()
    argv = shlex.split(m.group(1))
    assert argv[:2] == ["slurm-colo", "simulate"]
    return argv[1:]


def figures(results: Path) -> list[dict[str, object]]:
    """results.json's rows without the seconds each policy took to simulate."""
    rows = json.loads(results.read_text())
    assert rows and all("wall_s" in r for r in rows)
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def replayed(argv: list[str], out: Path) -> list[str]:
    """``argv`` writing into ``out`` (the written command names no ``--out``)."""
    assert "--out" not in argv and "-o" not in argv
    return [*argv, "--out", str(out)]


def test_a_generated_trace_with_every_setting_moved_replays_to_the_same_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gavel = tmp_path / "a100 data.json"  # a space: the command quotes paths
    gavel.write_text(json.dumps(gavel_doc()))
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps(score_doc()))
    config = tmp_path / "site.toml"
    config.write_text('[placement]\nmin_delta = 1.05\nundo = "off"\n')
    argv = [
        "simulate",
        *("--jobs", "70", "--gpus", "6", "--load", "1.7", "--seed", "3", "--users", "2"),
        *("--multi-gpu", "--max-duration-h", "12", "--aggressive-share", "0.3"),
        *("--time-limits", "1-2.5", "--cross-user", "never", "--unplaced", "hold"),
        *("--slots", "3", "--gpu-memory-gib", "24", "--hidden-share", "0.4"),
        *("--policies", "exclusive-fifo,gandiva-random,ours,ours-submit,oracle-error"),
        *("--oracle-error", "0.7", "--gpu", "a100", "--gavel", str(gavel)),
        *("--scores", str(scores), "--config", str(config), "--out", str(tmp_path / "first")),
    ]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    again = written_command(tmp_path / "first" / "results.md")
    assert "--undo off" in " ".join(again)  # the config's setting, spelled out
    code, _, err = run_cli(replayed(again, tmp_path / "again"), capsys)
    assert code == 0, err
    first = figures(tmp_path / "first" / "results.json")
    assert [r["policy"] for r in first] == [
        "exclusive-fifo",
        "gandiva-random",
        "ours",
        "ours-submit",
        "oracle-error",
    ]
    assert figures(tmp_path / "again" / "results.json") == first
    # and the replay writes the same command again
    assert written_command(tmp_path / "again" / "results.md") == again


def test_a_seed_list_replays_to_the_same_per_seed_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--jobs", "50", "--gpus", "4", "--seeds", "2,5", "--load", "2"]
    argv += ["--policies", "exclusive-fifo,ours", "--out", str(tmp_path / "first")]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    again = written_command(tmp_path / "first" / "seeds.md")
    code, _, err = run_cli(replayed(again, tmp_path / "again"), capsys)
    assert code == 0, err
    first = json.loads((tmp_path / "first" / "seeds.json").read_text())
    assert {r["seed"] for r in first} == {2, 5}
    assert json.loads((tmp_path / "again" / "seeds.json").read_text()) == first


def test_a_sacct_export_replays_to_the_same_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = write_sacct_export(tmp_path / "jobs.txt", jobs=30, users=2)
    argv = ["simulate", "--sacct", str(export), "--gpus", "3"]
    argv += ["--policies", "exclusive-fifo,ours", "--out", str(tmp_path / "first")]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    again = written_command(tmp_path / "first" / "results.md")
    assert "--jobs" not in again and "--load" not in again  # an export has its own
    code, _, err = run_cli(replayed(again, tmp_path / "again"), capsys)
    assert code == 0, err
    first = figures(tmp_path / "first" / "results.json")
    assert figures(tmp_path / "again" / "results.json") == first
