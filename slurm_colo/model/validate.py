"""Held-out check of a training run. Pure.

A seeded share of the observed pairs (both directions) is hidden, the model is trained on
the rest and scored on the hidden entries (weighted mean absolute error of n). The nightly
retrain publishes only if this error does not exceed the live set's own held-out error by
more than a threshold, and fits the published set with the hyper-parameters found here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .data import Observations
from .fit import fit_table

MIN_PAIRS = 10


class HeldOut(NamedTuple):
    #: weighted MAE of n on the hidden pairs (None: too few pairs to check)
    mae: float | None
    #: number of hidden pairs
    pairs: int
    #: hyper-parameters fitted on the rest, for :func:`~.fit.fit_table`'s ``hyper``
    hyper: dict[str, Any]


def holdout_mae(obs: Observations, share: float = 0.2, seed: int = 0) -> HeldOut:
    """The held-out check; ``HeldOut(None, 0, {})`` when there are fewer than
    :data:`MIN_PAIRS` observed pairs to split."""
    classes = sorted(obs.classes)
    e = obs.aggregate(classes)
    if len(e) == 0:
        return HeldOut(None, 0, {})
    k = len(classes)
    lo, hi = np.minimum(e.ia, e.ib), np.maximum(e.ia, e.ib)
    pair_key = lo * k + hi
    uniq = np.unique(pair_key)
    never_keys = {
        classes.index(a) * k + classes.index(b)
        for a, b in obs.never
        if a in obs.classes and b in obs.classes
    }
    uniq = np.array([u for u in uniq if int(u) not in never_keys], np.int64)
    if len(uniq) < MIN_PAIRS:
        return HeldOut(None, 0, {})
    rng = np.random.default_rng(seed)
    n_hide = max(1, int(round(share * len(uniq))))
    hidden = rng.choice(uniq, n_hide, replace=False)
    is_hidden = np.isin(pair_key, hidden)
    train = Observations(classes=obs.classes, never=set(obs.never), faults=dict(obs.faults))
    keep = ~is_hidden
    train.add_arrays(
        classes, e.ia[keep], e.ib[keep], np.exp(e.y[keep]), e.w[keep], e.censored[keep]
    )
    table = fit_table(train, seed=seed)
    err, wsum = 0.0, 0.0
    for i in np.flatnonzero(is_hidden):
        a, b = classes[e.ia[i]], classes[e.ib[i]]
        pred = table.pair(a, b).n_a
        err += float(e.w[i]) * abs(pred - float(np.exp(e.y[i])))
        wsum += float(e.w[i])
    hyper: dict[str, Any] = {
        k: table.training[k] for k in ("hyper", "hyper_share") if k in table.training
    }
    return HeldOut(err / wsum, int(n_hide), hyper)
