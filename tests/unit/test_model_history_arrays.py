"""member_pair_episodes (arrays, the nightly retrain) equals pair_episodes (tuples)."""

from __future__ import annotations

import random

import numpy as np

from slurm_colo.model.data import Observations
from slurm_colo.model.history import (
    SOURCE_WEIGHT,
    PairEpisodes,
    add_pair_episodes,
    member_pair_episodes,
    pair_episodes,
)


def test_arrays_give_the_same_pairs_as_tuples() -> None:
    rng = random.Random(3)
    classes = ["a", "b", "c", "d"]
    sources = ["progress", "duration", "null"]
    episodes = []
    for _ in range(300):
        start = rng.uniform(0, 1e6)
        end = start + rng.choice([0.0, rng.uniform(1, 7200)])  # some empty: left out
        members = [
            (j, rng.choice(classes), rng.choice([None, rng.uniform(0, 1.5)]), rng.choice(sources))
            for j in range(rng.choice([2, 2, 3, 4]))
        ]
        episodes.append((start, end, members, rng.random() < 0.05, rng.random() < 0.05))
    want = pair_episodes(episodes)
    got = _arrays(episodes)

    def rows(p: PairEpisodes) -> list[tuple[object, ...]]:
        cols = [p.n_a, p.n_b, p.hours, p.end, p.quality_a, p.quality_b]
        return sorted(
            (
                p.classes[int(a)],
                p.classes[int(b)],
                *[-1.0 if np.isnan(x[i]) else round(float(x[i]), 9) for x in cols],
                bool(f),
                bool(o),
            )
            for i, (a, b, f, o) in enumerate(zip(p.a, p.b, p.fault, p.oom, strict=True))
        )

    assert len(got.a) == len(want.a) > 300
    assert rows(got) == rows(want)
    o1, o2 = Observations(), Observations()
    assert add_pair_episodes(o1, got, 1e6, 30.0) == add_pair_episodes(o2, want, 1e6, 30.0)
    assert o1.faults == o2.faults and o1.never == o2.never


def test_no_pairs() -> None:
    z = np.zeros(0)
    p = member_pair_episodes(
        [], z, z, z.astype(bool), z.astype(bool), z.astype(np.int64), z.astype(np.int64), z, z
    )
    assert len(p.a) == 0 and p.classes == []


Member = tuple[int, str, float | None, str]
Episode = tuple[float, float, list[Member], bool, bool]


def _ep(t: float, *members: tuple[str, float]) -> Episode:
    """An hour's episode of ``members`` (class, rate), each reporting progress."""
    ms: list[Member] = [(i, c, n, "progress") for i, (c, n) in enumerate(members)]
    return (t, t + 3600, ms, False, False)


def _rates(p: PairEpisodes) -> dict[tuple[str, str, float], float]:
    """(class, partner, episode end) -> the class's rate given to that partner."""
    return {
        (p.classes[int(a)], p.classes[int(b)], float(e)): round(float(na), 6)
        for a, b, na, e in zip(p.a, p.b, p.n_a, p.end, strict=True)
    }


def test_a_set_of_three_gives_its_slowdown_to_the_partner_that_slows_it_alone() -> None:
    # x ran at 0.6 next to a alone and at full speed next to b alone; in a set of the three
    # it ran at 0.5: a takes the whole slowdown, b none (an even split gave each 0.71)
    episodes = [
        _ep(0.0, ("x", 0.6), ("a", 0.9)),
        _ep(4e3, ("x", 1.0), ("b", 0.9)),
        _ep(9e3, ("x", 0.5), ("a", 0.8), ("b", 0.9)),
        # with c, never measured alone with x, the split is even
        _ep(2e4, ("x", 0.49), ("a", 0.8), ("c", 0.9)),
    ]
    for p in (pair_episodes(episodes), _arrays(episodes)):
        got = _rates(p)
        assert got[("x", "a", 9e3 + 3600)] == 0.5 and got[("x", "b", 9e3 + 3600)] == 1.0
        assert got[("x", "a", 2e4 + 3600)] == 0.7 == got[("x", "c", 2e4 + 3600)]


def test_a_history_with_a_class_per_job_needs_no_class_by_class_matrix() -> None:
    # a year of jobs named afresh for each run: 200,000 classes (a matrix of every pair of
    # them, as the split of a set's slowdown once read, would be 298 GiB); the few sets of
    # three still split by what their members showed alone
    episodes = [
        _ep(0.0, ("x", 0.6), ("a", 0.9)),
        _ep(4e3, ("x", 1.0), ("b", 0.9)),
        _ep(9e3, ("x", 0.5), ("a", 0.8), ("b", 0.9)),
    ]
    p = _arrays(episodes, [f"run-{k:06d}" for k in range(200_000)])
    got = _rates(p)
    assert p.classes == ["a", "b", "x"]  # only the classes that take part in a pair
    assert got[("x", "a", 9e3 + 3600)] == 0.5 and got[("x", "b", 9e3 + 3600)] == 1.0


def _arrays(episodes: list[Episode], more_classes: list[str] | None = None) -> PairEpisodes:
    """:func:`member_pair_episodes` on the same episodes as arrays (the class list holding
    ``more_classes`` too, as the history's does: every class of the window)."""
    classes = sorted({m[1] for e in episodes for m in e[2]}) + (more_classes or [])
    members = [m for e in episodes for m in e[2]]
    return member_pair_episodes(
        classes,
        np.array([e[0] for e in episodes]),
        np.array([e[1] for e in episodes]),
        np.array([e[3] for e in episodes]),
        np.array([e[4] for e in episodes]),
        np.repeat(np.arange(len(episodes)), [len(e[2]) for e in episodes]),
        np.array([classes.index(m[1]) for m in members]),
        np.array([np.nan if m[2] is None else m[2] for m in members]),
        np.array([SOURCE_WEIGHT.get(m[3], 0.0) for m in members]),
    )
