"""The time-limit accounts of shared jobs (agent/time_credit.py), kept across restarts in
``time_owed.json`` beside the live score set, like ``learned.json``.

The agent saves them at most once a minute (``SAVE_S``) and when it stops; at start it
reads them back, so a restart does not lose what a job is owed and not given yet, nor the
time the job shared while the agent was down. After a crash the accounts are those of up
to a minute before: that minute's charge is made again at the speed seen then, and minutes
given in it are given once more (a job's limit then grows by up to ``STEP_S`` too much,
never too little). A file that cannot be read is set aside (``time_owed.json.bad``) with a
warning. Jobs that left the accounts in the last day (ended, or requeued and pending) are
kept too when they carry what a new run keeps (minutes given, a refusal): a job requeued
before a restart and started again after it is not given its minutes again (if its limit,
``limit_s``, is still the one it had with them).

The file::

    {"format": "slurm-colo-time-owed/1", "at": <the last look, Unix time>,
     "jobs": [{"job": 12, "rate": 0.75, "since": ..., "owed_s": 42.0,
               "given_min": 10, "refused": false, "start": ...,
               "members": [12, 15], "set_since": ..., "limit_s": 3600.0}, ...],
     "left": [{"job": 9, "left_at": ..., <the same fields>}, ...]}

``left`` may be missing (none). ``clock`` (``{"boot_id": ..., "offset": ...}``, the
wall clock's offset from the boot-time clock as the accounts were copied) lets an agent
restarted on the same boot find a step of the clock made while it was down and move the
accounts by it (slurm_colo/clock.py); without it, or after a reboot, a step meanwhile is
charged as time (forward) or owes nothing until the clock passes ``at`` again (back). A
``clock`` that cannot be read is left out: the accounts are read as without one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from . import kept
from .kept import KeptFileError
from .time_credit import Account, Accounts

FORMAT = "slurm-colo-time-owed/1"
#: beside ``learned.json``, in the directory of ``scores.path``
FILE_NAME = "time_owed.json"
#: save at most this often (and when the agent stops)
SAVE_S = 60.0
WHAT = "time owed to shared jobs' limits"


class TimeOwedError(KeptFileError):
    """The saved time-limit accounts cannot be read."""


def _row(job: int, a: Account) -> dict[str, Any]:
    return {
        "job": job,
        "rate": a.rate,
        "since": a.since,
        "owed_s": a.owed_s,
        "given_min": a.given_min,
        "refused": a.refused,
        "start": a.start,
        "members": None if a.members is None else list(a.members),
        "set_since": a.set_since,
        "limit_s": a.limit_s,
    }


def to_json(saved: Accounts) -> bytes:
    jobs = [_row(j, a) for j, a in sorted(saved.jobs.items())]
    left = [_row(j, a) | {"left_at": t} for j, (t, a) in sorted(saved.left.items())]
    doc: dict[str, Any] = {"format": FORMAT, "at": saved.at, "jobs": jobs, "left": left}
    if saved.clock is not None:
        doc["clock"] = {"boot_id": saved.clock[0], "offset": saved.clock[1]}
    return json.dumps(doc).encode() + b"\n"


def _clock(d: Any) -> tuple[str, float] | None:
    """The file's clock mark; None when missing or unreadable (it only refines)."""
    try:
        boot, offset = d["boot_id"], float(d["offset"])
    except (KeyError, TypeError, ValueError):
        return None
    return (boot, offset) if isinstance(boot, str) and boot and math.isfinite(offset) else None


def _account(r: Any, at: float, where: str, source: str) -> tuple[int, Account]:
    """One row: (job id, account), its times no later than ``at``."""
    try:
        job = int(r["job"])
        rate, since, owed = float(r["rate"]), float(r["since"]), float(r["owed_s"])
        given = int(r["given_min"])
        refused = r.get("refused", False)
        start = float(r.get("start", 0.0))
        listed = r.get("members")
        members = None if listed is None else tuple(int(m) for m in listed)
        set_since = float(r.get("set_since", since))
        limit = float(r.get("limit_s", 0.0))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise TimeOwedError(f"{source}: {where} is malformed ({type(e).__name__}: {e})") from None
    finite = all(math.isfinite(v) for v in (rate, since, owed, start, set_since, limit))
    if not finite or job <= 0 or min(rate, given, limit) < 0 or not set_since <= since <= at:
        raise TimeOwedError(f"{source}: {where} has a value out of range")
    acc = Account(rate, since, owed, given, bool(refused), start, members, set_since, limit)
    return job, acc


def from_json(raw: bytes, source: str) -> Accounts:
    """The accounts of a saved file."""
    d = kept.document(raw, source, FORMAT, TimeOwedError)
    try:
        at = float(d["at"])
    except (KeyError, TypeError, ValueError):
        raise TimeOwedError(f"{source}: no time of the last look ('at')") from None
    if not math.isfinite(at):
        raise TimeOwedError(f"{source}: the time of the last look ('at') is not a number")
    out = Accounts(at, {}, clock=_clock(d.get("clock")))
    for k, r in enumerate(d.get("jobs") or []):
        job, acc = _account(r, at, f"jobs[{k}]", source)
        out.jobs[job] = acc
    for k, r in enumerate(d.get("left") or []):
        where = f"left[{k}]"
        try:
            left_at = float(r["left_at"])
        except (KeyError, TypeError, ValueError):
            raise TimeOwedError(f"{source}: {where} has no time it left ('left_at')") from None
        job, acc = _account(r, left_at, where, source)  # refuses a left_at that is not a number
        if left_at > at:
            raise TimeOwedError(f"{source}: {where} has a value out of range")
        out.left[job] = (left_at, acc)
    return out


def save(path: Path, saved: Accounts) -> bool:
    """Write the accounts atomically; False (logged) when the file cannot be written."""
    return kept.save(path, to_json(saved), WHAT)


def load(path: Path) -> Accounts | None:
    """The saved accounts; None when there are none or the file cannot be read (set aside
    and reported)."""
    return kept.load(path, from_json, WHAT)
