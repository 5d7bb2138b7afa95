"""What each `slurm-colo doctor` check returns (:class:`Check`), how it is printed, and the
exit status a list of them gives. Shared by the checks of Slurm's files
(:mod:`.slurm_checks`) and of the rest (:mod:`.doctor`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..fsutil import read_regular

OK, WARN, FAIL = "OK", "WARN", "FAIL"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    message: str
    fix: str = ""


def format_check(c: Check) -> str:
    line = f"[{c.status:<4}] {c.name}: {c.message}"
    return line + (f"\n       fix: {c.fix}" if c.fix and c.status != OK else "")


def exit_code(checks: Iterable[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0


def read_text(path: Path) -> str | None:
    """The file's text, or None when it cannot be read or is not a regular file."""
    try:
        return read_regular(path).decode("utf-8", errors="replace")
    except OSError:
        return None
