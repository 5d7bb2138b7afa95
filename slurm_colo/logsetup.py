"""Logging for the hooks and the helpers they start: stderr (Slurm's log) and syslog.

Shared by ``slurm_colo.hooks`` and the detached node helpers (sampler, ingest, MPS stop),
so neither imports the other for it.
"""

from __future__ import annotations

import logging
import os
import sys


class _LazySyslog(logging.Handler):
    """Opens /dev/log on the first message only: a quiet hook pays nothing for syslog."""

    def __init__(self) -> None:
        super().__init__()
        self._inner: logging.Handler | None = None
        self._failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if self._inner is None and not self._failed:
            import logging.handlers

            try:
                self._inner = logging.handlers.SysLogHandler(address="/dev/log")
                self._inner.setFormatter(self.formatter)
            except OSError:
                self._failed = True
        if self._inner is not None:
            self._inner.emit(record)


def setup_logging(hook: str) -> None:
    root = logging.getLogger("slurm_colo")
    if root.handlers:
        return
    root.setLevel(logging.INFO)
    fmt = logging.Formatter(f"slurm-colo {hook}[%(process)d]: %(levelname)s %(message)s")
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(fmt)
    root.addHandler(err)
    if os.path.exists("/dev/log"):
        sl = _LazySyslog()
        sl.setFormatter(fmt)
        root.addHandler(sl)
