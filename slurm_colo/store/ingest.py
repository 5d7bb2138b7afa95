"""Idempotent ingest of per-job records (``slurm_colo.contracts.records.JobRecord``).

:func:`ingest_records` stores records keyed by ``record_id``: ingesting a record twice
stores it once; :func:`record_from_json` checks one record as read from anywhere (a spool
file, a message). A locked database raises :class:`StoreError`: nothing of the failed batch
is written. Reading a spool directory is :mod:`slurm_colo.spool.ingest`'s job.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import String, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from slurm_colo.contracts.records import UID_MAX, JobRecord

from ..errors import StoreError
from .engine import db_errors, require_schema
from .schema import CoRunnerRow, Job, Profile

log = logging.getLogger("slurm_colo.store")

BATCH = 2000
_PROFILE_KEYS = (
    "sm_util_mean",
    "sm_util_p95",
    "mem_used_mean_gib",
    "mem_peak_gib",
    "mem_bw_util_mean",
    "power_w_mean",
    "samples",
    "solo_s",
)


class BadRecord(ValueError):
    """A record that cannot be stored as it is (the message says why)."""


def _num(v: Any) -> float | None:
    """A finite non-negative number, else None (NaN, negative, text are dropped)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a whole number past 1e308
        return None
    return f if math.isfinite(f) and f >= 0 else None


def _short(v: Any) -> str:
    """A value as a reason shows it: its repr, cut to 40 characters."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _finite(v: Any) -> bool:
    """A number a float holds: not text, not a bool, not NaN or infinite, not past 1e308."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _column_length(name: str) -> int:
    """The length of a string column of the jobs table, as the schema declares it."""
    column_type = Job.__table__.c[name].type
    assert isinstance(column_type, String) and column_type.length is not None
    return column_type.length


#: the largest value of the database's INTEGER and BIGINT columns (PostgreSQL's; SQLite's
#: integers are 64-bit): a larger one makes the database refuse the whole batch
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_no_nul(r: JobRecord) -> None:
    """PostgreSQL's text cannot hold a NUL character (the whole batch would be refused)."""
    named: list[tuple[str, Any]] = [
        (n, getattr(r, n))
        for n in ("cluster", "node", "user", "cls", "mechanism", "state", "gpu_model")
    ]
    named += [("gres_type", r.gres_type), ("gpu_name", r.gpu_name), ("mode", str(r.mode))]
    named += [("gpu_uuids", str(u)) for u in r.gpu_uuids]
    named += [(f"co-runner {c.job_id}", f"{c.cls} {c.user}") for c in r.co_runners]
    for name, v in named:
        if isinstance(v, str) and "\x00" in v:
            raise BadRecord(f"{name} {v!r} contains a NUL character")


def check_record(r: JobRecord) -> None:
    """Raise :class:`BadRecord` for a record that cannot be stored."""
    if not _whole(r.job_id) or not 0 <= r.job_id <= INT64_MAX:
        raise BadRecord(f"job_id {r.job_id!r} is not a non-negative 64-bit integer")
    for name in ("node", "user", "cls", "cluster"):
        v = getattr(r, name)
        if not isinstance(v, str) or not v or len(v) > 128:
            raise BadRecord(f"{name} {v!r} is not a non-empty string of at most 128 characters")
    # the columns' lengths: PostgreSQL refuses a longer value (and with it the whole batch)
    for name in ("cls", "user", "cluster", "mode", "mechanism"):
        v = getattr(r, name)
        if name == "mechanism" and v is None:
            continue
        if name == "mode":
            v = str(v)  # stored as its text
        most = _column_length(name)
        if not isinstance(v, str) or len(v) > most:
            raise BadRecord(f"{name} {v!r} is not a string of at most {most} characters")
    for name in ("start", "end"):
        v = getattr(r, name)
        if not _finite(v) or v < 0:
            raise BadRecord(f"{name} time {_short(v)} is not a finite epoch time")
    if r.end < r.start:
        raise BadRecord(
            f"job ends ({r.end}) before it starts ({r.start}): clock skew or a corrupt record"
        )
    for name in ("gpu_model", "gres_type", "gpu_name"):
        v = getattr(r, name)
        most = _column_length(name)
        if not isinstance(v, str) or (len(v) > most and name != "gpu_name"):
            raise BadRecord(f"{name} {v!r} is not a string of at most {most} characters")
    most = _column_length("record_id")
    if len(r.record_id) > most:
        raise BadRecord(f"record id {r.record_id!r} is longer than {most} characters")
    for name in ("uid", "exit_code", "version"):
        v = getattr(r, name)
        # a uid is an unsigned 32-bit number (-1: unknown); the others fit a signed one
        most = UID_MAX if name == "uid" else INT32_MAX
        if not _whole(v) or not -INT32_MAX - 1 <= v <= most:
            raise BadRecord(f"{name} {v!r} is not a 32-bit integer")
    pct = r.thread_pct
    if pct is not None and not (_whole(pct) and 0 <= pct <= 100):
        raise BadRecord(f"thread_pct {pct!r} is not a percentage (a whole number 0-100)")
    if not isinstance(r.gpus, list) or not all(_whole(g) and g >= 0 for g in r.gpus):
        raise BadRecord(f"gpus {_short(r.gpus)} is not a list of GPU indexes")
    most = _column_length("gpus")
    if len(",".join(str(g) for g in r.gpus)) > most:
        raise BadRecord(
            f"gpus: {len(r.gpus)} GPU indexes do not fit the column ({most} characters)"
        )
    if not isinstance(r.gpu_uuids, list):
        raise BadRecord(f"gpu_uuids {r.gpu_uuids!r} is not a list")
    if r.progress is not None and not isinstance(r.progress, dict):
        raise BadRecord("progress must be an object or null")
    if not isinstance(r.co_runners, list) or not isinstance(r.profile, dict):
        raise BadRecord("co_runners must be a list and profile an object")
    for c in r.co_runners:
        if not _whole(c.job_id) or not 0 <= c.job_id <= INT64_MAX:
            raise BadRecord(f"co-runner job id {c.job_id!r} is not a non-negative 64-bit integer")
        if not isinstance(c.cls, str) or not c.cls:
            raise BadRecord(f"co-runner {c.job_id!r} has no class")
        for t in (c.start, c.end):
            if not _finite(t):
                raise BadRecord(f"co-runner {c.job_id!r} has a non-numeric time {_short(t)}")
    _check_no_nul(r)


def record_from_json(text: str | bytes) -> JobRecord:
    """Parse one record file; :class:`BadRecord` says what is wrong."""
    try:
        d = json.loads(text)
    except ValueError as e:  # not JSON, not UTF-8, an integer of more than 4,300 digits
        raise BadRecord(f"not JSON ({e})") from None
    except RecursionError:
        raise BadRecord("not a record (JSON nested too deeply)") from None
    return record_from_dict(d)


def record_from_dict(d: Any) -> JobRecord:
    """One record as decoded JSON (a file, a RECORDS message); :class:`BadRecord` says what
    is wrong."""
    if not isinstance(d, dict):
        raise BadRecord("top level is not an object")
    try:
        r = JobRecord.from_dict(d)
    except TypeError as e:
        raise BadRecord(f"fields do not match the record format ({e})") from None
    check_record(r)
    return r


def _rows(r: JobRecord, now: float) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    rid = r.record_id
    prog = r.progress if isinstance(r.progress, dict) else {}
    it = _num(prog.get("iterations"))
    job = {
        "record_id": rid,
        "cluster": r.cluster,
        "job_id": r.job_id,
        "node": r.node,
        "user": r.user,
        "uid": int(r.uid),
        "cls": r.cls,
        "start_time": float(r.start),
        "end_time": float(r.end),
        "mode": str(r.mode),
        "shared": bool(r.shared),
        "mechanism": r.mechanism,
        "thread_pct": r.thread_pct,
        "mem_limit_gib": _num(r.mem_limit_gib),
        "gpus": ",".join(str(int(g)) for g in r.gpus),
        "gpu_uuids": ",".join(str(u) for u in r.gpu_uuids),
        "exit_code": int(r.exit_code),
        "state": str(r.state)[:32],
        "mps_fault": bool(r.mps_fault),
        "progress_rate": _num(prog.get("rate")),
        "progress_solo_rate": _num(prog.get("solo_rate")) or None,
        "progress_iterations": int(it) if it is not None and it <= INT64_MAX else None,
        "version": int(r.version),
        "ingested_at": now,
        "gpu_model": r.gpu_model,
        "gres_type": r.gres_type,
        "gpu_name": r.gpu_name[: _column_length("gpu_name")],
    }
    p = r.profile
    prof: dict[str, Any] = {k: _num(p.get(k)) for k in _PROFILE_KEYS}
    if prof["samples"] is not None:
        prof["samples"] = int(prof["samples"]) if prof["samples"] <= INT32_MAX else None
    if prof["sm_util_mean"] is not None and prof["sm_util_mean"] > 1.0:
        prof["sm_util_mean"] = min(prof["sm_util_mean"] / 100.0, 1.0)  # percent -> fraction
    if prof["sm_util_p95"] is not None and prof["sm_util_p95"] > 1.0:
        prof["sm_util_p95"] = min(prof["sm_util_p95"] / 100.0, 1.0)
    extra = {k: v for k, v in p.items() if k not in _PROFILE_KEYS}
    prof.update(
        record_id=rid,
        extra=json.dumps(extra, default=str, allow_nan=False) if _json_ok(extra) else "{}",
    )
    cos = [
        {
            "record_id": rid,
            "co_job_id": int(c.job_id),
            "co_cls": str(c.cls)[:64],
            "co_user": str(c.user)[:64],
            "start_time": float(c.start),
            "end_time": float(c.end),
        }
        for c in r.co_runners
    ]
    return job, prof, cos


def _json_ok(d: dict[str, Any]) -> bool:
    try:
        json.dumps(d, default=str, allow_nan=False)
        return True
    except ValueError:
        return False


def _insert(engine: Engine, table: Any) -> Any:
    if engine.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    if engine.dialect.name == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing()
    raise StoreError(f"unsupported database dialect {engine.dialect.name}")


def ingest_records(engine: Engine, records: Iterable[JobRecord]) -> int:
    """Store ``records``; returns how many were new. Invalid records raise
    :class:`StoreError` naming the record before anything is written."""
    require_schema(engine)
    recs = list(records)
    now = time.time()
    by_id: dict[str, JobRecord] = {}
    for r in recs:
        try:
            check_record(r)
        except BadRecord as e:
            raise StoreError(
                f"record of job {getattr(r, 'job_id', '?')} on {getattr(r, 'node', '?')}: {e}"
            ) from None
        by_id.setdefault(r.record_id, r)
    new = 0
    ids = list(by_id)
    for s in range(0, len(ids), BATCH):
        chunk = ids[s : s + BATCH]
        with db_errors(engine), engine.begin() as conn:
            existing: set[str] = set()
            for t in range(0, len(chunk), 500):
                existing.update(
                    conn.scalars(select(Job.record_id).where(Job.record_id.in_(chunk[t : t + 500])))
                )
            todo = [by_id[i] for i in chunk if i not in existing]
            if not todo:
                continue
            jobs, profs, cos = [], [], []
            for r in todo:
                j, p, c = _rows(r, now)
                jobs.append(j)
                profs.append(p)
                cos.extend(c)
            conn.execute(_insert(engine, Job.__table__), jobs)
            conn.execute(_insert(engine, Profile.__table__), profs)
            if cos:
                conn.execute(_insert(engine, CoRunnerRow.__table__), cos)
            new += len(todo)
    return new
