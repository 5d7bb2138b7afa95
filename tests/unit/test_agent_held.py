"""The agent's undo of a harmful placement: probe verdicts, requeue, re-aim (no I/O)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_colo.agent import held as agent_held
from slurm_colo.agent import learned as agent_learned
from slurm_colo.agent.arrays import OWN_GPU_TASK_NOTE
from slurm_colo.agent.server import Agent
from slurm_colo.agent.state import AgentState
from slurm_colo.config import Config, PlacementConfig
from slurm_colo.contracts.placement import Placement
from slurm_colo.contracts.probe import ProbeReport
from slurm_colo.contracts.protocol import format_request, parse_reply
from slurm_colo.errors import SlurmError
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.metrics import render
from slurm_colo.placement.retract import undone_floor
from slurm_colo.scores import ClassInfo, table_from_pairs
from slurm_colo.slurm.model import GresAlloc, SlurmJob, SlurmNode

LAYOUT = (NodeGpus("n1", 4, "v100", 32.0, (0, 1), 4),)
# the table says slow and fast get on well (1.0 each); in truth they do not
SCORES = table_from_pairs(
    [("slow", "fast", 1.0, 1.0), ("slow", "slow", 0.5, 0.5), ("fast", "fast", 0.5, 0.5)],
    classes={
        "slow": ClassInfo(memory_gib=4.0, progress_rate=10.0),
        "fast": ClassInfo(memory_gib=4.0, progress_rate=20.0),
    },
    created="",
)


def _state(**placement: object) -> AgentState:
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0, **placement))  # type: ignore[arg-type]
    s = AgentState(cfg, SCORES)
    s.apply_snapshot([], [SlurmNode("n1", "IDLE")], 0.0)
    return s


def _req(cls: str) -> dict[str, str]:
    return {"user": "alice", "uid": "1000", "name": "job", "mode": "auto", "class": cls}


def _running(job_id: int, tag: str, idx: int = 0, requeue: bool = True) -> SlurmJob:
    return SlurmJob(
        job_id,
        "job",
        "alice",
        1000,
        "RUNNING",
        nodes="n1",
        gres=(GresAlloc("shard", f"v100_s{idx}", 1, (idx,)),),
        admin_comment=tag,
        requeue=requeue,
    )


def _pair(**placement: object) -> tuple[AgentState, list[SlurmJob]]:
    """slow (job 10) runs on GPU 0; fast (job 11) was placed next to it."""
    s = _state(**placement)
    a = s.place_request(_req("slow"), 1.0)
    b = s.place_request(_req("fast"), 2.0)
    assert a["gres"] == b["gres"] == "gres:shard:v100_s0:1"
    jobs = [_running(10, a["tag"]), _running(11, b["tag"])]
    s.apply_snapshot(jobs, [], 3.0)
    s.job_started(10, None, 3.0)
    s.job_started(11, None, 4.0)
    return s, jobs


def _report(slow_now: float, fast_now: float) -> dict[str, object]:
    return {
        "job": 11,
        "gpu": 0,
        "since": 4.0,
        "window_s": 480.0,
        "members": [
            {"job": 10, "cls": "slow", "rate": slow_now, "rate_before": 10.0, "before": []},
            {"job": 11, "cls": "fast", "rate": fast_now},
        ],
    }


def test_a_good_set_is_kept_and_its_measurement_used_from_the_next_look_at_slurm() -> None:
    s, jobs = _pair()
    reply, actions = s.probe(ProbeReport.from_wire(_report(9.0, 18.0)), 600.0)
    assert reply["verdict"] == "keep" and actions == []
    assert s.scores is SCORES  # no rebuild on the hook's request
    s.apply_snapshot(jobs, [], 602.0)
    p = s.scores.pair("fast", "slow")
    assert p.observed and p.n_a == pytest.approx(0.9) and p.n_b == pytest.approx(0.9)
    assert s.ledger.probes["kept"] == 1 and s.status(600.0)["probes"] == {"kept": 1}


def test_a_kept_set_shows_its_measured_slowdown_while_it_runs() -> None:
    """slow runs at 9 of its 10 alone, fast at 18 of 20: the slowest member is 1/0.9."""
    s, jobs = _pair()
    (g0,) = [g for g in s.status(500.0)["gpus"] if g["index"] == 0]
    assert g0["observed_slowdown"] is None  # not measured yet
    s.probe(ProbeReport.from_wire(_report(9.0, 18.0)), 600.0)
    s.apply_snapshot(jobs, [], 602.0)
    (g0,) = [g for g in s.status(602.0)["gpus"] if g["index"] == 0]
    assert g0["observed_slowdown"] == pytest.approx(1.111, abs=1e-3)
    assert 'slurm_colo_gpu_observed_slowdown{node="n1",gpu="0",gres_type="v100_s0"} 1.111' in (
        render(s.status(602.0))
    )
    s.job_ended(11, 603.0)  # another set now: what was measured is not its
    (g0,) = [g for g in s.status(603.0)["gpus"] if g["index"] == 0]
    assert g0["observed_slowdown"] is None


def test_a_harmful_newcomer_is_requeued_held_and_aimed_once_a_gpu_of_its_type_fits() -> None:
    s, jobs = _pair()
    reply, actions = s.probe(
        ProbeReport.from_wire(_report(3.0, 6.0)), 600.0
    )  # 0.3 each: combined 0.6
    assert reply["verdict"] == "undo" and "combined throughput 0.60 < 1" in reply["reason"]
    [a] = actions
    assert a.kind == "requeue_hold" and a.job_id == 11
    tag = Placement.from_tag(a.admin_comment)
    assert tag is not None and tag.held == "v100_s0" and tag.undone and not tag.shared
    assert "requeued after 600s together" in a.comment
    # the job left GPU 0, the pair is learnt; GPU 1 is idle but of another type: it waits
    assert [o.job_id for o in s.view.gpus[0].occupants] == [10]
    assert s.scores.pair("fast", "slow").n_a == pytest.approx(0.3)
    assert s.reaim(601.0) == [] and 11 in s.held
    assert s.status(601.0)["held"][0]["gres_type"] == "v100_s0"
    assert "requeued after its probe" in s.explain(11, jobs[1].admin_comment)["reason"]
    # Slurm shows it held; slow ends: GPU 0 is free and the job is aimed there
    held = replace(jobs[1], state="PENDING", gres=(), admin_comment=a.admin_comment)
    s.apply_snapshot([jobs[0], held], [], 620.0)
    assert s.reaim(620.0) == [] and 11 in s.held
    s.job_ended(10, 650.0)
    s.apply_snapshot([held], [], 700.0)
    [aim] = s.reaim(700.0)
    assert aim.kind == "aim" and aim.node == "n1" and aim.job_id == 11
    assert aim.start_now  # the wait Slurm puts on a requeued job is cleared
    t2 = Placement.from_tag(aim.admin_comment)
    assert t2 is not None and t2.undone and t2.held is None and t2.gpu == 0
    assert 11 not in s.held and [o.job_id for o in s.view.gpus[0].occupants] == [11]
    # it lost its probe window: no new partner joins it while it runs
    assert s.view.gpus[0].occupants[0].no_partners
    assert s.place_request(_req("slow"), 701.0)["gres"] == "gres:shard:v100_s1:1"
    # the Epilog of the run that was requeued may report its end late: the new
    # placement stays
    s.job_ended(11, 701.0)
    assert s.ledger.by_job.get(11) in s.ledger.placements


@pytest.mark.parametrize("queue_gate, verdict", [(0.75, "undo"), (0.0, "keep")])
def test_a_set_is_judged_by_the_rule_it_was_placed_under(queue_gate: float, verdict: str) -> None:
    # slow at 0.55 and fast at 1.0 (combined 1.55). fast was placed while no job waited:
    # the throughput path was closed (throughput_queue 0.75), so slow must keep
    # 1 / max_slowdown and the set is undone. With the queue gate off it was open, and the
    # throughput path's floor (1 / throughput_max_slowdown) keeps the set.
    s, jobs = _pair(throughput_queue=queue_gate)
    placed = s.ledger.placements[s.ledger.by_job[11]]
    assert placed.decision.throughput_open == (queue_gate == 0.0)
    reply, _ = s.probe(ProbeReport.from_wire(_report(5.5, 20.0)), 600.0)
    assert reply["verdict"] == verdict
    if verdict == "undo":
        assert "job 10 at 0.55x solo speed, below 1/1.5" in reply["reason"]


@pytest.mark.parametrize(
    "why, setup",
    [
        ("placement.undo is off", {"undo": "off"}),
        ("--no-requeue", {"no_requeue": True}),
        ("requeued once already", {"undone": True}),
        ("time limit ends it sooner", {"ends_at": 900.0}),
    ],
)
def test_a_harmful_set_is_left_running_when_it_may_not_be_undone(
    why: str, setup: dict[str, object]
) -> None:
    s, jobs = _pair(**({"undo": setup["undo"]} if "undo" in setup else {}))
    if setup.get("no_requeue"):
        jobs[1] = replace(jobs[1], requeue=False)
    if setup.get("undone"):
        jobs[1] = replace(jobs[1], admin_comment=jobs[1].admin_comment.replace("]", " undone=1]"))
    if setup.get("ends_at"):
        jobs[1] = replace(jobs[1], end_time=setup["ends_at"])  # 300 s after the probe at 600 s
    s.apply_snapshot(jobs, [], 500.0)
    reply, actions = s.probe(ProbeReport.from_wire(_report(3.0, 6.0)), 600.0)
    assert reply["verdict"] == "harmful" and why in reply["reason"] and actions == []
    assert s.scores.pair("fast", "slow").n_a == pytest.approx(0.3)  # learnt all the same
    assert len(s.view.gpus[0].occupants) == 2


@pytest.mark.parametrize("left_behind, verdict", [("undo", "undo"), ("learn", "harmful")])
def test_a_second_look_at_a_set_left_behind_undoes_it_unless_turned_off(
    left_behind: str, verdict: str
) -> None:
    # fast's probe kept a set of three; the third job left and fast, the newest of the two
    # left, reports the pair (0.3 each) as a second look
    s, _ = _pair(left_behind=left_behind)
    report = ProbeReport.from_wire({**_report(3.0, 6.0), "since": 7200.0, "again": True})
    assert report.again
    reply, actions = s.probe(report, 7800.0)
    assert reply["verdict"] == verdict
    assert [a.job_id for a in actions] == ([11] if verdict == "undo" else [])
    if verdict == "harmful":
        assert 'placement.left_behind = "learn"' in reply["reason"]
    assert s.scores.pair("fast", "slow").n_a == pytest.approx(0.3)  # learnt either way


def test_a_restarted_agent_finds_held_jobs_in_their_tags() -> None:
    s, jobs = _pair()
    _, [a] = s.probe(ProbeReport.from_wire(_report(3.0, 6.0)), 600.0)
    fresh = _state()
    held = replace(jobs[1], state="PENDING", gres=(), admin_comment=a.admin_comment)
    fresh.apply_snapshot([held], [], 700.0)
    assert fresh.held[11].request.gres_type == "v100_s0" and fresh.held[11].request.cls == "fast"
    assert fresh.held[11].request.rate_floor == pytest.approx(undone_floor(fresh.cfg.placement))
    [aim] = fresh.reaim(700.0)
    assert aim.node == "n1" and Placement.from_tag(aim.admin_comment).gpu == 0  # type: ignore[union-attr]
    # once it runs, another restart still finds it may not take partners (its tag says undone)
    again = _state()
    again.apply_snapshot([replace(jobs[1], admin_comment=aim.admin_comment)], [], 800.0)
    [o] = again.view.gpus[0].occupants
    assert o.job_id == 11 and o.no_partners
    assert again.status(800.0)["gpus"][0]["occupants"][0]["no_partners"] is True
    # a held job Slurm no longer shows as pending (released by hand, cancelled) is dropped
    other = _state()
    other.apply_snapshot([held], [], 700.0)
    other.apply_snapshot([replace(held, state="CANCELLED")], [], 800.0)
    assert other.held == {}


def test_a_failed_requeue_leaves_the_job_running_and_a_failed_release_holds_it_again() -> None:
    s, _ = _pair()
    _, [a] = s.probe(ProbeReport.from_wire(_report(3.0, 6.0)), 600.0)
    s.failed(a, 601.0)
    assert s.held == {} and s.ledger.probes == {"undone": 1, "undo_failed": 1}
    s2, jobs = _pair()
    _, [a2] = s2.probe(ProbeReport.from_wire(_report(3.0, 6.0)), 600.0)
    s2.job_ended(10, 650.0)
    s2.apply_snapshot(
        [replace(jobs[1], state="PENDING", gres=(), admin_comment=a2.admin_comment)], [], 700.0
    )
    [aim] = s2.reaim(700.0)
    s2.failed(aim, 701.0)
    assert s2.held[11].request.gres_type == "v100_s0" and 11 not in s2.ledger.by_job


def test_a_job_held_without_a_gpu_request_stays_so_when_slurm_refuses_a_change() -> None:
    s = _state(unplaced="hold")
    a = s.place_request(dict(_req("slow"), gpu_type="v100"), 1.0)
    b = s.place_request(dict(_req("slow"), gpu_type="v100"), 1.1)
    c = s.place_request(dict(_req("slow"), gpu_type="v100"), 1.2)
    held = SlurmJob(12, "job", "alice", 1000, "PENDING", admin_comment=c["tag"], submit_time=1.2)
    running = [_running(10, a["tag"], 0), _running(11, b["tag"], 1)]
    s.apply_snapshot(running + [held], [], 5.0)
    [lock] = s.reaim(5.0)
    s.failed(lock, 5.1)  # scontrol hold refused: it stays held by its user
    assert not s.held[12].locked and s.reaim(5.2) == []  # not retried at every look
    [again] = s.reaim(5.1 + agent_held.LOCK_RETRY_S)  # but after a while
    assert (again.kind, again.job_id) == ("admin_hold", 12) and s.held[12].locked
    s.job_ended(11, 8.0)
    s.apply_snapshot(running[:1] + [held], [], 9.0)
    [aim] = s.reaim(9.0)
    assert aim.gres == "gres:shard:v100_s1:1" and 12 not in s.held
    s.failed(aim, 9.1)  # the release refused: held again, still for any GPU
    h = s.held[12]
    assert (
        h.any_gpu
        and h.model == "v100"
        and h.waits_for() == "a shared v100 GPU"
        and 12 not in s.ledger.by_job
    )


def test_learnt_pairs_outlive_an_older_score_set_and_yield_to_a_newer_one() -> None:
    s, _ = _pair()
    s.probe(ProbeReport.from_wire(_report(3.0, 6.0)), time.time())
    s.scores = replace(SCORES, created="2026-01-01T00:00:00+00:00")  # made before the probe
    assert s.scores.pair("fast", "slow").n_a == pytest.approx(0.3)
    s.scores = replace(SCORES, created="2099-01-01T00:00:00+00:00")
    assert s.scores.pair("fast", "slow").n_a == 1.0 and s.live.learned == {}


def _named(job_id: int | str) -> int | str:
    """A job as the agent named it to scontrol: a plain job's number as an int, an array's
    task (``123_4``) as it is."""
    return int(job_id) if str(job_id).isdigit() else job_id


class FakeControl:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, int | str, str]] = []
        self.fail = fail

    def requeue_hold(
        self,
        job_id: int | str,
        admin_comment: str,
        comment: str,
        restore: tuple[str, str] = ("", ""),
    ) -> None:
        self.calls.append(("requeue_hold", _named(job_id), admin_comment))
        if self.fail:
            raise SlurmError("scontrol requeuehold 11 failed: Job is not running")

    def aim_and_release(
        self,
        job_id: int | str,
        node: str,
        admin_comment: str,
        comment: str,
        gres: str = "",
        start_now: bool = False,
        restore: tuple[str, str] = ("", ""),
    ) -> None:
        self.calls.append(("aim", _named(job_id), node))

    def admin_hold(self, job_id: int | str) -> None:
        self.calls.append(("admin_hold", _named(job_id), ""))

    def hold_pending(
        self,
        job_id: int | str,
        admin_comment: str,
        comment: str,
        restore: tuple[str, str] = ("", ""),
    ) -> None:
        self.calls.append(("hold_pending", _named(job_id), admin_comment))


class NoSlurm:
    name = "none"

    def jobs(self) -> list[SlurmJob]:
        return []

    def job(self, job_id: int) -> SlurmJob | None:
        return None

    def nodes(self) -> list[SlurmNode]:
        return []


@pytest.mark.parametrize("fail", [False, True])
def test_the_server_answers_the_probe_then_changes_slurm(fail: bool, tmp_path: Path) -> None:
    control = FakeControl(fail)
    agent = Agent(
        Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0)),
        NoSlurm(),
        control,
        learned_file=tmp_path / "learned.json",
    )
    s, _ = _pair()
    agent.state = s
    line = format_request("PROBE", _report(3.0, 6.0))
    refused = agent.handle(line, 54321)
    assert refused.startswith(b"ERR") and b"reserved" in refused and not control.calls
    reply = parse_reply("PROBE", agent.handle(line, 0))
    assert reply["verdict"] == "undo"
    deadline = time.monotonic() + 5
    while not control.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    with agent._control_lock:
        assert control.calls[0][:2] == ("requeue_hold", 11)
    assert (11 in s.held) is not fail
    # what the probe measured is on disk for the next start of the agent
    saved = agent_learned.load(tmp_path / "learned.json")
    assert saved[("fast", "slow")][0].n_a == pytest.approx(0.3)


def test_a_restarted_agent_keeps_what_probes_measured_until_a_newer_score_set(
    tmp_path: Path,
) -> None:
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0))
    first = Agent(cfg, NoSlurm(), FakeControl(), learned_file=tmp_path / "learned.json")
    s, _ = _pair()
    first.state = s
    parse_reply("PROBE", first.handle(format_request("PROBE", _report(3.0, 6.0)), 0))
    again = Agent(cfg, NoSlurm(), FakeControl(), learned_file=tmp_path / "learned.json")
    again.state.scores = replace(SCORES, created="2026-01-01T00:00:00+00:00")  # older
    assert again.state.scores.pair("fast", "slow").n_a == pytest.approx(0.3)
    assert again.state.status(0.0)["learned_pairs"] == 1
    again.state.scores = replace(SCORES, created="2099-01-01T00:00:00+00:00")  # the retrain's
    assert again.state.scores.pair("fast", "slow").n_a == 1.0


def test_an_unreadable_measurements_file_is_set_aside_and_the_agent_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = tmp_path / "learned.json"
    f.write_text('{"format": "slurm-colo-learned/1", "pairs": [{"a": "x"')
    agent = Agent(Config(gpus=LAYOUT), NoSlurm(), FakeControl(), learned_file=f)
    assert agent.state.live.learned == {}
    assert not f.exists() and (tmp_path / "learned.json.bad").exists()  # nothing lost
    assert "not JSON" in caplog.text and "set aside" in caplog.text


@pytest.mark.parametrize(
    "text",
    [
        '{"format": "slurm-colo-learned/1", "pairs": 5}',  # not a list
        '{"format": "slurm-colo-learned/1", "pairs": [{"a": "x", "b": "y", "n_a": 1, '
        '"n_b": 1, "at": ' + "9" * 400 + "}]}",  # too large for a float
        "[" * 100_000 + "]" * 100_000,  # nested too deeply for the JSON reader
        '{"format": "slurm-colo-learned/1", "pairs": [{"a": "x", "b": "y", "n_a": 1, '
        '"n_b": 1, "at": 5, "never": "false"}]}',  # a string flag: bool("false") is true
    ],
)
def test_a_damaged_measurements_file_of_any_shape_is_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    f = tmp_path / "learned.json"
    f.write_text(text)
    agent = Agent(Config(gpus=LAYOUT), NoSlurm(), FakeControl(), learned_file=f)
    assert agent.state.live.learned == {}
    assert not f.exists() and (tmp_path / "learned.json.bad").read_text() == text
    assert "set aside" in caplog.text


@pytest.mark.parametrize(
    "pairs, why",
    [
        ([{"a": "x", "b": "y", "n_a": "fast", "n_b": 1, "at": 0}], r"pairs\[0\] is malformed"),
        ([{"a": "x", "b": "y", "n_a": 0.5, "n_b": 1, "at": -5}], "out of range"),
        ([{"a": "x", "b": "y", "n_a": float("nan"), "n_b": 1, "at": 0}], "out of range"),
        ([{"b": "y", "n_a": 0.5, "n_b": 1, "at": 0}], "malformed"),
    ],
)
def test_bad_measurement_rows_are_refused_with_the_row_named(pairs: list, why: str) -> None:
    raw = json.dumps({"format": "slurm-colo-learned/1", "pairs": pairs}).encode()
    with pytest.raises(agent_learned.LearnedError, match=why):
        agent_learned.from_json(raw, "learned.json")
    with pytest.raises(agent_learned.LearnedError, match="not a slurm-colo-learned/1 file"):
        agent_learned.from_json(b'{"format": "other"}', "learned.json")


def test_with_unplaced_hold_a_job_without_a_gpu_waits_held_without_a_gpu_request() -> None:
    s = _state(unplaced="hold")
    a = s.place_request(_req("slow"), 1.0)
    b = s.place_request(_req("slow"), 1.1)  # slow+slow: delta 1.0, too little: GPU 1
    c = s.place_request(_req("slow"), 1.2)
    d = s.place_request(_req("slow"), 1.3)
    assert (a["gres"], b["gres"]) == ("gres:shard:v100_s0:1", "gres:shard:v100_s1:1")
    # no GPU takes c or d: each waits held, without a GPU request, for any shared GPU
    assert c["action"] == d["action"] == "hold" and "node" not in c
    assert c["gres"] == d["gres"] == "none"
    # (no job waits: the throughput path, which would take slow+slow at 0.5 each, is closed)
    assert c["comment"].startswith(
        "colo: held until a shared GPU fits (n1:0: slow+slow: slow predicted at 0.50x solo "
        "speed; few jobs wait, so only sets where all gain"
    )
    tag = Placement.from_tag(c["tag"])
    assert tag is not None and tag.held == "*" and not tag.undone and not tag.shared
    assert tag.model == ""
    assert s.ledger.decisions["hold:no partner now"] == 2
    held = [
        SlurmJob(
            12,
            "job",
            "alice",
            1000,
            "PENDING",
            admin_comment=c["tag"],
            submit_time=1.2,
            state_reason="JobHeldUser",
        ),
        SlurmJob(
            13,
            "job",
            "alice",
            1000,
            "PENDING",
            admin_comment=d["tag"],
            submit_time=1.3,
            state_reason="JobHeldUser",
        ),
    ]
    running = [_running(10, a["tag"], 0), _running(11, b["tag"], 1)]
    s.apply_snapshot(running + held, [], 5.0)
    assert sorted(s.held) == [12, 13]
    assert s.status(5.0)["held"][0]["waits_for"] == "a shared GPU"
    # nothing fits yet: their users' holds become the administrator's, once
    locks = s.reaim(5.0)
    assert [(x.kind, x.job_id) for x in locks] == [("admin_hold", 12), ("admin_hold", 13)]
    assert s.reaim(5.5) == []
    # Slurm refused one (slurmctld busy): that one is tried again a while later, alone
    s.failed(locks[1], 5.6)
    assert s.reaim(6.0) == []
    later = 5.6 + agent_held.LOCK_RETRY_S
    assert [(x.kind, x.job_id) for x in s.reaim(later)] == [("admin_hold", 13)]
    assert s.reaim(later + 1.0) == []
    # GPU 1 (type v100_s1) frees up first: the oldest goes there, its shard request set now
    s.job_ended(11, 8.0)
    s.apply_snapshot(running[:1] + held, [], 9.0)
    [aim] = s.reaim(9.0)
    assert (aim.kind, aim.job_id, aim.node, aim.gres) == ("aim", 12, "n1", "gres:shard:v100_s1:1")
    assert Placement.from_tag(aim.admin_comment).gpu == 1  # type: ignore[union-attr]
    assert aim.comment.startswith("colo: released onto GPU 1 of n1: opened idle shared GPU 1")
    assert not Placement.from_tag(aim.admin_comment).undone  # type: ignore[union-attr]
    assert "held=" not in aim.admin_comment
    assert not aim.start_now  # never requeued: its own start time (a --begin) stands
    assert sorted(s.held) == [13]


def test_a_job_held_for_one_gpu_type_by_an_earlier_version_is_released_onto_that_type() -> None:
    s = _state(unplaced="hold")
    a = s.place_request(_req("slow"), 1.0)
    b = s.place_request(_req("slow"), 1.1)
    old = SlurmJob(
        12,
        "job",
        "alice",
        1000,
        "PENDING",
        submit_time=1.2,
        admin_comment="slurm-colo[v=1 tok=old1 cls=slow mode=auto held=v100_s0]",
    )
    running = [_running(10, a["tag"], 0), _running(11, b["tag"], 1)]
    s.apply_snapshot(running + [old], [], 5.0)
    h = s.held[12]
    assert not h.any_gpu and h.reason == "held at submission until a v100_s0 GPU fits"
    assert s.reaim(5.0) == []  # it has its shard request: no admin hold needed
    s.job_ended(11, 8.0)  # GPU 1 frees up, but it is of another type
    s.apply_snapshot(running[:1] + [old], [], 9.0)
    assert s.reaim(9.0) == []
    s.job_ended(10, 8.5)
    s.apply_snapshot([old], [], 12.0)
    [aim] = s.reaim(12.0)
    assert (aim.node, aim.gres) == ("n1", "") and Placement.from_tag(aim.admin_comment).gpu == 0  # type: ignore[union-attr]


def test_a_held_job_asking_for_a_gpu_model_is_released_onto_that_model_only() -> None:
    layout = (NodeGpus("n1", 1, "v100", 32.0, (0,), 4), NodeGpus("n2", 1, "a100", 40.0, (0,), 4))
    s = AgentState(
        Config(gpus=layout, placement=PlacementConfig(explore_rate=0.0, unplaced="hold")), SCORES
    )
    s.apply_snapshot([], [SlurmNode("n1", "IDLE"), SlurmNode("n2", "IDLE")], 0.0)
    a = s.place_request(dict(_req("slow"), gpu_type="v100"), 1.0)
    c = s.place_request(dict(_req("slow"), gpu_type="v100"), 1.2)
    assert (
        a["node"] == "n1" and c["action"] == "hold" and Placement.from_tag(c["tag"]).model == "v100"
    )  # type: ignore[union-attr]
    run_a = SlurmJob(
        10,
        "job",
        "alice",
        1000,
        "RUNNING",
        nodes="n1",
        gres=(GresAlloc("shard", "v100_s0", 1, (0,)),),
        admin_comment=a["tag"],
    )
    held = SlurmJob(
        12,
        "job",
        "alice",
        1000,
        "PENDING",
        admin_comment=c["tag"],
        submit_time=1.2,
        state_reason="JobHeldAdmin",
    )
    s.apply_snapshot([run_a, held], [], 5.0)
    assert s.held[12].model == "v100" and s.held[12].locked
    assert s.reaim(5.0) == []  # the idle a100 is not for it, and it is locked already
    s.job_ended(10, 8.0)
    s.apply_snapshot([held], [], 9.0)
    [aim] = s.reaim(9.0)
    assert (aim.node, aim.gres) == ("n1", "gres:shard:v100_s0:1")


def test_without_unplaced_hold_such_a_job_keeps_its_own_gpu() -> None:
    s = _state()
    for t in (1.0, 1.1):
        s.place_request(_req("slow"), t)
    assert s.place_request(_req("slow"), 1.2)["action"] == "exclusive"


def test_unplaced_auto_holds_only_when_every_gpu_is_shared() -> None:
    all_shared = (NodeGpus("n1", 2, "v100", 32.0, (0, 1), 4),)
    assert agent_held.hold_unplaced(Config(gpus=all_shared))
    assert not agent_held.hold_unplaced(Config(gpus=LAYOUT))  # GPUs 2 and 3 are not shared
    assert not agent_held.hold_unplaced(
        Config(gpus=all_shared, placement=PlacementConfig(unplaced="own-gpu"))
    )
    assert agent_held.hold_unplaced(Config(gpus=LAYOUT, placement=PlacementConfig(unplaced="hold")))


def test_held_jobs_are_found_in_slurm_and_released_by_hand_without_their_held_mark() -> None:
    tag = "slurm-colo[v=1 tok=t cls=a mode=auto held=v100_s1]"
    jobs = [
        SlurmJob(7, "j", "alice", 1000, "PENDING", admin_comment=tag),
        SlurmJob(
            5,
            "j",
            "alice",
            1000,
            "PENDING",
            admin_comment=tag.replace("s1", "s0").replace(" held", " undone=1 held"),
        ),
        SlurmJob(6, "j", "alice", 1000, "RUNNING", admin_comment=tag),
        SlurmJob(
            8, "j", "alice", 1000, "PENDING", admin_comment="slurm-colo[v=1 tok=u cls=a mode=auto]"
        ),
    ]
    jobs += [
        SlurmJob(
            9,
            "j",
            "bob",
            1001,
            "PENDING",
            admin_comment="slurm-colo[v=1 tok=w cls=a mode=auto held=*]",
        ),
        SlurmJob(
            4,
            "j",
            "bob",
            1001,
            "PENDING",
            admin_comment="slurm-colo[v=1 tok=x cls=a mode=auto held=* model=a100]",
        ),
    ]
    found = agent_held.held_in_slurm(jobs)
    assert [(h.job.job_id, h.gres_type, h.model) for h in found] == [
        (4, "*", "a100"),
        (5, "v100_s0", ""),
        (7, "v100_s1", ""),
        (9, "*", ""),
    ]
    m, s0, s1, anyg = found
    # only the requeued one has the wait of a requeue cleared when released by hand
    assert [h.undone for h in found] == [False, True, False, False]
    assert [h.waits_for() for h in found] == [
        "a shared a100 GPU",
        "a v100_s0 GPU",
        "a v100_s1 GPU",
        "a shared GPU",
    ]
    assert s1.unheld_tag() == "slurm-colo[v=1 tok=t cls=a mode=auto]"
    assert anyg.unheld_tag() == "slurm-colo[v=1 tok=w cls=a mode=auto]"
    assert Placement.from_tag(s1.unheld_tag()).held is None  # type: ignore[union-attr]
    # released by hand: a requeued job keeps its shard request; one held without a request
    # gets untargeted sharing, or a whole GPU of the model it asked for
    assert s1.release_gres() == ""
    assert anyg.release_gres() == "gres:shard:1" and m.release_gres() == "gres:gpu:a100:1"


def test_measurements_that_cannot_be_saved_stay_in_memory_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0))
    agent = Agent(cfg, NoSlurm(), FakeControl(), learned_file=tmp_path / "gone" / "learned.json")
    s, _ = _pair()
    agent.state = s
    reply = parse_reply("PROBE", agent.handle(format_request("PROBE", _report(3.0, 6.0)), 0))
    assert reply["verdict"] == "undo"  # answered all the same
    assert "cannot save probe measurements" in caplog.text
    assert s.scores.pair("fast", "slow").n_a == pytest.approx(0.3)


@pytest.mark.parametrize("pinned", [True, False])
def test_a_requeued_job_pinned_with_w_is_aimed_only_at_its_own_nodes(pinned: bool) -> None:
    """Two nodes with the same shared GPU type: the newcomer undone on n1 would fit n2's idle
    GPU at once, unless its user pinned it to n1 (``-w n1``: Slurm's required_nodes)."""
    two = (NodeGpus("n1", 4, "v100", 32.0, (0, 1), 4), NodeGpus("n2", 4, "v100", 32.0, (0, 1), 4))
    s = AgentState(Config(gpus=two, placement=PlacementConfig(explore_rate=0.0)), SCORES)
    nodes = [SlurmNode("n1", "IDLE"), SlurmNode("n2", "IDLE")]
    s.apply_snapshot([], nodes, 0.0)
    pin = {"req_nodes": "n1"} if pinned else {}
    a = s.place_request({**_req("slow"), **pin}, 1.0)
    b = s.place_request({**_req("fast"), **pin}, 2.0)
    assert a["gres"] == b["gres"] == "gres:shard:v100_s0:1"
    jobs = [_running(10, a["tag"]), _running(11, b["tag"])]
    s.apply_snapshot(jobs, nodes, 3.0)
    s.job_started(10, None, 3.0, "n1", [0])
    s.job_started(11, None, 4.0, "n1", [0])
    _, [undo] = s.probe(ProbeReport.from_wire(_report(3.0, 6.0)), 600.0)
    held = replace(
        jobs[1],
        state="PENDING",
        gres=(),
        nodes="",
        admin_comment=undo.admin_comment,
        required_nodes="n1" if pinned else "",
    )
    s.apply_snapshot([jobs[0], held], nodes, 620.0)
    aims = s.reaim(620.0)
    if not pinned:  # n2's GPU 0 is of its type and idle: it goes there now
        assert [(x.kind, x.node) for x in aims] == [("aim", "n2")]
        return
    assert aims == [] and 11 in s.held  # n1's GPU 0 still has its harmful partner
    s.job_ended(10, 650.0)
    s.apply_snapshot([held], nodes, 700.0)
    [aim] = s.reaim(700.0)
    assert aim.kind == "aim" and aim.node == "n1" and aim.job_id == 11


def test_where_slurm_changes_a_pending_jobs_gres_an_undone_job_takes_any_gpu_of_its_model() -> None:
    """Slurm 23.11+: the newcomer undone on GPU 0 (v100_s0) need not wait for that GPU: it is
    aimed at once at the idle GPU 1 (v100_s1) with its shard request set anew; an agent
    restarted meanwhile finds it so in its tag."""
    s, jobs = _pair()
    s.holds.retype_after_undo = True
    _, [a] = s.probe(ProbeReport.from_wire(_report(3.0, 6.0)), 600.0)
    tag = Placement.from_tag(a.admin_comment)
    assert tag is not None and tag.held == "*" and tag.model == "v100" and tag.undone
    assert s.status(601.0)["held"][0]["gres_type"] == "*"
    held = replace(jobs[1], state="PENDING", gres=(), admin_comment=a.admin_comment)
    s.apply_snapshot([jobs[0], held], [], 600.5)
    # not within REQUEUE_SETTLE_S of the requeue: Slurm may still refuse its new run
    assert s.reaim(600.5) == [] and 11 in s.held
    s.apply_snapshot([jobs[0], held], [], 620.0)
    [aim] = s.reaim(620.0)  # GPU 0 still runs its harmful partner: GPU 1, at once
    assert aim.kind == "aim" and aim.job_id == 11 and aim.node == "n1"
    assert aim.gres == "gres:shard:v100_s1:1" and aim.model == "v100"
    t2 = Placement.from_tag(aim.admin_comment)
    assert t2 is not None and t2.undone and t2.held is None and t2.gpu == 1
    restarted = _state()
    restarted.apply_snapshot([jobs[0], held], [], 620.0)
    h = restarted.holds.jobs[11]
    assert h.any_gpu and h.model == "v100" and h.undone


def test_which_slurm_versions_change_a_pending_jobs_gres() -> None:
    from slurm_colo.slurm.version import can_change_pending_gres

    assert not can_change_pending_gres((22, 5)) and not can_change_pending_gres(None)
    assert can_change_pending_gres((24, 11)) and can_change_pending_gres((26, 5))


@pytest.mark.parametrize(
    "refusal",
    [
        "scontrol hold 12 failed: Invalid user id for job 12",  # another user's job
        "scontrol hold 12 failed: Access/permission denied for job 12",
    ],
)
def test_while_slurm_refuses_the_agent_the_right_no_job_is_held(
    refusal: str, caplog: pytest.LogCaptureFixture
) -> None:
    s = _state(unplaced="hold")
    a = s.place_request(_req("slow"), 1.0)
    b = s.place_request(_req("slow"), 1.1)
    c = s.place_request(_req("slow"), 1.2)
    assert c["action"] == "hold"
    # Slurm refuses the administrator's hold for the right: a held job could never be
    # released, so the next such job keeps its own-GPU request instead
    lock = agent_held.Action("admin_hold", 12)
    with caplog.at_level("ERROR", logger="slurm_colo.agent"):
        s.failed(lock, 2.0, refusal)
        s.failed(agent_held.Action("aim", 13), 2.1, made=False)  # skipped: not logged
    assert caplog.text.count("Slurm refuses the agent the right to change jobs") == 1
    assert "job 13" not in caplog.text
    d = s.place_request(_req("slow"), 3.0)
    assert d["action"] == "exclusive" and "gres" not in d
    assert d["comment"].endswith("; not held: Slurm refuses the agent the right to release it")
    assert s.status(3.0)["slurm_changes"]["refused"] == refusal
    assert s.rights.holding_back(3.0) and s.reaim(3.0) == []  # not even worked out
    # once a change goes through again, jobs are held as before
    assert s.rights.granted()
    assert s.place_request(_req("slow"), 4.0)["action"] == "hold"
    assert (a["action"], b["action"]) == ("share", "share")


# ---- job arrays held for the agent (agent/arrays.py) ------------------------------------

FAST_PAIRS = table_from_pairs(
    [("fast", "fast", 0.9, 0.9)], classes={"fast": ClassInfo(memory_gib=4.0)}, created=""
)


def _held_array(tag: str, tasks: str, reason: str = "JobHeldUser") -> SlurmJob:
    return SlurmJob(
        40,
        "sweep",
        "alice",
        1000,
        "PENDING",
        admin_comment=tag,
        submit_time=1.0,
        state_reason=reason,
        array_tasks=tasks,
    )


def test_with_unplaced_hold_an_array_is_held_and_its_tasks_released_one_by_one() -> None:
    s = _state(unplaced="hold")
    s.scores = FAST_PAIRS  # fast+fast gains: up to 4 of them on a GPU (its 4 shards)
    reply = s.place_request({**_req("fast"), "array": "1"}, 1.0)
    assert (reply["action"], reply["array"], reply["gres"]) == ("hold", "1", "none")
    tag = Placement.from_tag(reply["tag"])
    assert tag is not None and tag.held == "*" and not tag.shared and tag.cls == "fast"
    assert s.ledger.decisions["hold:job array"] == 1 and s.ledger.placements == {}
    s.apply_snapshot([_held_array(reply["tag"], "0-9")], [], 2.0)
    assert sorted(s.held) == [40]
    acts = s.reaim(2.0)
    # the array's hold becomes the administrator's first, then tasks go while GPUs take them
    assert (acts[0].kind, acts[0].job_id, acts[0].task) == ("admin_hold", 40, None)
    aims = acts[1:]
    assert [(a.kind, a.target) for a in aims] == [("aim", f"40_{t}") for t in range(8)]
    assert (
        sorted(a.gres for a in aims) == ["gres:shard:v100_s0:1"] * 4 + ["gres:shard:v100_s1:1"] * 4
    )
    tokens = [Placement.from_tag(a.admin_comment).token for a in aims]  # type: ignore[union-attr]
    assert tokens == [f"{tag.token}-{t}" for t in range(8)]
    assert all("held=" not in a.admin_comment for a in aims)
    assert aims[0].comment.startswith("colo: released onto GPU ")
    # the array stays held for tasks 8 and 9; none released twice before Slurm splits them
    assert sorted(s.held) == [40] and s.reaim(2.5) == []
    # a refused release forgets that task's placement; the array stays held
    s.failed(aims[7], 2.6)
    assert f"{tag.token}-7" not in s.ledger.placements and sorted(s.held) == [40]
    ex = s.explain(0, aims[0].admin_comment)
    assert ex["known"] and ex["reason"].startswith("held at submission; then")


def test_a_held_arrays_last_task_released_ends_its_hold_and_is_never_released_whole() -> None:
    s = _state(unplaced="hold")
    s.scores = FAST_PAIRS
    reply = s.place_request({**_req("fast"), "array": "1"}, 1.0)
    s.apply_snapshot([_held_array(reply["tag"], "3", "JobHeldAdmin")], [], 2.0)
    [aim] = s.reaim(2.0)
    assert aim.target == "40_3" and s.held == {}
    # Slurm shows the record as the task it now is: pending with its new tag, no array
    task = replace(_held_array(aim.admin_comment, ""), state_reason="Resources")
    s.apply_snapshot([task], [], 3.0)
    assert s.reaim(3.0) == [] and s.held == {}
    assert s.ledger.by_job[40] == Placement.from_tag(aim.admin_comment).token  # type: ignore[union-attr]


def test_a_held_array_seen_as_its_last_task_is_not_released_as_one_job() -> None:
    """The look after the last task's release may still show the array's held tag."""
    s = _state(unplaced="hold")
    s.scores = FAST_PAIRS
    reply = s.place_request({**_req("fast"), "array": "1"}, 1.0)
    s.apply_snapshot([_held_array(reply["tag"], "3-4", "JobHeldAdmin")], [], 2.0)
    assert [a.target for a in s.reaim(2.0)] == ["40_3", "40_4"]
    # a look taken before Slurm applied the updates: the array still held, its tasks listed
    s.apply_snapshot([_held_array(reply["tag"], "4", "JobHeldAdmin")], [], 2.5)
    assert s.reaim(2.5) == []
    # then the record is the last task, its tag still the held one
    s.apply_snapshot([_held_array(reply["tag"], "", "JobHeldAdmin")], [], 3.0)
    assert s.reaim(3.0) == [] and s.held == {}


def test_an_arrays_record_left_with_its_last_task_is_released_by_that_tasks_name() -> None:
    """A throttled array's last two tasks released at two looks: the record then waits as
    task 7 alone, no task listed, its tag the array's held one. Slurm refuses a node change
    to ``JobId=40`` (an array); ``40_7`` is that task."""
    s = _state(unplaced="hold")
    s.scores = FAST_PAIRS
    reply = s.place_request({**_req("fast"), "array": "1"}, 1.0)
    record = replace(_held_array(reply["tag"], "", "JobHeldAdmin"), array_task=7)
    s.apply_snapshot([record], [], 2.0)
    [aim] = s.reaim(2.0)
    assert (aim.kind, aim.target) == ("aim", "40_7") and aim.node == "n1", aim


def test_a_probe_undoing_an_arrays_record_requeues_that_task_only() -> None:
    """``scontrol requeuehold 11`` of an array's record requeues every task of the array,
    those that ended too; ``11_4`` the one it runs as."""
    s, jobs = _pair()
    s.apply_snapshot([jobs[0], replace(jobs[1], array_task=4)], [], 3.5)
    reply, actions = s.probe(ProbeReport.from_wire(_report(3.0, 6.0)), 600.0)
    assert reply["verdict"] == "undo"
    assert [(a.kind, a.target) for a in actions] == [("requeue_hold", "11_4")]


def test_an_array_held_by_hand_release_gets_a_whole_gpu_not_untargeted_shards() -> None:
    tag = Placement("t", "fast", held="*").to_tag()
    (one,) = agent_held.held_in_slurm([_held_array(tag, "0-9")])
    assert one.release_gres() == "gres:gpu:1"
    (single,) = agent_held.held_in_slurm([_held_array(tag, "")])
    assert single.release_gres() == "gres:shard:1"


def test_each_task_of_a_held_array_released_counts_as_a_job_of_its_class() -> None:
    s = _state(unplaced="hold")
    s.scores = FAST_PAIRS
    reply = s.place_request({**_req("fast"), "array": "1"}, 1.0)
    s.apply_snapshot([_held_array(reply["tag"], "0-2", "JobHeldAdmin")], [], 2.0)
    placed: list[str] = []
    s.live.placed = placed.append  # type: ignore[method-assign]
    assert len(s.reaim(2.0)) == 3 and placed == ["fast"] * 3


def _split_task(job_id: int, a: agent_held.Action, state: str) -> SlurmJob:
    """A task of array 40 after its release, as Slurm shows it: a job of its own."""
    return SlurmJob(
        job_id,
        "sweep",
        "alice",
        1000,
        state,
        nodes="n1" if state == "RUNNING" else "",
        gres=(GresAlloc("gpu", "v100", 1, (job_id % 2 + 2,)),) if state == "RUNNING" else (),
        tres_per_node=a.gres,
        admin_comment=a.admin_comment,
        comment=a.comment,
        submit_time=1.0,
    )


def test_where_jobs_keep_their_own_gpu_a_held_arrays_task_none_takes_gets_one() -> None:
    """Slurm 22.05 at a site with whole GPUs: the array is held all the same; a task no
    shared GPU takes is released with its own GPU request, a few at a time."""
    from slurm_colo.agent.arrays import OWN_GPU_TASK_NOTE, OWN_GPU_WAITING

    s = _state()  # unplaced = "auto" on a site with whole GPUs: jobs keep their own GPU
    s.scores = FAST_PAIRS
    reply = s.place_request({**_req("fast"), "array": "1", "gpu_type": "v100"}, 1.0)
    assert (reply["action"], reply["array"], reply["gres"]) == ("hold", "1", "none")
    assert reply["user_msg"].endswith(", else with its own GPU request")
    assert s.ledger.decisions["hold:job array"] == 1
    record = _held_array(reply["tag"], "0-19", "JobHeldAdmin")
    s.apply_snapshot([record], [], 2.0)
    aims = s.reaim(2.0)
    shared, own = aims[:8], aims[8:]  # 4 shards on each shared GPU, then own GPUs
    assert [a.task for a in shared] == list(range(8)) and all(a.node == "n1" for a in shared)
    assert [a.task for a in own] == list(range(8, 8 + OWN_GPU_WAITING))
    tag = Placement.from_tag(reply["tag"])
    assert tag is not None
    for a in own:
        assert (a.kind, a.target, a.node, a.gres) == ("aim", f"40_{a.task}", "", "gres:gpu:v100:1")
        assert a.comment == OWN_GPU_TASK_NOTE
        t = Placement.from_tag(a.admin_comment)
        assert t is not None and t.held is None and t.token == tag.token and t.cls == "fast"
    # not released twice before Slurm shows them split from the array
    assert s.reaim(2.5) == [] and sorted(s.held) == [40]
    # Slurm's next answer: two of them started, two still wait: two more go
    split = [_split_task(100 + i, a, "RUNNING" if i < 2 else "PENDING") for i, a in enumerate(own)]
    record = replace(record, array_tasks="12-19")
    s.apply_snapshot([record, *split], [], 3.0)
    more = s.reaim(3.0)
    assert [(a.task, a.gres) for a in more] == [(12, "gres:gpu:v100:1"), (13, "gres:gpu:v100:1")]
    # a refused release: that task goes again at the next look
    s.failed(more[1], 3.5)
    assert [a.task for a in s.reaim(4.0)] == [13]
    ex = s.explain(0, own[0].admin_comment)
    assert "with its own GPU request where none takes it" in ex["reason"], ex


def _array_beside_slow_jobs(s: AgentState, at: float = 1.0) -> tuple[dict, list[SlurmJob]]:
    """The hook's answer for a ``--colocate`` array of class fast (scores ``FAST_PAIRS``),
    and two slow jobs running on the two shared GPUs, next to which no fast task is put."""
    s.scores = FAST_PAIRS
    reply = s.place_request({**_req("fast"), "array": "1"}, at)
    busy = [_running(10 + i, Placement(f"t{i}", "slow").to_tag(), i % 2) for i in range(2)]
    return reply, busy


def test_where_jobs_keep_their_own_gpu_an_arrays_last_task_none_takes_ends_its_hold() -> None:
    s = _state()
    reply, busy = _array_beside_slow_jobs(s)
    s.apply_snapshot([*busy, _held_array(reply["tag"], "5", "JobHeldAdmin")], [], 2.0)
    [aim] = s.reaim(2.0)  # slow runs on both shared GPUs: fast is not put next to it
    assert (aim.target, aim.gres, aim.node) == ("40_5", "gres:gpu:1", "") and s.held == {}


def test_an_arrays_record_left_as_its_last_task_keeps_the_arrays_own_gpu_way() -> None:
    """Task 8 released at an earlier look and task 9 left: 22.05 and 24.11 show the record
    as task 9, no task listed. It is still the held array's (a task none takes goes with its
    own GPU request), not a held job of its own that waits for a shared GPU only; once
    released it is not released again by a late look that still shows it held."""
    s = _state()
    reply, busy = _array_beside_slow_jobs(s)
    array = _held_array(reply["tag"], "8-9%1", "JobHeldAdmin")
    s.apply_snapshot([*busy, array], [], 2.0)
    [first] = s.reaim(2.0)
    assert (first.target, first.gres) == ("40_8", "gres:gpu:1")
    left = replace(array, array_tasks="", array_task=9)
    s.apply_snapshot([*busy, left, _split_task(41, first, "RUNNING")], [], 3.0)
    [aim] = s.reaim(3.0)
    assert (aim.kind, aim.target, aim.gres, aim.node) == ("aim", "40_9", "gres:gpu:1", "")
    assert aim.comment == OWN_GPU_TASK_NOTE and s.held == {}
    s.apply_snapshot([*busy, left], [], 3.5)  # a look taken before Slurm applied it
    assert s.reaim(3.5) == []
    released = replace(left, admin_comment=aim.admin_comment, state_reason="Resources")
    s.apply_snapshot([*busy, released], [], 4.0)
    assert s.reaim(4.0) == [] and s.held == {}


def test_after_a_restart_an_arrays_record_left_as_its_last_task_is_the_arrays() -> None:
    s = _state()
    reply, busy = _array_beside_slow_jobs(s)
    left = replace(_held_array(reply["tag"], "", "JobHeldAdmin"), array_task=5)
    s.apply_snapshot([*busy, left], [], 2.0)
    [aim] = s.reaim(2.0)
    assert (aim.target, aim.gres, aim.node) == ("40_5", "gres:gpu:1", "") and s.held == {}


def test_one_look_releases_at_most_32_tasks_of_all_held_arrays_together() -> None:
    from slurm_colo.agent.arrays import MAX_TASKS_PER_LOOK

    wide = (NodeGpus("n1", 16, "v100", 32.0, tuple(range(16)), 4),)  # 64 shards
    s = AgentState(Config(gpus=wide, placement=PlacementConfig(explore_rate=0.0)), FAST_PAIRS)
    s.apply_snapshot([], [SlurmNode("n1", "IDLE")], 0.0)
    first = s.place_request({**_req("fast"), "array": "1"}, 1.0)
    second = s.place_request({**_req("fast"), "array": "1"}, 1.1)
    arrays = [
        _held_array(first["tag"], "0-29", "JobHeldAdmin"),
        replace(_held_array(second["tag"], "0-29", "JobHeldAdmin"), job_id=41, submit_time=2.0),
    ]
    s.apply_snapshot(arrays, [SlurmNode("n1", "IDLE")], 3.0)
    aims = s.reaim(3.0)
    assert len(aims) == MAX_TASKS_PER_LOOK
    assert [a.target for a in aims] == [f"40_{t}" for t in range(30)] + ["41_0", "41_1"]
    assert all(a.node == "n1" for a in aims)  # every GPU is shared: all onto shards


@pytest.mark.parametrize("unplaced", ["auto", "hold"])
def test_a_held_array_holds_up_newer_jobs_only_where_its_tasks_wait_for_shared_gpus(
    unplaced: str,
) -> None:
    """Past ``reserve_after_h`` the job held longest makes newer ones wait their turn
    (``bypass_h``) and has a GPU drained for it; a held array whose tasks get a GPU of their
    own when none of the shared ones takes them waits for no shared GPU, so it does neither."""
    s = _state(unplaced=unplaced, reserve_after_h=1.0, bypass_h=0.5)
    placed = [s.place_request(_req("fast"), 0.1 * i) for i in (1, 2)]
    assert [p["gres"] for p in placed] == ["gres:shard:v100_s0:1", "gres:shard:v100_s1:1"]
    fast = [_running(10 + i, p["tag"], i) for i, p in enumerate(placed)]
    s.apply_snapshot(fast, [SlurmNode("n1", "MIXED")], 0.5)
    reply = s.place_request({**_req("fast"), "array": "1"}, 1.0)
    assert reply["action"] == "hold"
    array = _held_array(reply["tag"], "0-99", "JobHeldAdmin")
    s.apply_snapshot([*fast, array], [SlurmNode("n1", "MIXED")], 2.0)
    aims = s.reaim(2.0)  # fast is not put next to fast: no task goes to a shared GPU
    assert all(not a.node for a in aims)
    assert len(aims) == (4 if unplaced == "auto" else 0)
    later = 2 * 3600.0
    s.apply_snapshot([*fast, array], [SlurmNode("n1", "MIXED")], later)
    d = s.place_request(_req("slow"), later)  # slow would gain next to fast
    if unplaced == "auto":
        assert d["action"] == "share", d
        assert s.holds.waits() == []
    else:
        assert "waits its turn behind a job held for 2.0 h" in d["comment"], d
        assert [w.job_id for w in s.holds.waits()] == [40]


@pytest.mark.parametrize("newer_slurm", [False, True])
def test_a_task_whose_release_slurm_refused_after_its_split_is_found_again_as_held(
    newer_slurm: bool,
) -> None:
    """Its update split it from the array with a shared GPU's shard request, its release
    failed: the comments the action carries make it a held job of its own, with its own
    placement token, which the agent adopts at its next look and releases. Slurm 22.05
    cannot change its shard request, so there it waits for a GPU of that type (as a
    requeued job); 23.11 and later give it the shard request of the GPU that takes it."""
    s = _state(unplaced="hold")
    s.holds.retype_after_undo = newer_slurm
    s.scores = FAST_PAIRS
    reply = s.place_request({**_req("fast"), "array": "1"}, 1.0)
    array = _held_array(reply["tag"], "0-1", "JobHeldAdmin")
    s.apply_snapshot([array], [], 2.0)
    first, second = s.reaim(2.0)
    assert first.gres == "gres:shard:v100_s0:1"
    token = Placement.from_tag(reply["tag"]).token  # type: ignore[union-attr]
    again = Placement.from_tag(first.restore[0])
    assert again is not None and again.held == "*" and again.token == f"{token}-0"
    assert again.cls == "fast" and first.restore[1] == array.comment
    s.failed(first, 2.5)  # Slurm refused the release of task 0 after splitting it
    split = replace(
        array,
        job_id=77,
        admin_comment=first.restore[0],
        tres_per_node=first.gres,
        array_tasks="",
    )
    s.apply_snapshot([replace(array, array_tasks="1"), split], [], 3.0)
    assert 77 in s.held and s.held[77].token == f"{token}-0"
    assert s.held[77].request.gres_type == ("" if newer_slurm else "v100_s0")
    aims = [a for a in s.reaim(3.0) if a.kind == "aim"]
    assert [(a.target, a.node) for a in aims] == [("77", "n1")]
    t = Placement.from_tag(aims[0].admin_comment)
    assert t is not None and t.token == f"{token}-0" and t.held is None and t.gpu == 0
    assert aims[0].gres == ("gres:shard:v100_s0:1" if newer_slurm else "")  # 22.05: kept


@pytest.mark.parametrize("newer_slurm", [False, True])
def test_a_task_refused_its_release_with_its_own_gpu_request_is_released_with_it_again(
    newer_slurm: bool,
) -> None:
    """A held array's task no shared GPU took was split from the array by the update that
    gave it its own GPU request, and Slurm refused its release: adopted from its restored
    tag, it is released with that request, kept as it is (not held for a shared GPU only,
    as a single held job is). On 22.05, which cannot change it, at once; from 23.11 while
    no shared GPU takes it, and onto a shared GPU once one does (there with
    ``replan = "off"``: with "auto" the array keeps its own-GPU request and is moved)."""
    s = _state(replan="off")
    s.holds.retype_after_undo = newer_slurm
    reply, busy = _array_beside_slow_jobs(s)
    array = _held_array(reply["tag"], "0-1", "JobHeldAdmin")
    s.apply_snapshot([*busy, array], [], 2.0)
    first = s.reaim(2.0)[0]  # slow on both shared GPUs: task 0 gets its own GPU request
    assert (first.target, first.gres, first.node) == ("40_0", "gres:gpu:1", "")
    s.failed(first, 2.5)
    split = replace(
        array,
        job_id=77,
        admin_comment=first.restore[0],
        comment=first.restore[1],
        tres_per_node=first.gres,
        array_tasks="",
    )
    s.apply_snapshot([*busy, replace(array, array_tasks="1"), split], [], 3.0)
    assert s.held[77].own_gpu == "gres:gpu:1"
    # explain: the task has no placement of its own; its array's answer says why
    ex = s.explain(77, split.admin_comment)
    assert "each with its own GPU request where none takes it" in ex["reason"], ex
    [again] = [a for a in s.reaim(3.0) if a.target == "77"]
    assert (again.kind, again.node, again.gres) == ("aim", "", "")  # its request kept
    assert again.comment == OWN_GPU_TASK_NOTE
    assert again.restore == (split.admin_comment, split.comment)
    t = Placement.from_tag(again.admin_comment)
    assert t is not None and t.held is None and t.cls == "fast"
    assert 77 not in s.held
    # refused once more: the restored tag makes it held again at the next look
    s.failed(again, 3.5)
    s.apply_snapshot([replace(array, array_tasks="1"), split], [], 4.0)  # the GPUs are free
    [later] = [a for a in s.reaim(4.0) if a.target == "77"]
    assert later.node == ("n1" if newer_slurm else ""), later


@pytest.mark.parametrize(
    ("tres", "gres"),
    [
        ("gres:gpu:1", ""),
        ("gres/gpu:v100:1", ""),
        ("gres:shard:v100_s0:1", ""),
        ("", "gres:shard:1"),
    ],
)
def test_held_release_by_hand_keeps_the_gpu_request_a_held_task_already_has(
    tres: str, gres: str
) -> None:
    job = SlurmJob(
        77,
        "sweep",
        "alice",
        1000,
        "PENDING",
        admin_comment=Placement("tok-0", "fast", held="*").to_tag(),
        tres_per_node=tres,
    )
    [h] = agent_held.held_in_slurm([job])
    assert h.release_gres() == gres


def test_a_task_stranded_held_with_its_release_tag_is_released_again() -> None:
    """Slurm refused a task's release after its split and refused setting its comments back
    too: the task waits, held, with the tag the release gave it. The next look that finds
    it so releases it again as it is (per look, at most as many jobs with one tag as
    releases with that tag were refused), and only while
    that refusal is recent (no later hold of such a job by an administrator is undone)."""
    from slurm_colo.agent.held_arrays import REFUSED_KEEP_S

    s = _state()
    reply, busy = _array_beside_slow_jobs(s)
    array = _held_array(reply["tag"], "0-1", "JobHeldAdmin")
    s.apply_snapshot([*busy, array], [], 2.0)
    first, second = s.reaim(2.0)  # tasks 0 and 1 with their own GPU request: the last
    assert s.held == {}  # the array is no longer held: its last task is released
    s.failed(first, 2.5)  # and its restoring update failed too: the tag is the release's
    stranded = replace(
        array,
        job_id=77,
        admin_comment=first.admin_comment,
        comment=first.comment,
        tres_per_node=first.gres,
        array_tasks="",
    )
    waiting = replace(stranded, job_id=78, state_reason="Resources")  # task 1, released
    s.apply_snapshot([*busy, stranded, waiting], [], 3.0)
    assert 77 not in s.held  # its tag does not say it is held
    again = [a for a in s.reaim(3.0) if a.job_id == 77]
    assert [(a.kind, a.node, a.gres, a.admin_comment, a.comment) for a in again] == [
        ("aim", "", "", first.admin_comment, first.comment)
    ]
    assert not [a for a in s.reaim(3.0) if a.job_id == 78]  # not held: left to Slurm
    # held by an administrator long after: left alone
    later = 3.0 + REFUSED_KEEP_S
    s.apply_snapshot([stranded], [], later)
    assert not [a for a in s.reaim(later) if a.job_id == 77]


def test_the_agent_looks_for_stranded_tasks_when_no_job_is_held(tmp_path: Path) -> None:
    """The look at Slurm re-aims held jobs only where there are any: a task stranded held
    after the array's last release has none, and is released all the same."""
    t0 = time.time()
    s = _state()
    reply, busy = _array_beside_slow_jobs(s, t0)
    array = _held_array(reply["tag"], "0", "JobHeldAdmin")
    s.apply_snapshot([*busy, array], [], t0)
    [first] = s.reaim(t0)
    s.failed(first, t0)
    assert s.held == {}
    stranded = replace(
        array, job_id=77, admin_comment=first.admin_comment, comment=first.comment, array_tasks=""
    )

    class Slurm(NoSlurm):
        def jobs(self) -> list[SlurmJob]:
            return [*busy, stranded]

        def nodes(self) -> list[SlurmNode]:
            return [SlurmNode("n1", "MIXED")]

    control = FakeControl()
    agent = Agent(s.cfg, Slurm(), control, learned_file=tmp_path / "learned.json")
    agent.state = s
    agent.refresh()
    assert ("aim", 77, "") in control.calls, control.calls


@pytest.mark.parametrize("unplaced", ["hold", "auto"])
def test_a_throttled_array_has_no_more_tasks_released_than_may_run(unplaced: str) -> None:
    """``--array=0-7%2``: Slurm runs at most two tasks at once, so the agent releases at
    most two that have not ended (the others would hold places on shared GPUs, or wait
    with their own GPU request, without being able to start)."""
    s = _state(unplaced=unplaced)
    s.scores = FAST_PAIRS
    reply = s.place_request({**_req("fast"), "array": "1"}, 1.0)
    array = _held_array(reply["tag"], "0-7%2", "JobHeldAdmin")
    s.apply_snapshot([array], [], 2.0)
    first = s.reaim(2.0)
    assert [a.task for a in first] == [0, 1]
    assert s.reaim(2.5) == []  # released, not yet split from the array in Slurm's answer
    split = [_split_task(100 + i, a, "RUNNING") for i, a in enumerate(first)]
    s.apply_snapshot([replace(array, array_tasks="2-7%2"), *split], [], 3.0)
    assert s.reaim(3.0) == []  # both run
    s.apply_snapshot([replace(array, array_tasks="2-7%2"), split[1]], [], 4.0)
    assert [a.task for a in s.reaim(4.0)] == [2]  # one ended: one more


def test_an_adopted_own_gpu_task_counts_among_its_arrays_waiting_tasks() -> None:
    from slurm_colo.agent.held_arrays import waiting_with_own_gpu

    def task(job_id: int, token: str) -> SlurmJob:
        tag = Placement(token, "fast").to_tag()
        return SlurmJob(
            job_id, "sweep", "alice", 1000, "PENDING", admin_comment=tag, comment=OWN_GPU_TASK_NOTE
        )

    assert waiting_with_own_gpu([task(1, "pabc"), task(2, "pabc-7")]) == {"pabc": 2}
