"""Ingest a spool directory into the history store, directly or through the agent.

Reads every ``*.json`` record file (written atomically by :mod:`.directory`), stores them
in batches, moves stored files to ``done/`` (or deletes them) and quarantines corrupt ones
in ``bad/`` with a ``.reason`` file, never blocking the others. Where the batches go is the
caller's: :func:`ingest_spool` writes them to a database
(:func:`slurm_colo.store.ingest_records`); :func:`ship_spool` sends them to the agent on
the head node (``RECORDS``), which stores them in its database. Both are idempotent by
record id: a batch stored but not acknowledged is sent again and stored once. A failed
batch (a locked database, an unreachable agent) raises, and its files stay in the spool
for the next try.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from slurm_colo.contracts.records import JobRecord
from slurm_colo.errors import StoreError
from slurm_colo.store.engine import require_schema
from slurm_colo.store.ingest import BATCH, BadRecord, ingest_records, record_from_json

log = logging.getLogger("slurm_colo.spool")


@dataclass
class IngestResult:
    ingested: int = 0
    duplicates: int = 0
    done_files: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.ingested} new record(s), {self.duplicates} already stored, "
            f"{len(self.bad)} bad file(s) quarantined"
        )


def _free_name(bad: Path, name: str) -> str:
    """``name``, or ``name.1``, ``name.2`` ... where a file of that name is already set
    aside: a bad record is never written over another."""
    candidate, k = name, 0
    while (bad / candidate).exists() or (bad / f"{candidate}.reason").exists():
        k += 1
        candidate = f"{name}.{k}"
    return candidate


def _quarantine(spool: Path, f: Path, reason: str) -> None:
    bad = spool / "bad"
    bad.mkdir(exist_ok=True)
    name = _free_name(bad, f.name)
    try:
        os.replace(f, bad / name)
        (bad / f"{name}.reason").write_text(reason + "\n", encoding="utf-8")
    except OSError as e:
        log.error("cannot quarantine %s: %s", f, e.strerror)
    log.warning("bad record file %s moved to %s as %s: %s", f.name, bad, name, reason)


def _not_there(path: Path) -> str:
    return "is not a directory" if path.exists() else "does not exist"


def ingest_spool(
    engine: Engine, spool_dir: str | Path, keep_done: bool = True, batch: int = BATCH
) -> IngestResult:
    """Ingest every ``*.json`` file of ``spool_dir``.

    Ingested files go to ``spool_dir/done/`` (``keep_done=False``: deleted); unreadable or
    invalid ones to ``spool_dir/bad/`` beside a ``NAME.reason`` file. Hidden and temporary
    files (names starting with a dot, not ending in ``.json``) are left alone: the node side
    writes them before the atomic rename. A database error raises :class:`StoreError`
    after the batches before it were committed; the failed batch's files stay in place.
    """
    spool = Path(spool_dir)
    if not spool.is_dir():
        raise StoreError(f"spool directory {spool} {_not_there(spool)}")
    require_schema(engine)
    return store_files(spool, lambda recs: ingest_records(engine, recs), keep_done, batch)


#: records per RECORDS message: well under the protocol's 64 KiB line
SHIP_BATCH = 20


def ship_spool(
    send: Callable[[list[dict[str, Any]]], dict[str, Any]],
    spool_dir: str | Path,
    keep_done: bool = True,
) -> IngestResult:
    """:func:`ingest_spool` through the agent: ``send`` makes one ``RECORDS`` round trip
    (raising :class:`~slurm_colo.errors.AgentError` when the agent cannot be reached, which
    leaves the batch's files in place) and returns the agent's ``{"stored": n}``."""
    spool = Path(spool_dir)
    if not spool.is_dir():
        raise StoreError(f"spool directory {spool} {_not_there(spool)}")

    def store(recs: list[JobRecord]) -> int:
        reply = send([r.to_dict() for r in recs])
        return int(reply.get("stored", 0))

    return store_files(spool, store, keep_done, SHIP_BATCH)


def store_files(
    spool: Path, store: Callable[[list[JobRecord]], int], keep_done: bool = True, batch: int = BATCH
) -> IngestResult:
    """The file loop of both: read, check, store a batch, move its files to ``done/``."""
    res = IngestResult()
    files = sorted(p for p in spool.glob("*.json") if p.is_file() and not p.name.startswith("."))
    for s in range(0, len(files), batch):
        good: list[tuple[Path, JobRecord]] = []
        for f in files[s : s + batch]:
            try:
                good.append((f, record_from_json(f.read_bytes())))
            except BadRecord as e:
                _quarantine(spool, f, str(e))
                res.bad.append((f.name, str(e)))
            except OSError as e:
                log.warning("cannot read %s: %s (left in place)", f, e.strerror)
        if not good:
            continue
        new = store([r for _, r in good])
        res.ingested += new
        res.duplicates += len(good) - new
        done = spool / "done"
        if keep_done:
            done.mkdir(exist_ok=True)
        for f, _ in good:
            try:
                if keep_done:
                    os.replace(f, done / f.name)
                else:
                    f.unlink()
                res.done_files += 1
            except OSError as e:
                log.error("ingested %s but cannot move it: %s", f, e.strerror)
    return res
