"""Run one external command: argv list, no shell, a time limit, output captured.

Admin code takes a :data:`Runner` argument so tests can hand in a fake one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    rc: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0


Runner = Callable[[Sequence[str]], Result]

#: exit status used when the program does not exist (as a shell would)
NOT_FOUND = 127
TIMED_OUT = 124


def run_command(argv: Sequence[str], timeout_s: float = 60.0) -> Result:
    """Run ``argv``; a missing program gives rc 127, a time-out rc 124 (never raises)."""
    args = tuple(argv)
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return Result(args, NOT_FOUND, "", f"{args[0]}: command not found")
    except subprocess.TimeoutExpired:
        return Result(args, TIMED_OUT, "", f"{args[0]}: timed out after {timeout_s:g} s")
    except OSError as e:
        return Result(args, NOT_FOUND, "", f"{args[0]}: {e.strerror}")
    return Result(args, p.returncode, p.stdout, p.stderr)
