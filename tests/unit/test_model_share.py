"""The share view of the model (combined throughput and split) and the tied kernel forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slurm_colo.errors import ModelError
from slurm_colo.model import Observations, fit_table
from slurm_colo.model.data import Entries
from slurm_colo.model.features import class_distances
from slurm_colo.model.gp import _START, FORMS, _nll_and_grad, fit_gp
from slurm_colo.model.share import MIN_PAIRS, fit_share, share_entries

WEIGHT = {"a-bs8": 1.0, "a-bs16": 1.6, "a-bs32": 2.5, "b-bs8": 0.7, "b-bs16": 1.2, "c": 3.0}


def turns(a: str, b: str) -> float:
    """Jobs that take turns: a job's share follows its weight; a self-pair splits evenly."""
    return 0.95 * WEIGHT[a] / (WEIGHT[a] + WEIGHT[b])


def observations(skip: frozenset[tuple[str, str]] = frozenset()) -> Observations:
    obs = Observations()
    names = sorted(WEIGHT)
    for c in names:
        obs.add_class(c, sm_util=WEIGHT[c] / 3.0)
    for i, a in enumerate(names):
        for b in names[i:]:
            if (a, b) not in skip:
                obs.add_pair(a, b, turns(a, b), turns(b, a))
    return obs


def random_entries(rng: np.random.Generator, k: int = 5, m: int = 14) -> Entries:
    ia, ib = rng.integers(0, k, m), rng.integers(0, k, m)
    return Entries(ia, ib, rng.normal(-0.7, 0.2, m), rng.uniform(0.5, 2.0, m), np.zeros(m, bool))


@pytest.mark.parametrize("form", FORMS)
def test_analytic_gradient_matches_finite_differences(form: str) -> None:
    rng = np.random.default_rng(3)
    e = random_entries(rng)
    pts = rng.normal(size=(5, 2))
    dists = [((pts[:, None, g] - pts[None, :, g]) ** 2) for g in range(2)] + [np.zeros((5, 5))] * 3
    theta = _START + rng.normal(0.0, 0.3, len(_START))
    yc = e.y - e.y.mean()
    _, grad = _nll_and_grad(theta, dists, e, yc, form)
    for j in range(len(theta)):
        step = np.zeros_like(theta)
        step[j] = 1e-4
        num = (
            _nll_and_grad(theta + step, dists, e, yc, form)[0]
            - _nll_and_grad(theta - step, dists, e, yc, form)[0]
        ) / 2e-4
        assert grad[j] == pytest.approx(num, rel=1e-4, abs=1e-5), (form, j)


def test_share_entries_rewrite_each_pair_exactly() -> None:
    # classes 0, 1, 2: (0,1) both ways, (0,2) one way only, (1,1) a self-pair
    e = Entries(
        np.array([0, 1, 0, 1]),
        np.array([1, 0, 2, 1]),
        np.log([0.6, 0.3, 0.5, 0.45]),
        np.array([1.0, 3.0, 1.0, 2.0]),
        np.zeros(4, bool),
    )
    total, ratio = share_entries(e, 3)
    assert list(zip(ratio.ia, ratio.ib)) == [(0, 1)]
    assert ratio.y[0] == pytest.approx(math.log(0.6 / 0.3))
    assert ratio.w[0] == pytest.approx(1.0 / (1.0 / 1.0 + 1.0 / 3.0))
    got = {
        (int(a), int(b)): (math.exp(y), w)
        for a, b, y, w in zip(total.ia, total.ib, total.y, total.w)
    }
    assert got.keys() == {(0, 1), (1, 1)}  # the one-way pair (0, 2) is left to the other view
    assert got[(0, 1)][0] == pytest.approx(0.9)
    assert got[(1, 1)] == pytest.approx((0.9, 2.0))


def test_fitted_views_keep_their_symmetry() -> None:
    obs = observations()
    classes = sorted(obs.classes)
    view = fit_share(obs.aggregate(classes), class_distances(classes, obs.classes))
    assert view is not None
    s, r = view.total.mean_grid(), view.ratio.mean_grid()
    assert np.allclose(s, s.T)
    assert np.allclose(r, -r.T)
    assert np.allclose(np.diag(view.mean_grid()), np.diag(s) - math.log(2.0))  # even split


def test_time_slicing_pairs_never_measured_are_predicted_from_the_split() -> None:
    hidden = frozenset({("a-bs16", "c"), ("b-bs8", "c"), ("a-bs32", "b-bs16")})
    t = fit_table(observations(skip=hidden))
    assert t.training["model"] == "gp-pairs+share/2"
    assert set(t.training["hyper_share"]) == {"total", "ratio"}
    for a, b in hidden:
        p = t.pair(a, b)
        assert not p.observed
        assert p.n_a == pytest.approx(turns(a, b), abs=0.04)
        assert p.n_b == pytest.approx(turns(b, a), abs=0.04)


def test_too_few_pairs_measured_both_ways_leave_the_per_direction_view_alone() -> None:
    obs = Observations()
    for c in ("x", "y", "z"):
        obs.add_class(c)
    obs.add_pair("x", "y", 0.5, 0.4)
    obs.add_entry("x", "z", 0.7)
    classes = sorted(obs.classes)
    assert len(share_entries(obs.aggregate(classes), 3)[1]) < MIN_PAIRS
    assert fit_share(obs.aggregate(classes), class_distances(classes, obs.classes)) is None
    t = fit_table(obs)
    assert t.training["model"] == "gp-pairs/1"
    assert "hyper_share" not in t.training


def test_tied_forms_give_no_standard_deviation_and_unknown_forms_are_refused() -> None:
    e = random_entries(np.random.default_rng(1))
    dists = [np.zeros((5, 5))] * 5
    with pytest.raises(ModelError, match="pairs"):
        fit_gp(e, dists, form="symmetric").predict()
    with pytest.raises(ModelError, match="unknown kernel form"):
        fit_gp(e, dists, form="diagonal")
