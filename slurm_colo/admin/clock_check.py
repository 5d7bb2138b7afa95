"""`slurm-colo doctor`'s look at the host's time synchronisation.

Two things here need clocks that agree and do not step. Munge credentials carry their
creation time and live 60 s here (docs/transport.md): a GPU node whose clock is a minute
off the head node's has its records and probe reports refused as expired. And a step of a
clock costs measurements: the agent moves its own times by it, but a GPU node drops the
progress rates of the jobs running across it and gives up their probe windows
(docs/node.md).

The check asks the time service the host runs, in turn: ``timedatectl`` (systemd), then
``chronyc``, then ``ntpstat`` (ntpd). The first that answers decides: synchronised is
``OK``, not synchronised ``WARN``. When none answers (a container, a host without
systemd) there is no check: no word from any of them is not a fault of the host.
"""

from __future__ import annotations

from .check import OK, WARN, Check
from .run import Runner

NAME = "clock"
FIX = (
    "keep the clock synchronised on every node: `timedatectl set-ntp true`, or start "
    "chrony (`chronyc tracking` should say `Leap status : Normal`)"
)
WHY = (
    "munge credentials between nodes (60 s) expire when the clocks are a minute apart, "
    "and a step of the clock costs the jobs' probe measurements"
)


def _not_synchronised(said: str) -> Check:
    return Check(NAME, WARN, f"the clock is not synchronised ({said}): {WHY}", FIX)


def _field(text: str, key: str) -> str:
    """The value of ``key : value`` in ``chronyc tracking``'s output ("" when missing)."""
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == key:
            return value.strip()
    return ""


def check_clock(runner: Runner) -> Check | None:
    """Whether the host's clock is synchronised; None when no time service answers."""
    r = runner(["timedatectl", "show", "--property=NTPSynchronized", "--value"])
    said = r.stdout.strip()
    if r.ok and said in ("yes", "no"):
        if said == "yes":
            return Check(NAME, OK, "the clock is synchronised (timedatectl)")
        return _not_synchronised("timedatectl: NTPSynchronized=no")
    r = runner(["chronyc", "-n", "tracking"])
    leap = _field(r.stdout, "Leap status") if r.ok else ""
    if leap == "Normal":
        return Check(NAME, OK, "the clock is synchronised (chronyc: leap status Normal)")
    if leap:
        return _not_synchronised(f"chronyc: leap status {leap}")
    r = runner(["ntpstat"])
    if r.rc == 0:
        return Check(NAME, OK, "the clock is synchronised (ntpstat)")
    if r.rc == 1:  # 2: ntpd cannot be asked
        return _not_synchronised("ntpstat: unsynchronised")
    return None
