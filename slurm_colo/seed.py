"""A score table straight from measured pair data (no model): the hand-loaded table the
lab and tests use, and the "oracle" the simulator compares against."""

from __future__ import annotations

import datetime as dt

from .gavel import GavelData
from .scores import ClassInfo, PairScore, ScoreTable


def table_from_measurements(data: GavelData, sd: float = 0.03) -> ScoreTable:
    t = ScoreTable(
        id=f"measured-{data.gpu}",
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        gpu_model=data.gpu,
        classes={c: ClassInfo(solo_rate=r) for c, r in data.solo.items()},
        training={"source": f"measured pairs ({data.gpu})", "model": "none (measured values)"},
    )
    for a, b in data.unordered_pairs():
        na, nb = data.pairs[(a, b)]
        t.pairs[(a, b)] = PairScore(na, nb, sd, observed=True)
    for a, b in data.never:
        if a <= b:
            t.pairs[(a, b)] = PairScore(0.0, 0.0, 0.0, observed=True, never=True)
    return t
