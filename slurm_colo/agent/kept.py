"""Files the agent keeps across restarts (``learned.json``, ``time_owed.json``, beside the
live score set): written atomically, and read back at start. A file that cannot be written
is logged (what it holds stays in memory); one that cannot be read is set aside as
``<name>.bad`` with a warning, and the agent starts without it instead of refusing to
start."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ColoError
from ..fsutil import atomic_write_bytes

log = logging.getLogger("slurm_colo.agent")
T = TypeVar("T")


class KeptFileError(ColoError):
    """A file the agent keeps across restarts cannot be read."""


def document(raw: bytes, source: str, fmt: str, error: type[ColoError]) -> dict[str, Any]:
    """The JSON object of a kept file whose ``"format"`` is ``fmt``; ``error`` otherwise."""
    try:
        d = json.loads(raw)
    except ValueError as e:  # not JSON, not UTF-8, an integer of more than 4,300 digits
        raise error(f"{source}: not JSON ({e})") from None
    if not isinstance(d, dict) or d.get("format") != fmt:
        raise error(f"{source}: not a {fmt} file")
    return d


def save(path: Path, data: bytes, what: str) -> bool:
    """Write ``data`` to ``path`` atomically; False (logged) when it cannot be written."""
    try:
        atomic_write_bytes(path, data, mode=0o644)
        return True
    except OSError as e:
        log.warning(
            "cannot save %s to %s: %s (kept in memory until the agent stops)",
            what,
            path,
            e.strerror or e,
        )
        return False


#: what parsing a damaged file may raise besides a ColoError (a value of the wrong type,
#: a number too large, JSON nested too deeply)
_UNREADABLE = (
    ColoError,
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    OverflowError,
    RecursionError,
)


def load(path: Path, parse: Callable[[bytes, str], T], what: str) -> T | None:
    """``parse(raw, name)`` of the file; None when it is missing or unreadable (a file
    ``parse`` refuses, with :class:`~slurm_colo.errors.ColoError` or any error a damaged
    file can cause, is set aside)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("cannot read %s %s: %s; starting without them", what, path, e.strerror or e)
        return None
    try:
        return parse(raw, str(path))
    except _UNREADABLE as e:
        # a shape parse did not foresee is a bad file all the same
        if not isinstance(e, ColoError):
            e = KeptFileError(f"{path}: unreadable ({type(e).__name__}: {str(e)[:200]})")
        bad = path.with_name(path.name + ".bad")
        try:
            os.replace(path, bad)
            where = f"set aside as {bad}"
        except OSError as err:
            where = f"could not be set aside ({err.strerror})"
        log.warning("%s; %s, starting without %s", e, where, what)
        return None
