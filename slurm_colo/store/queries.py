"""Read-only queries of the history (``slurm-colo history``)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from ..errors import StoreError
from .engine import db_errors, require_schema
from .schema import CoRunnerRow, Episode, Job, Profile

_REL = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now: float | None = None) -> float:
    """``2026-11-01``, ``2026-11-01T12:00``, ``7d``/``12h`` (ago) or epoch seconds -> epoch."""
    t = text.strip()
    now = time.time() if now is None else now
    m = _REL.match(t)
    if m:
        return now - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        return float(t)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise StoreError(
            f"cannot read time {text!r}: use 2026-11-01, 2026-11-01T12:00, 7d, 12h or epoch seconds"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def query_jobs(
    engine: Engine,
    user: str | None = None,
    cls: str | None = None,
    node: str | None = None,
    since: float | None = None,
    until: float | None = None,
    limit: int = 100,
    gpu_model: str | None = None,
) -> list[dict[str, Any]]:
    """Jobs (newest first) with their co-runner count and profile summary."""
    require_schema(engine)
    co = (
        select(CoRunnerRow.record_id, func.count().label("n"))
        .group_by(CoRunnerRow.record_id)
        .subquery()
    )
    q = (
        select(
            Job.job_id,
            Job.cluster,
            Job.node,
            Job.gpu_model,
            Job.user,
            Job.cls,
            Job.start_time,
            Job.end_time,
            Job.shared,
            Job.mechanism,
            Job.state,
            Job.mps_fault,
            Job.progress_rate,
            Profile.sm_util_mean,
            Profile.mem_peak_gib,
            func.coalesce(co.c.n, 0).label("co_runners"),
        )
        .join(Profile, Profile.record_id == Job.record_id, isouter=True)
        .join(co, co.c.record_id == Job.record_id, isouter=True)
    )
    if user:
        q = q.where(Job.user == user)
    if cls:
        q = q.where(Job.cls == cls)
    if node:
        q = q.where(Job.node == node)
    if gpu_model is not None:
        q = q.where(Job.gpu_model == gpu_model)
    if since is not None:
        q = q.where(Job.end_time >= since)
    if until is not None:
        q = q.where(Job.start_time <= until)
    q = q.order_by(Job.start_time.desc()).limit(max(1, limit))
    with db_errors(engine), engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


def counts(engine: Engine) -> dict[str, int]:
    require_schema(engine)
    with db_errors(engine), engine.connect() as conn:
        return {
            "jobs": conn.scalar(select(func.count()).select_from(Job)) or 0,
            "episodes": conn.scalar(select(func.count()).select_from(Episode)) or 0,
        }
