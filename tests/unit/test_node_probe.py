"""The node side of the probe: measuring a new shared set from the jobs' progress."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fake_agent import FakeAgent

from slurm_colo.config import AgentConfig, Config, NodeConfig, PlacementConfig
from slurm_colo.contracts.protocol import parse_request
from slurm_colo.node import journal
from slurm_colo.node.jobstate import read_progress
from slurm_colo.node.layout import NodeLayout
from slurm_colo.node.probe import Prober, measure, rate_between
from slurm_colo.node.record_build import progress_summary


def pts(
    rate: float, t0: float, t1: float, start_it: float = 0.0, step: float = 10.0
) -> list[tuple[float, float]]:
    out, t = [], t0
    while t <= t1 + 1e-9:
        out.append((t, start_it + rate * (t - t0)))
        t += step
    return out


def ev(kind: str, t: float, job: int, cls: str = "c") -> dict[str, object]:
    return {"ev": kind, "t": t, "job": job, "cls": cls, "user": "u", "uid": 1}


def test_rate_between_needs_points_and_a_forward_counter() -> None:
    p = pts(5.0, 0, 100)
    assert rate_between(p, 20, 80) == pytest.approx(5.0)
    assert rate_between(p, 20, 35) is None  # two points only
    assert rate_between([(0, 100.0), (10, 50.0), (20, 10.0)], 0, 20) is None  # restarted count


def test_measure_reads_the_newcomer_now_and_the_incumbent_before_and_after() -> None:
    # job 1 alone from 0, job 2 arrives at 1000: job 1 drops from 10/s to 4/s
    events = [ev("start", 0, 1, "a"), ev("start", 1000, 2, "b")]
    points = {1: pts(10, 0, 1000) + pts(4, 1010, 1600, start_it=10000), 2: pts(3, 1000, 1600)}
    m = measure(events, 2, 1600, 100, lambda j: points[j])
    assert m is not None
    r = m.to_wire()  # what the agent is sent
    assert r["job"] == 2 and r["since"] == 1000 and r["window_s"] == 500
    one, two = r["members"]
    assert (
        one["job"] == 1
        and one["rate"] == pytest.approx(4)
        and one["rate_before"] == pytest.approx(10)
    )
    assert one["before"] == []
    assert two == {"job": 2, "cls": "b", "rate": pytest.approx(3)}


def test_measure_names_the_set_an_incumbent_was_in_before() -> None:
    events = [ev("start", 0, 1, "a"), ev("start", 100, 3, "x"), ev("start", 1000, 2, "b")]
    r = measure(events, 2, 1600, 100, lambda j: pts(1, 0, 1600))
    assert r is not None
    by_job = {m["job"]: m for m in r.to_wire()["members"]}
    assert by_job[1]["before"] == ["x"] and by_job[3]["before"] == ["a"]
    assert by_job[1]["rate_before"] == pytest.approx(1)  # from 100 + warm-up to 1000


def test_nothing_is_measured_alone_or_after_the_set_changed() -> None:
    assert measure([ev("start", 0, 1)], 1, 600, 60, lambda j: []) is None
    changed = [ev("start", 0, 1), ev("start", 100, 2), ev("start", 200, 3)]
    assert measure(changed, 2, 800, 60, lambda j: []) is None  # job 3 came later
    left = [ev("start", 0, 1), ev("start", 100, 2), ev("start", 0, 3), ev("end", 300, 3)]
    assert measure(left, 2, 800, 60, lambda j: []) is None  # job 3 left after job 2 came
    assert measure(changed, 3, 800, 60, lambda j: []) is not None
    assert measure(changed, 9, 800, 60, lambda j: []) is None


def _cfg(tmp_path: Path, probe_s: float = 100.0) -> Config:
    sock = str(tmp_path / "agent.sock")
    return Config(
        agent=AgentConfig(socket=sock, address=f"unix:{sock}"),
        node=NodeConfig(run_dir=str(tmp_path / "run"), spool_dir=str(tmp_path / "spool")),
        placement=PlacementConfig(probe_s=probe_s),
    )


def _files(lay: NodeLayout, t0: float) -> None:
    lay.gpu_dir(0).mkdir(parents=True)
    for e in (ev("start", t0, 1, "a"), ev("start", t0 + 1000, 2, "b")):
        journal.append(lay.journal(0), e)
    for job, p in (
        (1, pts(10, t0, t0 + 1000) + pts(4, t0 + 1010, t0 + 1100, 10000, 5)),
        (2, pts(3, t0 + 1000, t0 + 1100, step=5)),
    ):
        lay.user_dir(job).mkdir(parents=True)
        (lay.user_dir(job) / "progress.json").write_text(
            json.dumps({"points": [list(x) for x in p]})
        )


def test_the_sampler_probe_sends_the_set_once_and_keeps_the_verdict(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    _files(lay, 5000.0)
    agent = FakeAgent(tmp_path / "agent.sock", b'OK\t{"verdict":"undo","reason":"harmful: x"}\n')
    try:
        pr = Prober(cfg, lay, 2, [0])
        pr.maybe(5000.0 + 1050)  # before probe_s
        assert pr.pending and agent.requests == []
        pr.maybe(5000.0 + 1100)
        assert not pr.pending and pr.result is not None
        assert pr.result["verdict"] == "undo" and pr.result["reason"] == "harmful: x"
        verb, payload = parse_request(agent.requests[0])
        assert verb == "PROBE" and payload["job"] == 2 and payload["gpu"] == 0
        inc = payload["members"][0]
        assert inc["rate"] == pytest.approx(4) and inc["rate_before"] == pytest.approx(10)
        pr.maybe(5000.0 + 2000)
        assert len(agent.requests) == 1
    finally:
        agent.close()


@contextmanager
def _probing(tmp_path: Path, reply: bytes) -> Iterator[tuple[Prober, FakeAgent]]:
    """Job 2's probe of the set of ``_files`` (5000 s on), and an agent answering ``reply``."""
    cfg = _cfg(tmp_path)
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    _files(lay, 5000.0)
    agent = FakeAgent(tmp_path / "agent.sock", reply)
    try:
        yield Prober(cfg, lay, 2, [0]), agent
    finally:
        agent.close()


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_a_step_of_the_nodes_clock_in_the_window_gives_the_probe_up(
    step: float, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The window spans the step: the set is not judged, nothing is sent to the agent."""
    undo = b'OK\t{"verdict":"undo","reason":"harmful: x"}\n'
    with _probing(tmp_path, undo) as (pr, agent):
        pr.maybe(5000.0 + 1050)
        with caplog.at_level("WARNING", logger="slurm_colo.node"):
            assert pr.clock_stepped(step)
        assert not pr.pending and pr.result is not None
        assert pr.result == {
            "verdict": "none",
            "reason": f"the node's clock stepped {step:+.1f} s in the probe window",
        }
        assert "the probe window is given up" in caplog.text
        pr.maybe(5000.0 + 1100 + step)
        assert agent.requests == [] and pr.result["verdict"] == "none"
        assert not pr.clock_stepped(step)  # nothing left to give up


def test_a_step_of_the_nodes_clock_ends_the_watch_of_a_kept_set(tmp_path: Path) -> None:
    with _probing(tmp_path, b'OK\t{"verdict":"keep","reason":"fine"}\n') as (pr, agent):
        pr.maybe(5000.0 + 1100)
        assert pr.result is not None and pr.result["verdict"] == "keep" and pr.pending
        assert len(agent.requests) == 1
        assert not pr.clock_stepped(3600.0)  # the verdict stands
        assert not pr.pending and pr.result["verdict"] == "keep"


def test_the_probe_without_an_agent_or_turned_off(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    _files(lay, 5000.0)
    pr = Prober(cfg, lay, 2, [0])
    pr.maybe(6100.0)
    assert pr.result is not None and pr.result["verdict"] == "unjudged"
    assert pr.result["members"][1]["rate"] == pytest.approx(3)
    assert not Prober(_cfg(tmp_path, probe_s=0), lay, 2, [0]).pending
    assert not Prober(cfg, lay, 2, [0, 1]).pending  # multi-GPU jobs never share


def test_the_agents_probe_window_from_the_placement_wins_over_the_nodes(tmp_path: Path) -> None:
    """A GPU node's config need not repeat placement.probe_s: the JOBSTART reply carries the
    agent's, and the sampler's probe keeps to it."""
    cfg = _cfg(tmp_path)  # the node's own window: 100 s; job 2 joined the set at 6000
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    _files(lay, 5000.0)
    agent = FakeAgent(tmp_path / "agent.sock", b'OK\t{"verdict":"keep","reason":"fine"}\n')
    try:
        own = Prober(cfg, lay, 2, [0], probe_s=None)
        agents = Prober(cfg, lay, 2, [0], probe_s=60.0)
        own.maybe(6070.0)
        assert own.probe_s == 100.0 and own.pending and agent.requests == []
        assert agents.maybe(6070.0)
        assert agents.result is not None
        assert agents.result["verdict"] == "keep" and len(agent.requests) == 1
        assert agents.pending and agents.again  # kept: it watches for a job to leave
        assert not Prober(cfg, lay, 2, [0], probe_s=0.0).pending  # the agent turned it off
    finally:
        agent.close()


def test_next_look_tells_an_arrival_from_a_departure() -> None:
    from slurm_colo.node.probe import next_look

    pair = [ev("start", 0, 1), ev("start", 100, 2)]
    assert next_look(pair, 2, 100) == ("same", 100)
    arrived = [*pair, ev("start", 150, 3)]
    assert next_look(arrived, 2, 100) == ("arrived", 150)  # job 3's own probe judges
    left = [*arrived, ev("end", 200, 3)]  # job 3 undone: jobs 1 and 2 are left
    assert next_look(left, 2, 100) == ("left", 200)
    assert next_look(left, 1, 0) == ("alone", 0)  # job 2, the newest left, judges it
    assert next_look([*pair, ev("end", 300, 1)], 2, 100) == ("alone", 100)  # job 2 alone
    assert next_look([*left, ev("start", 250, 4)], 2, 100) == ("arrived", 250)


def test_a_set_left_behind_by_an_undone_job_is_judged_by_its_newest_member(
    tmp_path: Path,
) -> None:
    """Job 2 joins job 1; job 3 joins at once, so job 2's probe finds the set changed; job
    3's probe undoes it. Job 2 then judges the pair left behind, with job 1's rate in it."""
    cfg = _cfg(tmp_path)
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    t0 = 5000.0
    lay.gpu_dir(0).mkdir(parents=True)
    for e in (
        ev("start", t0, 1, "a"),
        ev("start", t0 + 1000, 2, "b"),
        ev("start", t0 + 1001, 3, "c"),
    ):
        journal.append(lay.journal(0), e)
    for job, p in ((1, pts(4, t0, t0 + 1400, step=5)), (2, pts(3, t0 + 1000, t0 + 1400, step=5))):
        lay.user_dir(job).mkdir(parents=True)
        (lay.user_dir(job) / "progress.json").write_text(
            json.dumps({"points": [list(x) for x in p]})
        )
    agent = FakeAgent(tmp_path / "agent.sock", b'OK\t{"verdict":"undo","reason":"harmful"}\n')
    try:
        pr = Prober(cfg, lay, 2, [0])
        pr.maybe(t0 + 1100)  # job 3 came after job 2: wait and see
        assert pr.pending and pr.after_arrival and agent.requests == []
        journal.append(lay.journal(0), ev("end", t0 + 1105, 3, "c"))  # job 3 undone
        pr.maybe(t0 + 1150)  # the second window after job 3 came is not over
        assert pr.pending and pr.after_arrival
        pr.maybe(t0 + 1201)  # it is: job 3 has left, job 2 judges the pair from then
        assert pr.pending and pr.since == t0 + 1105 and agent.requests == []
        pr.maybe(t0 + 1204)  # not before probe_s after job 3 left
        assert pr.pending and agent.requests == []
        pr.maybe(t0 + 1105 + 100)
        assert not pr.pending and pr.result is not None and pr.result["verdict"] == "undo"
        verb, payload = parse_request(agent.requests[0])
        assert verb == "PROBE" and payload["job"] == 2 and payload["since"] == t0 + 1105
        assert [m["job"] for m in payload["members"]] == [1, 2]
        assert payload["members"][0]["rate"] == pytest.approx(4)
        # measured against the set of three it ran in before job 3 left
        assert payload["members"][0]["rate_before"] == pytest.approx(4)
        assert payload["members"][0]["before"] == ["b", "c"]
    finally:
        agent.close()


def test_a_probe_overtaken_by_a_job_that_stays_leaves_the_set_to_that_jobs_probe(
    tmp_path: Path,
) -> None:
    cfg = _cfg(tmp_path)
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    _files(lay, 5000.0)
    journal.append(lay.journal(0), ev("start", 5000.0 + 1050, 3, "c"))
    pr = Prober(cfg, lay, 2, [0])
    pr.maybe(5000.0 + 1100)
    assert pr.pending and pr.after_arrival
    pr.maybe(5000.0 + 1240)  # not yet two probe windows after job 3 came
    assert pr.pending
    pr.maybe(5000.0 + 1250)
    assert pr.result == {"verdict": "none", "reason": "a job that came later judges the set"}


def _three(lay: NodeLayout, t0: float, until: float, drop_at: float | None = None) -> None:
    """Job 1 alone from t0, job 3 from t0 + 500, job 2 (the newest) from t0 + 1000. Job 1
    makes 4 steps/s, 1.2 from ``drop_at`` on."""
    lay.gpu_dir(0).mkdir(parents=True)
    for e in (
        ev("start", t0, 1, "a"),
        ev("start", t0 + 500, 3, "c"),
        ev("start", t0 + 1000, 2, "b"),
    ):
        journal.append(lay.journal(0), e)
    one = pts(4, t0, until, step=5)
    if drop_at is not None:
        one = [p for p in one if p[0] < drop_at]
        one += pts(1.2, drop_at, until, start_it=4 * (drop_at - t0), step=5)
    for job, p in ((1, one), (2, pts(3, t0 + 1000, until, step=5))):
        lay.user_dir(job).mkdir(parents=True)
        (lay.user_dir(job) / "progress.json").write_text(
            json.dumps({"points": [list(x) for x in p]})
        )


def test_a_kept_set_left_by_a_job_is_judged_again_by_its_newest_member(tmp_path: Path) -> None:
    """Job 2's probe keeps the set of three; when job 3 leaves, job 2 (the newest of the pair
    left) judges the pair once it has run probe_s, and only once."""
    cfg = _cfg(tmp_path)
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    t0 = 5000.0
    _three(lay, t0, t0 + 1600, drop_at=t0 + 1200)  # job 1 slows down once job 3 has left
    agent = FakeAgent(tmp_path / "agent.sock", b'OK\t{"verdict":"keep","reason":"fine"}\n')
    try:
        pr = Prober(cfg, lay, 2, [0])
        assert pr.maybe(t0 + 1100) and pr.result is not None and pr.result["verdict"] == "keep"
        assert [m["job"] for m in parse_request(agent.requests[0])[1]["members"]] == [1, 3, 2]
        assert not pr.maybe(t0 + 1150) and pr.pending  # nothing changed: nothing to judge
        journal.append(lay.journal(0), ev("end", t0 + 1200, 3, "c"))
        assert not pr.maybe(t0 + 1210) and pr.since == t0 + 1200  # the pair runs from then
        assert not pr.maybe(t0 + 1250) and len(agent.requests) == 1  # not probe_s yet
        assert pr.maybe(t0 + 1300)
        verb, payload = parse_request(agent.requests[1])
        assert verb == "PROBE" and payload["job"] == 2 and payload["since"] == t0 + 1200
        assert [m["job"] for m in payload["members"]] == [1, 2] and payload["again"] is True
        # job 1: its rate in the pair against its rate in the set of three it was in before
        one = payload["members"][0]
        assert one["rate"] == pytest.approx(1.2) and one["rate_before"] == pytest.approx(4)
        assert one["before"] == ["b", "c"]
        assert pr.result["verdict"] == "keep" and pr.result["again"]["verdict"] == "keep"
        assert not pr.pending  # a second verdict is the last
        journal.append(lay.journal(0), ev("start", t0 + 1400, 4, "d"))
        journal.append(lay.journal(0), ev("end", t0 + 1450, 4, "d"))
        assert not pr.maybe(t0 + 1600) and len(agent.requests) == 2
    finally:
        agent.close()


def test_watching_a_kept_set_ends_when_the_job_is_no_longer_the_newest_or_alone(
    tmp_path: Path,
) -> None:
    cfg = _cfg(tmp_path)
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    t0 = 5000.0
    _three(lay, t0, t0 + 1600)
    agent = FakeAgent(tmp_path / "agent.sock", b'OK\t{"verdict":"keep","reason":"fine"}\n')
    try:
        pr = Prober(cfg, lay, 2, [0])
        assert pr.maybe(t0 + 1100)
        # job 4 arrives (its own probe judges the set it makes) and stays; job 1 leaves:
        # job 4 is the newest of those left, so it is not job 2's to judge
        journal.append(lay.journal(0), ev("start", t0 + 1200, 4, "d"))
        assert not pr.maybe(t0 + 1210) and pr.again and pr.since is None
        journal.append(lay.journal(0), ev("end", t0 + 1300, 1, "a"))
        assert not pr.maybe(t0 + 1310)
        assert not pr.pending and len(agent.requests) == 1
        assert pr.result is not None and "again" not in pr.result
        # alone: nothing left to judge either
        other = Prober(cfg, lay, 3, [0])
        other.result, other.again, other.start = {"verdict": "keep"}, True, t0 + 1100
        journal.append(lay.journal(0), ev("end", t0 + 1400, 2, "b"))
        journal.append(lay.journal(0), ev("end", t0 + 1400, 4, "d"))
        assert not other.maybe(t0 + 1500) and not other.pending
    finally:
        agent.close()


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000 + "]" * 200_000,  # under the 1 MiB cap, nested past the JSON reader
        '{"points": [[6000, 1' + "0" * 400 + "], [6050, 2], [6100, 3]]}",  # past float()
        '{"points": [[6000, 0], [6050, 1e308], [6100, -1e308]]}',  # differences past float
    ],
)
def test_a_progress_file_the_job_wrote_badly_is_read_as_no_progress(
    tmp_path: Path, text: str
) -> None:
    cfg = _cfg(tmp_path)
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    _files(lay, 5000.0)
    (lay.user_dir(2) / "progress.json").write_text(text)  # the newcomer's, written by it
    pr = Prober(cfg, lay, 2, [0])
    pr.maybe(6100.0)
    assert pr.result is not None and pr.result["verdict"] == "unjudged"
    incumbent, newcomer = pr.result["members"]
    assert incumbent["rate"] == pytest.approx(4) and newcomer["rate"] is None
    rec = progress_summary(read_progress(lay, 2), [])
    assert rec is None or all(v is None or math.isfinite(v) for v in rec.values())
