"""Jobs that may not start yet (``--dependency``, ``--begin``): held at submission without a
GPU request and placed once Slurm lets them start, so that no place on a shared GPU is
kept for them while they wait (no I/O)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_colo.agent.held import HELD_TO_START, OWN_GPU_NOTE
from slurm_colo.agent.state import AgentState
from slurm_colo.config import Config, PlacementConfig
from slurm_colo.contracts.placement import Placement
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.scores import ClassInfo, table_from_pairs
from slurm_colo.slurm.model import GresAlloc, SlurmJob, SlurmNode

#: GPUs 0 and 1 shared, 2 and 3 whole: a mixed site (a job no shared GPU takes gets its own)
LAYOUT = (NodeGpus("n1", 4, "v100", 32.0, (0, 1), 4),)
SCORES = table_from_pairs(
    [("good", "good", 1.0, 1.0), ("bad", "bad", 0.4, 0.4), ("bad", "good", 0.4, 0.4)],
    classes={c: ClassInfo(memory_gib=4.0) for c in ("good", "bad")},
)
AFTER = "afterok:19(unfulfilled)"


def _state(**placement: object) -> AgentState:
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0, **placement))  # type: ignore[arg-type]
    s = AgentState(cfg, SCORES)
    s.apply_snapshot([], [SlurmNode("n1", "IDLE")], 0.0)
    return s


def _req(cls: str, deferred: bool = False) -> dict[str, str]:
    r = {"user": "alice", "uid": "1000", "name": "job", "mode": "auto", "class": cls}
    return dict(r, deferred="1") if deferred else r


def _held(tag: str, **waits: object) -> SlurmJob:
    """Job 20 as Slurm lists it held at submission (the hook's priority 0)."""
    job = SlurmJob(20, "job", "alice", 1000, "PENDING", admin_comment=tag, submit_time=1.0)
    return replace(job, **{"state_reason": "JobHeldUser", **waits})  # type: ignore[arg-type]


def _running(job_id: int, tag: str, idx: int) -> SlurmJob:
    gres = (GresAlloc("shard", f"v100_s{idx}", 1, (idx,)),)
    return SlurmJob(
        job_id, "job", "alice", 1000, "RUNNING", nodes="n1", gres=gres, admin_comment=tag
    )


def test_a_job_with_a_dependency_is_held_and_keeps_no_place_until_it_may_start() -> None:
    s = _state()
    r = s.place_request(_req("good", deferred=True), 1.0)
    assert r["action"] == "hold" and r["gres"] == "none" and "node" not in r
    assert r["comment"] == f"colo: {HELD_TO_START}"
    tag = Placement.from_tag(r["tag"])
    assert tag is not None and tag.held == "*" and tag.cls == "good"
    assert s.ledger.decisions["hold:waits to start"] == 1
    assert s.ledger.placements == {} and not s.view.gpus[0].occupants  # no place kept
    assert s.explain(0, r["tag"])["reason"] == HELD_TO_START
    # while its dependency is not met it stays held, by the administrator (it has no GPU
    # request and must not be released by hand), and counts as no job waiting for a GPU
    s.apply_snapshot([_held(r["tag"], dependency=AFTER)], [], 2.0)
    assert [(a.kind, a.job_id) for a in s.reaim(2.0)] == [("admin_hold", 20)]
    assert s.holds.to_start == {20: f"its dependency ({AFTER})"}
    assert s.holds.jobs[20].reason == HELD_TO_START and s.holds.waits() == []
    assert s.occupancy.queue == 0
    [held] = s.status(2.0)["held"]
    assert held["job_id"] == 20 and held["waits_to_start"] == f"its dependency ({AFTER})"
    later = _held(r["tag"], dependency=AFTER, state_reason="JobHeldAdmin")
    for t in (60.0, 120.0):
        s.apply_snapshot([later], [], t)
        assert s.reaim(t) == []
    # met (Slurm clears it): placed on what fits now, its shard request set
    s.apply_snapshot([replace(later, dependency="")], [], 180.0)
    assert s.holds.to_start == {} and s.holds.jobs[20].since == 120.0  # its wait began then
    [aim] = s.reaim(180.0)
    assert (aim.kind, aim.job_id, aim.node, aim.gres) == ("aim", 20, "n1", "gres:shard:v100_s0:1")
    assert 20 not in s.held and s.ledger.of_job(20) is not None


def test_one_no_shared_gpu_takes_once_it_may_start_gets_its_own_gpu_at_a_mixed_site() -> None:
    s = _state()
    bad = [s.place_request(_req("bad"), 1.0 + k) for k in range(2)]
    assert [b["gres"] for b in bad] == ["gres:shard:v100_s0:1", "gres:shard:v100_s1:1"]
    running = [_running(10 + k, b["tag"], k) for k, b in enumerate(bad)]
    r = s.place_request(_req("bad", deferred=True), 3.0)
    s.apply_snapshot([*running, _held(r["tag"], eligible_time=100.0)], [], 50.0)
    assert s.holds.to_start == {20: "its begin time"} and s.reaim(50.0)[0].kind == "admin_hold"
    s.apply_snapshot([*running, _held(r["tag"], eligible_time=100.0)], [], 101.0)
    [aim] = s.reaim(101.0)  # bad+bad keeps 0.4 each: no shared GPU takes it
    assert (aim.kind, aim.job_id, aim.node, aim.gres) == ("aim", 20, "", "gres:gpu:1")
    assert aim.comment == OWN_GPU_NOTE
    tag = Placement.from_tag(aim.admin_comment)
    assert tag is not None and not tag.held  # left to Slurm now
    assert 20 not in s.held


def test_where_every_gpu_is_shared_it_waits_held_for_one_once_it_may_start() -> None:
    s = _state(unplaced="hold")
    bad = [s.place_request(_req("bad"), 1.0 + k) for k in range(2)]
    running = [_running(10 + k, b["tag"], k) for k, b in enumerate(bad)]
    r = s.place_request(_req("bad", deferred=True), 3.0)
    assert r["action"] == "hold" and r["comment"] == f"colo: {HELD_TO_START}"
    job = _held(r["tag"], state_reason="JobHeldAdmin")
    s.apply_snapshot([*running, job], [], 101.0)
    assert s.reaim(101.0) == [] and 20 in s.held
    assert [w.job_id for w in s.holds.waits()] == [20]  # it waits for a shared GPU now
    s.job_ended(10, 102.0)
    s.apply_snapshot([running[1], job], [], 103.0)
    [aim] = s.reaim(103.0)
    assert (aim.kind, aim.node, aim.gres) == ("aim", "n1", "gres:shard:v100_s0:1")


def test_a_job_that_may_start_at_submission_is_placed_as_before() -> None:
    s = _state()
    assert s.place_request(_req("good"), 1.0)["gres"] == "gres:shard:v100_s0:1"
    # the agent may not release jobs (Slurm refuses it the right): placed as before
    s.rights.refused = "Access/permission denied"
    r = s.place_request(_req("good", deferred=True), 2.0)
    assert r["action"] == "share" and s.ledger.decisions["hold:waits to start"] == 0


@pytest.mark.parametrize(
    "waits, counted",
    [({}, 1), ({"dependency": AFTER}, 0), ({"eligible_time": 500.0}, 0)],
)
def test_only_jobs_that_may_start_count_as_waiting_for_a_gpu(
    waits: dict[str, object], counted: int
) -> None:
    s = _state()
    job = replace(
        SlurmJob(30, "x", "carol", 7, "PENDING", tres_per_node="gres:gpu:1"),
        state_reason="Resources" if not waits else "Dependency",
        **waits,  # type: ignore[arg-type]
    )
    s.apply_snapshot([job], [], 100.0)
    assert s.occupancy.queue == counted
