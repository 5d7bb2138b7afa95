"""The simulator's ground truth: measured co-location throughputs (Gavel's V100 data).

A job of class ``a`` sharing a GPU with jobs ``b, c, ...`` progresses at
``n(a|b) * n(a|c) * ...`` times its solo speed: the multiplicative composition, used for
every set of 3+ jobs, the same composition the score table uses for its predictions.
Pairs Gavel could not run (out of memory) cannot co-locate; pairs measured at exactly 1.0
(censored, "at least 1.0") are taken at 1.0. Pure: takes :class:`~slurm_colo.gavel.GavelData`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..gavel import GavelData
from ..scores import ClassInfo, PairScore, ScoreTable


class Truth:
    """True set throughputs, cached per multiset of classes."""

    def __init__(self, data: GavelData) -> None:
        self.data = data
        self.pairs = data.pairs
        self.never = {tuple(sorted(p)) for p in data.never}
        self._cache: dict[tuple[str, ...], dict[str, float] | None] = {}

    def classes(self) -> list[str]:
        return self.data.classes

    def rates(self, classes: Sequence[str]) -> dict[str, float] | None:
        """Class -> normalised throughput of each member of the set, or None when the set
        holds a pair that cannot run together. One-member sets run at 1.0."""
        key = tuple(sorted(classes))
        if key in self._cache:
            return self._cache[key]
        out: dict[str, float] | None = {}
        k = len(key)
        n = [1.0] * k
        for i in range(k):
            for j in range(i + 1, k):
                a, b = key[i], key[j]
                if (a, b) in self.never or (a, b) not in self.pairs:
                    out = None
                    break
                na, nb = self.pairs[(a, b)]
                n[i] *= na
                n[j] *= nb
            if out is None:
                break
        if out is not None:
            out = {key[i]: n[i] for i in range(k)}
        self._cache[key] = out
        return out

    def pair(self, a: str, b: str) -> tuple[float, float] | None:
        return self.pairs.get((a, b))


def oracle_scores(data: GavelData, error: float = 0.0, seed: int = 0) -> ScoreTable:
    """A score table that knows the truth: every measured pair, no uncertainty.

    ``error`` > 0: each measured throughput is off by a seeded uniform factor within
    ``1 ± error`` (0.01: ±1 %), which pairs cannot run together stays exact. This is an
    oracle that is almost right, to measure how far a near-perfect prediction moves one
    seed's results from the exact oracle's."""
    if not 0.0 <= error < 1.0:
        raise ValueError(f"oracle error {error:g}: give a share from 0 to below 1")
    rng = random.Random(f"oracle-error {seed}")

    def off(n: float) -> float:
        return n * (1.0 + rng.uniform(-error, error)) if error else n

    t = ScoreTable(id=f"oracle-{data.gpu}", gpu_model=data.gpu, prior_n=0.0, prior_sd=1.0)
    for c in data.classes:
        t.classes[c] = ClassInfo(solo_rate=data.solo[c])
    for (a, b), (na, nb) in data.pairs.items():
        if a <= b:
            t.pairs[(a, b)] = PairScore(off(na), off(nb), 0.0, observed=True)
    for a, b in data.never:
        if a <= b:
            t.pairs[(a, b)] = PairScore(0.0, 0.0, 0.0, observed=True, never=True)
    return t


def split_pairs(
    data: GavelData, hidden_share: float, seed: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Seeded split of the measured pairs (each once, a <= b) into (train, hidden)."""
    pairs = data.unordered_pairs()
    rng = random.Random(seed)
    idx = list(range(len(pairs)))
    rng.shuffle(idx)
    n_hidden = round(hidden_share * len(pairs))
    hidden = sorted(pairs[i] for i in idx[:n_hidden])
    train = sorted(pairs[i] for i in idx[n_hidden:])
    return train, hidden
