"""Ingest spooled records into the history store (``slurm_colo.store``).

Run detached by the Epilog (through :mod:`.handoff`) so the Epilog never waits on
SQLAlchemy or a locked database, by ``slurm-colo spool ingest``, and by hand
(``python -m slurm_colo.spool.drain``). One run at a time per node (a lock file); a locked
or unreachable database leaves the files in the spool for the next run. Both the spool and
the fallback spool are ingested.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from slurm_colo.config import Config, load_config
from slurm_colo.errors import StoreError
from slurm_colo.fsutil import ensure_dir, locked
from slurm_colo.spool.directory import SpoolDirs, pending, prune_done

log = logging.getLogger("slurm_colo.spool.drain")


@dataclass
class IngestReport:
    ingested: int = 0
    duplicates: int = 0
    bad: int = 0
    #: ingested files older than node.spool_keep_days deleted from done/
    pruned: int = 0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        s = f"{self.ingested} new, {self.duplicates} already stored, {self.bad} bad"
        if self.pruned:
            s += f", {self.pruned} old ingested file(s) deleted"
        return s + (f"; errors: {'; '.join(self.errors)}" if self.errors else "")


def ingest_pending(cfg: Config, busy_timeout_s: float | None = None,
                   lock_timeout_s: float = 0.0) -> IngestReport:
    """Ingest both spool directories; never raises for a DB problem (it is reported)."""
    from slurm_colo.spool.ingest import ingest_spool
    from slurm_colo.store import make_engine

    dirs = SpoolDirs.of_config(cfg)
    rep = IngestReport()
    run_dir = Path(cfg.node.run_dir)
    ensure_dir(run_dir)
    try:
        with locked(run_dir / "ingest.lock", timeout_s=lock_timeout_s):
            engine = make_engine(cfg.store.url, busy_timeout_s if busy_timeout_s is not None
                                 else cfg.store.busy_timeout_s)
            try:
                # a few passes: records spooled by Epilogs that ran while this ingest held
                # the lock (their own ingest gave up at once) are picked up too
                for _ in range(3):
                    before = rep.ingested + rep.duplicates
                    for d in dirs.both():
                        if not d.is_dir():
                            continue
                        try:
                            r = ingest_spool(engine, d)
                        except StoreError as e:
                            rep.errors.append(f"{d}: {e}")
                            continue
                        rep.ingested += r.ingested
                        rep.duplicates += r.duplicates
                        rep.bad += len(r.bad)
                    if rep.errors or rep.ingested + rep.duplicates == before or not pending(dirs):
                        break
                for d in dirs.both():
                    rep.pruned += prune_done(d, cfg.node.spool_keep_days)
            finally:
                engine.dispose()
    except TimeoutError:
        rep.errors.append("another ingest is running")
    except StoreError as e:
        rep.errors.append(str(e))
    return rep


def ingest_logged(cfg: Config) -> IngestReport:
    """:func:`ingest_pending`, its summary logged (a warning when there were errors)."""
    rep = ingest_pending(cfg)
    (log.warning if rep.errors else log.info)("%s", rep.summary())
    return rep


def main() -> int:
    from slurm_colo.logsetup import setup_logging

    setup_logging("ingest")  # detached: syslog is where an admin looks
    try:
        cfg = load_config()
    except Exception as e:
        log.error("%s", e)
        return 1
    ingest_logged(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
