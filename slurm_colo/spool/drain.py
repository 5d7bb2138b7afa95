"""Ingest spooled records into the history store (``slurm_colo.store``), directly or
through the agent on the head node (``node.records_to``).

Run detached by the Epilog (through :mod:`slurm_colo.node.handoff`) so the Epilog never
waits on SQLAlchemy, a locked database or the network, by ``slurm-colo spool ingest``, and
by hand (``python -m slurm_colo.spool.drain``). One run at a time per node (a lock file); a
locked or unreachable database leaves the files in the spool for the next run; an
unreachable agent is tried again for ``node.records_retry_s`` (and by every later run).
Both the spool and the fallback spool are ingested.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_colo.config import Config, load_config, records_to
from slurm_colo.contracts.enums import RecordsTo
from slurm_colo.errors import AgentError, StoreError
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


def ingest_pending(
    cfg: Config,
    busy_timeout_s: float | None = None,
    lock_timeout_s: float = 0.0,
    retry_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> IngestReport:
    """Ingest both spool directories; never raises for a DB or agent problem (it is
    reported). ``retry_s``: how long to keep trying an unreachable agent (default
    ``node.records_retry_s``; 0 tries once)."""
    if records_to(cfg) == RecordsTo.AGENT:
        return _ship_pending(
            cfg, lock_timeout_s, cfg.node.records_retry_s if retry_s is None else retry_s, sleep
        )
    from slurm_colo.spool.ingest import ingest_spool
    from slurm_colo.store import make_engine

    dirs = SpoolDirs.of_config(cfg)
    rep = IngestReport()
    run_dir = Path(cfg.node.run_dir)
    ensure_dir(run_dir)
    try:
        with locked(run_dir / "ingest.lock", timeout_s=lock_timeout_s):
            engine = make_engine(
                cfg.store.url,
                busy_timeout_s if busy_timeout_s is not None else cfg.store.busy_timeout_s,
            )
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


def _ship_pending(
    cfg: Config, lock_timeout_s: float, retry_s: float, sleep: Callable[[float], None]
) -> IngestReport:
    """:func:`ingest_pending` through the agent: RECORDS messages, retried with a growing
    pause (2 s to 60 s) while the agent cannot be reached, for at most ``retry_s``."""
    from slurm_colo.contracts import client
    from slurm_colo.spool.ingest import ship_spool

    def send(records: list[dict[str, Any]]) -> dict[str, Any]:
        reply = client.request(cfg.agent.address, "RECORDS", {"records": records}, 10.0, cfg)
        for rid, why in reply.get("bad") or []:
            log.warning("the agent did not store record %s: %s", rid, why)
        return reply

    dirs = SpoolDirs.of_config(cfg)
    rep = IngestReport()
    run_dir = Path(cfg.node.run_dir)
    ensure_dir(run_dir)
    deadline = time.monotonic() + retry_s
    pause = 2.0
    try:
        with locked(run_dir / "ingest.lock", timeout_s=lock_timeout_s):
            while True:
                failed = ""
                before = rep.ingested + rep.duplicates + rep.bad
                for d in dirs.both():
                    if not d.is_dir():
                        continue
                    try:
                        r = ship_spool(send, d)
                    except (AgentError, StoreError) as e:
                        failed = f"{d}: {e}"
                        continue
                    rep.ingested += r.ingested
                    rep.duplicates += r.duplicates
                    rep.bad += len(r.bad)
                if not failed and (
                    not pending(dirs) or rep.ingested + rep.duplicates + rep.bad == before
                ):
                    break  # all sent, or what is left cannot be read now
                if time.monotonic() + pause > deadline:
                    if failed:
                        rep.errors.append(failed + "; records stay spooled for the next run")
                    break
                if failed:
                    log.warning("%s; trying again in %.0f s", failed, pause)
                sleep(pause)
                pause = min(60.0, pause * 2)
            for d in dirs.both():
                rep.pruned += prune_done(d, cfg.node.spool_keep_days)
    except TimeoutError:
        rep.errors.append("another ingest is running")
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
