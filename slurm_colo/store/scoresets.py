"""Score sets in the database (versioned, with window and metrics) and which one is live;
imported profiling campaigns (pair observations and class solo figures)."""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Engine

from ..errors import StoreError
from ..gavel import GavelData
from ..scores import ScoreTable, scores_from_dict
from .engine import db_errors, require_schema
from .schema import ClassSolo, LiveScoreSet, PairObservation, ScoreSet


def record_score_set(
    engine: Engine,
    table: ScoreTable,
    status: str,
    message: str = "",
    window: tuple[float | None, float | None] = (None, None),
    n_entries: int = 0,
) -> None:
    require_schema(engine)
    row = {
        "id": table.id,
        "created": time.time(),
        "gpu_model": table.gpu_model,
        "window_start": window[0],
        "window_end": window[1],
        "n_entries": n_entries,
        "status": status,
        "message": message,
        "metrics": json.dumps(table.metrics),
        "table_json": json.dumps(table.to_dict()),
    }
    with db_errors(engine), engine.begin() as conn:
        conn.execute(insert(ScoreSet), [row])


def free_score_set_id(engine: Engine, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``... when a set of that id exists (two retrains
    within one second)."""
    require_schema(engine)
    with db_errors(engine), engine.connect() as conn:
        taken = set(conn.scalars(select(ScoreSet.id).where(ScoreSet.id.startswith(base))))
    k, sid = 1, base
    while sid in taken:
        k += 1
        sid = f"{base}-{k}"
    return sid


def set_live(engine: Engine, score_set_id: str, gpu_model: str) -> None:
    """Mark ``score_set_id`` live for ``gpu_model``; the previous live set is retired."""
    require_schema(engine)
    with db_errors(engine), engine.begin() as conn:
        old = conn.scalar(
            select(LiveScoreSet.score_set_id).where(LiveScoreSet.gpu_model == gpu_model)
        )
        if old is not None:
            conn.execute(update(ScoreSet).where(ScoreSet.id == old).values(status="retired"))
            conn.execute(delete(LiveScoreSet).where(LiveScoreSet.gpu_model == gpu_model))
        conn.execute(update(ScoreSet).where(ScoreSet.id == score_set_id).values(status="live"))
        conn.execute(
            insert(LiveScoreSet),
            [{"gpu_model": gpu_model, "score_set_id": score_set_id, "since": time.time()}],
        )


def live_score_set(engine: Engine, gpu_model: str) -> ScoreTable | None:
    require_schema(engine)
    with db_errors(engine), engine.connect() as conn:
        sid = conn.scalar(
            select(LiveScoreSet.score_set_id).where(LiveScoreSet.gpu_model == gpu_model)
        )
        if sid is None:
            return None
        raw = conn.scalar(select(ScoreSet.table_json).where(ScoreSet.id == sid))
    if raw is None:
        raise StoreError(f"live score set {sid} is missing from score_sets")
    return scores_from_dict(json.loads(raw), f"score set {sid}")


def list_score_sets(engine: Engine, limit: int = 20) -> list[dict[str, Any]]:
    require_schema(engine)
    q = (
        select(
            ScoreSet.id,
            ScoreSet.created,
            ScoreSet.gpu_model,
            ScoreSet.status,
            ScoreSet.n_entries,
            ScoreSet.message,
            ScoreSet.metrics,
        )
        .order_by(ScoreSet.created.desc())
        .limit(limit)
    )
    with db_errors(engine), engine.connect() as conn:
        return [dict(r._mapping) | {"metrics": json.loads(r.metrics)} for r in conn.execute(q)]


def import_gavel(engine: Engine, data: GavelData, source: str | None = None) -> tuple[int, int]:
    """Store a profiling campaign as pair observations (replacing an earlier import of the
    same source). Returns (classes, pairs) stored; absent pairs are simply not stored."""
    require_schema(engine)
    src = source or f"gavel:{data.gpu}"
    now = time.time()
    pairs = []
    for a, b in data.unordered_pairs():
        na, nb = data.pairs[(a, b)]
        pairs.append(
            {
                "source": src,
                "gpu_model": data.gpu,
                "a": a,
                "b": b,
                "n_a": na,
                "n_b": nb,
                "weight": 1.0,
                "censored": (a, b) in data.censored,
                "never": False,
                "faults": 0.0,
                "observed_at": now,
            }
        )
    for a, b in sorted({(min(x, y), max(x, y)) for x, y in data.never}):
        pairs.append(
            {
                "source": src,
                "gpu_model": data.gpu,
                "a": a,
                "b": b,
                "n_a": None,
                "n_b": None,
                "weight": 1.0,
                "censored": False,
                "never": True,
                "faults": 0.0,
                "observed_at": now,
            }
        )
    solos = [
        {
            "source": src,
            "gpu_model": data.gpu,
            "cls": c,
            "solo_rate": r,
            "memory_gib": None,
            "sm_util": None,
        }
        for c, r in sorted(data.solo.items())
    ]
    with db_errors(engine), engine.begin() as conn:
        conn.execute(delete(PairObservation).where(PairObservation.source == src))
        conn.execute(delete(ClassSolo).where(ClassSolo.source == src))
        if pairs:
            conn.execute(insert(PairObservation), pairs)
        if solos:
            conn.execute(insert(ClassSolo), solos)
    return len(solos), len(pairs)


def imported_gpu_models(engine: Engine) -> list[str]:
    require_schema(engine)
    with db_errors(engine), engine.connect() as conn:
        return sorted(set(conn.scalars(select(ClassSolo.gpu_model).distinct())))
