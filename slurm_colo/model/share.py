"""The second view of the model: a pair as its combined throughput and its share. Pure.

For a pair measured together, ``n(a | b)`` and ``n(b | a)`` are rewritten exactly as

* ``log S(a, b) = log(n(a | b) + n(b | a))``, the combined throughput, *symmetric* in the
  pair; and
* ``r(a, b) = log(n(a | b) / n(b | a))``, how the pair splits it, *antisymmetric*
  (``r(b, a) = -r(a, b)``, ``r(a, a) = 0``),

and back: ``n(a | b) = S / (1 + exp(-r))``. Each gets a GP of its own with the tied kernel
forms of :mod:`.gp`: a self-pair then always splits evenly, and "a class that takes a large
share against others" is one effect per class instead of separate "suffers" and "disturbs"
effects. Jobs that take turns on a GPU (time-slicing) fit this view well, jobs that contend
(MPS) the per-direction view of :mod:`.gp`; :func:`slurm_colo.model.fit.fit_table` averages
the two (in log space), which scored better than either view alone on both GPU types of
the Gavel data, and about the same on the synthetic data of :mod:`.evaluate`.

Pairs with only one direction measured inform only the per-direction view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .data import Entries
from .gp import PairGP, fit_gp

#: fewest pairs of two classes measured in both directions for this view to be fitted
MIN_PAIRS = 8


def share_entries(e: Entries, k: int) -> tuple[Entries, Entries]:
    """(log S entries, r entries) of the pairs of ``e`` (ordered entries over ``k``
    classes): one of each per pair ``a < b`` with both directions, plus a log S entry per
    self-pair. A pair's weight is that of the two directions in series (1 / (1/w + 1/w'))."""
    key = e.ia * k + e.ib
    order = np.argsort(key, kind="stable")
    skey = key[order]
    fwd = np.flatnonzero(e.ia < e.ib)
    rev_key = e.ib[fwd] * k + e.ia[fwd]
    at = np.minimum(np.searchsorted(skey, rev_key), max(len(skey) - 1, 0))
    found = skey[at] == rev_key if len(skey) else np.zeros(0, bool)
    i, j = fwd[found], order[at[found]]
    w = 1.0 / (1.0 / e.w[i] + 1.0 / e.w[j])
    ratio = Entries(e.ia[i], e.ib[i], e.y[i] - e.y[j], w, np.zeros(len(i), bool))
    same = np.flatnonzero(e.ia == e.ib)
    total = Entries(
        np.r_[e.ia[i], e.ia[same]],
        np.r_[e.ib[i], e.ib[same]],
        np.r_[np.logaddexp(e.y[i], e.y[j]), e.y[same] + np.log(2.0)],
        np.r_[w, e.w[same]],
        np.r_[e.censored[i] & e.censored[j], e.censored[same]],
    )
    return total, ratio


@dataclass
class ShareView:
    total: PairGP  # symmetric form, log S
    ratio: PairGP  # antisymmetric form, r

    def mean_grid(self) -> np.ndarray:
        """Posterior mean of ``log n(a | b)`` for every ordered pair (k x k)."""
        return self.total.mean_grid() - np.logaddexp(0.0, -self.ratio.mean_grid())

    @property
    def params(self) -> dict[str, dict[str, float]]:
        return {"total": self.total.params, "ratio": self.ratio.params}


def fit_share(
    e: Entries, dists: list[np.ndarray], seed: int = 0, hyper: Mapping[str, Any] | None = None
) -> ShareView | None:
    """Fit the view; ``None`` when fewer than :data:`MIN_PAIRS` pairs of two classes were
    measured in both directions. ``hyper`` (:attr:`ShareView.params` of an earlier fit):
    use those hyper-parameters instead of searching them."""
    total, ratio = share_entries(e, dists[0].shape[0])
    if len(ratio) < MIN_PAIRS:
        return None
    hyper = hyper or {}
    return ShareView(
        fit_gp(total, dists, seed=seed, form="symmetric", fixed=hyper.get("total")),
        fit_gp(ratio, dists, seed=seed, form="antisymmetric", fixed=hyper.get("ratio")),
    )
