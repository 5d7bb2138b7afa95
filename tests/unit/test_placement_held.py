"""Held jobs as the policy sees them (placement/held.py): the probe's verdict on the
newcomer, and where a held job may go."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_colo.config import PlacementConfig
from slurm_colo.contracts.placement import Placement
from slurm_colo.placement import ClusterView, Decision, GpuView, JobRequest, Occupant
from slurm_colo.placement.guard import Reservation
from slurm_colo.placement.held import (
    HeldJob,
    Newcomer,
    judge_probe,
    must_lock,
    oldest_first,
    place_held,
    release,
    requeued,
    undo_tag,
    why_not_undone,
)
from slurm_colo.placement.retract import Member, undone_floor
from slurm_colo.scores import ClassInfo, table_from_pairs

SCORES = table_from_pairs(
    [("slow", "fast", 1.0, 1.0), ("slow", "slow", 0.5, 0.5), ("fast", "fast", 0.5, 0.5)],
    classes={"slow": ClassInfo(memory_gib=4.0), "fast": ClassInfo(memory_gib=4.0)},
    created="",
)
CFG = PlacementConfig(explore_rate=0.0)


def _held(
    job_id: int, since: float, gres_type: str = "v100_s1", undone: bool = True, model: str = ""
) -> HeldJob:
    req = JobRequest(
        key=str(job_id), user="carol", uid=1002, cls="fast", mode="auto", gres_type=gres_type
    )
    return HeldJob(job_id, f"tok{job_id}", req, since, "harmful", undone=undone, model=model)


def _view() -> ClusterView:
    gpus = [GpuView("n1", i, f"v100_s{i}", 32.0, 4, model="v100") for i in (0, 1)]
    gpus.append(GpuView("n2", 0, "a100_s0", 80.0, 4, model="a100"))
    return ClusterView(gpus=gpus)


def test_a_requeued_request_keeps_to_its_shard_type_and_asks_for_the_undone_floor() -> None:
    req = requeued(JobRequest(key="11", user="a", uid=1, cls="fast", mode="auto"), "v100_s0", CFG)
    assert req.gres_type == "v100_s0" and req.rate_floor == undone_floor(CFG)


def test_a_good_set_is_kept_and_a_harmful_one_undone_with_what_it_showed() -> None:
    good = [Member("10", "slow", "auto", 0.9, True), Member("11", "fast", "auto", 0.9, True)]
    j = judge_probe("11", good, SCORES, CFG, Newcomer(placed=True))
    assert j.verdict == "keep" and j.reply() == {"verdict": "keep", "reason": j.reason}
    assert set(j.observed) == {("fast", "slow")}
    bad = [Member("10", "slow", "auto", 0.3, True), Member("11", "fast", "auto", 0.3, True)]
    j = judge_probe("11", bad, SCORES, CFG, Newcomer(placed=True))
    assert j.verdict == "undo" and j.why_not == "" and j.reply()["verdict"] == "undo"
    j = judge_probe("11", bad, SCORES, CFG, Newcomer(placed=True, undone=True))
    assert j.verdict == "harmful"
    assert j.reply()["reason"] == f"{j.reason}; left running: the job was requeued once already"


@pytest.mark.parametrize(
    "cfg,newcomer,why",
    [
        (PlacementConfig(undo="off"), Newcomer(placed=True), "placement.undo is off"),
        (CFG, Newcomer(placed=False), "the job was not placed by the agent"),
        (CFG, Newcomer(placed=True, requeue=False), "Slurm may not requeue the job (--no-requeue)"),
        (CFG, Newcomer(placed=True, undone=True), "the job was requeued once already"),
        (
            CFG,
            Newcomer(placed=True, ends_in_s=60.0),
            "its time limit ends it sooner than a restart would help",
        ),
        (CFG, Newcomer(placed=True, ends_in_s=CFG.probe_s + 1), ""),
        (CFG, Newcomer(placed=True, ends_in_s=-5.0), ""),  # past its limit: Slurm's business
    ],
)
def test_why_a_harmful_newcomer_is_left_running(
    cfg: PlacementConfig, newcomer: Newcomer, why: str
) -> None:
    assert why_not_undone(cfg, newcomer) == why


def test_the_undo_tag_says_held_for_its_type_and_undone() -> None:
    req = JobRequest(key="11", user="a", uid=1, cls="fast", mode="auto")
    tag = Placement.from_tag(undo_tag("tok", req, "harmful", "v100_s0"))
    assert tag is not None and (tag.token, tag.held, tag.undone, tag.cls) == (
        "tok",
        "v100_s0",
        True,
        "fast",
    )


def test_held_jobs_are_aimed_oldest_first() -> None:
    assert [h.job_id for h in oldest_first([_held(2, 5.0), _held(1, 9.0), _held(3, 1.0)])] == [
        3,
        2,
        1,
    ]


def test_a_requeued_job_goes_only_to_a_gpu_of_its_type() -> None:
    view = _view()
    d = place_held(_held(60, 0.0, "v100_s1"), view, SCORES, CFG, None)
    assert d.shared and (d.node, d.index) == ("n1", 1)
    d = place_held(_held(60, 0.0, "t4_s0"), view, SCORES, CFG, None)
    assert not d.shared


def test_a_job_held_without_a_gpu_request_takes_any_shared_gpu_of_its_model() -> None:
    view = _view()
    for g in view.gpus[:2]:  # the v100s are busy with a job that takes no partner
        g.occupants.append(Occupant("9", "bob", 1001, "slow", 4.0, job_id=9, no_partners=True))
    d = place_held(_held(62, 0.0, "", undone=False), view, SCORES, CFG, None)
    assert d.shared and d.node == "n2"
    h = _held(62, 0.0, "", undone=False, model="v100")
    h.request = JobRequest(key="62", user="carol", uid=1002, cls="fast", mode="auto")
    d = place_held(h, ClusterView([g for g in view.gpus if g.model == h.model]), SCORES, CFG, None)
    assert not d.shared


def test_a_gpu_drained_for_a_held_job_is_open_to_it_and_to_it_only() -> None:
    view = _view()
    r = Reservation(60, "n1", (1,), 0.0, 5.0, "v100_s1")
    view.gpus[1].closed_for = 60
    d = place_held(_held(60, 0.0, "v100_s1"), view, SCORES, CFG, r)
    assert d.shared and (d.node, d.index) == ("n1", 1)
    assert view.gpus[1].closed_for == 60  # closed again until Slurm shows the job running
    d = place_held(_held(61, 1.0, "v100_s1"), view, SCORES, CFG, r)
    assert not d.shared


def test_an_admin_hold_is_asked_once_for_a_job_without_a_gpu_request() -> None:
    h = _held(12, 0.0, "", undone=False)
    assert must_lock(h, 5.0, "JobHeldUser")
    assert not must_lock(h, 5.0, "JobHeldAdmin")  # it has it already
    h.lock_retry_at = 60.0
    assert not must_lock(h, 5.0, "JobHeldUser") and must_lock(h, 60.0, "JobHeldUser")
    h.locked = True
    assert not must_lock(h, 99.0, "JobHeldUser")
    assert not must_lock(_held(11, 0.0, "v100_s0"), 5.0, "JobHeldUser")  # keeps its request


def test_a_release_says_where_and_why() -> None:
    d = Decision("share", "opened GPU", node="n1", index=1)
    r = release(_held(11, 0.0, "v100_s1"), d)
    assert r.comment == "colo: requeued after a harmful pairing; now GPU 1 of n1"
    assert r.note == "requeued after its probe (harmful); then opened GPU"
    tag = Placement.from_tag(r.tag)
    assert tag is not None and tag.undone and not tag.held and (tag.node, tag.gpu) == ("n1", 1)
    r = release(_held(12, 0.0, "", undone=False), d)
    assert r.comment == "colo: released onto GPU 1 of n1: opened GPU"
    assert r.note == "held at submission; then opened GPU"


def test_newer_jobs_wait_their_turn_only_behind_a_job_waiting_too_long() -> None:
    from slurm_colo.placement.held import waits_behind

    cfg = PlacementConfig(reserve_after_h=6.0, bypass_h=1.5)
    h = 3600.0
    # the oldest has waited 7 h: a job 2 h newer waits, one 1 h newer passes
    assert waits_behind(3 * h, 1 * h, 8 * h, cfg)
    assert not waits_behind(2 * h, 1 * h, 8 * h, cfg)
    # the oldest has waited 5 h only, none waits, or the rule is off
    assert not waits_behind(3 * h, 1 * h, 6 * h, cfg)
    assert not waits_behind(3 * h, None, 8 * h, cfg)
    assert not waits_behind(3 * h, 1 * h, 8 * h, replace(cfg, bypass_h=0.0))


def test_the_queue_head_is_the_oldest_held_job_a_gpu_could_take() -> None:
    from slurm_colo.placement.held import queue_head

    view = ClusterView([GpuView("n1", 0, "v100_s0", 32.0, 4, model="v100")])
    req = JobRequest(key="k", user="u", uid=1, cls="a")
    nowhere = HeldJob(1, "t1", replace(req, gres_type="a100_s0"), 100.0, "x")
    anywhere = HeldJob(2, "t2", req, 200.0, "x", undone=False)
    assert queue_head([anywhere, nowhere], view) == 200.0  # no a100 GPU: it holds up nobody
    assert queue_head([nowhere], view) is None


def test_each_held_job_waits_behind_the_oldest_that_may_want_its_gpus() -> None:
    from slurm_colo.placement.held import queue_heads, rivals, wanting

    view = ClusterView(
        [
            GpuView("n1", 0, "v100_s0", 32.0, 4, model="v100"),
            GpuView("n1", 1, "v100_s1", 32.0, 4, model="v100"),
        ]
    )
    req = JobRequest(key="k", user="u", uid=1, cls="a")
    s1 = HeldJob(1, "t1", replace(req, gres_type="v100_s1"), 100.0, "x")
    s0 = HeldJob(2, "t2", replace(req, gres_type="v100_s0"), 300.0, "x")
    anywhere = HeldJob(3, "t3", req, 200.0, "x", undone=False)
    held = [s1, s0, anywhere]
    assert [h.job_id for h in rivals(s0, held)] == [2, 3]  # not the v100_s1 one
    assert [h.job_id for h in rivals(anywhere, held)] == [1, 2, 3]
    # the v100_s0 job waits behind the any-GPU job (200), not the older v100_s1 one (100)
    assert queue_heads(held, view) == {"v100_s1": 100.0, "v100_s0": 200.0, "*": 100.0}
    # a job about to take a v100_s0 GPU: the v100_s0 and the any-GPU jobs may want it
    assert [h.job_id for h in wanting("v100_s0", held)] == [2, 3]
    assert [h.job_id for h in wanting("k80_s0", held)] == [3]
