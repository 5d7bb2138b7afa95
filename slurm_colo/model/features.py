"""Side features of a class, used for similarity between classes (and so for pairs never
measured together and for brand-new classes with only a solo profile).

Groups: family (from the name, ``resnet18-bs64`` -> ``resnet18``), log batch size, log solo
rate, SM utilisation, log memory. Each group gives a squared-distance matrix; the model
learns one weight per group, so a group that does not help is switched off by the data.
Unknown values sit at the group mean (distance 0 to everything: no information). Pure.
"""

from __future__ import annotations

import math

import numpy as np

from .data import ClassProfile, family_and_batch

GROUPS = ("family", "batch", "solo_rate", "sm_util", "memory")


def _standardise(vals: list[float | None]) -> np.ndarray:
    known = np.array([v for v in vals if v is not None], float)
    out = np.zeros(len(vals))
    if known.size < 2 or float(known.std()) < 1e-12:
        return out
    m, s = float(known.mean()), float(known.std())
    for i, v in enumerate(vals):
        if v is not None:
            out[i] = (v - m) / s
    return out


def _sqdist(x: np.ndarray) -> np.ndarray:
    if x.ndim == 1:
        x = x[:, None]
    sq = (x * x).sum(1)
    d = sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)
    return np.maximum(d, 0.0)


def class_distances(classes: list[str], profiles: dict[str, ClassProfile]) -> list[np.ndarray]:
    """One squared-distance matrix per feature group, in :data:`GROUPS` order."""
    fam_bs = [family_and_batch(c) for c in classes]
    fams = sorted({f for f, _ in fam_bs})
    fam_ix = {f: i for i, f in enumerate(fams)}
    onehot = np.zeros((len(classes), len(fams)))
    for i, (f, _) in enumerate(fam_bs):
        onehot[i, fam_ix[f]] = 1.0
    bs = _standardise([math.log2(b) if b else None for _, b in fam_bs])
    prof = [profiles.get(c) or ClassProfile() for c in classes]
    solo = _standardise([math.log(p.solo_rate) if p.solo_rate else None for p in prof])
    util = _standardise([p.sm_util for p in prof])
    mem = _standardise([math.log(p.memory_gib) if p.memory_gib else None for p in prof])
    return [_sqdist(onehot) * 0.5, _sqdist(bs), _sqdist(solo), _sqdist(util), _sqdist(mem)]
