"""Job-side progress helper and its summary in the record (solo vs shared rate)."""

from __future__ import annotations

import json
from pathlib import Path

from slurm_colo.node.record_build import progress_summary
from slurm_colo.progress import MAX_POINTS, ProgressReporter


def test_without_the_variable_it_does_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_COLO_PROGRESS_FILE", raising=False)
    r = ProgressReporter()
    r.report(10)
    assert r.path == "" and list(tmp_path.iterdir()) == []


def test_writes_are_throttled_and_atomic(tmp_path: Path) -> None:
    f = tmp_path / "progress.json"
    r = ProgressReporter(str(f))
    r.report(1, now=100.0)
    r.report(2, now=100.5)  # within a second: kept in memory only
    assert json.loads(f.read_text())["iterations"] == 1.0
    r.report(3, now=101.2)
    data = json.loads(f.read_text())
    assert data["iterations"] == 3.0 and data["points"] == [
        [100.0, 1.0],
        [100.5, 2.0],
        [101.2, 3.0],
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["progress.json"]


def test_points_stay_bounded(tmp_path: Path) -> None:
    r = ProgressReporter(str(tmp_path / "p.json"), min_interval_s=1e12)  # memory only
    for i in range(10 * MAX_POINTS):
        r.report(i, now=float(i))
    assert len(r.points) <= MAX_POINTS and r.points[0] == [0.0, 0.0]
    assert r.points[-1][1] == 10 * MAX_POINTS - 1


def test_unwritable_file_never_raises(tmp_path: Path) -> None:
    r = ProgressReporter(str(tmp_path / "missing-dir" / "p.json"))
    r.report(1, force=True)


def test_rates_solo_and_overall() -> None:
    prog = {"iterations": 300, "points": [[0, 0], [10, 100], [20, 150], [30, 200], [40, 300]]}
    # shared from 10 to 30: the job ran at 5 it/s there, 10 it/s alone
    s = progress_summary(prog, [(10.0, 30.0)])
    assert s == {"iterations": 300, "rate": 7.5, "solo_rate": 10.0}
    assert progress_summary(prog, [(0.0, 40.0)])["solo_rate"] is None
    assert progress_summary(None, []) is None
    assert progress_summary({"points": [[1, 5]]}, [])["rate"] is None


def test_malformed_progress_never_breaks_the_record() -> None:
    bad = {
        "iterations": "lots",
        "points": [[1, 2, 3], "x", [0, 0], [None, 1], [10, 50], [float("nan"), 1], [True, 5]],
    }
    s = progress_summary(bad, [])
    assert s == {"iterations": 50.0, "rate": 5.0, "solo_rate": 5.0}
    assert progress_summary({"points": "nope"}, []) == {
        "iterations": None,
        "rate": None,
        "solo_rate": None,
    }
