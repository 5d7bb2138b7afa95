"""The node-local record spool: write first (atomic rename), ingest later, lose nothing.

A record's file name is derived from its ``record_id``, so writing the same job twice
(an Epilog re-run, crash recovery) replaces the file instead of adding a second record.
When the spool directory is full or unwritable the record goes to the fallback directory
under ``run_dir``; ``slurm-colo spool ingest`` ingests both.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurm_colo.config import Config

from slurm_colo.contracts.records import JobRecord
from slurm_colo.fsutil import atomic_write_bytes

log = logging.getLogger("slurm_colo.spool.directory")

#: temporary files older than this are leftovers of a killed writer and are removed
STALE_TMP_S = 3600.0


@dataclass(frozen=True)
class SpoolDirs:
    """Where a node's records wait for ingest: ``<spool_dir>``, and
    ``<run_dir>/spool-fallback`` when the spool is full or unwritable."""

    spool: Path
    fallback: Path

    @classmethod
    def of(cls, run_dir: str | Path, spool_dir: str | Path) -> SpoolDirs:
        return cls(Path(spool_dir), Path(run_dir) / "spool-fallback")

    @classmethod
    def of_config(cls, cfg: Config) -> SpoolDirs:
        return cls.of(cfg.node.run_dir, cfg.node.spool_dir)

    def both(self) -> tuple[Path, Path]:
        return self.spool, self.fallback


def file_name(record_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in record_id)
    return f"{safe}.json"


def write_record(dirs: SpoolDirs, rec: JobRecord) -> Path:
    """Spool ``rec``; returns where it went. Raises OSError only if every place failed."""
    import json

    data = json.dumps(rec.to_dict(), sort_keys=True).encode() + b"\n"
    errors: list[str] = []
    for d in dirs.both():
        try:
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = d / file_name(rec.record_id)
            atomic_write_bytes(path, data, mode=0o600, fsync=True)
            if d != dirs.spool:
                log.error(
                    "spool %s unusable (%s); record %s written to %s",
                    dirs.spool,
                    errors[0],
                    rec.record_id,
                    path,
                )
            return path
        except OSError as e:
            errors.append(f"{d}: {e.strerror or e}")
    raise OSError(f"cannot spool record {rec.record_id}: {'; '.join(errors)}")


def pending(dirs: SpoolDirs) -> list[Path]:
    """Spooled record files (both directories), oldest first; stale temp files removed."""
    out = []
    now = time.time()
    for d in dirs.both():
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.name.startswith(".tmp-"):
                try:
                    if now - e.stat().st_mtime > STALE_TMP_S:
                        os.unlink(e.path)
                except OSError:
                    pass
            elif e.name.endswith(".json"):
                out.append(Path(e.path))
    return sorted(out, key=lambda p: (p.stat().st_mtime if p.exists() else 0, p.name))


def prune_done(spool_dir: Path, keep_days: float, now: float | None = None) -> int:
    """Delete ingested record files in ``spool_dir/done/`` older than ``keep_days``
    (by modification time: when the ingest moved them there). ``keep_days <= 0`` keeps
    everything. Returns how many were deleted; an unreadable directory deletes nothing."""
    if keep_days <= 0:
        return 0
    cutoff = (time.time() if now is None else now) - keep_days * 86400.0
    n = 0
    try:
        entries = list(os.scandir(spool_dir / "done"))
    except OSError:
        return 0
    for e in entries:
        if not e.name.endswith(".json"):
            continue
        try:
            if e.is_file(follow_symlinks=False) and e.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(e.path)
                n += 1
        except OSError:
            continue
    return n
