"""The compatibility model: structure, cold start, shrinkage, never/censored/faults, recency."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slurm_colo.gavel import bundled_path, load_gavel
from slurm_colo.model import Observations, fit_gavel, fit_table
from slurm_colo.model.history import add_pair_episodes, pair_episodes
from slurm_colo.scores import scores_from_dict

LOAD = {
    "a-bs8": 0.2,
    "a-bs16": 0.35,
    "a-bs32": 0.5,
    "b-bs8": 0.6,
    "b-bs16": 0.75,
    "b-bs32": 0.9,
    "c": 0.4,
    "d": 0.7,
}


def truth(a: str, b: str) -> float:
    return 1.0 / (1.0 + 1.5 * LOAD[a] * LOAD[b])


def synthetic(
    skip: set[tuple[str, str]] = frozenset(), weight: float = 1.0, profiles: bool = True
) -> Observations:
    obs = Observations()
    names = sorted(LOAD)
    for c in names:
        obs.add_class(c, sm_util=LOAD[c] if profiles else None, memory_gib=4.0)
    for i, a in enumerate(names):
        for b in names[i:]:
            if (a, b) not in skip and (b, a) not in skip:
                obs.add_pair(a, b, truth(a, b), truth(b, a), weight=weight)
    return obs


def test_every_pair_of_every_class_is_predicted_and_valid() -> None:
    t = fit_table(synthetic())
    k = len(LOAD)
    assert len(t.pairs) == k * (k + 1) // 2
    scores_from_dict(t.to_dict())  # passes the published-format validation
    for (a, b), p in t.pairs.items():
        assert p.observed and p.n_a == pytest.approx(truth(a, b), abs=0.02)


def test_pairs_never_seen_together_follow_the_structure() -> None:
    hidden = {("a-bs32", "b-bs32"), ("c", "d"), ("a-bs8", "b-bs16")}
    t = fit_table(synthetic(skip=hidden))
    mean_n = float(np.mean([truth(a, b) for a in LOAD for b in LOAD]))
    for a, b in hidden:
        p = t.pair(a, b)
        assert not p.observed
        assert abs(p.n_a - truth(a, b)) < 0.05
        assert (
            abs(p.n_a - truth(a, b)) < abs(mean_n - truth(a, b)) or abs(mean_n - truth(a, b)) < 0.05
        )


def test_cold_start_from_solo_profile_features() -> None:
    obs = synthetic()
    obs.add_class("newjob", sm_util=0.9, memory_gib=4.0)  # looks like b-bs32 when alone
    t = fit_table(obs)
    for other in ("a-bs8", "b-bs8", "c"):
        p = t.pair("newjob", other)
        assert not p.observed and 0.0 < p.n_a <= 1.0
    # a heavy newcomer suffers more next to a heavy partner than next to a light one
    assert t.pair("newjob", "b-bs32").n_a < t.pair("newjob", "a-bs8").n_a
    # and is less certain than a measured pair
    assert t.pair("newjob", "c").sd > t.pair("b-bs32", "c").sd


def test_thin_data_shrinks_to_the_prior_with_more_uncertainty() -> None:
    obs = Observations()
    obs.add_pair("x", "y", 0.9, 0.3)
    obs.add_class("z")
    t = fit_table(obs)
    assert 0.3 <= t.prior_n <= 0.9
    far = t.pair("z", "z")
    near = t.pair("x", "y")
    assert far.sd > near.sd
    assert abs(far.n_a - t.prior_n) < 0.2
    unknown = t.pair("never-heard-of", "x")
    assert not unknown.known and unknown.n_a == t.prior_n


def test_oom_pairs_and_pairs_with_a_fatal_mps_fault_are_never() -> None:
    obs = synthetic()
    obs.add_never("a-bs8", "c")
    for _ in range(3):
        obs.add_fault("b-bs8", "d")
    obs.add_fault("a-bs16", "a-bs32")
    t = fit_table(obs)
    assert t.pair("c", "a-bs8").never and t.pair("c", "a-bs8").n_a == 0.0
    assert t.delta(["a-bs8", "c"])[0] == 0.0
    assert t.pair("b-bs8", "d").never  # three fatal faults
    # one fault is enough, though the pair was measured fine many times
    assert obs.pair_counts()[("a-bs16", "a-bs32")] > 1
    p = t.pair("a-bs16", "a-bs32")
    assert p.never and p.n_a == 0.0 and truth("a-bs16", "a-bs32") > 0.4


def test_censored_values_are_lower_bounds() -> None:
    obs = synthetic(skip={("a-bs8", "a-bs16")})
    obs.add_pair("a-bs8", "a-bs16", 1.0, 1.0, censored=True)
    t = fit_table(obs)
    p = t.pair("a-bs8", "a-bs16")
    assert p.n_a >= 1.0 - 1e-9 and p.n_b >= 1.0 - 1e-9


def test_nan_negative_and_zero_weight_entries_are_refused() -> None:
    obs = synthetic()
    before = len(obs)
    assert not obs.add_entry("c", "d", math.nan)
    assert not obs.add_entry("c", "d", -0.5)
    assert not obs.add_entry("c", "d", 0.5, weight=0.0)
    assert len(obs) == before and obs.rejected == 3
    t = fit_table(obs)
    assert t.training["rejected_entries"] == 3


def test_no_pair_data_gives_a_prior_only_table() -> None:
    obs = Observations()
    obs.add_class("x", memory_gib=10.0)
    t = fit_table(obs)
    assert t.pairs == {} and t.classes["x"].memory_gib == 10.0
    assert "prior-only" in t.training["model"]


def test_recent_history_outweighs_old_history() -> None:
    now = 100 * 86400.0

    def episodes(n_old: float, n_new: float) -> Observations:
        obs = Observations()
        rows = []
        for k in range(4):
            rows.append(
                (
                    0.0,
                    3600.0 * 5,
                    [(1, "x", n_old, "progress"), (2, "y", n_old, "progress")],
                    False,
                    False,
                )
            )
            rows.append(
                (
                    now - 3600 * 6,
                    now - 3600,
                    [(3, "x", n_new, "progress"), (4, "y", n_new, "progress")],
                    False,
                    False,
                )
            )
        add_pair_episodes(obs, pair_episodes(rows), now=now, half_life_days=10.0)
        return obs

    t = fit_table(episodes(0.9, 0.4))
    assert t.pair("x", "y").n_a == pytest.approx(0.4, abs=0.05)


def test_sets_of_three_feed_the_pairs() -> None:
    rows = [
        (
            0.0,
            3600.0,
            [(1, "x", 0.25, "progress"), (2, "y", 0.25, "progress"), (3, "z", 0.25, "progress")],
            False,
            False,
        )
    ]
    pe = pair_episodes(rows)
    assert len(pe.a) == 3 and np.allclose(pe.n_a, 0.5)  # 0.5 * 0.5 = 0.25 with two partners
    obs = Observations()
    add_pair_episodes(obs, pe, now=3600.0, half_life_days=30.0)
    t = fit_table(obs)
    n, _, _, _ = t.set_throughputs(["x", "y", "z"])
    assert n[0] == pytest.approx(0.25, abs=0.05)


def test_fit_gavel_predicts_a_full_table_from_some_pairs() -> None:
    data = load_gavel(bundled_path(), "k80")
    pairs = data.unordered_pairs()
    train = set(pairs[::2])
    t = fit_gavel(data, train, seed=0)
    assert t.gpu_model == "k80" and set(t.classes) == set(data.solo)
    k = len(data.solo)
    assert len(t.pairs) == k * (k + 1) // 2
    assert all(t.classes[c].solo_rate == data.solo[c] for c in data.solo)
    held = [p for p in pairs if p not in train]
    err = np.mean([abs(t.pair(a, b).n_a - data.pairs[(a, b)][0]) for a, b in held])
    assert err < 0.04
    for a, b in data.never:
        assert t.pair(a, b).never
    assert sum(p.observed for p in t.pairs.values() if not p.never) == len(train)


def test_the_published_fit_reuses_the_hyper_parameters_the_held_out_check_scored(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    from slurm_colo.model import gp
    from slurm_colo.model.validate import holdout_mae

    obs = synthetic()
    held = holdout_mae(obs, share=0.3, seed=0)
    assert held.mae is not None and held.pairs > 0
    assert set(held.hyper) == {"hyper", "hyper_share"}
    searches: list[int] = []
    real = gp.minimize
    monkeypatch.setattr(gp, "minimize", lambda *a, **k: searches.append(1) or real(*a, **k))
    t = fit_table(obs, hyper=held.hyper)
    assert searches == []
    assert t.training["hyper"] == held.hyper["hyper"]
    assert t.training["hyper_share"] == held.hyper["hyper_share"]
    assert t.training["hyper_search"] == "reused from the held-out fit"
    for a, b in [("a-bs8", "d"), ("b-bs32", "c")]:  # every pair is in the posterior again
        assert t.pair(a, b).n_a == pytest.approx(truth(a, b), abs=0.02)
    fresh = fit_table(obs)
    assert len(searches) == 3 and fresh.training["hyper_search"] == "fitted"


def test_observations_restricted_to_some_classes_aggregate_as_if_only_those_were_added() -> None:
    import numpy as np

    from slurm_colo.model.data import Observations

    full, only = Observations(), Observations()
    keep = {"a", "b", "c"}
    rows = [("a", "b", 0.8, 0.7), ("a", "x", 0.5, 0.9), ("c", "c", 0.6, 0.6), ("y", "b", 0.4, 0.3)]
    for a, b, na, nb in rows:
        full.add_pair(a, b, na, nb, weight=2.0)
        if a in keep and b in keep:
            only.add_pair(a, b, na, nb, weight=2.0)
    cl = ["x", "b", "a", "y", "c"]  # bulk entries, as the history adds them
    ia, ib = np.array([2, 0, 4, 1, 3]), np.array([1, 2, 1, 4, 1])
    n, w = np.array([0.9, 0.5, 0.7, 0.6, 0.2]), np.array([1.0, 3.0, 2.0, 1.0, 4.0])
    full.add_arrays(cl, ia, ib, n, w)
    ok = [k for k in range(5) if cl[ia[k]] in keep and cl[ib[k]] in keep]
    order = sorted(keep)
    to = {c: i for i, c in enumerate(order)}
    only.add_arrays(
        order,
        np.array([to[cl[ia[k]]] for k in ok]),
        np.array([to[cl[ib[k]]] for k in ok]),
        n[ok],
        w[ok],
    )
    full.add_never("a", "y")
    weights = full.class_weights()
    assert weights["x"] == 2.0 + 2.0 + 3.0 and weights["c"] == 2.0 + 2.0 + 1.0
    got = full.restricted(keep)
    assert set(got.classes) == keep and got.never == set()
    want_e, got_e = only.aggregate(order), got.aggregate(order)
    for f in ("ia", "ib", "y", "w", "censored"):
        assert np.array_equal(getattr(got_e, f), getattr(want_e, f)), f
