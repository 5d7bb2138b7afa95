"""Numbers read from outside, checked: whole numbers as Slurm writes them (job ids, GPU
indexes, exit codes), without trusting ``str.isdigit``, and the numbers of the node's JSON
files and the agent's replies, within the range their writer keeps to. Standard library
only: the hooks import this."""

from __future__ import annotations

import math
from typing import Any


def decimal(text: str, max_digits: int) -> int | None:
    """``text`` as an integer when it is 1 to ``max_digits`` ASCII digits, else None: a
    job id or GPU index as Slurm writes it. ``isdigit()`` alone takes ``²``, which
    ``int()`` refuses, and any number of digits, which ``int()`` refuses past 4,300."""
    ok = text.isascii() and text.isdigit() and len(text) <= max_digits
    return int(text) if ok else None


def number(v: Any, name: str, lo: float, hi: float) -> float:
    """``v`` (a JSON number or its text) as a finite float from ``lo`` to ``hi``; else
    ``ValueError``/``TypeError`` naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise TypeError(f"{name}: not a number: {v!r}")
    try:
        out = float(v)
    except (ValueError, OverflowError):
        raise ValueError(f"{name}: not a number: {v!r}") from None
    if not (math.isfinite(out) and lo <= out <= hi):
        raise ValueError(f"{name} {v!r} is not a number from {_show(lo)} to {_show(hi)}")
    return out


def _show(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def whole(v: Any, name: str, lo: int, hi: int) -> int:
    """As :func:`number`, a whole number (``3``, ``3.0`` or ``"3"``)."""
    if isinstance(v, str):
        n = decimal(v.strip().removeprefix("-"), 19)
        if n is None:
            raise ValueError(f"{name}: not a whole number: {v!r}")
        v = -n if v.strip().startswith("-") else n
    out = number(v, name, lo, hi)
    if not out.is_integer():
        raise ValueError(f"{name}: not a whole number: {v!r}")
    return int(v) if isinstance(v, int) else int(out)
