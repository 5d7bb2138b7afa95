"""Judging a probed set (placement/retract.py) and placing a job whose shard type is fixed."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from slurm_colo.config import PlacementConfig
from slurm_colo.placement import ClusterView, GpuView, JobRequest, Occupant, place
from slurm_colo.placement.retract import (
    Member,
    judge,
    members_from_report,
    observed_pairs,
    split_slowdown,
    with_pairs,
)
from slurm_colo.scores import ClassInfo, PairScore, table_from_pairs

CFG = PlacementConfig(explore_rate=0.0, cross_user="shard")
SCORES = table_from_pairs(
    [("a", "b", 0.9, 0.8), ("a", "c", 0.7, 0.9), ("b", "c", 0.95, 0.95)],
    classes={
        "a": ClassInfo(progress_rate=10.0),
        "b": ClassInfo(progress_rate=4.0),
        "c": ClassInfo(),
    },
)


def test_a_set_is_undone_when_combined_throughput_is_below_one() -> None:
    v = judge("2", [Member("1", "a", "auto", 0.45), Member("2", "b", "auto", 0.5)], SCORES, CFG)
    assert v.undo and "combined throughput 0.95 < 1" in v.reason


def test_a_set_is_undone_when_an_auto_job_is_slowed_beyond_max_slowdown() -> None:
    members = [Member("1", "a", "auto", 0.6), Member("2", "b", "auto", 0.95)]
    v = judge("2", members, SCORES, replace(CFG, min_throughput=0.0))
    assert v.undo and "job 1 at 0.60x" in v.reason and "below 1/1.5" in v.reason
    # the same slowdown is accepted for an aggressive job
    members[0] = Member("1", "a", "aggressive", 0.6)
    assert not judge("2", members, SCORES, CFG).undo


def test_a_set_that_does_more_work_keeps_a_member_down_to_the_throughput_floor() -> None:
    cfg = replace(CFG, min_throughput=1.0, throughput_max_slowdown=2.5)
    members = [Member("1", "a", "auto", 0.6), Member("2", "b", "auto", 0.95)]
    assert not judge("2", members, SCORES, cfg).undo  # 1.55 combined: the throughput path
    members = [Member("1", "a", "auto", 0.35), Member("2", "b", "auto", 0.95)]
    v = judge("2", members, SCORES, cfg)
    assert v.undo and "job 1 at 0.35x" in v.reason and "below 1/2.5" in v.reason
    members = [Member("1", "a", "auto", 0.6), Member("2", "b", "auto", 0.3)]
    assert judge("2", members, SCORES, cfg).undo  # 0.9 combined: harmful


def test_a_set_placed_while_the_throughput_path_was_closed_keeps_the_slowdown_floor() -> None:
    # placed while the queue was about to run out (placement.throughput_drain_h): the set
    # is judged by the rule it was placed under, the max_slowdown floor
    cfg = replace(CFG, min_throughput=1.0, throughput_max_slowdown=2.5)
    members = [Member("1", "a", "auto", 0.6), Member("2", "b", "auto", 0.95)]
    v = judge("2", members, SCORES, cfg, throughput=False)
    assert v.undo and "job 1 at 0.60x" in v.reason and "below 1/1.5" in v.reason
    members = [Member("1", "a", "auto", 0.7), Member("2", "b", "auto", 0.95)]
    assert not judge("2", members, SCORES, cfg, throughput=False).undo  # every member keeps 2/3


def test_a_good_set_is_kept_and_what_it_showed_is_still_learnt() -> None:
    v = judge("2", [Member("1", "a", "auto", 0.85), Member("2", "b", "auto", 0.75)], SCORES, CFG)
    assert not v.undo and "kept" in v.reason
    assert v.observed == {("b", "a"): PairScore(0.75, 0.85, 0.02, observed=True)}


def test_nothing_is_undone_without_a_measurement() -> None:
    members = [
        Member("1", "a", "auto", 0.1, measured=False),
        Member("2", "b", "auto", 0.1, measured=False),
    ]
    v = judge("2", members, SCORES, CFG)
    assert not v.undo and "no member reports progress" in v.reason and v.observed == {}
    assert not judge("9", members, SCORES, CFG).undo  # the newcomer is not in the set


def test_observed_pairs_of_three_split_the_newcomers_slowdown_as_predicted() -> None:
    new = Member("3", "c", "auto", 0.64)
    members = [Member("1", "a", "auto", 0.9 * 0.5), Member("2", "b", "auto", 0.8 * 0.95), new]
    obs = observed_pairs(new, members, SCORES)
    # a's 0.45 over b's predicted 0.9: 0.5; b's 0.76 over a's predicted 0.8: 0.95
    assert obs[("c", "a")].n_b == pytest.approx(0.5) and obs[("c", "b")].n_b == pytest.approx(0.95)
    # c's own 0.64: n(c|a) is predicted 0.9 and n(c|b) 0.95, so a takes the larger share
    ca, cb = obs[("c", "a")].n_a, obs[("c", "b")].n_a
    assert ca * cb == pytest.approx(0.64) and ca < cb
    assert math.log(ca) / math.log(cb) == pytest.approx(math.log(0.9) / math.log(0.95))
    assert all(p.sd == 0.05 and p.observed for p in obs.values())


def test_a_newcomers_slowdown_is_split_by_the_predicted_effect_of_each_partner() -> None:
    # one partner predicted harmless takes none of it; the other takes it all
    assert split_slowdown(0.6, [0.7, 1.0]) == pytest.approx([0.6, 1.0])
    # three partners: shares in proportion to the predicted log slowdowns
    got = split_slowdown(0.5, [0.8, 0.8 * 0.8, 1.0])
    assert got[1] == pytest.approx(got[0] ** 2) and got[2] == pytest.approx(1.0)
    assert math.prod(got) == pytest.approx(0.5)
    # evenly when no partner is predicted to slow it, or nothing was done
    assert split_slowdown(0.81, [1.0, 1.0]) == pytest.approx([0.9, 0.9])
    assert split_slowdown(0.0, [0.5, 0.9]) == [0.0, 0.0]
    # a pair: the rate itself
    assert split_slowdown(0.7, [0.9]) == [0.7]


def test_an_unmeasured_side_keeps_the_prediction() -> None:
    new = Member("2", "c", "auto", 0.2, measured=False)
    obs = observed_pairs(new, [Member("1", "a", "auto", 0.5), new], SCORES)
    assert obs[("c", "a")] == PairScore(0.9, 0.5, 0.02, observed=True)  # n(c|a) predicted 0.9


def test_members_from_a_node_report() -> None:
    report = {
        "job": 7,
        "members": [
            # there before: 6/s now, 8/s before, when it shared the GPU with c (n(a|c) = 0.7)
            {"job": 5, "cls": "a", "rate": 6.0, "rate_before": 8.0, "before": ["c"]},
            # the newcomer: 2/s against its class's solo progress rate of 4/s
            {"job": 7, "cls": "b", "rate": 2.0},
            # reports no progress: predicted next to a and b (0.9 * 0.95)
            {"job": 6, "cls": "c", "rate": None, "rate_before": None, "before": ["a"]},
        ],
    }
    m = {x.key: x for x in members_from_report(report, SCORES, {"7": "aggressive"})}
    assert m["5"].n == pytest.approx(6 / 8 * 0.7) and m["5"].measured
    assert m["7"].n == pytest.approx(0.5) and m["7"].measured and m["7"].mode == "aggressive"
    assert m["6"].n == pytest.approx(0.9 * 0.95) and not m["6"].measured and m["6"].mode == "auto"


def test_a_measured_speed_above_solo_is_read_as_solo() -> None:
    """The progress figures are the job's own: a newcomer reporting 1e300 per second (its
    class's solo rate is 4/s) used to teach the agent that its class ran 2.5e299 times
    faster next to ``a``, so the policy paired it with ``a`` ever after; an incumbent 20 %
    faster than before is noise."""
    report = {
        "job": 7,
        "members": [
            {"job": 5, "cls": "a", "rate": 9.6, "rate_before": 8.0, "before": []},
            {"job": 7, "cls": "b", "rate": 1e300},
        ],
    }
    m = {x.key: x for x in members_from_report(report, SCORES)}
    assert (m["5"].n, m["7"].n) == (1.0, 1.0) and m["5"].measured and m["7"].measured
    obs = observed_pairs(m["7"], list(m.values()), SCORES)
    assert obs[("b", "a")].n_a == 1.0 and obs[("b", "a")].n_b == 1.0


def test_a_newcomer_of_a_class_without_solo_progress_rate_is_predicted() -> None:
    report = {
        "job": 2,
        "members": [
            {"job": 1, "cls": "a", "rate": 5.0, "rate_before": "x"},
            {"job": 2, "cls": "c", "rate": 3.0},
        ],
    }
    m = {x.key: x for x in members_from_report(report, SCORES)}
    assert not m["2"].measured and m["2"].n == pytest.approx(0.9)
    assert not m["1"].measured  # a rate_before that is not a number is ignored


def test_with_pairs_replaces_either_orientation() -> None:
    t = with_pairs(SCORES, {("b", "a"): PairScore(0.3, 0.4, 0.02, observed=True)})
    assert (
        ("a", "b") not in t.pairs
        and t.pair("a", "b").n_a == 0.4
        and SCORES.pair("a", "b").n_a == 0.9
    )
    assert with_pairs(SCORES, {}) is SCORES


def _view() -> ClusterView:
    gpus = []
    for node in ("n1", "n2"):
        for i in range(2):
            gpus.append(
                GpuView(
                    node=node,
                    index=i,
                    gres_type=f"v100_s{i}",
                    memory_gib=32.0,
                    slots=4,
                    model="v100",
                )
            )
    return ClusterView(gpus)


def test_a_job_with_a_fixed_shard_type_only_goes_to_gpus_of_that_type() -> None:
    view = _view()
    view.add_occupant(view.gpus[0], Occupant("1", "u", 1, "a", 4.0))  # n1 GPU 0 (v100_s0)
    view.add_occupant(view.gpus[3], Occupant("2", "u", 1, "c", 4.0))  # n2 GPU 1 (v100_s1)
    free = place(JobRequest("9", "u", 1, "b"), view, SCORES, CFG)
    assert free.shared and (free.node, free.index) == ("n1", 1)  # an idle GPU: first one
    d = place(JobRequest("9", "u", 1, "b", gres_type="v100_s0"), view, SCORES, CFG)
    assert d.shared and (d.node, d.index) == ("n2", 0)  # the idle GPU of its type
    view.add_occupant(view.gpus[2], Occupant("3", "u", 1, "c", 27.0))  # n2 GPU 0: no room
    d = place(JobRequest("9", "u", 1, "b", gres_type="v100_s0"), view, SCORES, CFG)
    assert d.shared and (d.node, d.index) == ("n1", 0) and d.partners == ("1",)
    view.add_occupant(view.gpus[0], Occupant("4", "u", 1, "a", 26.0))
    w = place(JobRequest("9", "u", 1, "b", gres_type="v100_s0"), view, SCORES, CFG)
    assert w.action == "exclusive" and w.reason.startswith("wait: no GPU of type v100_s0")
    assert place(JobRequest("9", "u", 1, "b", gres_type="v100_s1"), view, SCORES, CFG).shared
