"""Observations from co-location episodes (the store's history). Pure.

An episode is an interval with a constant set of jobs on one GPU; each member carries its
normalised throughput while shared (or none) and how it was obtained. Pairs give the
entries ``n(a | b)`` and ``n(b | a)``; in a set of k >= 3 jobs a member's throughput is the
product over its partners (the composition rule of the score table), so each partner gets
a share of it, at half weight: ``n ** s``, the shares ``s`` in proportion to the member's
mean log throughput next to each partner alone in the same history (pair episodes,
:func:`alone_logs`), or ``1 / (k - 1)`` each when a partner was never measured alone with
it or none slowed it (:func:`slurm_colo.scores.slowdown_shares`, the rule the probe uses).
Weight = hours shared x ``0.5 ** (age / half-life)`` x a source factor (job-reported
progress 1.0, the duration proxy :data:`PROXY_WEIGHT`).
Fatal MPS faults count per pair; out-of-memory while sharing marks the pair never.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..scores import EVEN_BELOW, LOG_FLOOR, log_rate, slowdown_shares
from .data import Observations

PROXY_WEIGHT = 0.3
SOURCE_WEIGHT = {"progress": 1.0, "duration": PROXY_WEIGHT}


@dataclass
class PairEpisodes:
    """Pair episodes as arrays (the form the nightly retrain and the benchmark use)."""

    classes: list[str]
    a: np.ndarray  # class index of the first member
    b: np.ndarray
    n_a: np.ndarray  # NaN when unknown
    n_b: np.ndarray
    hours: np.ndarray  # duration x 1/(k-1) share
    end: np.ndarray  # epoch seconds
    quality_a: np.ndarray  # source factor of each member's value
    quality_b: np.ndarray
    fault: np.ndarray
    oom: np.ndarray


def pair_episodes(
    episodes: Iterable[
        tuple[float, float, Sequence[tuple[int, str, float | None, str]], bool, bool]
    ],
) -> PairEpisodes:
    """(start, end, members, mps_fault, oom) tuples -> :class:`PairEpisodes`."""
    episodes = [e for e in episodes if len(e[2]) >= 2 and e[1] > e[0]]
    sums: dict[tuple[str, str], list[float]] = {}
    for start, end, members, _, _ in episodes:
        if len(members) == 2:
            for (_, ca, na, sa), (_, cb, _, _) in (members, members[::-1]):
                w = (end - start) / 3600.0 * SOURCE_WEIGHT.get(sa, 0.0)
                if na is not None and na >= 0 and w > 0:
                    acc = sums.setdefault((ca, cb), [0.0, 0.0])
                    acc[0] += w * log_rate(na)
                    acc[1] += w
    alone = {key: t / w for key, (t, w) in sums.items()}
    ix: dict[str, int] = {}
    cols: list[list[float]] = [[] for _ in range(10)]
    for start, end, members, fault, oom in episodes:
        k = len(members)
        share = 1.0 / (k - 1)
        for i in range(k):
            for j in range(i + 1, k):
                _, ca, na, sa = members[i]
                _, cb, nb, sb = members[j]
                sh_a = _share(alone, members, i, j)
                sh_b = _share(alone, members, j, i)
                ea = na**sh_a if na is not None and na >= 0 else np.nan
                eb = nb**sh_b if nb is not None and nb >= 0 else np.nan
                qa = SOURCE_WEIGHT.get(sa, 0.0) * (1.0 if k == 2 else 0.5)
                qb = SOURCE_WEIGHT.get(sb, 0.0) * (1.0 if k == 2 else 0.5)
                row = [
                    ix.setdefault(ca, len(ix)),
                    ix.setdefault(cb, len(ix)),
                    ea,
                    eb,
                    (end - start) / 3600.0 * share,
                    end,
                    qa,
                    qb,
                    float(fault),
                    float(oom),
                ]
                for c, v in zip(cols, row):
                    c.append(v)
    arr = [np.asarray(c, float) for c in cols]
    return PairEpisodes(
        list(ix),
        arr[0].astype(np.int64),
        arr[1].astype(np.int64),
        arr[2],
        arr[3],
        arr[4],
        arr[5],
        arr[6],
        arr[7],
        arr[8] > 0,
        arr[9] > 0,
    )


def _share(
    alone: dict[tuple[str, str], float],
    members: Sequence[tuple[int, str, float | None, str]],
    i: int,
    j: int,
) -> float:
    """Member ``i``'s share of its slowdown that goes to partner ``j``
    (:func:`~slurm_colo.scores.slowdown_shares` of its means alone)."""
    if len(members) == 2:
        return 1.0
    partners = [y for y in range(len(members)) if y != i]
    shares = slowdown_shares([alone.get((members[i][1], members[y][1])) for y in partners])
    return shares[partners.index(j)]


@dataclass(frozen=True)
class AloneLogs:
    """Weighted mean log throughput of class ``a`` next to class ``b`` alone, for the pairs
    measured (sparse: a history of jobs named afresh for each run has a class per job, and
    a ``classes x classes`` matrix of them would not fit in memory)."""

    classes: int
    keys: np.ndarray  # a * classes + b, sorted
    values: np.ndarray

    def at(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The value of each (``a``, ``b``), NaN where that pair was not measured."""
        q = np.asarray(a, np.int64) * self.classes + np.asarray(b, np.int64)
        if len(self.keys) == 0:
            return np.full(q.shape, np.nan)
        pos = np.minimum(np.searchsorted(self.keys, q), len(self.keys) - 1)
        return np.where(self.keys[pos] == q, self.values[pos], np.nan)


def alone_logs(
    classes: int, a: np.ndarray, b: np.ndarray, n: np.ndarray, weight: np.ndarray
) -> AloneLogs:
    """Weighted mean log throughput of class ``a`` next to ``b`` over pair episodes (``n``
    of ``a``, NaN or negative unknown; clamped to [1e-6, 1]), per pair measured."""
    ok = ~np.isnan(n) & (n >= 0) & (weight > 0)
    key = a[ok].astype(np.int64) * classes + b[ok]
    w = weight[ok]
    logs = np.log(np.clip(n[ok], LOG_FLOOR, 1.0))
    uniq, inv = np.unique(key, return_inverse=True)
    tw = np.bincount(inv, weights=w, minlength=len(uniq))
    tl = np.bincount(inv, weights=w * logs, minlength=len(uniq))
    has = tw > 0
    return AloneLogs(classes, uniq[has], tl[has] / tw[has])


def member_pair_episodes(
    classes: list[str],
    start: np.ndarray,
    end: np.ndarray,
    fault: np.ndarray,
    oom: np.ndarray,
    episode: np.ndarray,
    cls: np.ndarray,
    n: np.ndarray,
    quality: np.ndarray,
) -> PairEpisodes:
    """:func:`pair_episodes` on arrays: episodes (``start``, ``end``, ``fault``, ``oom``)
    and their members grouped by episode (``episode`` indexes the episode arrays, ``cls``
    indexes ``classes``, ``n`` is NaN when unknown, ``quality`` the member's source factor)."""
    k = np.bincount(episode, minlength=len(start))
    first = np.cumsum(k) - k
    cols: list[list[np.ndarray]] = [[] for _ in range(10)]
    pairs = np.nonzero((k == 2) & (end > start))[0]
    hours2 = np.tile((end[pairs] - start[pairs]) / 3600.0, 2)
    p1, p2 = first[pairs], first[pairs] + 1
    alone = alone_logs(
        len(classes),
        cls[np.concatenate([p1, p2])],
        cls[np.concatenate([p2, p1])],
        n[np.concatenate([p1, p2])],
        hours2 * quality[np.concatenate([p1, p2])],
    )
    for kk in np.unique(k[k >= 2]).tolist():
        eps = np.nonzero((k == kk) & (end > start))[0]
        if len(eps) == 0:
            continue
        i, j = np.triu_indices(kk, 1)
        ia = (first[eps][:, None] + i[None, :]).ravel()
        ib = (first[eps][:, None] + j[None, :]).ravel()
        e = np.repeat(eps, len(i))
        share = 1.0 / (kk - 1)
        half = 1.0 if kk == 2 else 0.5
        shares = _shares(alone, cls[first[eps][:, None] + np.arange(kk)[None, :]])
        sh_a, sh_b = shares[:, i, j].ravel(), shares[:, j, i].ravel()
        with np.errstate(invalid="ignore"):
            na = np.where(n[ia] >= 0, n[ia] ** sh_a, np.nan)
            nb = np.where(n[ib] >= 0, n[ib] ** sh_b, np.nan)
        for c, v in zip(
            cols,
            (
                cls[ia],
                cls[ib],
                na,
                nb,
                (end[e] - start[e]) / 3600.0 * share,
                end[e],
                quality[ia] * half,
                quality[ib] * half,
                fault[e],
                oom[e],
            ),
            strict=True,
        ):
            c.append(v)
    if not cols[0]:
        z = np.zeros(0)
        return PairEpisodes(
            [],
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            z,
            z,
            z,
            z,
            z,
            z,
            np.zeros(0, bool),
            np.zeros(0, bool),
        )
    a, b, na, nb, hours, e_end, qa, qb, f, o = (np.concatenate(c) for c in cols)
    # only the classes that take part in a pair, as pair_episodes does
    used, inv = np.unique(np.concatenate([a, b]), return_inverse=True)
    return PairEpisodes(
        [classes[int(x)] for x in used],
        inv[: len(a)].astype(np.int64),
        inv[len(a) :].astype(np.int64),
        na,
        nb,
        hours,
        e_end,
        qa,
        qb,
        f.astype(bool),
        o.astype(bool),
    )


def _shares(alone: AloneLogs, members: np.ndarray) -> np.ndarray:
    """``[e, x, y]``: the share of member ``x``'s slowdown that goes to partner ``y`` in
    episode ``e`` (``members``: episodes x k class indexes): :func:`_share` for a whole
    array of episodes at once."""
    kk = members.shape[1]
    if kk == 2:
        return np.ones((len(members), 2, 2))
    logs = alone.at(*np.broadcast_arrays(members[:, :, None], members[:, None, :]))
    partner = ~np.eye(kk, dtype=bool)[None, :, :]
    known = np.where(partner, ~np.isnan(logs), True).all(axis=2)
    total = np.where(partner, np.nan_to_num(logs), 0.0).sum(axis=2)
    split = known & (total <= -EVEN_BELOW)
    with np.errstate(invalid="ignore", divide="ignore"):
        prop = logs / np.where(split, total, 1.0)[:, :, None]
    return np.where(split[:, :, None], prop, 1.0 / (kk - 1))


def add_pair_episodes(
    obs: Observations, ep: PairEpisodes, now: float, half_life_days: float
) -> int:
    """Add the entries, faults and never-pairs of ``ep`` to ``obs``; returns entries kept."""
    if len(ep.a) == 0:
        for c in ep.classes:
            obs.add_class(c)
        return 0
    age_days = np.maximum(now - ep.end, 0.0) / 86400.0
    rec = 0.5 ** (age_days / half_life_days) if half_life_days > 0 else np.ones_like(age_days)
    base = ep.hours * rec
    ok = ~(ep.fault | ep.oom)
    kept = obs.add_arrays(
        ep.classes,
        np.concatenate([ep.a[ok], ep.b[ok]]),
        np.concatenate([ep.b[ok], ep.a[ok]]),
        np.concatenate([ep.n_a[ok], ep.n_b[ok]]),
        np.concatenate([(base * ep.quality_a)[ok], (base * ep.quality_b)[ok]]),
    )
    k = len(ep.classes)
    for mask, fn in ((ep.fault, obs.add_fault), (ep.oom, None)):
        if not mask.any():
            continue
        lo = np.minimum(ep.a[mask], ep.b[mask])
        hi = np.maximum(ep.a[mask], ep.b[mask])
        keys, cnt = np.unique(lo * k + hi, return_counts=True)
        for x, c in zip(keys, cnt):
            a, b = ep.classes[int(x) // k], ep.classes[int(x) % k]
            if fn is None:
                obs.add_never(a, b)
            else:
                fn(a, b, float(c))
    return kept
