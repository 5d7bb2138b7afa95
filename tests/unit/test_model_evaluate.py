"""Offline evaluation on the bundled Gavel data (hide pairs, train, score)."""

from __future__ import annotations

import pytest

from slurm_colo.errors import ModelError
from slurm_colo.gavel import bundled_path, load_gavel
from slurm_colo.model.evaluate import (
    SYNTHETIC_KINDS,
    evaluate,
    score,
    split_pairs,
    synthetic_like,
    train_mean,
    train_row_col,
)


@pytest.fixture(scope="module")
def k80():  # type: ignore[no-untyped-def]
    return load_gavel(bundled_path(), "k80")


def test_split_is_seeded_and_disjoint(k80) -> None:  # type: ignore[no-untyped-def]
    tr1, hid1 = split_pairs(k80, 0.3, seed=3)
    tr2, hid2 = split_pairs(k80, 0.3, seed=3)
    assert (tr1, hid1) == (tr2, hid2)
    assert not tr1 & set(hid1)
    assert len(hid1) == round(0.3 * len(k80.unordered_pairs()))
    assert split_pairs(k80, 0.3, seed=4)[1] != hid1


def test_a_perfect_predictor_scores_perfectly(k80) -> None:  # type: ignore[no-untyped-def]
    _, hidden = split_pairs(k80, 0.3, 0)
    s = score(k80, hidden, lambda a, b: k80.pairs[(a, b)])
    assert (s.mae, s.acc_s, s.acc_delta) == (0.0, 1.0, 1.0)
    assert s.spearman == pytest.approx(1.0)


def test_baselines_behave_as_described(k80) -> None:  # type: ignore[no-untyped-def]
    train, hidden = split_pairs(k80, 0.3, 0)
    mean = train_mean(k80, train)
    assert mean("a3c", "lm-bs5") == mean("cyclegan", "a3c")
    assert score(k80, hidden, mean).spearman == 0.0  # a constant has no ranking
    rc = train_row_col(k80, train)
    assert score(k80, hidden, rc).mae < score(k80, hidden, mean).mae


def test_model_beats_both_baselines_by_a_wide_margin(k80) -> None:  # type: ignore[no-untyped-def]
    res = evaluate(k80, hide=0.3, seeds=1)
    m, rc, mean = res["model"], res["row effect + column effect"], res["mean of observed pairs"]
    assert m["mae_n"] < 0.6 * rc["mae_n"] and m["mae_n"] < 0.3 * mean["mae_n"]
    assert m["spearman_s"] > rc["spearman_s"] + 0.2
    assert m["acc_delta_gt_1"] > rc["acc_delta_gt_1"]


@pytest.mark.parametrize("kind", SYNTHETIC_KINDS)
def test_other_data_of_the_same_shape(k80, kind) -> None:  # type: ignore[no-untyped-def]
    syn = synthetic_like(k80, seed=1, kind=kind)
    assert syn.classes == k80.classes and syn.solo == k80.solo and syn.never == k80.never
    assert syn.unordered_pairs() == k80.unordered_pairs()
    assert synthetic_like(k80, seed=1, kind=kind).pairs == syn.pairs  # seeded
    assert synthetic_like(k80, seed=2, kind=kind).pairs != syn.pairs
    assert all(0.0 < n <= 1.0 for pair in syn.pairs.values() for n in pair)
    res = evaluate(syn, hide=0.3, seeds=1)
    m, rc, mean = res["model"], res["row effect + column effect"], res["mean of observed pairs"]
    assert m["mae_n"] < 0.75 * rc["mae_n"] and m["mae_n"] < 0.3 * mean["mae_n"]
    assert m["spearman_s"] > rc["spearman_s"]
    assert m["acc_delta_gt_1"] > rc["acc_delta_gt_1"]


def test_bad_arguments() -> None:
    data = load_gavel(bundled_path(), "v100")
    with pytest.raises(ModelError, match="--hide"):
        split_pairs(data, 1.5, 0)
    with pytest.raises(ModelError, match="--seeds"):
        evaluate(data, seeds=0)
    with pytest.raises(ModelError, match="synthetic kind"):
        synthetic_like(data, seed=0, kind="mig")
