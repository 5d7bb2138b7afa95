"""Co-location episodes rebuilt from the records."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from slurm_colo.contracts.records import CoRunner, JobRecord
from slurm_colo.store import ingest_records, make_engine, upgrade
from slurm_colo.store.episodes import (
    SKEW_TOLERANCE_S,
    JobView,
    build_episodes,
    load_episodes,
    rebuild_episodes,
)


def view(
    jid: int,
    cls: str,
    start: float,
    end: float,
    co: list[tuple[int, str, float, float]],
    rate: float | None = None,
    solo: float | None = None,
    gpu: str = "0",
) -> JobView:
    return JobView(jid, "n1", gpu, cls, start, end, co, rate=rate, solo_rate=solo)


def test_a_pair_seen_from_both_records_is_one_episode() -> None:
    a = view(1, "x", 0, 1000, [(2, "y", 200, 800)], rate=5.0, solo=10.0)
    b = view(2, "y", 200, 800, [(1, "x", 200, 800)], rate=3.0, solo=6.0)
    eps, rep = build_episodes([a, b])
    assert len(eps) == 1 and rep.episodes == 1
    e = eps[0]
    assert (e.start, e.end) == (200, 800)
    members = {m[1]: m for m in e.members}
    # x ran 400 s alone at n=1 and 600 s shared: 0.5 * 1000 = 400 + 600 * n -> n = 1/6
    assert members["x"][2] == pytest.approx(1 / 6)
    assert members["x"][3] == "progress"
    assert members["y"][2] == pytest.approx(0.5)  # shared the whole time


def test_skewed_copies_of_one_episode_merge() -> None:
    a = view(1, "x", 0, 1000, [(2, "y", 200, 800)])
    b = view(2, "y", 203, 801, [(1, "x", 199, 1000)])  # the other node's clock is 3 s off
    eps, _ = build_episodes([a, b])
    assert len(eps) == 1
    assert (eps[0].start, eps[0].end) == (200, 801)  # union of the two views


def test_a_third_job_splits_the_run_into_constant_sets() -> None:
    a = view(1, "x", 0, 300, [(2, "y", 0, 300), (3, "z", 100, 200)])
    eps, _ = build_episodes([a])
    sets = [(e.start, e.end, sorted(m[1] for m in e.members)) for e in eps]
    assert sets == [(0, 100, ["x", "y"]), (100, 200, ["x", "y", "z"]), (200, 300, ["x", "y"])]


def test_intervals_far_outside_the_run_are_clock_skew_and_ignored() -> None:
    a = view(
        1,
        "x",
        10_000,
        11_000,
        [(2, "y", 0, 50), (3, "z", 10_500, 10_400), (4, "w", 10_990, 12_000)],
    )
    eps, rep = build_episodes([a])
    assert rep.skewed_intervals == 1  # (2, y) ended hours before x started
    assert [(e.start, e.end) for e in eps] == [(10_990, 11_000)]  # w clipped; z empty


def test_duration_proxy_without_progress() -> None:
    solo = [view(10 + i, "x", i * 5000, i * 5000 + 100, []) for i in range(3)]
    shared = view(1, "x", 0, 200, [(2, "y", 0, 200)])
    eps, rep = build_episodes(solo + [shared])
    m = {x[1]: x for x in eps[0].members}
    assert m["x"][2] == pytest.approx(0.5) and m["x"][3] == "duration"
    assert m["y"][2] is None and m["y"][3] == "null"  # y's record is missing
    assert rep.proxy_cv["x"] == pytest.approx(0.0)


def test_rebuild_from_the_database(tmp_path: Path) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e)
    recs = [
        JobRecord(
            job_id=1,
            node="n1",
            user="a",
            uid=1,
            cls="x",
            start=0,
            end=1000,
            gpus=[0],
            co_runners=[CoRunner(2, "y", "b", 200, 800)],
            progress={"rate": 5.0, "solo_rate": 10.0},
        ),
        JobRecord(
            job_id=2,
            node="n1",
            user="b",
            uid=2,
            cls="y",
            start=200,
            end=800,
            gpus=[0],
            co_runners=[CoRunner(1, "x", "a", 200, 800)],
            progress={"rate": 3.0, "solo_rate": 6.0},
            mps_fault=True,
        ),
        JobRecord(job_id=3, node="n2", user="a", uid=1, cls="x", start=0, end=100, gpus=[1]),
    ]
    ingest_records(e, recs)
    rep = rebuild_episodes(e)
    assert rep.jobs == 3 and rep.episodes == 1
    rebuild_episodes(e)  # rebuilding replaces, never duplicates
    eps = load_episodes(e)
    assert len(eps) == 1 and eps[0].mps_fault and eps[0].node == "n1"
    assert sorted(m[1] for m in eps[0].members) == ["x", "y"]
    assert load_episodes(e, since=900) == []
    assert SKEW_TOLERANCE_S > 0


def test_corrupt_episode_rows_are_skipped(tmp_path: Path) -> None:
    from sqlalchemy import text

    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e)
    with e.begin() as c:
        for eid in (1, 2):
            c.execute(
                text(
                    "INSERT INTO episodes (id, node, gpu, start_time, end_time, n_members, "
                    "mps_fault, oom) VALUES (:i, 'n', '0', 0, 10, 2, 0, 0)"
                ),
                {"i": eid},
            )
        ins = text(
            "INSERT INTO episode_members (episode_id, end_time, job_id, cls, rate, solo_rate, total_s, "
            "shared_s) VALUES (:e, 10, :j, :c, :r, :s, :t, :sh)"
        )
        c.execute(ins, {"e": 1, "j": 1, "c": "x", "r": 5.0, "s": 10.0, "t": 10.0, "sh": 10.0})
        c.execute(ins, {"e": 1, "j": 2, "c": "y", "r": None, "s": None, "t": None, "sh": None})
        c.execute(ins, {"e": 2, "j": 3, "c": "x", "r": 5.0, "s": 10.0, "t": 10.0, "sh": 10.0})
    eps = load_episodes(e)  # episode 2 lost a member: skipped
    assert len(eps) == 1 and eps[0].members == [(1, "x", 0.5, "progress"), (2, "y", None, "null")]


def test_a_record_across_a_clock_step_gives_its_episode_but_no_figures() -> None:
    # the node's clock stepped an hour ahead while jobs 12, 13 and 1 ran: their durations
    # are an hour too long
    solo = [view(10 + i, "x", i * 5000, i * 5000 + 100, []) for i in range(2)]
    stepped_solo = [view(12 + i, "x", 20_000 + i * 5000, 23_700 + i * 5000, []) for i in range(2)]
    for v in stepped_solo:
        v.clock_stepped = True
    x = view(1, "x", 0, 3800, [(2, "y", 0, 3800)], rate=1.0, solo=10.0)
    x.clock_stepped, x.mps_fault = True, True
    y = view(2, "y", 0, 3800, [(1, "x", 0, 3800)])
    eps, rep = build_episodes(solo + stepped_solo + [x, y])
    assert len(eps) == 1 and (eps[0].start, eps[0].end) == (0, 3800) and eps[0].mps_fault
    m = {k[1]: k for k in eps[0].members}
    assert m["x"][2] is None and m["x"][3] == "null"  # not 1.0/10.0, not 100 s / 3800 s
    assert rep.proxy_cv["x"] == pytest.approx(0.0)  # the solo runs of 100 s only
    shared = view(3, "x", 50_000, 50_200, [(4, "y", 50_000, 50_200)])
    eps, _ = build_episodes(solo + stepped_solo + [shared])
    assert eps[0].members[0][2] == pytest.approx(0.5)  # 100 s against 200 s, not 1900 s


def test_a_stepped_record_in_the_database_is_no_solo_run_and_has_no_figures(
    tmp_path: Path,
) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e)
    check_stepped_records(e)


def check_stepped_records(e: Engine) -> None:
    """A record across a step of its node's clock, in an upgraded store (also run on
    PostgreSQL: tests/unit/test_store_postgres.py)."""
    from slurm_colo.store.episodes import db_solo_reference, update_episodes

    step = {"sm_util_mean": 50.0, "clock_steps_s": [3600.0]}

    def rec(jid: int, start: float, end: float, **kw: object) -> JobRecord:
        return JobRecord(
            job_id=jid, node="n1", user="a", uid=1, cls="x", start=start, end=end, gpus=[0], **kw
        )

    ingest_records(
        e,
        [
            rec(10, 0, 100, progress={"rate": 10.0}),
            rec(11, 1000, 4700, profile=step),  # solo, across a step
            rec(
                1,
                5000,
                8800,
                profile=step,
                progress={"rate": 1.0, "solo_rate": 10.0},
                co_runners=[CoRunner(2, "y", "a", 5000, 8800)],
                mps_fault=True,
            ),
        ],
    )
    rebuild_episodes(e)
    with e.connect() as c:
        ref = db_solo_reference(c, None)
    assert ref.duration == {"x": 100.0} and ref.rate == {"x": 10.0}
    eps = load_episodes(e)
    assert len(eps) == 1 and eps[0].mps_fault
    assert (1, "x", None, "null") in eps[0].members
    # the incremental build gives the same as the full one
    ingest_records(
        e,
        [
            rec(
                3,
                9000,
                9200,
                co_runners=[CoRunner(4, "y", "a", 9000, 9200)],
            ),
            rec(
                5,
                10_000,
                13_700,
                profile=step,
                co_runners=[CoRunner(6, "y", "a", 10_000, 13_700)],
            ),
        ],
    )
    update_episodes(e)
    eps = {ep.members[0][0]: ep for ep in load_episodes(e)}
    assert eps[3].members[0][2:] == (pytest.approx(0.5), "duration")
    assert eps[5].members[0][2:] == (None, "null")
