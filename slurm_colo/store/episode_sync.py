"""Keep the stored episodes up to date with the job records, incrementally.

``episode_sources`` lists the records the episodes were built from (the build's
watermark: a record is new when it is missing there, whatever its times or the clock of
the host that ingested it). A node seen for the first time is built whole, one
transaction per node (an interrupted build leaves whole nodes done). On the other nodes
only the episodes containing a job with a new record are rebuilt, from the records of
their member jobs (see :mod:`.episode_build` for why that is enough), in one transaction;
the result equals a full rebuild (:func:`.episodes.rebuild_episodes`). A node whose
records were deleted is built again whole.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import delete, func, select, text
from sqlalchemy.engine import Connection, Engine

from .engine import db_errors, require_schema
from .episode_build import (
    BuildReport,
    EpisodeRow,
    JobView,
    build_groups,
    is_solo_run,
    skewed_intervals,
)
from .episode_fetch import bulk_insert, chunks, episodes_with, job_views, node_views, related_jobs
from .schema import Episode, EpisodeMember, EpisodeSource, Job

log = logging.getLogger("slurm_colo.store")

#: new records of built nodes handled per transaction (and held in memory at once)
UPDATE_BATCH = 100_000

_SOURCE_COLUMNS = (
    "record_id",
    "node",
    "cls",
    "start_time",
    "end_time",
    "rate",
    "mem_peak_gib",
    "solo",
    "skewed",
    "gpu_model",
)
_EPISODE_COLUMNS = (
    "id",
    "node",
    "gpu",
    "start_time",
    "end_time",
    "n_members",
    "mps_fault",
    "oom",
    "gpu_model",
)
_MEMBER_COLUMNS = (
    "episode_id",
    "end_time",
    "job_id",
    "cls",
    "rate",
    "solo_rate",
    "total_s",
    "shared_s",
)


def _source_row(v: JobView) -> tuple[Any, ...]:
    return (
        v.record_id,
        v.node,
        v.cls,
        v.start,
        v.end,
        v.rate,
        v.mem_peak,
        is_solo_run(v),
        skewed_intervals(v),
        v.gpu_model,
    )


def _insert(conn: Connection, rows: list[EpisodeRow], sources: list[tuple[Any, ...]]) -> None:
    """Add episodes (rows come from new records: ``sources`` is not empty then)."""
    bulk_insert(conn, "episode_sources", _SOURCE_COLUMNS, sources, ignore_existing=True)
    if rows:
        # ids chosen here (RETURNING many rows is one statement per row on SQLite): the
        # insert above holds SQLite's write lock; PostgreSQL locks the table
        if conn.dialect.name == "postgresql":
            conn.execute(text("LOCK TABLE episodes IN EXCLUSIVE MODE"))
        first = int(conn.scalar(select(func.coalesce(func.max(Episode.id), 0))) or 0) + 1
        ids = range(first, first + len(rows))
        bulk_insert(
            conn,
            "episodes",
            _EPISODE_COLUMNS,
            [
                (
                    eid,
                    r.node,
                    r.gpu,
                    r.start,
                    r.end,
                    len(r.members),
                    r.mps_fault,
                    r.oom,
                    r.gpu_model,
                )
                for eid, r in zip(ids, rows, strict=True)
            ],
        )
        bulk_insert(
            conn,
            "episode_members",
            _MEMBER_COLUMNS,
            [(eid, r.end, *m) for eid, r in zip(ids, rows, strict=True) for m in r.members],
        )


def _delete(conn: Connection, ids: list[int]) -> None:
    for ch in chunks(ids):
        conn.execute(delete(EpisodeMember).where(EpisodeMember.episode_id.in_(ch)))
        conn.execute(delete(Episode).where(Episode.id.in_(ch)))


def _reset_node(conn: Connection, node: str) -> None:
    _delete(conn, list(conn.scalars(select(Episode.id).where(Episode.node == node))))
    conn.execute(delete(EpisodeSource).where(EpisodeSource.node == node))


def _build_node(engine: Engine, node: str, reset: bool, rep: BuildReport) -> None:
    """Build a node whole from all its records (``reset``: forget what was built first)."""
    with db_errors(engine), engine.connect() as conn:
        views = node_views(conn, node)
    rows = build_groups(views)
    sources = [_source_row(v) for v in views]
    with db_errors(engine), engine.begin() as conn:
        if reset:
            _reset_node(conn, node)
        else:
            _delete(conn, list(conn.scalars(select(Episode.id).where(Episode.node == node))))
        _insert(conn, rows, sources)
    _count(rep, rows, sources)


def _update_nodes(engine: Engine, pending: dict[str, dict[str, int]], rep: BuildReport) -> None:
    """Rebuild the episodes containing a job with a new record on built nodes."""
    jobs = {node: set(p.values()) for node, p in pending.items()}
    with db_errors(engine), engine.connect() as conn:
        views = job_views(conn, related_jobs(conn, jobs), pending)
    rows: list[EpisodeRow] = []
    sources = []
    for node, vs in views.items():
        rows += build_groups(vs, jobs[node])
        sources += [_source_row(v) for v in vs if v.record_id in pending[node]]
    with db_errors(engine), engine.begin() as conn:
        _delete(conn, episodes_with(conn, jobs))
        _insert(conn, rows, sources)
    _count(rep, rows, sources)


def _count(rep: BuildReport, rows: list[EpisodeRow], sources: list[tuple[Any, ...]]) -> None:
    rep.jobs += len(sources)
    rep.episodes += len(rows)
    at = _SOURCE_COLUMNS.index("skewed")
    rep.skewed_intervals += sum(s[at] for s in sources)


def _survey(engine: Engine) -> tuple[dict[str, dict[str, int]], set[str], set[str]]:
    """(record id -> job id of the new records of built nodes, per node; nodes never built;
    nodes with deleted records)."""
    q = (
        select(Job.node, Job.record_id, Job.job_id)
        .outerjoin(EpisodeSource, EpisodeSource.record_id == Job.record_id)
        .where(EpisodeSource.record_id.is_(None))
    )
    pending: dict[str, dict[str, int]] = {}
    fresh: set[str] = set()
    with db_errors(engine), engine.connect() as conn:
        built = set(conn.scalars(select(EpisodeSource.node).distinct()))
        n_new = 0
        for part in conn.execute(q).partitions(50_000):
            n_new += len(part)
            for node, rid, jid in part:
                if node in built:
                    pending.setdefault(node, {})[rid] = jid
                else:
                    fresh.add(node)
        # built records = stored records - new ones; more sources than that: some deleted
        n_jobs = conn.scalar(select(func.count()).select_from(Job)) or 0
        n_built = conn.scalar(select(func.count()).select_from(EpisodeSource)) or 0
        gone: set[str] = set()
        if n_built > n_jobs - n_new:
            gone = set(
                conn.scalars(
                    select(EpisodeSource.node)
                    .outerjoin(Job, Job.record_id == EpisodeSource.record_id)
                    .where(Job.record_id.is_(None))
                    .distinct()
                )
            )
    return pending, fresh, gone


def update_episodes(engine: Engine) -> BuildReport:
    """Build the episodes of the records not built yet; returns what was done (records
    added, episodes written, skewed intervals among the added records)."""
    require_schema(engine)
    rep = BuildReport()
    pending, fresh, gone = _survey(engine)
    for node in sorted(gone):
        log.info("records of node %s were deleted: rebuilding its episodes", node)
        pending.pop(node, None)
    for node in sorted(fresh | gone):
        _build_node(engine, node, node in gone, rep)
    batch: dict[str, dict[str, int]] = {}
    for node in sorted(pending):  # bounded batches: a backlog does not fill the memory
        batch[node] = pending[node]
        if sum(map(len, batch.values())) >= UPDATE_BATCH:
            _update_nodes(engine, batch, rep)
            batch = {}
    if batch:
        _update_nodes(engine, batch, rep)
    return rep


def clear_episodes(engine: Engine) -> None:
    """Forget every episode and which records they were built from."""
    require_schema(engine)
    with db_errors(engine), engine.begin() as conn:
        conn.execute(delete(EpisodeMember))
        conn.execute(delete(Episode))
        conn.execute(delete(EpisodeSource))
