"""Offline evaluation on a profiling campaign: hide a seeded share of the measured pairs,
train on the rest (solo rates stay known), score the hidden pairs. Pure.

Metrics (averaged over seeds): mean absolute error of n (both members), Spearman rank
correlation of the combined throughput S = n_a + n_b, and the accuracy of the decisions
"S > 1" and "delta > 1" (delta = 2 min(n_a, n_b)). Baselines: "mean of observed pairs"
and "row effect + column effect" (ridge-regularised additive model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import spearmanr

from ..errors import ModelError
from ..gavel import GavelData
from .fit import fit_gavel

Predictor = Callable[[str, str], tuple[float, float]]
Trainer = Callable[[GavelData, set[tuple[str, str]], int], Predictor]


def split_pairs(data: GavelData, hide: float, seed: int) -> tuple[set[tuple[str, str]], list[tuple[str, str]]]:
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
        return {"mae_n": self.mae, "spearman_s": self.spearman, "acc_s_gt_1": self.acc_s,
                "acc_delta_gt_1": self.acc_delta}


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


def train_row_col(data: GavelData, train: set[tuple[str, str]], seed: int = 0,
                  ridge: float = 1.0) -> Predictor:
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


def evaluate(data: GavelData, hide: float = 0.3, seeds: int = 5,
             trainers: dict[str, Trainer] | None = None) -> dict[str, dict[str, float]]:
    """name -> averaged metrics (+ per-seed spread as ``*_sd``)."""
    if seeds < 1:
        raise ModelError(f"--seeds must be at least 1, got {seeds}")
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
