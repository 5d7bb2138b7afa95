"""The per-GPU occupancy journal: stays, overlaps, faults, torn lines, compaction."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_colo.node import journal


def _j(tmp_path: Path, events: list[dict]) -> Path:
    p = tmp_path / "journal.jsonl"
    for e in events:
        journal.append(p, dict(e))
    return p


EVENTS = [
    {"ev": "start", "job": 1, "t": 100.0, "cls": "a", "user": "u", "uid": 1},
    {"ev": "start", "job": 2, "t": 150.0, "cls": "b", "user": "u", "uid": 1},
    {"ev": "end", "job": 1, "t": 200.0},
    {"ev": "start", "job": 3, "t": 250.0, "cls": "c", "user": "u", "uid": 1},
    {"ev": "fault", "kind": "client_fatal", "t": 260.0, "detail": "x"},
]


def test_overlaps_and_shared_intervals(tmp_path: Path) -> None:
    ev = journal.read(_j(tmp_path, EVENTS))
    ov = journal.overlaps(ev, 2, 150.0, 300.0)
    assert [(s.job, lo, hi) for s, lo, hi in ov] == [(1, 150.0, 200.0), (3, 250.0, 300.0)]
    assert journal.shared_intervals(ev, 2, 150.0, 300.0) == [(150.0, 200.0), (250.0, 300.0)]
    assert journal.overlaps(ev, 1, 100.0, 200.0)[0][0].job == 2
    assert [s.job for s in journal.active(ev)] == [2, 3]


def test_faults_window(tmp_path: Path) -> None:
    ev = journal.read(_j(tmp_path, EVENTS))
    assert len(journal.faults(ev, 150.0, 300.0)) == 1
    assert journal.faults(ev, 100.0, 200.0) == []  # job 1 had left before the fault


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    p = _j(tmp_path, EVENTS[:2])
    with open(p, "ab") as f:
        f.write(b'{"ev": "end", "job"')  # crash mid-append
    ev = journal.read(p)
    assert len(ev) == 2
    journal.append(p, {"ev": "end", "job": 2, "t": 300.0})  # starts on a fresh line
    ev = journal.read(p)
    assert ev[-1] == {"ev": "end", "job": 2, "t": 300.0}
    assert [s.job for s in journal.active(ev)] == [1]


def test_compaction_when_idle_and_keep_pending(tmp_path: Path) -> None:
    p = _j(tmp_path, EVENTS[:3] + [{"ev": "end", "job": 2, "t": 210.0}])
    journal.compact(p, keep_jobs={2})  # job 2's record is not spooled yet: keep it
    assert {e.get("job") for e in journal.read(p)} >= {2}
    journal.compact(p, keep_jobs=set())
    assert journal.read(p) == []


def test_big_journal_is_compacted_to_what_live_jobs_need(tmp_path: Path) -> None:
    import time as _t

    p = tmp_path / "journal.jsonl"
    lines = []
    for j in range(3000):  # a long history of short jobs, all ended
        lines.append({"ev": "start", "job": j, "t": float(j), "cls": "c", "user": "u", "uid": 1})
        lines.append({"ev": "end", "job": j, "t": j + 0.5})
    lines.append({"ev": "start", "job": 5000, "t": 2999.2, "cls": "c", "user": "u", "uid": 1})
    import json

    p.write_text("".join(json.dumps(e) + "\n" for e in lines))
    assert p.stat().st_size > journal.MAX_BYTES
    t = _t.monotonic()
    journal.compact(p, keep_jobs=set())
    assert _t.monotonic() - t < 2.0
    kept = journal.stays(journal.read(p))
    assert set(kept) == {2999, 5000}  # the live job and the one stay overlapping it


def test_an_idle_gpus_journal_keeps_the_last_days_faults_only(tmp_path: Path) -> None:
    now = 100_000.0
    faults = [
        {"ev": "fault", "kind": "client_fatal", "t": now - 3600 * h, "detail": str(h)}
        for h in (30, 23, *range(22, 0, -1))
    ]
    p = _j(tmp_path, EVENTS[:2] + faults + [{"ev": "end", "job": 1, "t": now - 10}])
    journal.append(p, {"ev": "end", "job": 2, "t": now - 5})
    journal.compact(p, keep_jobs=set(), now=now)
    kept = journal.read(p)
    assert all(e["ev"] == "fault" for e in kept)  # no stays: the GPU is idle
    assert len(kept) == journal.FAULTS_KEPT == 20  # the last 20 of the 23 within a day
    assert [e["detail"] for e in kept] == [str(h) for h in range(20, 0, -1)]
    journal.compact(p, keep_jobs=set(), now=now + 2 * 86400)
    assert journal.read(p) == []


def test_a_fifo_in_the_journals_place_does_not_block(tmp_path: Path) -> None:
    """A FIFO where the journal belongs used to block every hook on the GPU for ever (a
    plain open waits for a writer): it reads as no events, and writing to it fails at once."""
    path = tmp_path / "journal.jsonl"
    os.mkfifo(path)
    assert journal.read(path) == []
    with pytest.raises(OSError, match="not a regular file"):
        journal.append(path, {"ev": "start", "job": 1, "t": 1.0})
