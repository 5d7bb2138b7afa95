"""The time a shared job loses to sharing, added to its Slurm time limit
(agent/time_credit.py, AgentState.extend_limits, the server's ``extend`` action)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_slurm import FixedSlurm

from slurm_colo.agent.server import Agent
from slurm_colo.agent.state import AgentState
from slurm_colo.agent.time_credit import UNLIMITED_S, TimeCredit, has_limit
from slurm_colo.config import Config, PlacementConfig
from slurm_colo.contracts.enums import TimeLimit
from slurm_colo.errors import SlurmError
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.scores import ClassInfo, table_from_pairs
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
    assert c.due({7: FAR}, 3000.0) == [] and c.given_min(8) == 0
    c.observe({7: 0.5, 8: 0.5}, 3100.0)  # a job id seen again starts afresh
    assert c.given_min(8) == 0
    c.observe({7: 0.5, 8: 0.5}, 5000.0)
    c.stop("Slurm refused the agent the right")  # no job is asked for any more
    assert c.due({7: FAR, 8: FAR}, 5000.0) == [] and c.stopped


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


def test_a_new_score_set_changes_the_speeds_charged_from_then_on() -> None:
    s, jobs = _pair()
    s.extend_limits(3.0)
    s.apply_snapshot(jobs, [], 1203.0)
    s.extend_limits(1203.0)  # 1200 s at 0.75: 300 s owed each
    s.scores = table_from_pairs(
        [("a", "b", 0.5, 0.5), ("a", "a", 0.4, 0.4), ("b", "b", 0.4, 0.4)],
        classes={"a": ClassInfo(memory_gib=4.0), "b": ClassInfo(memory_gib=4.0)},
        created="",
    )
    s.apply_snapshot(jobs, [], 1803.0)
    assert s.extend_limits(1803.0) == []  # 600 s more at 0.75 (seen at 1203): 450 s
    s.apply_snapshot(jobs, [], 2103.0)
    acts = s.extend_limits(2103.0)  # 300 s at 0.5 (the new set's): 600 s, the step
    assert sorted((a.job_id, a.minutes) for a in acts) == [(10, 10), (11, 10)]


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

    def extend_time_limit(self, job_id: int, minutes: int) -> None:
        self.calls.append((job_id, minutes))
        if self.fail == "denied":
            raise SlurmError(f"scontrol update JobId={job_id} failed: Access/permission denied")
        if self.fail == "gone" and job_id == 10:
            raise SlurmError(f"scontrol update JobId={job_id} failed: Invalid job id specified")


@pytest.mark.parametrize(("fail", "calls"), [("", 4), ("gone", 3), ("denied", 2)])
def test_the_server_raises_limits_and_stops_asking_when_slurm_refuses(
    fail: str, calls: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, jobs = _pair()
    control = Control(fail)
    agent = Agent(
        Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0)),
        FixedSlurm(jobs, [SlurmNode("n1", "MIXED")]),
        control,  # type: ignore[arg-type]
        learned_file=tmp_path / "learned.json",
    )
    agent.state = s
    now = [3.0]
    monkeypatch.setattr("slurm_colo.agent.server.time.time", lambda: now[0])
    agent.refresh()
    now[0] = 2403.0
    agent.refresh()
    assert sorted(control.calls) == [(10, 10), (11, 10)]
    now[0] = 4803.0
    # 600 s more owed each: given, but not to a job Slurm refused, nor to any once Slurm
    # refused the agent the right
    agent.refresh()
    assert len(control.calls) == calls
    stopped = s.status(4803.0)["time_limits"]["stopped"]
    assert (stopped is not None) is (fail == "denied")
    if stopped:
        assert "Access/permission denied" in stopped
        from typer.testing import CliRunner

        from slurm_colo.cli import app
        from slurm_colo.contracts import client

        monkeypatch.setattr(client, "status", lambda cfg, timeout_s=2.0: s.status(4803.0))
        out = CliRunner().invoke(app, ["status"]).output
        assert "time limits of shared jobs: NOT raised: Slurm refused the agent the right" in out
