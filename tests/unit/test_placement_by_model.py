"""Placement with one score set per GPU model (placement/by_model.py)."""

from __future__ import annotations

import pytest

from slurm_colo.config import PlacementConfig
from slurm_colo.placement import ClusterView, GpuView, JobRequest, Occupant, by_model, place
from slurm_colo.placement.by_model import ModelViews, ScoreBook, place_by_model
from slurm_colo.scores import table_from_pairs

CFG = PlacementConfig(explore_rate=0.0)


def gpu(node: str, model: str, index: int = 0, *classes: str) -> GpuView:
    return GpuView(
        node=node,
        index=index,
        gres_type=f"{model}_s{index}",
        memory_gib=32.0,
        slots=4,
        model=model,
        occupants=[
            Occupant(key=f"{node}{index}{k}", user="u", uid=1, cls=c, memory_gib=4.0)
            for k, c in enumerate(classes)
        ],
    )


def job(cls: str = "x", **kw: object) -> JobRequest:
    return JobRequest(key="j", user="u", uid=1, cls=cls, memory_gib=4.0, **kw)  # type: ignore[arg-type]


GOOD = table_from_pairs([("x", "y", 0.95, 0.95), ("y", "y", 0.9, 0.9)], id="good")
BAD = table_from_pairs([("x", "y", 0.3, 0.3), ("y", "y", 0.9, 0.9)], id="bad")
MEH = table_from_pairs([("x", "y", 0.8, 0.8), ("y", "y", 0.9, 0.9)], id="meh")


def mixed() -> ClusterView:
    return ClusterView([gpu("k1", "k80", 0, "y"), gpu("v1", "v100", 0, "y")])


def test_each_gpu_is_judged_with_its_own_models_set() -> None:
    book = ScoreBook(BAD, {"v100": GOOD, "k80": BAD})
    r = place_by_model(job(), mixed(), book, CFG)
    assert r.decision.shared and r.decision.node == "v1" and r.model == "v100"
    assert r.scores is GOOD
    # the same pair predicted the other way round on each model: the job goes to the K80
    r = place_by_model(job(), mixed(), ScoreBook(BAD, {"v100": BAD, "k80": GOOD}), CFG)
    assert r.decision.node == "k1" and r.model == "k80" and r.scores is GOOD
    # a model without a set of its own is judged with the site default
    r = place_by_model(job(), mixed(), ScoreBook(GOOD, {"v100": BAD}), CFG)
    assert r.decision.node == "k1" and r.model == "" and r.scores is GOOD


def test_the_best_set_wins_by_the_policys_ranking() -> None:
    # both models accept the job next to a partner: the higher predicted gain wins
    r = place_by_model(job(), mixed(), ScoreBook(BAD, {"v100": MEH, "k80": GOOD}), CFG)
    assert r.decision.node == "k1" and r.decision.partners == ("k100",)
    r = place_by_model(job(), mixed(), ScoreBook(BAD, {"v100": GOOD, "k80": MEH}), CFG)
    assert r.decision.node == "v1"


def test_an_idle_gpu_beats_a_partner_that_adds_less_than_running_alone() -> None:
    view = ClusterView([gpu("k1", "k80", 0, "y"), gpu("v1", "v100", 0)])  # the V100 is idle
    # next to y on the K80 the pair adds 0.95 + 0.95 - 1 = 0.9 < 1: the idle V100 is better
    r = place_by_model(job(), view, ScoreBook(BAD, {"v100": BAD, "k80": GOOD}), CFG)
    assert r.decision.node == "v1" and not r.decision.partners and r.model == "v100"
    # 1.0 + 1.0 - 1 = 1: sharing adds as much as running alone, the partner is taken
    even = table_from_pairs([("x", "y", 1.0, 1.0)], id="even")
    r = place_by_model(job(), view, ScoreBook(BAD, {"v100": BAD, "k80": even}), CFG)
    assert r.decision.node == "k1" and r.decision.partners and r.scores is even
    # the policy itself, every GPU judged with the K80's set, answers the same both times
    assert place(job(), view, GOOD, CFG).node == "v1"
    assert place(job(), view, even, CFG).node == "k1"


def test_a_single_set_places_once_on_the_whole_view(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, str]] = []
    real = by_model.place

    def counting(j, v, s, c):  # type: ignore[no-untyped-def]
        calls.append((id(v), s.id))
        return real(j, v, s, c)

    monkeypatch.setattr(by_model, "place", counting)
    view = mixed()
    r = place_by_model(job(), view, ScoreBook(GOOD), CFG)
    assert calls == [(id(view), "good")] and r.model == ""
    assert r.decision == place(job(), mixed(), GOOD, CFG)
    # a view of one model with its own set: once, on the whole view, with that set
    calls.clear()
    v100 = ClusterView([gpu("v1", "v100", 0, "y"), gpu("v2", "v100", 1)])
    r = place_by_model(job(), v100, ScoreBook(BAD, {"v100": GOOD, "k80": BAD}), CFG)
    assert calls == [(id(v100), "good")] and r.model == "v100"
    # multi-GPU jobs are never split per model
    calls.clear()
    r = place_by_model(job(gpus_per_node=2), view, ScoreBook(BAD, {"v100": GOOD}), CFG)
    assert len(calls) == 1 and not r.decision.shared


def test_a_job_with_a_fixed_shard_type_looks_at_that_model_only() -> None:
    book = ScoreBook(BAD, {"v100": GOOD, "k80": MEH})
    r = place_by_model(job(gres_type="k80_s0"), mixed(), book, CFG)
    assert r.decision.node == "k1" and r.model == "k80" and r.scores is MEH
    r = place_by_model(job(gres_type="a100_s0"), mixed(), book, CFG)
    assert not r.decision.shared and "a100_s0" in r.decision.reason


def test_no_part_takes_the_job_names_each_parts_reason() -> None:
    r = place_by_model(job(), mixed(), ScoreBook(GOOD, {"v100": BAD, "k80": BAD}), CFG)
    d = r.decision
    assert not d.shared and d.reason.startswith("own GPU: ")
    assert "k80 GPUs: k1:0: y+x" in d.reason and "v100 GPUs: v1:0: y+x" in d.reason


def test_the_parts_follow_the_view_and_keep_their_indexes() -> None:
    cache = ModelViews()
    book = ScoreBook(BAD, {"v100": GOOD, "k80": BAD})
    view = mixed()
    first = cache.parts(view, book)
    assert sorted(first) == ["k80", "v100"]
    assert cache.parts(view, book) is first  # same view, same version: same parts
    r = place_by_model(job(), view, book, CFG, cache)
    assert r.decision.node == "v1" and r.decision.partners
    index = first["v100"].policy_state
    assert index is not None
    # the job joins v1:0 through the whole view: its part sees it, with the same index
    view.add_occupant(view.gpus[1], Occupant(key="j", user="u", uid=1, cls="x", memory_gib=4.0))
    r2 = place_by_model(job(), view, book, CFG, cache)
    assert cache.parts(view, book) is first and first["v100"].policy_state is index
    fresh = place_by_model(job(), mixed_with_x(), book, CFG)
    assert r2.decision == fresh.decision and not r2.decision.shared  # x+x never measured
    view.remove_occupant(view.gpus[1], "j")
    assert place_by_model(job(), view, book, CFG, cache).decision == r.decision
    # a GPU replaced by hand: the parts are built afresh
    view.gpus[0] = gpu("k1", "k80", 0)
    view.invalidate()
    assert cache.parts(view, book) is not first


def mixed_with_x() -> ClusterView:
    v = mixed()
    v.gpus[1].occupants.append(Occupant(key="j", user="u", uid=1, cls="x", memory_gib=4.0))
    return v


def _score(d, view, t, j):  # type: ignore[no-untyped-def]
    """The policy's ranking of a GPU with partners: predicted gain less the uncertainty."""
    g = view.find(d.node, d.index)
    cl = [o.cls for o in g.occupants]
    before = sum(t.set_throughputs(cl)[0]) if len(cl) > 1 else 1.0
    gain = sum(t.set_throughputs([*cl, j.cls])[0]) - before
    return gain - CFG.risk_aversion * d.predicted_sd


def test_with_the_same_set_everywhere_the_split_agrees_with_the_policy() -> None:
    """Random views of two models, every GPU judged with one table through the book (split
    into parts) and by the policy on the whole view: the same kind of answer, the same
    idle GPU, an equally good partner."""
    import random

    rng = random.Random(7)
    classes = ["p", "q", "r", "s"]
    for trial in range(120):
        rows = []
        for i, a in enumerate(classes):
            for b in classes[i:]:
                n_a, n_b = rng.uniform(0.3, 1.05), rng.uniform(0.3, 1.05)
                # two jobs of one class split a GPU evenly (as the model's tables say)
                rows.append((a, b, n_a, n_a if a == b else n_b))
        t = table_from_pairs(rows, id=f"t{trial}")
        gpus = []
        for k in range(6):
            model = "v100" if k % 2 else "k80"
            occupants = rng.choices(
                classes, k=rng.choice([0, 1, 1, 2] if trial % 3 == 0 else [1, 2])
            )
            gpus.append(gpu(f"n{k}", model, 0, *occupants))
        view = ClusterView(gpus)
        j = job(rng.choice(classes))
        want = place(j, view, t, CFG)
        got = place_by_model(j, ClusterView(list(gpus)), ScoreBook(t, {"v100": t, "k80": t}), CFG)
        d = got.decision
        assert (d.shared, bool(d.partners)) == (want.shared, bool(want.partners)), trial
        if want.shared and not want.partners:
            assert d.node == want.node
        elif want.shared:
            assert _score(d, view, t, j) == pytest.approx(_score(want, view, t, j), abs=2e-3)


def test_a_cached_split_answers_as_a_fresh_one_through_many_changes() -> None:
    import random

    rng = random.Random(3)
    classes = ["p", "q", "r"]
    rows = [
        (a, b, rng.uniform(0.4, 1.05), rng.uniform(0.4, 1.05)) for a in classes for b in classes
    ]
    book = ScoreBook(
        table_from_pairs(rows[:4], id="d"),
        {"v100": table_from_pairs(rows, id="v"), "k80": table_from_pairs(rows[::-1], id="k")},
    )
    view = ClusterView([gpu(f"n{k}", "v100" if k % 2 else "k80", 0) for k in range(8)])
    cache = ModelViews()
    for step in range(150):
        j = job(rng.choice(classes))
        got = place_by_model(j, view, book, CFG, cache).decision
        copy = ClusterView(
            [gpu(g.node, g.model, 0, *[o.cls for o in g.occupants]) for g in view.gpus]
        )
        want = place_by_model(j, copy, book, CFG).decision
        same = ("action", "node", "index", "predicted_delta", "predicted_rate", "mem_limit_gib")
        assert [getattr(got, a) for a in same] == [getattr(want, a) for a in same], step
        assert len(got.partners) == len(want.partners), step
        g = rng.choice(view.gpus)
        if g.occupants and rng.random() < 0.4:
            view.remove_occupant(g, g.occupants[0].key)
        elif len(g.occupants) < 3:
            view.add_occupant(
                g, Occupant(key=f"o{step}", user="u", uid=1, cls=j.cls, memory_gib=4.0)
            )


def test_each_models_part_sees_the_sites_queue() -> None:
    sliced = table_from_pairs([("x", "y", 0.55, 0.52)], id="sliced")  # throughput path only
    book = ScoreBook(GOOD, {"k80": sliced, "v100": BAD})
    cache = ModelViews()
    view = mixed()
    view.queue_per_gpu = 2.0  # a long queue: the K80 pair is worth its slowdown
    r = place_by_model(job(), view, book, CFG, cache)
    assert r.decision.node == "k1" and r.model == "k80"
    assert all(p.queue_per_gpu == 2.0 for p in cache.parts(view, book).values())
    view.queue_per_gpu = 0.1  # a short queue, the same parts: no set where a member loses
    r = place_by_model(job(), view, book, CFG, cache)
    assert not r.decision.shared and "few jobs wait" in r.decision.reason


def test_a_view_built_afresh_carries_each_parts_index_over() -> None:
    """The agent builds a new view at every look at Slurm: each part's index is carried to
    the new part of the same GPUs, and answers as a new one would."""
    from slurm_colo.placement.policy import index_for

    cache = ModelViews()
    book = ScoreBook(BAD, {"v100": GOOD, "k80": BAD})
    first = cache.parts(mixed(), book)
    prepared = {m: index_for(p, book.table(m), CFG) for m, p in first.items()}
    again = mixed_with_x()  # afresh, and the V100 GPU has one job more
    parts = cache.parts(again, book)
    assert parts is not first
    for m, p in parts.items():
        assert index_for(p, book.table(m), CFG) is prepared[m]
        assert first[m].policy_state is None  # it serves the new part now
    r = place_by_model(job(), again, book, CFG, cache)
    assert r.decision == place_by_model(job(), mixed_with_x(), book, CFG).decision
