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
    got = member_pair_episodes(
        classes,
        np.array([e[0] for e in episodes]),
        np.array([e[1] for e in episodes]),
        np.array([e[3] for e in episodes]),
        np.array([e[4] for e in episodes]),
        np.repeat(np.arange(len(episodes)), [len(e[2]) for e in episodes]),
        np.array([classes.index(m[1]) for e in episodes for m in e[2]]),
        np.array([np.nan if m[2] is None else m[2] for e in episodes for m in e[2]]),
        np.array([SOURCE_WEIGHT.get(m[3], 0.0) for e in episodes for m in e[2]]),
    )

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
