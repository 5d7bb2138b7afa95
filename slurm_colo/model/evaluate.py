"""Offline evaluation on a profiling campaign: hide a seeded share of the measured pairs,
train on the rest (solo rates stay known), score the hidden pairs. Pure.

Metrics (averaged over seeds): mean absolute error of n (both members), Spearman rank
correlation of the combined throughput S = n_a + n_b, and the accuracy of the decisions
"S > 1" and "delta > 1" (delta = 2 min(n_a, n_b)). Baselines: "mean of observed pairs"
and "row effect + column effect" (ridge-regularised additive model).

:func:`synthetic_like` makes other data of the same shape (the same classes, measured and
out-of-memory pairs, from a seeded low-rank model), so that a change to the model can be
checked beyond the two bundled measurement sets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import spearmanr

from ..errors import ModelError
from ..gavel import GavelData
from .data import family_and_batch
from .fit import fit_gavel

Predictor = Callable[[str, str], tuple[float, float]]
Trainer = Callable[[GavelData, set[tuple[str, str]], int], Predictor]


def split_pairs(
    data: GavelData, hide: float, seed: int
) -> tuple[set[tuple[str, str]], list[tuple[str, str]]]:
    if not 0.0 < hide < 1.0:
        raise ModelError(f"--hide must be between 0 and 1 (exclusive), got {hide}")
    pairs = data.unordered_pairs()
    if len(pairs) < 4:
        raise ModelError(f"only {len(pairs)} measured pairs: too few to evaluate")
    idx = np.random.default_rng(seed).permutation(len(pairs))
    k = max(1, int(round(hide * len(pairs))))
    return {pairs[i] for i in idx[k:]}, [pairs[i] for i in idx[:k]]


@dataclass
class Scores:
    mae: float
    spearman: float
    acc_s: float
    acc_delta: float

    def as_dict(self) -> dict[str, float]:
        return {
            "mae_n": self.mae,
            "spearman_s": self.spearman,
            "acc_s_gt_1": self.acc_s,
            "acc_delta_gt_1": self.acc_delta,
        }


def score(data: GavelData, hidden: list[tuple[str, str]], pred: Predictor) -> Scores:
    err: list[float] = []
    s_true: list[float] = []
    s_pred: list[float] = []
    ok_s: list[bool] = []
    ok_d: list[bool] = []
    for a, b in hidden:
        na, nb = data.pairs[(a, b)]
        pa, pb = pred(a, b)
        err.append(abs(na - pa))
        if a != b:
            err.append(abs(nb - pb))
        s_true.append(na + nb)
        s_pred.append(pa + pb)
        ok_s.append((na + nb > 1.0) == (pa + pb > 1.0))
        ok_d.append((2 * min(na, nb) > 1.0) == (2 * min(pa, pb) > 1.0))
    if np.ptp(s_pred) == 0 or np.ptp(s_true) == 0:
        rho = 0.0  # a constant prediction has no ranking
    else:
        rho = float(spearmanr(s_true, s_pred).statistic)
    return Scores(float(np.mean(err)), rho, float(np.mean(ok_s)), float(np.mean(ok_d)))


def _entries(data: GavelData, train: set[tuple[str, str]]) -> list[tuple[str, str, float]]:
    out = []
    for a, b in train:
        na, nb = data.pairs[(a, b)]
        out.append((a, b, na))
        if a != b:
            out.append((b, a, nb))
    return out


def train_mean(data: GavelData, train: set[tuple[str, str]], seed: int = 0) -> Predictor:
    m = float(np.mean([v for _, _, v in _entries(data, train)]))
    return lambda a, b: (m, m)


def train_row_col(
    data: GavelData, train: set[tuple[str, str]], seed: int = 0, ridge: float = 1.0
) -> Predictor:
    """n(a | b) = mu + r_a + c_b, ridge-regularised least squares."""
    cl = data.classes
    ix = {c: i for i, c in enumerate(cl)}
    k = len(cl)
    ent = _entries(data, train)
    x = np.zeros((len(ent), 2 * k + 1))
    y = np.zeros(len(ent))
    for r, (a, b, v) in enumerate(ent):
        x[r, 0] = 1.0
        x[r, 1 + ix[a]] = 1.0
        x[r, 1 + k + ix[b]] = 1.0
        y[r] = v
    reg = ridge * np.eye(2 * k + 1)
    reg[0, 0] = 0.0
    w = np.linalg.solve(x.T @ x + reg, x.T @ y)

    def f(a: str, b: str) -> float:
        return float(w[0] + w[1 + ix[a]] + w[1 + k + ix[b]])

    return lambda a, b: (f(a, b), f(b, a))


def train_model(data: GavelData, train: set[tuple[str, str]], seed: int = 0) -> Predictor:
    table = fit_gavel(data, train, seed=seed)

    def f(a: str, b: str) -> tuple[float, float]:
        p = table.pair(a, b)
        return p.n_a, p.n_b

    return f


TRAINERS: dict[str, Trainer] = {
    "model": train_model,
    "mean of observed pairs": train_mean,
    "row effect + column effect": train_row_col,
}


#: the most seeded splits one evaluation averages (``simulate --seeds`` takes as many)
MAX_SEEDS = 100


def evaluate(
    data: GavelData, hide: float = 0.3, seeds: int = 5, trainers: dict[str, Trainer] | None = None
) -> dict[str, dict[str, float]]:
    """name -> averaged metrics (+ per-seed spread as ``*_sd``)."""
    if not 1 <= seeds <= MAX_SEEDS:
        raise ModelError(f"--seeds must be from 1 to {MAX_SEEDS}, got {seeds}")
    trainers = trainers or TRAINERS
    rows: dict[str, list[dict[str, float]]] = {n: [] for n in trainers}
    for seed in range(seeds):
        train, hidden = split_pairs(data, hide, seed)
        for name, trainer in trainers.items():
            rows[name].append(score(data, hidden, trainer(data, train, seed)).as_dict())
    out: dict[str, dict[str, float]] = {}
    for name, rs in rows.items():
        keys = rs[0].keys()
        out[name] = {k: float(np.mean([r[k] for r in rs])) for k in keys}
        out[name].update({f"{k}_sd": float(np.std([r[k] for r in rs])) for k in keys})
    return out


SYNTHETIC_KINDS = ("time-slice", "contention")


def _standardised(x: np.ndarray) -> np.ndarray:
    s = float(x.std())
    return (x - x.mean()) / s if s > 0 else np.zeros_like(x)


def synthetic_like(
    data: GavelData, seed: int, kind: str = "contention", noise: float = 0.03
) -> GavelData:
    """Seeded data of the same shape as ``data``: the same classes (names, solo rates, so the
    same features), the same measured and out-of-memory pairs, values from a low-rank model.

    Every class gets a latent vector of 3: a random vector of its family, a random linear
    function of its log batch size and log solo rate, and a part of its own. ``time-slice``
    (jobs take turns, like K80): ``n(a | b) = w_a / (w_a + w_b) * overlap(a, b)``, so that
    ``S`` stays near 1. ``contention`` (like V100 with MPS):
    ``n(a | b) = 1 / (1 + demand_b * sensitivity_a * interaction(a, b))``, values clipped at 1.0,
    and a pair with both members clipped is censored, as in the Gavel reader. Each value
    carries a multiplicative measurement noise of ``noise`` (log scale).
    """
    if kind not in SYNTHETIC_KINDS:
        raise ModelError(f"unknown synthetic kind {kind!r}; known: {', '.join(SYNTHETIC_KINDS)}")
    rng = np.random.default_rng(seed)
    cl = data.classes
    fam = [family_and_batch(c)[0] for c in cl]
    batch = np.log2([family_and_batch(c)[1] or 1 for c in cl])
    solo = np.log([data.solo[c] for c in cl])
    fam_vec = {f: rng.normal(size=3) for f in sorted(set(fam))}
    feats = np.c_[_standardised(batch), _standardised(solo)]
    z = (
        0.8 * np.array([fam_vec[f] for f in fam])
        + feats @ (0.6 * rng.normal(size=(2, 3)))
        + 0.4 * rng.normal(size=(len(cl), 3))
    )
    ix = {c: i for i, c in enumerate(cl)}

    def truth(a: str, b: str) -> float:
        i, j = ix[a], ix[b]
        if kind == "time-slice":
            wi, wj = math.exp(0.25 * z[i, 0]), math.exp(0.25 * z[j, 0])
            overlap = math.exp(0.05 + 0.06 * (z[i, 1] + z[j, 1]) + 0.06 * z[i, 2] * z[j, 2])
            return wi / (wi + wj) * overlap
        demand = math.exp(0.6 * z[j, 0] - 0.4)
        sensitivity = math.exp(0.6 * (0.5 * z[i, 0] + 0.87 * z[i, 1]) - 0.4)
        return 1.0 / (1.0 + demand * sensitivity * math.exp(0.5 * z[i, 2] * z[j, 2]))

    out = GavelData(gpu=f"{data.gpu}-{kind}-{seed}", solo=dict(data.solo), never=set(data.never))
    for a, b in data.unordered_pairs():
        na = min(1.0, truth(a, b) * math.exp(noise * rng.normal()))
        nb = na if a == b else min(1.0, truth(b, a) * math.exp(noise * rng.normal()))
        out.pairs[(a, b)], out.pairs[(b, a)] = (na, nb), (nb, na)
        if na >= 1.0 and nb >= 1.0:
            out.censored.update({(a, b), (b, a)})
    return out
