"""RECORDS from the GPU nodes: their spooled job records, stored in the head node's history
(``store.url``), once by record id (docs/transport.md). The database is opened at the first
message and kept; the agent's lock is not held, so a busy database holds up only the
connection that brought the records."""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..config import Config
from ..errors import ProtocolError

__all__ = ["RecordSink"]

log = logging.getLogger("slurm_colo.agent")


class RecordSink:
    """The head node's history, as the agent's RECORDS verb writes to it."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._engine: Any = None
        self._lock = threading.Lock()

    def store(self, p: dict[str, Any]) -> dict[str, Any]:
        """Store the records of one RECORDS message; the reply's counts. A record that
        cannot be stored is named in the reply and skipped; a database error is raised
        (an error reply: the node keeps its files and sends them again)."""
        from ..store import make_engine
        from ..store.ingest import BadRecord, ingest_records, record_from_dict

        raw = p.get("records")
        if not isinstance(raw, list):
            raise ProtocolError("RECORDS: 'records' must be a list")
        good, bad = [], []
        for d in raw:
            try:
                good.append(record_from_dict(d))
            except BadRecord as e:
                rid = d.get("record_id", "?") if isinstance(d, dict) else "?"
                bad.append([str(rid), str(e)])
                log.warning("RECORDS: record %s not stored: %s", rid, e)
        with self._lock:
            if self._engine is None:
                self._engine = make_engine(self.cfg.store.url, self.cfg.store.busy_timeout_s)
            engine = self._engine
        new = ingest_records(engine, good) if good else 0
        return {"stored": new, "duplicates": len(good) - new, "bad": bad}
