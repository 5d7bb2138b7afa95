"""`simulate --seeds`: seed lists, per-seed figures against the baseline and the oracle, the
spread table, and the CLI writing it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from slurm_colo.cli import app
from slurm_colo.sim.metrics import Result
from slurm_colo.sim.spread import (
    MAX_SEEDS,
    SeedsError,
    parse_seeds,
    per_seed_table,
    seed_rows,
    spread_table,
)


def result(policy: str, makespan: float, jct: float, over: int = 0, decile: float = 2.0) -> Result:
    return Result(
        policy=policy,
        jobs=10,
        makespan_h=makespan,
        avg_jct_h=jct,
        p99_jct_h=jct,
        avg_slowdown=1.0,
        worst_decile_slowdown=decile,
        gpu_hours=1.0,
        colocated_share=0.0,
        harmful_share=0.0,
        max_stretch=1.0,
        over_limit_jobs=over,
        worst_class_slowdown=decile,
        worst_user_slowdown=1.0,
    )


@pytest.mark.parametrize(
    "text,seeds",
    [
        ("7", [7]),
        ("1-4", [1, 2, 3, 4]),
        ("1,4,7", [1, 4, 7]),
        ("1-3, 9", [1, 2, 3, 9]),
        ("2,1-3", [2, 1, 3]),  # repeats dropped, order kept
    ],
)
def test_seed_lists_and_ranges(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize(
    "text,why",
    [
        ("one", "'one' is not a seed"),
        ("1-", "'1-' is not a seed"),
        ("5-2", "from low to high"),
        ("-3", "is not a seed"),
        ("1,,2", "'' is not a seed"),
        (f"1-{MAX_SEEDS + 1}", f"more than {MAX_SEEDS} seeds"),
        ("1-99999999999", f"more than {MAX_SEEDS} seeds"),
    ],
)
def test_bad_seed_lists_say_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(SeedsError, match=why):
        parse_seeds(text)


def test_rows_compare_each_seed_with_its_own_baseline_and_oracle() -> None:
    rows = seed_rows(
        {
            1: [
                result("exclusive-fifo", 400, 60),
                result("ours", 300, 12),
                result("oracle", 290, 10),
            ],
            2: [
                result("exclusive-fifo", 500, 50),
                result("ours", 350, 10, over=2),
                result("oracle", 350, 9),
            ],
        }
    )
    ours = {r.seed: r for r in rows if r.policy == "ours"}
    assert ours[1].makespan_vs_base == pytest.approx(-25.0)
    assert ours[1].avg_jct_vs_base == pytest.approx(-80.0)
    assert ours[1].makespan_vs_ref == pytest.approx(100 * (300 / 290 - 1))
    assert ours[2].makespan_vs_base == pytest.approx(-30.0)
    assert ours[2].makespan_vs_ref == pytest.approx(0.0)
    assert ours[2].over_limit_jobs == 2


def test_rows_without_baseline_or_oracle_leave_the_comparison_empty() -> None:
    rows = seed_rows({3: [result("ours", 300, 12)]})
    assert rows[0].makespan_vs_base is None and rows[0].makespan_vs_ref is None
    assert "ours" in spread_table(rows) and " - " in spread_table(rows)


def test_spread_table_gives_mean_best_and_worst_seed() -> None:
    rows = seed_rows(
        {
            1: [result("exclusive-fifo", 400, 60), result("ours", 300, 12, decile=2.0)],
            2: [result("exclusive-fifo", 400, 60), result("ours", 320, 15, over=1, decile=4.0)],
        }
    )
    line = next(ln for ln in spread_table(rows).splitlines() if ln.startswith("| ours"))
    assert "-22.5% (-25.0% .. -20.0%)" in line  # makespan: mean, best, worst
    assert "-77.5% (-80.0% .. -75.0%)" in line  # average JCT
    assert "3.0 (2.0 .. 4.0)" in line
    assert line.rstrip(" |").endswith("0/1")  # jobs >1.5x, one figure per seed
    per_seed = per_seed_table(rows).splitlines()
    assert per_seed[0] == "| seed | ours |"  # the baseline is the reference, not a column
    assert per_seed[2] == "| 1 | -25.0% / -80.0% |"
    assert per_seed[3] == "| 2 | -20.0% / -75.0% |"


def two_seeds(out: Path, policies: str, *more: str) -> Any:
    """``simulate --seeds 1-2`` of a small trace, results to ``out``."""
    argv = ["simulate", "--jobs", "120", "--gpus", "8", "--seeds", "1-2"]
    return CliRunner().invoke(app, [*argv, "--policies", policies, *more, "--out", str(out)])


def test_cli_runs_every_seed_and_writes_the_spread(tmp_path: Path) -> None:
    r = two_seeds(tmp_path, "exclusive-fifo,oracle")
    assert r.exit_code == 0, r.output
    assert "seed 1" in r.output and "seed 2" in r.output
    rows = json.loads((tmp_path / "seeds.json").read_text())
    assert {(x["seed"], x["policy"]) for x in rows} == {
        (s, p) for s in (1, 2) for p in ("exclusive-fifo", "oracle")
    }
    md = (tmp_path / "seeds.md").read_text()
    assert "--seeds 1-2" in md and "| oracle | 2 |" in md


def test_spread_table_counts_jobs_past_their_time_limit_only_when_traces_have_limits() -> None:
    from dataclasses import replace

    plain = seed_rows({1: [result("ours", 300, 12)], 2: [result("ours", 310, 12)]})
    assert "past time limit" not in spread_table(plain)
    assert all(r.past_limit_jobs is None for r in plain)
    limited = seed_rows(
        {
            1: [replace(result("ours", 300, 12), past_limit_jobs=7)],
            2: [replace(result("ours", 310, 12), past_limit_jobs=0)],
        }
    )
    table = spread_table(limited).splitlines()
    assert table[0].rstrip(" |").endswith("past time limit (per seed)")
    assert table[2].rstrip(" |").endswith("0/0 | 7/0")  # jobs >1.5x, then past the limit


def test_cli_seeds_with_time_limits_count_the_jobs_past_them(tmp_path: Path) -> None:
    r = two_seeds(tmp_path, "exclusive-fifo,gandiva-random", "--time-limits", "1-1")
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "seeds.json").read_text())
    by = {(x["seed"], x["policy"]): x["past_limit_jobs"] for x in rows}
    assert by[(1, "exclusive-fifo")] == by[(2, "exclusive-fifo")] == 0  # alone: never past
    assert all(isinstance(v, int) for v in by.values())
    md = (tmp_path / "seeds.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("| gandiva-random | 2 |"))
    shared = f"{by[(1, 'gandiva-random')]}/{by[(2, 'gandiva-random')]}"
    assert "past time limit (per seed)" in md and line.rstrip(" |").endswith(shared)


def test_cli_rejects_a_bad_seed_list() -> None:
    r = CliRunner().invoke(app, ["simulate", "--jobs", "10", "--seeds", "3-1"])
    assert r.exit_code != 0
    assert isinstance(r.exception, SeedsError)  # main() prints it as "error: ..." and exits 1
    assert "from low to high" in str(r.exception)


def test_head_to_head_counts_the_seeds_won_on_every_figure() -> None:
    from dataclasses import replace

    from slurm_colo.sim.spread import head_to_head

    def worse(r: Result) -> Result:  # every figure higher, so ours wins unless told otherwise
        return replace(
            r,
            p99_jct_h=r.p99_jct_h + 1,
            avg_slowdown=2.0,
            worst_decile_slowdown=9.0,
            gpu_hours=2.0,
            harmful_share=0.1,
            worst_class_slowdown=9.0,
        )

    rows = seed_rows(
        {
            1: [result("ours", 300, 10), worse(result("gandiva", 330, 12))],
            2: [result("ours", 300, 10, decile=9.5), worse(result("gandiva", 330, 12))],
            3: [result("ours", 300, 10), worse(result("gandiva", 300, 12))],  # a tie is no win
        }
    )
    line = head_to_head(rows, "ours", "gandiva")
    assert line == (
        "ours vs gandiva: better on every figure on 1 of 3 seeds (not better on: "
        "worst 10% slowdown 1x, worst class slowdown 1x, makespan 1x)"
    )
    assert head_to_head(rows, "ours", "nobody") is None
