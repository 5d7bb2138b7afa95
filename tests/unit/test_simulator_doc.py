"""docs/simulator.md's tables are the code's: ``benchmarks/simulator_tables.py --check``
measures seed 1 again and fails, naming the rows, when the page no longer holds them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "simulator_tables.py"
SMALL = ["--campaigns", "k80", "--loads", "1.5", "--seeds", "1", "--jobs", "300", "--gpus", "16"]


def tables(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=280)


def test_the_simulator_page_holds_what_the_code_gives_for_seed_1() -> None:
    r = tables("--check", "--seeds", "1", "--loads", "1.5")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every row of these seeds is what the code gives" in r.stdout


def test_a_stale_or_missing_row_is_named_and_fails_the_check(tmp_path: Path) -> None:
    page = tmp_path / "simulator.md"
    page.write_text("# Simulator\n\n<!-- tables: begin -->\n<!-- tables: end -->\n", "utf-8")
    assert tables(*SMALL, "--doc", str(page)).returncode == 0  # written
    text = page.read_text("utf-8")
    assert "### K80 data, load 1.5" in text
    ok = tables(*SMALL, "--doc", str(page), "--check")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert page.read_text("utf-8") == text  # a check writes nothing

    row = next(line for line in text.splitlines() if line.startswith("| 1 | ours |"))
    cells = row.split(" | ")
    cells[4] = "1.0"  # makespan h
    page.write_text(text.replace(row, " | ".join(cells)), "utf-8")
    stale = tables(*SMALL, "--doc", str(page), "--check")
    assert stale.returncode == 1
    assert "1 row(s) stale" in stale.stderr and "benchmarks/simulator_doc.py" in stale.stderr
    assert f"now:  {row}" in stale.stdout and "page: | 1 | ours | " in stale.stdout

    page.write_text(text.replace("### K80 data, load 1.5", "### K80, load 1.5"), "utf-8")
    gone = tables(*SMALL, "--doc", str(page), "--check")
    assert gone.returncode == 1 and "page: (no such row)" in gone.stdout


def test_held_out_seeds_write_their_summary_only_between_their_markers(tmp_path: Path) -> None:
    """--held-out (seeds 21-30 unless told): the summary and the misses go between the
    held-out markers; the seeds 1-10 tables are left as they are."""
    page = tmp_path / "simulator.md"
    tables_block = "<!-- tables: begin -->\nkept\n<!-- tables: end -->\n"
    page.write_text(
        tables_block + "<!-- held-out: begin -->\nold\n<!-- held-out: end -->\n", "utf-8"
    )
    small = [
        "--campaigns",
        "k80",
        "--loads",
        "1.5",
        "--seeds",
        "21",
        "--jobs",
        "300",
        "--gpus",
        "16",
    ]
    r = tables("--held-out", *small, "--doc", str(page))
    assert r.returncode == 0, r.stdout + r.stderr
    text = page.read_text("utf-8")
    assert text.startswith(tables_block) and "\nold\n" not in text
    held = text.split("<!-- held-out: begin -->\n")[1]
    assert held.startswith(
        "Written by `python benchmarks/simulator_tables.py --held-out --seeds 21 "
    )
    assert "| k80 | 1.5 | ours | " in held and "Where `ours` or `ours-submit` is worse" in held
    assert "### " not in held  # no per-seed tables on the page...
    assert "| 21 | ours | " in r.stdout  # ...but printed
    refused = tables("--held-out", "--check", "--doc", str(page))
    assert refused.returncode == 2 and "not with --held-out" in refused.stderr


JITTER = REPO / "benchmarks" / "makespan_jitter.py"


def test_the_jitter_table_is_written_between_its_markers(tmp_path: Path) -> None:
    page = tmp_path / "simulator.md"
    page.write_text("before\n<!-- jitter: begin -->\nold\n<!-- jitter: end -->\nafter\n", "utf-8")
    small = ["--campaigns", "k80", "--loads", "1.5", "--seeds", "1", "--jobs", "300"]
    cmd = [sys.executable, str(JITTER), *small, "--gpus", "16", "--policies", "oracle,ours"]
    r = subprocess.run(
        [*cmd, "--doc", str(page), "--write"], capture_output=True, text=True, timeout=280
    )
    assert r.returncode == 0, r.stdout + r.stderr
    text = page.read_text("utf-8")
    assert text.startswith("before\n<!-- jitter: begin -->\nWritten by `python benchmarks/")
    assert "old" not in text and text.endswith("<!-- jitter: end -->\nafter\n")
    row = next(line for line in text.splitlines() if line.startswith("| K80 data | 1.5 | 1 |"))
    oracle, ours, gap = row.split(" | ")[3:6]
    (o0, o1), (u0, u1) = (
        [float(x) for x in cell.split(" (")[0].split(" → ")] for cell in (oracle, ours)
    )
    as_drawn, moved = (float(x) for x in gap.removesuffix(" % |").split(" / "))
    for g, u, o in ((as_drawn, u0, o0), (moved, u1, o1)):
        assert abs(g - 100 * (u / o - 1)) < 0.25  # from the unrounded makespans
    assert "- `oracle`: makespan moved by" in text and "- `ours` more than 3 % above" in text
    assert "--write" not in text  # the command written is the one that prints it

    page.write_text("no markers\n", "utf-8")
    bad = subprocess.run(
        [*cmd, "--doc", str(page), "--write"], capture_output=True, text=True, timeout=280
    )
    assert bad.returncode == 1 and "no <!-- jitter: begin -->" in bad.stderr
    assert page.read_text("utf-8") == "no markers\n"


def test_summary_into_writes_a_named_block_only(tmp_path: Path) -> None:
    """--summary-into NAME (the P100 block): the summary between that block's markers, the
    rest of the page untouched; not with --check, nor with --held-out's own block."""
    page = tmp_path / "simulator.md"
    rest = "<!-- tables: begin -->\nkept\n<!-- tables: end -->\n"
    page.write_text(rest + "<!-- p100: begin -->\nold\n<!-- p100: end -->\n", "utf-8")
    r = tables(*SMALL, "--summary-into", "p100", "--doc", str(page))
    assert r.returncode == 0, r.stdout + r.stderr
    text = page.read_text("utf-8")
    assert text.startswith(rest) and "\nold\n" not in text
    block = text.split("<!-- p100: begin -->\n")[1]
    assert block.startswith("Written by `python benchmarks/simulator_tables.py --summary-into p100")
    assert "| k80 | 1.5 | ours | " in block and "### " not in block
    assert tables("--summary-into", "p100", "--check").returncode == 2
    both = tables("--held-out", "--summary-into", "p100", "--doc", str(page))
    assert both.returncode == 2 and "not with --summary-into" in both.stderr


SENSITIVITY = REPO / "benchmarks" / "seed_sensitivity.py"
DOC_ALL = REPO / "benchmarks" / "simulator_doc.py"


def test_the_drain_and_oracle_error_tables_are_written_between_their_markers(
    tmp_path: Path,
) -> None:
    page = tmp_path / "simulator.md"
    page.write_text(
        "a\n<!-- drain-setting: begin -->\nold\n<!-- drain-setting: end -->\n"
        "b\n<!-- oracle-error: begin -->\nold\n<!-- oracle-error: end -->\nc\n",
        "utf-8",
    )
    small = ["--seeds", "1", "--held-out-seeds", "21", "--loads", "2.0", "--jobs", "300"]
    cmd = [sys.executable, str(SENSITIVITY), *small, "--gpus", "16", "--doc", str(page)]
    r = subprocess.run([*cmd, "--write"], capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    text = page.read_text("utf-8")
    assert "old" not in text and text.startswith("a\n") and text.endswith("\nc\n")
    drain = text.split("<!-- drain-setting: begin -->\n")[1].split("<!-- drain-setting: end")[0]
    assert drain.startswith("Written by `python benchmarks/seed_sensitivity.py --seeds 1 ")
    assert "--write" not in drain
    rows = [line for line in drain.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row.split(" | ")[0] for row in rows[1:]] == ["| 23", "| **24**", "| 25"]
    assert "- `oracle`: one seed's makespan against exclusive moved by up to" in drain
    # one seed: each row's mean is that seed's figure, which the line lists in row order
    oracle_means = [row.split(" | ")[1].split(" / ")[2].removesuffix(" %") for row in rows[1:]]
    line = next(x for x in drain.splitlines() if x.startswith("- `oracle`"))
    listed = line.split("(seed 1: ")[1].split(" at 23, 24, 25 h")[0]
    assert listed == ", ".join(f"{m} %" for m in oracle_means), (line, oracle_means)
    error = text.split("<!-- oracle-error: begin -->\n")[1]
    for name in ("`oracle-error` ±0.5 %", "`oracle-error` ±1 %", "`ours`", "`ours-submit`"):
        row = next(line for line in error.splitlines() if line.startswith(f"| {name} |"))
        runs, worst = row.split(" | ")[3:5]
        assert 0 <= int(runs) <= 2 and "(seed " in worst  # of 2 runs: seed 1 and 21
    assert "seed 21, load 2.0" in error and "21–21" not in error


def test_one_command_checks_every_blocks_markers_before_running_anything(
    tmp_path: Path,
) -> None:
    page = tmp_path / "simulator.md"
    blocks = ("tables", "held-out", "jitter", "drain-setting", "oracle-error")
    page.write_text("".join(f"<!-- {b}: begin -->\n<!-- {b}: end -->\n" for b in blocks), "utf-8")
    cmd = [sys.executable, str(DOC_ALL), "--doc", str(page)]
    listed = subprocess.run([*cmd, "--print"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stderr.splitlines()
    assert [line.split("]")[0] + "]" for line in lines] == [
        "[tables]",
        "[held-out]",
        "[jitter]",
        "[drain-setting]",  # one run writes the oracle-error block too
    ]
    assert "makespan_jitter.py --write" in lines[2] and "seed_sensitivity.py --write" in lines[3]
    gavel = tmp_path / "throughputs.json"
    gavel.write_text("{}", "utf-8")
    p100 = subprocess.run(
        [*cmd, "--print", "--gavel", str(gavel)], capture_output=True, text=True, timeout=60
    )
    assert p100.returncode == 1 and "no <!-- p100: begin -->, <!-- p100: end -->" in p100.stderr
    assert "nothing was run" in p100.stderr and page.read_text("utf-8").count("begin") == 5
    none = subprocess.run(
        [*cmd, "--gavel", str(tmp_path / "absent.json")], capture_output=True, text=True
    )
    assert none.returncode == 1 and "absent.json: no such file" in none.stderr
