"""Jobs' ends (and starts of jobs the agent did not place) reported by the node hooks leave
the agent's view behind until something reads it: the ends of a job array build it once,
not once per job, and every reader (a placement, a probe, STATUS, the agent's view thread)
finds it built."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from fake_slurm import QuietSlurm

from slurm_colo.agent.server import Agent
from slurm_colo.agent.state import AgentState
from slurm_colo.config import Config, PlacementConfig
from slurm_colo.contracts.enums import Unplaced
from slurm_colo.contracts.protocol import format_request
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.scores import ClassInfo, table_from_pairs
from slurm_colo.slurm.model import GresAlloc, SlurmJob, SlurmNode

LAYOUT = (NodeGpus("n1", 4, "v100", 32.0, (0, 1, 2, 3), 4),)
SCORES = table_from_pairs(
    [("good", "good", 1.0, 1.0), ("bad", "good", 0.2, 0.3), ("bad", "bad", 0.3, 0.3)],
    classes={c: ClassInfo(memory_gib=4.0) for c in ("good", "bad")},
)


def _req(cls: str) -> dict[str, str]:
    return {"user": "alice", "uid": "1000", "name": "job", "mode": "auto", "class": cls}


def _whole(job_id: int, idx: int) -> SlurmJob:
    """A job holding GPU ``idx`` whole (not placed by the agent)."""
    gres = (GresAlloc("gpu", f"v100_s{idx}", 1, (idx,)),)
    return SlurmJob(job_id, "x", "carol", 7, "RUNNING", nodes="n1", gres=gres)


@pytest.fixture
def builds() -> Iterator[list[float]]:
    """The times the view was built (Occupancy.rebuild), by any path."""
    from slurm_colo.agent import occupancy

    made: list[float] = []
    real = occupancy.Occupancy.rebuild

    def counted(self, *a, **k):  # type: ignore[no-untyped-def]
        made.append(time.monotonic())
        return real(self, *a, **k)

    occupancy.Occupancy.rebuild = counted  # type: ignore[method-assign]
    yield made
    occupancy.Occupancy.rebuild = real  # type: ignore[method-assign]


#: a job no GPU takes gets its own GPU (not held: the tests look at the view alone)
PLACEMENT = PlacementConfig(explore_rate=0.0, unplaced=Unplaced.OWN_GPU)


def _full_state() -> AgentState:
    """Every shared GPU held whole by a job Slurm lists (11-14)."""
    s = AgentState(Config(gpus=LAYOUT, placement=PLACEMENT), SCORES)
    s.apply_snapshot([_whole(11 + i, i) for i in range(4)], [SlurmNode("n1", "MIXED")], 0.0)
    return s


def test_the_ends_of_a_job_array_build_the_view_once_before_the_next_placement(
    builds: list[float],
) -> None:
    s = _full_state()
    assert s.place_request(_req("good"), 1.0)["action"] == "exclusive"  # no GPU free
    before = len(builds)
    for job_id in (11, 12, 13):
        s.job_ended(job_id, 1.5)
    assert len(builds) == before  # nothing built yet
    a = s.place_request(_req("good"), 2.0)
    assert len(builds) == before + 1  # built once, for the placement
    assert a["action"] == "share" and a["gres"] == "gres:shard:v100_s0:1", a
    assert s.place_request(_req("bad"), 2.0)["gres"] == "gres:shard:v100_s1:1"
    assert s.place_request(_req("bad"), 2.0)["gres"] == "gres:shard:v100_s2:1"
    assert len(builds) == before + 1  # the placements themselves add to the built view


def test_a_start_the_agent_did_not_place_is_seen_by_the_next_placement(
    builds: list[float],
) -> None:
    s = AgentState(Config(gpus=LAYOUT, placement=PLACEMENT), SCORES)
    s.apply_snapshot([], [SlurmNode("n1", "IDLE")], 0.0)
    before = len(builds)
    for job_id, idx in ((21, 0), (22, 1), (23, 2)):
        assert s.job_started(job_id, None, 1.0, "n1", [idx]) is None
    assert len(builds) == before
    assert s.place_request(_req("bad"), 1.5)["gres"] == "gres:shard:v100_s3:1"
    assert s.place_request(_req("bad"), 1.5)["action"] == "exclusive"
    assert len(builds) == before + 1


def test_every_reader_finds_the_view_built() -> None:
    s = _full_state()
    s.job_ended(11, 1.0)
    st = s.status(1.0)
    assert [g["exclusive_job"] for g in st["gpus"]] == [None, 12, 13, 14]
    assert not s.stale
    free = [g.index for g in s.view.gpus if g.exclusive_job is None and not g.occupants]
    assert free == [0]
    s.job_ended(12, 1.0)
    assert [g.index for g in s.view.gpus if g.exclusive_job is None] == [0, 1]
    s.job_ended(13, 1.0)
    assert s.explain(13)["known"] is False and not s.stale
    s.job_ended(14, 1.0)
    assert s.reservation is None and not s.stale


def test_the_agents_view_thread_builds_it_soon_after_a_jobs_end(
    builds: list[float],
) -> None:
    agent = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    agent.state.scores = SCORES
    agent.state.apply_snapshot([_whole(11, 0)], [SlurmNode("n1", "MIXED")], 0.0)
    t = threading.Thread(target=agent._view_builder, daemon=True)
    t.start()
    try:
        before = len(builds)
        sent = time.monotonic()
        for k in range(20):  # the ends come together: one build after them
            agent.handle(format_request("JOBEND", {"job": 100 + k, "node": "n1"}), peer_uid=0)
        agent.handle(format_request("JOBEND", {"job": 11, "node": "n1"}), peer_uid=0)
        deadline = time.monotonic() + 5
        while agent.state.stale and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not agent.state.stale
        assert len(builds) == before + 1 and builds[-1] >= sent
        assert agent.state.occupancy.view.gpus[0].exclusive_job is None
    finally:
        agent.stop.set()
        t.join(5)
    assert not t.is_alive()


def _placed_pair(s: AgentState) -> tuple[str, str]:
    """Two jobs placed on GPU 0 together; their tags."""
    a = s.place_request(_req("good"), 1.0)
    b = s.place_request(_req("good"), 1.0)
    assert a["gres"] == b["gres"] == "gres:shard:v100_s0:1", (a, b)
    return a["tag"], b["tag"]


def _linked(job_id: int, tag: str) -> SlurmJob:
    return SlurmJob(job_id, "job", "alice", 1000, "PENDING", admin_comment=tag)


def test_placed_jobs_starting_together_name_each_other_without_a_build_each(
    builds: list[float],
) -> None:
    s = AgentState(Config(gpus=LAYOUT, placement=PLACEMENT), SCORES)
    s.apply_snapshot([], [SlurmNode("n1", "IDLE")], 0.0)
    ta, tb = _placed_pair(s)
    # a look at Slurm links both to their jobs, pending
    s.apply_snapshot([_linked(101, ta), _linked(102, tb)], [SlurmNode("n1", "IDLE")], 2.0)
    before = len(builds)
    a = s.job_started(101, None, 3.0, "n1", [0])
    b = s.job_started(102, None, 3.0, "n1", [0])
    assert a is not None and b is not None
    assert a["partners"] == [102] and b["partners"] == [101], (a, b)
    assert len(builds) == before  # the view as it was names the partners
    assert s.view.gpus[0].occupants and not any(o.pending for o in s.view.gpus[0].occupants)
    assert len(builds) == before + 1


def test_jobs_started_before_a_look_linked_them_still_name_each_other(
    builds: list[float],
) -> None:
    # the Prolog's report comes before the agent's next look: the job is linked to its
    # placement by the tag the agent reads from Slurm (JOBSTART's lookup); in the view as
    # last built its partner is still there by its placement's token
    s = AgentState(Config(gpus=LAYOUT, placement=PLACEMENT), SCORES)
    s.apply_snapshot([], [SlurmNode("n1", "IDLE")], 0.0)
    ta, tb = _placed_pair(s)
    before = len(builds)
    a = s.job_started(201, ta, 1.5, "n1", [0])
    b = s.job_started(202, tb, 1.5, "n1", [0])
    assert a is not None and b is not None
    assert a["partners"] == [] and b["partners"] == [201], (a, b)
    assert len(builds) == before
    s.job_ended(201, 2.0)
    c = s.place_request(_req("good"), 2.0)
    assert c["gres"] == "gres:shard:v100_s0:1"
    assert s.job_started(203, c["tag"], 2.5, "n1", [0])["partners"] == [202]  # type: ignore[index]


def test_the_view_read_through_the_occupancy_itself_is_built_first(
    builds: list[float],
) -> None:
    # the held-job and re-plan code read ``state.occupancy``, not the state: the view
    # builds itself when read behind, so no reader has to remember to build it
    s = _full_state()
    s.job_ended(11, 1.0)
    before = len(builds)
    assert [g.exclusive_job for g in s.occupancy.view.gpus] == [None, 12, 13, 14]
    s.job_ended(12, 1.0)
    assert s.occupancy.reservation is None
    assert [g.exclusive_job for g in s.occupancy.view.gpus] == [None, None, 13, 14]
    assert len(builds) == before + 2 and not s.stale


def test_a_refused_replan_after_a_jobs_end_builds_the_view_once(builds: list[float]) -> None:
    from slurm_colo.agent.actions import Action

    s = AgentState(Config(gpus=LAYOUT, placement=PLACEMENT), SCORES)
    s.apply_snapshot([], [SlurmNode("n1", "IDLE")], 0.0)
    ta, _ = _placed_pair(s)
    s.apply_snapshot([_linked(101, ta)], [SlurmNode("n1", "IDLE")], 2.0)
    s.job_ended(999, 1.0)  # some other job's end leaves the view behind
    before = len(builds)
    s.failed(Action("retarget", 101), 3.0, "Job is no longer pending")
    assert len(builds) == before + 1  # its placement forgotten, the view built once
    assert 101 not in s.ledger.by_job
    assert len(s.view.gpus[0].occupants) == 1 and len(builds) == before + 1


def _running(job_id: int, tag: str, state: str = "RUNNING") -> SlurmJob:
    """A job placed on GPU 0 of n1, started at 1.5."""
    gres = (GresAlloc("shard", "v100_s0", 1, (0,)),)
    return replace(_linked(job_id, tag), state=state, nodes="n1", gres=gres, start_time=1.5)


def test_a_look_asked_for_before_a_jobs_end_does_not_bring_its_placement_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the periodic look reads Slurm in a child process: the Epilog's JOBEND may come while
    # it runs, and the snapshot then lists the ended job running
    caplog.set_level(logging.INFO, logger="slurm_colo.agent")
    s = AgentState(Config(gpus=LAYOUT, placement=PLACEMENT), SCORES)
    nodes = [SlurmNode("n1", "MIXED")]
    s.apply_snapshot([], nodes, 0.0)
    ta, tb = _placed_pair(s)
    s.job_started(201, ta, 1.5, "n1", [0])
    s.job_started(202, tb, 1.5, "n1", [0])
    both = [_running(201, ta), _running(202, tb)]
    s.apply_snapshot(both, nodes, 2.0, asked=1.9)
    s.job_ended(201, 3.0)
    s.apply_snapshot(both, nodes, 3.5, asked=2.9)  # asked for before the end
    assert 201 not in s.ledger.by_job
    assert [o.job_id for o in s.view.gpus[0].occupants] == [202]
    # a job completing (the Epilog runs on) is no partner either
    s.apply_snapshot([_running(201, ta, "COMPLETING"), both[1]], nodes, 4.0, asked=3.9)
    assert 201 not in s.ledger.by_job
    c = s.place_request(_req("good"), 4.5)
    assert c["gres"] == "gres:shard:v100_s0:1"
    assert s.job_started(203, c["tag"], 5.0, "n1", [0])["partners"] == [202]  # type: ignore[index]
    assert "placement rebuilt" not in caplog.text
    s.apply_snapshot(both[1:], nodes, 6.0, asked=5.9)  # Slurm has it ended now
    assert s.occupancy.ended == {}


def test_a_reported_end_gives_way_to_a_later_run_of_the_job() -> None:
    s = _full_state()
    nodes = [SlurmNode("n1", "MIXED")]
    s.job_ended(11, 1.0)
    stale = [_whole(11 + i, i) for i in range(4)]
    s.apply_snapshot(stale, nodes, 2.0, asked=0.5)
    assert s.view.gpus[0].exclusive_job is None  # not taken back by a look older than the end
    # requeued and started again: a run that started after the end holds its GPU
    rerun = [replace(stale[0], start_time=5.0)] + stale[1:]
    s.apply_snapshot(rerun, nodes, 6.0, asked=5.5)
    assert s.view.gpus[0].exclusive_job == 11 and s.occupancy.ended == {}
    s.job_ended(11, 7.0)
    assert s.job_started(11, None, 8.0, "n1", [0]) is None  # its Prolog's report of a rerun
    assert s.occupancy.ended == {}
