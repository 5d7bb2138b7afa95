"""Waiting for a condition in the real-Slurm tests (every lab's tools use this one)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    pred: Callable[[], Any], timeout: float = 40, step: float = 0.5, what: str = "condition"
) -> Any:
    """``pred()``'s first true value, polled every ``step`` seconds; AssertionError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or 'condition'}")
