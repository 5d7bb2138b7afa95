"""Queries of the incremental episode build (:mod:`.episode_sync`).

Lookups by job go through the job id indexes and leave the node to Python: given both,
SQLite prefers the node index and reads every record of the node.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import Select, null, select
from sqlalchemy.engine import Connection

from .episode_build import OOM_STATES, JobView
from .schema import CoRunnerRow, Episode, EpisodeMember, EpisodeSource, Job, Profile

#: ids per IN (...) list
CHUNK = 500
#: the record ran across a step of its node's clock: the sampler's note of it is stored
#: among the profile's other keys (a record without a profile has none)
CLOCK_STEPPED = Profile.extra.contains('"clock_steps_s"', autoescape=True)
_JOB_COLUMNS = (
    Job.record_id,
    Job.node,
    Job.job_id,
    Job.gpus,
    Job.gpu_uuids,
    Job.cls,
    Job.start_time,
    Job.end_time,
    Job.progress_rate,
    Job.progress_solo_rate,
    Job.mps_fault,
    Job.state,
    Job.gpu_model,
    Profile.mem_peak_gib,
    CLOCK_STEPPED,
)
_CO_COLUMNS = (
    CoRunnerRow.record_id,
    CoRunnerRow.co_job_id,
    CoRunnerRow.co_cls,
    CoRunnerRow.start_time,
    CoRunnerRow.end_time,
)


def chunks(ids: Iterable[Any]) -> Iterator[list[Any]]:
    items = sorted(ids)
    for s in range(0, len(items), CHUNK):
        yield items[s : s + CHUNK]


def bulk_insert(
    conn: Connection,
    table: str,
    columns: Sequence[str],
    rows: list[tuple[Any, ...]],
    ignore_existing: bool = False,
) -> None:
    """executemany of plain tuples: SQLAlchemy's per-row parameter processing costs more
    than SQLite's insert. The SQL is the same on SQLite and PostgreSQL."""
    if not rows:
        return
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) "
        f"VALUES ({', '.join([mark] * len(columns))})"
        + (" ON CONFLICT DO NOTHING" if ignore_existing else "")
    )
    conn.exec_driver_sql(sql, rows)


def _all_ids(jobs: dict[str, set[int]]) -> set[int]:
    return set().union(*jobs.values()) if jobs else set()


def related_jobs(conn: Connection, jobs: dict[str, set[int]]) -> dict[str, set[int]]:
    """Per node: ``jobs``, their co-runners and the other members of their stored
    episodes: every job whose records the episodes containing one of ``jobs`` depend on."""
    out = {node: set(ids) for node, ids in jobs.items()}
    m2 = EpisodeMember.__table__.alias("m2")
    for ch in chunks(_all_ids(jobs)):
        co = (
            select(Job.node, Job.job_id, CoRunnerRow.co_job_id)
            .join(CoRunnerRow, CoRunnerRow.record_id == Job.record_id)
            .where(Job.job_id.in_(ch))
        )
        mates = (
            select(Episode.node, EpisodeMember.job_id, m2.c.job_id)
            .join(Episode, Episode.id == EpisodeMember.episode_id)
            .join(m2, m2.c.episode_id == EpisodeMember.episode_id)
            .where(EpisodeMember.job_id.in_(ch))
        )
        for q in (co, mates):
            for node, jid, other in conn.execute(q).all():
                if node in jobs and jid in jobs[node]:
                    out[node].add(other)
    return out


def episodes_with(conn: Connection, jobs: dict[str, set[int]]) -> list[int]:
    """Ids of the stored episodes containing one of ``jobs`` (per node)."""
    ids: set[int] = set()
    for ch in chunks(_all_ids(jobs)):
        q = (
            select(EpisodeMember.episode_id, Episode.node, EpisodeMember.job_id)
            .join(Episode, Episode.id == EpisodeMember.episode_id)
            .where(EpisodeMember.job_id.in_(ch))
        )
        ids.update(
            eid for eid, node, jid in conn.execute(q).all() if node in jobs and jid in jobs[node]
        )
    return sorted(ids)


def _job_query(built: Any) -> Select:
    """The records' columns, their peak memory and ``built`` (the record id when built)."""
    return (
        select(*_JOB_COLUMNS, built)
        .select_from(Job)
        .outerjoin(Profile, Profile.record_id == Job.record_id)
    )


def _fill(conn: Connection, jq: Select, cq: Select, views: dict[str, JobView], keep: Any) -> None:
    # fetchall and plain tuples: several times faster than row-by-row attribute access
    for (
        rid,
        node,
        jid,
        gpus,
        uuids,
        cls,
        st,
        en,
        rate,
        solo,
        fault,
        state,
        model,
        peak,
        stepped,
        built,
    ) in conn.execute(jq).all():
        if keep(rid, node, jid, built):
            views[rid] = JobView(
                jid,
                node,
                uuids or gpus or "?",
                cls,
                st,
                en,
                rate=rate,
                solo_rate=solo,
                mps_fault=bool(fault),
                oom=str(state).upper() in OOM_STATES,
                record_id=rid,
                mem_peak=peak,
                gpu_model=model or "",
                clock_stepped=bool(stepped),
            )
    for rid, cid, ccls, st, en in conn.execute(cq).all():
        v = views.get(rid)
        if v is not None:
            v.co_runners.append((cid, ccls, st, en))
    for v in views.values():  # the database returns them in any order: sums must not depend on it
        if len(v.co_runners) > 1:
            v.co_runners.sort()


def node_views(conn: Connection, node: str) -> list[JobView]:
    """Every record of ``node``."""
    views: dict[str, JobView] = {}
    jq = _job_query(null()).where(Job.node == node)
    cq = (
        select(*_CO_COLUMNS)
        .join(Job, Job.record_id == CoRunnerRow.record_id)
        .where(Job.node == node)
    )
    _fill(conn, jq, cq, views, lambda *_: True)
    return list(views.values())


def job_views(
    conn: Connection, jobs: dict[str, set[int]], new: dict[str, dict[str, int]]
) -> dict[str, list[JobView]]:
    """Per node, the records of ``jobs`` that are built or in ``new``: a record ingested
    meanwhile waits for the next build."""

    def keep(rid: str, node: str, jid: int, built: str | None) -> bool:
        return (
            node in jobs and jid in jobs[node] and (built is not None or rid in new.get(node, ()))
        )

    views: dict[str, JobView] = {}
    for ch in chunks(_all_ids(jobs)):
        jq = (
            _job_query(EpisodeSource.record_id)
            .outerjoin(EpisodeSource, EpisodeSource.record_id == Job.record_id)
            .where(Job.job_id.in_(ch))
        )
        cq = (
            select(*_CO_COLUMNS)
            .join(Job, Job.record_id == CoRunnerRow.record_id)
            .where(Job.job_id.in_(ch))
        )
        _fill(conn, jq, cq, views, keep)
    out: dict[str, list[JobView]] = {node: [] for node in jobs}
    for v in views.values():
        out[v.node].append(v)
    return out
