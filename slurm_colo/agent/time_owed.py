"""The time-limit accounts of shared jobs (agent/time_credit.py), kept across restarts in
``time_owed.json`` beside the live score set, like ``learned.json``.

The agent saves them at most once a minute (``SAVE_S``) and when it stops; at start it
reads them back, so a restart does not lose what a job is owed and not given yet, nor the
time the job shared while the agent was down. After a crash the accounts are those of up
to a minute before: that minute's charge is made again at the speed seen then, and minutes
given in it are given once more (a job's limit then grows by up to ``STEP_S`` too much,
never too little). A file that cannot be read is set aside (``time_owed.json.bad``) with a
warning.

The file::

    {"format": "slurm-colo-time-owed/1", "at": <the last look, Unix time>,
     "jobs": [{"job": 12, "rate": 0.75, "since": ..., "owed_s": 42.0,
               "given_min": 10, "refused": false, "start": ...}, ...]}
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from . import kept
from .kept import KeptFileError
from .time_credit import Account

FORMAT = "slurm-colo-time-owed/1"
#: beside ``learned.json``, in the directory of ``scores.path``
FILE_NAME = "time_owed.json"
#: save at most this often (and when the agent stops)
SAVE_S = 60.0
WHAT = "time owed to shared jobs' limits"


class TimeOwedError(KeptFileError):
    """The saved time-limit accounts cannot be read."""


def to_json(at: float | None, jobs: list[tuple[int, Account]]) -> bytes:
    rows = [
        {
            "job": j,
            "rate": a.rate,
            "since": a.since,
            "owed_s": a.owed_s,
            "given_min": a.given_min,
            "refused": a.refused,
            "start": a.start,
        }
        for j, a in sorted(jobs, key=lambda x: x[0])
    ]
    return json.dumps({"format": FORMAT, "at": at, "jobs": rows}).encode() + b"\n"


def from_json(raw: bytes, source: str) -> tuple[float, dict[int, Account]]:
    """(the last look, the accounts by job id) of a saved file."""
    d = kept.document(raw, source, FORMAT, TimeOwedError)
    try:
        at = float(d["at"])
    except (KeyError, TypeError, ValueError):
        raise TimeOwedError(f"{source}: no time of the last look ('at')") from None
    out: dict[int, Account] = {}
    for k, r in enumerate(d.get("jobs") or []):
        try:
            job = int(r["job"])
            rate, since, owed = float(r["rate"]), float(r["since"]), float(r["owed_s"])
            given = int(r["given_min"])
            refused = r.get("refused", False)
            start = float(r.get("start", 0.0))
        except (KeyError, TypeError, ValueError) as e:
            raise TimeOwedError(
                f"{source}: jobs[{k}] is malformed ({type(e).__name__}: {e})"
            ) from None
        finite = all(math.isfinite(v) for v in (at, rate, since, owed, start))
        if not finite or job <= 0 or rate < 0 or given < 0 or since > at:
            raise TimeOwedError(f"{source}: jobs[{k}] has a value out of range")
        out[job] = Account(rate, since, owed, given, bool(refused), start)
    return at, out


def save(path: Path, at: float | None, jobs: list[tuple[int, Account]]) -> bool:
    """Write the accounts atomically; False (logged) when the file cannot be written."""
    return kept.save(path, to_json(at, jobs), WHAT)


def load(path: Path) -> tuple[float, dict[int, Account]] | None:
    """The saved accounts; None when there are none or the file cannot be read (set aside
    and reported)."""
    return kept.load(path, from_json, WHAT)
