"""Trace generation (Philly-like) and the sacct importer."""

from __future__ import annotations

import itertools

import pytest

from slurm_colo.gavel import bundled_path
from slurm_colo.sim.trace import (
    SimJob,
    TraceError,
    class_for_name,
    jittered,
    offered_load,
    philly_trace,
    read_philly,
    sacct_trace,
    slurm_duration_s,
    with_time_limits,
)

CLASSES = ["resnet18-bs64", "lm-bs20", "a3c"]
ROWS = [(3600.0, 1), (7200.0, 1), (36000.0, 1), (500000.0, 1), (1800.0, 4)]


def test_philly_trace_is_seeded_sorted_and_single_gpu_by_default() -> None:
    t1 = philly_trace(ROWS, CLASSES, jobs=500, gpus=16, load=1.5, seed=4)
    t2 = philly_trace(ROWS, CLASSES, jobs=500, gpus=16, load=1.5, seed=4)
    assert t1 == t2
    assert t1 != philly_trace(ROWS, CLASSES, jobs=500, gpus=16, load=1.5, seed=5)
    assert all(a.arrival <= b.arrival for a, b in itertools.pairwise(t1))
    assert {j.gpus for j in t1} == {1} and {j.cls for j in t1} <= set(CLASSES)
    assert [j.id for j in t1] == list(range(500))


def test_philly_trace_load_cap_and_multi_gpu() -> None:
    t = philly_trace(ROWS, CLASSES, jobs=4000, gpus=16, load=2.0, seed=1, max_duration_s=40000)
    assert max(j.work_s for j in t) == 40000
    assert 1.8 < offered_load(t, 16) < 2.2
    multi = philly_trace(ROWS, CLASSES, jobs=2000, gpus=16, load=1.0, seed=1, multi_gpu=True)
    assert 4 in {j.gpus for j in multi}


def test_bundled_philly_distribution_reads() -> None:
    rows = read_philly(bundled_path("philly_job_distribution.csv"))
    assert len(rows) > 30000 and {n for _, n in rows} >= {1, 2, 4, 8}


SACCT = """JobID|User|JobName|Submit|Start|End|AllocTRES|ReqTRES
101|alice|resnet18-bs64|2026-01-01T10:00:00|2026-01-01T10:05:00|2026-01-01T11:05:00|cpu=4,gres/gpu=1,mem=16G|
101.batch|alice|batch|2026-01-01T10:05:00|2026-01-01T10:05:00|2026-01-01T11:05:00|cpu=4|
102|bob|train.sh|2026-01-01T10:30:00|2026-01-01T10:31:00|2026-01-01T10:41:00|cpu=8,gres/gpu:v100=2|
103|bob|cpu-only|2026-01-01T10:40:00|2026-01-01T10:41:00|2026-01-01T10:42:00|cpu=8|
104|carol|never-ran|2026-01-01T10:50:00|Unknown|Unknown||gres/gpu=1
"""


def test_sacct_import_keeps_finished_gpu_jobs() -> None:
    t = sacct_trace(SACCT.splitlines(), CLASSES)
    assert [(j.arrival, j.work_s, j.gpus, j.user) for j in t] == [
        (0.0, 3600.0, 1, "alice"),
        (1800.0, 600.0, 2, "bob"),
    ]
    assert t[0].cls == "resnet18-bs64" and t[1].cls in CLASSES
    assert t[0].uid != t[1].uid


def test_sacct_import_names_missing_columns() -> None:
    with pytest.raises(TraceError, match="Submit"):
        sacct_trace(["JobID|User|Start|End|AllocTRES", "1|a|x|y|gres/gpu=1"], CLASSES)
    with pytest.raises(TraceError, match="no finished GPU jobs"):
        sacct_trace(SACCT.splitlines()[:1], CLASSES)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800.0),  # minutes
        ("30:15", 1815.0),  # minutes:seconds
        ("02:00:00", 7200.0),
        ("1-00:00:00", 86400.0),
        ("2-12", 216000.0),  # days-hours
        ("1-02:30", 95400.0),  # days-hours:minutes
        (" 10:00:00 ", 36000.0),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
        ("00:00:00", None),
        ("1:2:3:4", None),
        ("soon", None),
        ("9" * 5001, None),  # past int()'s 4,300 digits: a corrupt export, not a limit
        ("1-" + "0" * 10, None),
    ],
)
def test_slurm_time_limits_read_as_sacct_writes_them(text: str, seconds: float | None) -> None:
    assert slurm_duration_s(text) == seconds


def test_sacct_import_takes_the_time_limit_when_the_export_has_it() -> None:
    lines = SACCT.splitlines()
    assert all(j.limit_s is None for j in sacct_trace(lines, CLASSES))
    with_limit = [lines[0] + "|Timelimit"] + [
        ln + "|" + lim
        for ln, lim in zip(lines[1:], ["02:00:00", "", "UNLIMITED", "", "1-00:00:00"])
    ]
    t = sacct_trace(with_limit, CLASSES)
    assert [(j.work_s, j.limit_s) for j in t] == [(3600.0, 7200.0), (600.0, None)]


def test_sacct_import_names_the_line_of_a_gpu_count_it_cannot_read() -> None:
    lines = SACCT.splitlines()
    bad = "105|bob|x|2026-01-01T11:00:00|2026-01-01T11:00:05|2026-01-01T12:00:00|"
    with pytest.raises(TraceError, match=r"line 7 \(job 105\): gres/gpu=9+\.\.\. \(5001 digits\)"):
        sacct_trace(lines + [bad + "gres/gpu=" + "9" * 5001 + "|"], CLASSES)
    # a large but readable count is read, and the simulator says the cluster is too small
    t = sacct_trace(lines + [bad + "cpu=1,gres/gpu=123456789|"], CLASSES)
    assert t[-1].gpus == 123456789


def test_generated_time_limits_cover_each_run_within_the_factors_in_whole_minutes() -> None:
    t = philly_trace(ROWS, CLASSES, jobs=300, gpus=16, load=1.5, seed=2)
    limited = with_time_limits(t, 1.5, 3.0, seed=2)
    assert limited == with_time_limits(t, 1.5, 3.0, seed=2)
    assert limited != with_time_limits(t, 1.5, 3.0, seed=3)
    for j, lj in zip(t, limited, strict=True):
        assert lj.limit_s is not None and lj.limit_s % 60 == 0
        assert 1.5 * j.work_s <= lj.limit_s < 3.0 * j.work_s + 60
        assert lj == SimJob(**{**vars(j), "limit_s": lj.limit_s})  # nothing else moved
    exact = with_time_limits(t, 1.0, 1.0, seed=2)
    assert all(0 <= j.limit_s - j.work_s < 60 for j in exact if j.limit_s is not None)
    with pytest.raises(TraceError, match="1 <= low <= high"):
        with_time_limits(t, 0.5, 2.0, seed=1)
    with pytest.raises(TraceError, match="1 <= low <= high"):
        with_time_limits(t, 3.0, 2.0, seed=1)


def test_class_for_name_is_stable() -> None:
    assert class_for_name("lm-bs20", CLASSES) == "lm-bs20"
    assert class_for_name("my_experiment.sh", CLASSES) == class_for_name(
        "my_experiment.sh", CLASSES
    )


def test_jittered_moves_each_arrival_by_under_the_given_seconds_and_keeps_the_order() -> None:
    trace = philly_trace(ROWS, CLASSES, jobs=400, gpus=16, load=1.5, seed=4)
    moved = jittered(trace, 1.0, seed=7)
    assert moved == jittered(trace, 1.0, seed=7)
    assert moved != jittered(trace, 1.0, seed=8)
    shifts = [b.arrival - a.arrival for a, b in zip(trace, moved, strict=True)]
    assert all(0.0 <= s < 1.0 for s in shifts) and len(set(shifts)) > 300
    assert all(a.arrival <= b.arrival for a, b in itertools.pairwise(moved))
    same = [(j.id, j.work_s, j.cls, j.user, j.gpus) for j in trace]
    assert [(j.id, j.work_s, j.cls, j.user, j.gpus) for j in moved] == same
    assert jittered(trace, 0.0, seed=7) == trace


def test_jittered_never_puts_a_job_before_the_one_ahead_of_it() -> None:
    tied = [SimJob(i, 100.0, 60.0, "a3c", "u", 1) for i in range(50)]
    moved = jittered(tied, 5.0, seed=1)
    assert [j.id for j in moved] == list(range(50))
    assert all(a.arrival <= b.arrival for a, b in itertools.pairwise(moved))
    assert moved[-1].arrival > 100.0


def test_jittered_refuses_a_negative_jitter() -> None:
    with pytest.raises(TraceError, match="0 or more seconds"):
        jittered([], -1.0, seed=1)
