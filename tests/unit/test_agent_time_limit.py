"""The time a shared job loses to sharing, added to its Slurm time limit
(agent/time_credit.py, AgentState.extend_limits, the server's ``extend`` action)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fake_slurm import FixedSlurm

from slurm_colo.agent import time_owed
from slurm_colo.agent.server import Agent
from slurm_colo.agent.state import AgentState
from slurm_colo.agent.time_credit import (
    GONE_S,
    UNLIMITED_S,
    Account,
    Accounts,
    TimeCredit,
    has_limit,
)
from slurm_colo.clock import WallClock
from slurm_colo.config import Config, PlacementConfig
from slurm_colo.contracts.enums import TimeLimit
from slurm_colo.errors import SlurmError
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.scores import ClassInfo, ScoreTable, table_from_pairs
from slurm_colo.slurm.model import GresAlloc, SlurmJob, SlurmNode

# ---- the account, alone -----------------------------------------------------------------

FAR = 1e6  # an end far off: only the step gives time


def test_time_is_owed_at_one_less_the_speed_seen_and_given_in_whole_minutes() -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({7: 0.75}, 0.0)
    c.observe({7: 0.75}, 1200.0)  # 1200 s at 0.75: 300 s owed, under the step
    assert c.due({7: FAR}, 1200.0) == []
    c.observe({7: 0.5}, 2700.0)  # 1500 s more at 0.75: 675 s owed
    assert c.due({7: FAR}, 2700.0) == [(7, 12)]  # rounded up: 720 s given, 45 s ahead
    assert c.given_min(7) == 12
    c.observe({7: 0.5}, 2780.0)  # 80 s at 0.5 (the speed seen at 2700): 40 s, still ahead
    assert c.due({7: 2800.0}, 2780.0) == []  # nothing owed, even with the end near


def test_near_its_end_a_job_is_given_whatever_it_is_owed() -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({7: 0.8}, 0.0)
    c.observe({7: 0.8}, 100.0)  # 20 s owed
    assert c.due({7: 400.0}, 100.0) == []  # end 300 s off: not yet
    c.observe({7: 0.8}, 250.0)  # 50 s owed, end 150 s off
    assert c.due({7: 400.0}, 250.0) == [(7, 1)]


@pytest.mark.parametrize("rate", [1.0, 1.3])
def test_a_job_alone_or_faster_than_alone_is_owed_nothing(rate: float) -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({7: rate}, 0.0)
    c.observe({7: rate}, 5000.0)
    assert c.due({7: 5100.0}, 5000.0) == []


def test_a_job_without_a_limit_is_given_nothing() -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({7: 0.5}, 0.0)
    c.observe({7: 0.5}, 5000.0)
    assert c.due({}, 5000.0) == []  # only jobs with a limit are passed an end
    assert c.due({7: 5100.0}, 5000.0) == [(7, 42)]


@pytest.mark.parametrize(
    ("start", "end", "limited"),
    [
        (100.0, 100.0 + 3600, True),
        (100.0, 100.0 + UNLIMITED_S, False),  # Slurm's end of an UNLIMITED job
        (100.0, 0.0, False),  # not known
        (0.0, 3600.0, False),
    ],
)
def test_which_jobs_have_a_limit(start: float, end: float, limited: bool) -> None:
    assert has_limit(start, end) is limited


def test_a_refused_job_is_not_asked_for_again_and_a_gone_job_is_forgotten() -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({7: 0.5, 8: 0.5}, 0.0)
    c.observe({7: 0.5, 8: 0.5}, 1300.0)
    assert sorted(c.due({7: FAR, 8: FAR}, 1300.0)) == [(7, 11), (8, 11)]
    c.refused(7)
    c.observe({7: 0.5}, 3000.0)  # 8 ended
    assert c.due({7: FAR}, 3000.0) == [] and c.given_min(8) == 0 and 8 not in c.jobs
    c.observe({7: 0.5}, 5000.0)
    assert c.due({7: FAR}, 5000.0) == []


# ---- the agent: who is owed, at which speed ----------------------------------------------

LAYOUT = (NodeGpus("n1", 1, "v100", 32.0, (0,), 4),)  # one shared GPU
# a and b gain together (1.5), each at 0.75 of its solo speed
SCORES = table_from_pairs(
    [("a", "b", 0.75, 0.75), ("a", "a", 0.4, 0.4), ("b", "b", 0.4, 0.4)],
    classes={"a": ClassInfo(memory_gib=4.0), "b": ClassInfo(memory_gib=4.0)},
    created="",
)
END = 3.0 + 4 * 3600.0  # both jobs have 4 h


def _state(**placement: object) -> AgentState:
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0, **placement))  # type: ignore[arg-type]
    s = AgentState(cfg, SCORES)
    s.apply_snapshot([], [SlurmNode("n1", "IDLE")], 0.0)
    return s


def _running(job_id: int, tag: str, cls: str = "job") -> SlurmJob:
    return SlurmJob(
        job_id,
        cls,
        "alice",
        1000,
        "RUNNING",
        nodes="n1",
        gres=(GresAlloc("shard", "v100_s0", 1, (0,)),),
        admin_comment=tag,
        start_time=3.0,
        end_time=END,
    )


def _pair(**placement: object) -> tuple[AgentState, list[SlurmJob]]:
    s = _state(**placement)
    a = s.place_request({"user": "alice", "uid": "1000", "name": "a", "class": "a"}, 1.0)
    b = s.place_request({"user": "alice", "uid": "1000", "name": "b", "class": "b"}, 2.0)
    assert a["gres"] == b["gres"] == "gres:shard:v100_s0:1"
    jobs = [_running(10, a["tag"]), _running(11, b["tag"])]
    s.apply_snapshot(jobs, [], 3.0)
    return s, jobs


def test_each_placed_job_of_a_shared_gpu_is_given_the_time_its_set_costs_it() -> None:
    s, jobs = _pair()
    assert s.extend_limits(3.0) == []  # the first look starts the accounts
    s.apply_snapshot(jobs, [], 1803.0)
    assert s.extend_limits(1803.0) == []  # 1800 s at 0.75: 450 s owed each
    s.apply_snapshot(jobs, [], 2403.0)
    acts = s.extend_limits(2403.0)  # 2400 s at 0.75: 600 s each, the step
    assert sorted((a.kind, a.job_id, a.minutes) for a in acts) == [
        ("extend", 10, 10),
        ("extend", 11, 10),
    ]


def test_explain_says_how_much_time_a_job_was_given() -> None:
    from slurm_colo.cli.spine import _fmt_explain

    s, jobs = _pair()
    assert "time_limit_added_min" not in s.explain(10)
    s.extend_limits(3.0)
    s.apply_snapshot(jobs, [], 2403.0)
    s.extend_limits(2403.0)
    ex = s.explain(10)
    assert ex["time_limit_added_min"] == 10
    assert "time limit raised by 10 min so far, for the time sharing cost it" in _fmt_explain(ex)


def test_status_shows_the_minutes_added_per_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from slurm_colo.cli import app
    from slurm_colo.contracts import client

    s, jobs = _pair()
    s.extend_limits(3.0)
    s.apply_snapshot(jobs, [], 2403.0)
    s.extend_limits(2403.0)
    rows = s.status(2403.0)["gpus"][0]["occupants"]
    assert {o["job_id"]: o["time_limit_added_min"] for o in rows} == {10: 10, 11: 10}
    monkeypatch.setattr(client, "status", lambda cfg, timeout_s=2.0: s.status(2403.0))
    out = CliRunner().invoke(app, ["status"]).output
    assert out.count("s, time limit +10 min\n") == 2, out  # after "running Ns"


def test_a_job_the_agent_did_not_place_is_left_alone_and_a_job_alone_owes_nothing() -> None:
    s, jobs = _pair()
    by_hand = _running(12, "", cls="b")  # a shard job asked for by hand, on the same GPU
    s.apply_snapshot([*jobs, by_hand], [], 3.0)
    s.extend_limits(3.0)
    s.apply_snapshot([*jobs, by_hand], [], 2403.0)
    acts = s.extend_limits(2403.0)
    # next to the second b, a runs at 0.75 * 0.75 (1050 s owed in 2400 s, 17.5 min) and
    # b at 0.75 * 0.4 (1680 s); the hand-made job is not the agent's
    assert sorted((a.job_id, a.minutes) for a in acts) == [(10, 18), (11, 28)]
    alone = [jobs[0]]  # b and the hand-made job end
    s.apply_snapshot(alone, [], 2403.0)
    assert s.extend_limits(2403.0) == []
    s.apply_snapshot(alone, [], END - 60.0)
    # alone since: nothing more is owed (it was given 30 s ahead), even near its end
    assert s.extend_limits(END - 60.0) == []


def _table(rate: float) -> ScoreTable:
    return table_from_pairs(
        [("a", "b", rate, rate), ("a", "a", 0.4, 0.4), ("b", "b", 0.4, 0.4)],
        classes={"a": ClassInfo(memory_gib=4.0), "b": ClassInfo(memory_gib=4.0)},
        created="",
    )


def test_a_set_found_slower_is_charged_again_from_its_start_and_one_found_faster_from_now() -> None:
    s, jobs = _pair()
    s.extend_limits(3.0)
    s.apply_snapshot(jobs, [], 1203.0)
    s.extend_limits(1203.0)  # 1200 s at 0.75: 300 s owed each
    # the same set is now predicted (or measured) at 0.5: its 1800 s so far at 0.5
    s.scores = _table(0.5)
    s.apply_snapshot(jobs, [], 1803.0)
    acts = s.extend_limits(1803.0)
    assert sorted((a.job_id, a.minutes) for a in acts) == [(10, 15), (11, 15)]
    # at 0.75 again: the time already charged stays; 600 s at 0.5 (seen at 1803) now
    s.scores = _table(0.75)
    s.apply_snapshot(jobs, [], 2403.0)
    assert s.extend_limits(2403.0) == [] and s.credit.owed_s(10) == pytest.approx(300.0)
    s.apply_snapshot(jobs, [], 3003.0)
    s.extend_limits(3003.0)  # and 600 s at 0.75 after
    assert s.credit.owed_s(10) == pytest.approx(450.0)


def test_a_set_that_changed_is_not_charged_again_for_the_set_before() -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({7: 0.9, 8: 0.9}, 0.0, {7: 0.0, 8: 0.0}, {7: (7, 8), 8: (7, 8)})
    c.observe({7: 0.9}, 600.0, {7: 0.0}, {7: (7,)})  # 8 left: 7 alone (speed 1 from now)
    c.observe({7: 0.6, 9: 0.6}, 1200.0, {7: 0.0, 9: 1100.0}, {7: (7, 9), 9: (7, 9)})
    # 7: 600 s at 0.9, then 600 s at 0.9 (the speed seen at 600 s)
    assert c.owed_s(7) == pytest.approx(120.0)
    c.observe({7: 0.5, 9: 0.5}, 1800.0, {7: 0.0, 9: 1100.0}, {7: (7, 9), 9: (7, 9)})
    # (7, 9) found slower: charged again at 0.5 from when 7 was first charged at its speed
    # (1200 s), nothing again for the sets before
    assert c.owed_s(7) == pytest.approx(120.0 + 600.0 * 0.5)
    # 9, new at 1200 s, was charged at (7, 9)'s speed from its start at 1100 s
    assert c.owed_s(9) == pytest.approx(700.0 * 0.5)


def test_with_time_limit_keep_no_limit_is_touched() -> None:
    s, jobs = _pair(time_limit=TimeLimit.KEEP)
    for t in (3.0, 3003.0, END - 60.0):
        s.apply_snapshot(jobs, [], t)
        assert s.extend_limits(t) == []


# ---- the server: the update, and a refusal ---------------------------------------------


class Control:
    """Raises limits, or refuses: ``"denied"`` every job (the agent lacks the right),
    ``"gone"`` job 10 only (it ended meanwhile)."""

    def __init__(self, fail: str) -> None:
        self.fail = fail
        self.calls: list[tuple[int, int]] = []

    def extend_time_limit(self, job_id: int | str, minutes: int) -> None:
        job_id = int(job_id)  # a plain job, as scontrol names it
        self.calls.append((job_id, minutes))
        if self.fail == "denied":
            raise SlurmError(f"scontrol update JobId={job_id} failed: Access/permission denied")
        if self.fail == "gone" and job_id == 10:
            raise SlurmError(f"scontrol update JobId={job_id} failed: Invalid job id specified")


def _agent(control: Control, tmp_path: Path) -> tuple[AgentState, Agent, list[float]]:
    """An agent whose state holds the pair of jobs 10 and 11, and its clock (``now[0]``),
    after its first look at Slurm at 3 s."""
    s, jobs = _pair()
    agent = Agent(
        Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0)),
        FixedSlurm(jobs, [SlurmNode("n1", "MIXED")]),
        control,  # type: ignore[arg-type]
        learned_file=tmp_path / "learned.json",
    )
    agent.state = s
    now = [3.0]
    agent.clock = WallClock(wall=lambda: now[0], steady=lambda: now[0])
    agent.refresh()
    return s, agent, now


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_a_step_of_the_wall_clock_is_neither_charged_to_shared_jobs_nor_taken_from_them(
    step: float, tmp_path: Path
) -> None:
    control = Control("")
    s, agent, now = _agent(control, tmp_path)
    steady = [3.0]
    agent.clock = WallClock(wall=lambda: now[0], steady=lambda: steady[0])
    agent.refresh()  # the same moment as the first look: the clock's reference
    now[0], steady[0] = 603.0 + step, 603.0  # ten minutes, and the date set an hour off
    agent.refresh()
    assert s.credit.owed_s(10) == s.credit.owed_s(11) == pytest.approx(150.0)  # 600 s at 0.75
    assert control.calls == []
    now[0], steady[0] = 2403.0 + step, 2403.0
    agent.refresh()  # 2400 s in all: 600 s owed each, the step, as without a step
    assert sorted(control.calls) == [(10, 10), (11, 10)]


@pytest.mark.parametrize(("fail", "calls"), [("", 4), ("gone", 3)])
def test_the_server_raises_limits_and_stops_asking_for_a_job_slurm_refused(
    fail: str, calls: int, tmp_path: Path
) -> None:
    control = Control(fail)
    s, agent, now = _agent(control, tmp_path)
    now[0] = 2403.0
    agent.refresh()
    assert sorted(control.calls) == [(10, 10), (11, 10)]
    now[0] = 4803.0
    agent.refresh()  # 600 s more owed each: given, but not to the job Slurm refused
    assert len(control.calls) == calls
    assert s.status(4803.0)["slurm_changes"]["refused"] is None


def test_without_the_right_the_agent_asks_once_in_a_while_and_resumes_once_granted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from typer.testing import CliRunner

    from slurm_colo.agent.rights import RETRY_S
    from slurm_colo.cli import app
    from slurm_colo.contracts import client

    control = Control("denied")
    s, agent, now = _agent(control, tmp_path)
    now[0] = 2403.0
    with caplog.at_level("INFO", logger="slurm_colo.agent"):
        agent.refresh()
    # refused for the right: the other job of the batch is not asked for, and neither
    # job's 10 minutes count as given
    assert control.calls == [(10, 10)]
    assert s.credit.given_min(10) == s.credit.given_min(11) == 0
    assert caplog.text.count("Slurm refuses the agent the right to change jobs") == 1
    for t in (2408.0, 2413.0):  # the next looks ask nothing of Slurm
        now[0] = t
        agent.refresh()
    assert control.calls == [(10, 10)]
    st = s.status(2413.0)
    assert "Access/permission denied" in st["slurm_changes"]["refused"]
    monkeypatch.setattr(client, "status", lambda cfg, timeout_s=2.0: st)
    out = CliRunner().invoke(app, ["status"]).output
    assert "changes to jobs in Slurm: NOT made, Slurm refuses the agent the right" in out
    assert "no time limit raised" in out and "time limits of shared jobs" not in out
    # one change is tried again after RETRY_S: still refused, then granted
    now[0] = 2403.0 + RETRY_S
    agent.refresh()
    assert len(control.calls) == 2
    control.fail = ""
    now[0] = 2403.0 + 2 * RETRY_S
    with caplog.at_level("INFO", logger="slurm_colo.agent"):
        agent.refresh()  # the retry goes through: the agent resumes
        agent.refresh()  # and gives the other job its time at the next look
    assert "Slurm accepts the agent's changes again" in caplog.text
    # all of it: 3600 s shared at 0.75, 900 s each
    assert (2403.0 + 2 * RETRY_S - 3.0) * 0.25 == 900.0
    assert control.calls[2:] == [(10, 15), (11, 15)]
    assert s.credit.given_min(10) == s.credit.given_min(11) == 15
    assert s.status(now[0])["slurm_changes"]["refused"] is None


# ---- across a restart (agent/time_owed.py) ----------------------------------------------


def test_a_job_started_while_the_agent_was_down_is_charged_from_its_start() -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({7: 0.5}, 1000.0)
    saved = c.accounts()
    c = TimeCredit(step_s=600, guard_s=180)  # the agent restarts
    c.restore(saved)
    # job 7 ran on at 0.5 while the agent was down (1000 s: 500 s owed); job 8 started at
    # 1400 s, 600 s before this look, and runs at 0.25 (450 s owed)
    c.observe({7: 0.9, 8: 0.25}, 2000.0, {7: 500.0, 8: 1400.0})
    assert c.due({7: FAR, 8: FAR}, 2000.0) == []
    c.observe({7: 0.9, 8: 0.25}, 2300.0, {7: 500.0, 8: 1400.0})  # +30 s and +225 s
    assert c.due({7: FAR, 8: FAR}, 2300.0) == [(8, 12)]
    assert c.owed_s(7) == pytest.approx(530.0)


#: a job's limit in its first run (60 min), and in a run after 11 minutes were added
FIRST, RAISED = {8: 3600.0}, {8: 4260.0}


def test_a_requeued_job_keeps_the_minutes_slurm_kept_in_its_limit_as_time_given_ahead() -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({8: 0.5}, 0.0, {8: 0.0}, limits=FIRST)
    c.observe({8: 0.5}, 1300.0, {8: 0.0}, limits=FIRST)
    assert c.due({8: FAR}, 1300.0) == [(8, 11)]  # the limit is now 11 minutes longer
    c.observe({}, 1400.0)  # requeued (undone): pending, it leaves the accounts
    # started again at 2000 s: its limit still has the 11 minutes (Slurm keeps a raised
    # limit across a requeue), and the new run has not lost them yet
    c.observe({8: 0.5}, 2000.0, {8: 2000.0}, limits=RAISED)
    assert c.given_min(8) == 11 and c.owed_s(8) == pytest.approx(-660.0)
    c.observe({8: 0.5}, 3320.0, {8: 2000.0}, limits=RAISED)  # 660 s owed by this run: what it had
    assert c.due({8: FAR}, 3320.0) == [] and c.owed_s(8) == pytest.approx(0.0)
    c.observe({8: 0.5}, 4520.0, {8: 2000.0}, limits=RAISED)  # 600 s more: given
    assert c.due({8: FAR}, 4520.0) == [(8, 10)] and c.given_min(8) == 21


def test_a_job_requeued_while_the_agent_was_down_starts_a_new_run() -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({8: 0.5}, 0.0, {8: 1.0}, limits=FIRST)
    c.observe({8: 0.5}, 1300.0, {8: 1.0}, limits=FIRST)
    assert c.due({8: FAR}, 1300.0) == [(8, 11)]
    c.observe({8: 0.5}, 1400.0, {8: 1.0}, limits=RAISED)  # 50 s owed; the agent stops here
    saved = c.accounts()
    c = TimeCredit(step_s=600, guard_s=180)
    c.restore(saved)
    # meanwhile the job was requeued and started again at 2000 s: the 11 minutes in its
    # limit are this run's, and its time is charged from its new start
    c.observe({8: 0.5}, 2600.0, {8: 2000.0}, limits=RAISED)
    assert c.given_min(8) == 11 and c.owed_s(8) == pytest.approx(-660.0 + 300.0)


def test_a_job_requeued_before_a_restart_keeps_its_minutes_in_its_next_run(
    tmp_path: Path,
) -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({8: 0.5, 9: 0.9}, 0.0, {8: 1.0, 9: 1.0}, limits=FIRST)
    c.observe({8: 0.5, 9: 0.9}, 1300.0, {8: 1.0, 9: 1.0}, limits=FIRST)
    assert c.due({8: FAR}, 1300.0) == [(8, 11)]
    c.observe({}, 1400.0)  # 8 requeued and pending, 9 ended: both leave the accounts
    # saved and read back across the restart; 9 was given nothing and is not kept
    assert time_owed.save(tmp_path / "time_owed.json", c.accounts())
    saved = time_owed.load(tmp_path / "time_owed.json")
    assert saved is not None and set(saved.left) == {8} and saved.jobs == {}
    c = TimeCredit(step_s=600, guard_s=180)
    c.restore(saved)
    # 8 starts again at 2000 s: its limit still holds the 11 minutes of its first run
    c.observe({8: 0.5}, 2600.0, {8: 2000.0}, limits=RAISED)
    assert c.given_min(8) == 11 and c.owed_s(8) == pytest.approx(-660.0 + 300.0)
    # without what was kept, the new run would be owed from nothing and given them again
    fresh = TimeCredit(step_s=600, guard_s=180)
    fresh.restore(Accounts(saved.at, {}))
    fresh.observe({8: 0.5}, 2600.0, {8: 2000.0}, limits=RAISED)
    assert fresh.given_min(8) == 0 and fresh.owed_s(8) == pytest.approx(300.0)


@pytest.mark.parametrize("restart", [False, True])
def test_a_new_job_under_an_old_job_id_is_not_a_requeue(restart: bool, tmp_path: Path) -> None:
    # job 8 (limit 60 min) is given 11 minutes, then ends
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({8: 0.5}, 0.0, {8: 1.0}, limits=FIRST)
    c.observe({8: 0.5}, 1300.0, {8: 1.0}, limits=FIRST)
    assert c.due({8: FAR}, 1300.0) == [(8, 11)]
    c.observe({}, 1400.0)
    if restart:  # the agent restarts meanwhile, its accounts saved and read back
        assert time_owed.save(tmp_path / "time_owed.json", c.accounts())
        saved = time_owed.load(tmp_path / "time_owed.json")
        assert saved is not None and saved.left[8][1].limit_s == 3600.0 + 660.0
        c = TimeCredit(step_s=600, guard_s=180)
        c.restore(saved)
    # Slurm's state was reset: another job gets id 8, with a limit of its own (60 min, not
    # the 71 its namesake had): it is given its own time, nothing counts as given ahead
    c.observe({8: 0.5}, 2600.0, {8: 2000.0}, limits=FIRST)
    assert c.given_min(8) == 0 and c.owed_s(8) == pytest.approx(300.0)
    # while the same job requeued, its limit kept at 71 min, keeps its minutes
    twin = TimeCredit(step_s=600, guard_s=180)
    twin.observe({8: 0.5}, 0.0, {8: 1.0}, limits=FIRST)
    twin.observe({8: 0.5}, 1300.0, {8: 1.0}, limits=FIRST)
    twin.due({8: FAR}, 1300.0)
    twin.observe({}, 1400.0)
    twin.observe({8: 0.5}, 2600.0, {8: 2000.0}, limits=RAISED)
    assert twin.given_min(8) == 11 and twin.owed_s(8) == pytest.approx(-660.0 + 300.0)


def test_a_job_that_left_more_than_a_day_ago_is_not_kept() -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({8: 0.5}, 0.0, {8: 1.0})
    c.observe({8: 0.5}, 1300.0, {8: 1.0})
    c.due({8: FAR}, 1300.0)
    c.observe({}, 1400.0)
    assert set(c.accounts().left) == {8}
    c.observe({}, 1400.0 + GONE_S)
    assert c.accounts().left == {}


def test_a_job_is_charged_from_the_first_look_or_its_start_whichever_is_later() -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({7: 0.5}, 1000.0, {7: 100.0})  # the agent's first look: nothing before it
    c.observe({7: 0.5, 8: 0.5}, 1100.0, {7: 100.0, 8: 1090.0})  # 8 started 10 s ago
    assert c.owed_s(7) == pytest.approx(50.0) and c.owed_s(8) == pytest.approx(5.0)
    # 8 leaves the accounts and comes back with the same start (a job Slurm listed
    # again): charged from when it left, not again from 1090 s
    c.observe({7: 0.5}, 1200.0, {7: 100.0})
    c.observe({7: 0.5, 8: 0.5}, 1600.0, {7: 100.0, 8: 1090.0})
    assert c.owed_s(8) == pytest.approx(205.0)  # with the 5 s it was owed when it left


def test_the_agent_keeps_what_jobs_are_owed_across_a_restart(tmp_path: Path) -> None:
    s, jobs = _pair()
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0))
    control = Control("")
    now = [3.0]

    def agent() -> Agent:
        a = Agent(
            cfg,
            FixedSlurm(jobs, [SlurmNode("n1", "MIXED")]),
            control,
            learned_file=tmp_path / "learned.json",
        )  # type: ignore[arg-type]
        a.clock = WallClock(wall=lambda: now[0], steady=lambda: now[0])
        return a

    first = agent()
    first.state = s
    first.refresh()
    now[0] = 1803.0
    first.refresh()  # 450 s owed each, not given yet
    first.shutdown()
    assert control.calls == [] and (tmp_path / "time_owed.json").is_file()
    now[0] = 4803.0  # down for 3000 s, sharing all the while: 750 s more each
    again = agent()  # rebuilds the placements from the jobs' tags
    again.state.scores = s.scores  # the same score set as before the restart
    again.refresh()
    assert sorted(control.calls) == [(10, 20), (11, 20)]
    assert again.state.explain(10)["time_limit_added_min"] == 20


def test_an_unreadable_file_of_accounts_is_set_aside_and_the_agent_starts_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = tmp_path / "time_owed.json"
    f.write_text('{"format": "slurm-colo-time-owed/1", "at": 5, "jobs": [{"job": 7}]}')
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0))
    with caplog.at_level("WARNING", logger="slurm_colo.agent"):
        agent = Agent(
            cfg,
            FixedSlurm([], [SlurmNode("n1", "IDLE")]),
            Control(""),
            learned_file=tmp_path / "learned.json",
        )  # type: ignore[arg-type]
    assert agent.state.credit.jobs == {}
    assert (tmp_path / "time_owed.json.bad").is_file() and not f.exists()
    assert "jobs[0] is malformed" in caplog.text and "set aside" in caplog.text


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"format": "other/1", "at": 5, "jobs": []}',
        '{"format": "slurm-colo-time-owed/1", "jobs": []}',
        '{"format": "slurm-colo-time-owed/1", "at": 5, "jobs": [{"job": 7, "rate": 0.5, '
        '"since": 9, "owed_s": 1, "given_min": 0}]}',  # since after the last look
        '{"format": "slurm-colo-time-owed/1", "at": 5, "jobs": [{"job": 7, "rate": NaN, '
        '"since": 5, "owed_s": 1, "given_min": 0}]}',
        '{"format": "slurm-colo-time-owed/1", "at": 5, "jobs": [], "left": [{"job": 7, '
        '"rate": 0.5, "since": 1, "owed_s": 1, "given_min": 3}]}',  # no time it left
        '{"format": "slurm-colo-time-owed/1", "at": 5, "jobs": [], "left": [{"job": 7, '
        '"left_at": 6, "rate": 0.5, "since": 1, "owed_s": 1, "given_min": 3}]}',  # after 'at'
        '{"format": "slurm-colo-time-owed/1", "at": 5, "jobs": [], "left": [7]}',
        '{"format": "slurm-colo-time-owed/1", "at": 5, "jobs": [{"job": 7, "rate": 0.5, '
        '"since": 5, "owed_s": 1, "given_min": 0, "members": ["x"]}]}',
        '{"format": "slurm-colo-time-owed/1", "at": 5, "jobs": [{"job": 7, "rate": 0.5, '
        '"since": 4, "owed_s": 1, "given_min": 0, "set_since": 5}]}',  # after 'since'
        '{"format": "slurm-colo-time-owed/1", "at": 5, "jobs": [{"job": 7, "rate": 0.5, '
        '"since": 4, "owed_s": 1, "given_min": 0, "limit_s": -60}]}',
    ],
)
def test_a_malformed_file_of_accounts_is_refused(text: str) -> None:
    with pytest.raises(time_owed.TimeOwedError):
        time_owed.from_json(text.encode(), "time_owed.json")


def test_the_accounts_read_back_as_saved(tmp_path: Path) -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({7: 0.5, 8: 0.8}, 0.0)
    c.observe({7: 0.5, 8: 0.8}, 1300.0, sets={7: (7, 8), 8: (7, 8)})
    c.due({7: FAR}, 1300.0)  # 7 is given 11 min
    c.refused(8)
    c.observe({8: 0.8}, 1400.0, sets={8: (8, 9)})  # 7 leaves with its 11 minutes
    accounts = c.accounts()
    assert time_owed.save(tmp_path / "time_owed.json", accounts)
    saved = time_owed.load(tmp_path / "time_owed.json")
    assert saved == accounts and saved.at == 1400.0
    assert saved.left[7] == (1400.0, accounts.left[7][1]) and saved.left[7][1].given_min == 11
    assert saved.jobs[8].refused and saved.jobs[8].members == (8, 9)
    assert saved.jobs[8].set_since == 1400.0


def test_an_accounts_copy_keeps_every_field() -> None:
    """``Account.copy`` names the fields by hand (for speed, under the agent's lock): a field
    added later and left out of it would be lost from every saved ``time_owed.json``."""
    defaults = Account(1.0, 0.0)
    acc = Account(0.8, 10.0, 42.5, 3, True, 5.0, (7, 8), 6.0, 3600.0)
    changed = [
        f.name
        for f in dataclasses.fields(Account)
        if getattr(acc, f.name) == getattr(defaults, f.name)
    ]
    assert changed == [], f"set these fields in the test too: {changed}"
    assert acc.copy() == acc and acc.copy() is not acc


@pytest.mark.parametrize(("step", "same_boot"), [(3600.0, True), (-1800.0, True), (3600.0, False)])
def test_a_step_of_the_clock_while_the_agent_was_down_is_found_on_the_same_boot(
    step: float, same_boot: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, jobs = _pair()
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0))
    control = Control("")
    wall, boot_clock = [3.0], [100.0]
    boot = tmp_path / "boot_id"
    boot.write_text("1f0e\n")
    monkeypatch.setattr("slurm_colo.clock.BOOT_ID", boot)

    def agent() -> Agent:
        clock = WallClock(wall=lambda: wall[0], steady=lambda: boot_clock[0])
        return Agent(
            cfg,
            FixedSlurm(jobs, [SlurmNode("n1", "MIXED")]),
            control,
            learned_file=tmp_path / "learned.json",
            clock=clock,
        )  # type: ignore[arg-type]

    first = agent()
    first.state = s
    first.refresh()
    wall[0] += 1800.0
    boot_clock[0] += 1800.0
    first.refresh()  # 450 s owed each, not given yet
    first.shutdown()
    # down for 3000 s, sharing all the while (750 s more each), and the date was set
    # by ``step`` meanwhile
    wall[0] += 3000.0 + step
    boot_clock[0] += 3000.0
    if not same_boot:
        boot.write_text("2a7c\n")
        boot_clock[0] = 40.0
    again = agent()
    again.state.scores = s.scores
    again.refresh()
    if same_boot:  # 1200 s owed each: 20 minutes, as without a step
        assert sorted(control.calls) == [(10, 20), (11, 20)]
    else:  # after a reboot the step cannot be told from time passing: charged as time
        # (450 s + (3000 s + 3600 s) x 0.25 = 2100 s)
        assert sorted(control.calls) == [(10, 35), (11, 35)]


def test_the_clock_mark_reads_back_and_a_bad_one_is_left_out(tmp_path: Path) -> None:
    c = TimeCredit(step_s=600, guard_s=180)
    c.observe({7: 0.5}, 1000.0)
    accounts = c.accounts()
    accounts.clock = ("1f0e", 999_900.5)
    assert time_owed.save(tmp_path / "time_owed.json", accounts)
    saved = time_owed.load(tmp_path / "time_owed.json")
    assert saved == accounts and saved.clock == ("1f0e", 999_900.5)
    head = '{"format": "slurm-colo-time-owed/1", "at": 5, "jobs": [], "clock": '
    for bad in (
        '{"boot_id": "1f0e"}',
        '{"boot_id": 3, "offset": 1}',
        '{"boot_id": "1f0e", "offset": NaN}',
        "[1, 2]",
        '"x"',
    ):
        saved = time_owed.from_json((head + bad + "}").encode(), "time_owed.json")
        assert saved.at == 5 and saved.clock is None  # the accounts read as without one
