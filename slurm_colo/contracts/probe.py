"""The probe report: what a node's sampler measured of a new shared set (``PROBE``).

Built by :mod:`slurm_colo.node.probe`, sent to the agent, judged there
(:mod:`slurm_colo.placement.retract`). Standard library only: the node hooks import it.

On the wire (a JSON object)::

    {"job": 2, "since": 1000.0, "window_s": 500.0, "gpu": 0, "members": [
        {"job": 1, "cls": "a", "rate": 4.0, "rate_before": 10.0, "before": []},
        {"job": 2, "cls": "b", "rate": 3.0}]}

``members`` lists the jobs on the GPU, oldest first; the newcomer (``job``) has no
``rate_before``/``before``. ``"again": true`` marks a second look: the set left behind
when a job left a set this job's probe had kept. A rate is None when too few progress
points were written. Unknown keys are ignored; a known key of the wrong type is a
:class:`~slurm_colo.errors.ProtocolError`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import ProtocolError

#: how many times a job's probe looks again after its set changed before it was judged
#: (node/probe.py's Prober; the simulator mirrors it)
PROBE_LOOKS = 4


@dataclass(frozen=True)
class ProbeMember:
    """One job of the measured set."""

    job: int
    cls: str
    #: progress per second since the set formed (after the warm-up)
    rate: float | None
    #: (a member that was there before the newcomer) its rate before the newcomer came
    rate_before: float | None = None
    #: (the same) the classes it shared the GPU with then; None for the newcomer
    before: tuple[str, ...] | None = None

    def to_wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {"job": self.job, "cls": self.cls, "rate": self.rate}
        if self.before is not None:
            d["rate_before"] = self.rate_before
            d["before"] = list(self.before)
        return d

    @classmethod
    def from_wire(cls, d: Any) -> ProbeMember:
        if not isinstance(d, dict):
            raise ProtocolError(f"probe member: expected an object, got {type(d).__name__}")
        before = d.get("before")
        if before is not None and (
            not isinstance(before, list) or not all(isinstance(c, str) for c in before)
        ):
            raise ProtocolError("probe member: 'before' must be a list of class names")
        has_before = "before" in d or "rate_before" in d
        return cls(
            job=_int(d, "job"),
            cls=_str(d, "cls", "default"),
            rate=_rate(d, "rate"),
            rate_before=_rate(d, "rate_before"),
            before=tuple(before or ()) if has_before else None,
        )


@dataclass(frozen=True)
class ProbeReport:
    """The measurement of the set ``job`` joined, ``window_s`` seconds long."""

    job: int
    since: float
    window_s: float
    members: tuple[ProbeMember, ...]
    #: the GPU index on the node (set when read from the node's files)
    gpu: int | None = None
    #: a second look: the set left behind when a job left a set this job's probe kept
    again: bool = False

    def to_wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "job": self.job,
            "since": self.since,
            "window_s": self.window_s,
            "members": [m.to_wire() for m in self.members],
        }
        if self.gpu is not None:
            d["gpu"] = self.gpu
        if self.again:
            d["again"] = True
        return d

    @classmethod
    def from_wire(cls, d: Any) -> ProbeReport:
        if not isinstance(d, dict):
            raise ProtocolError(f"probe report: expected an object, got {type(d).__name__}")
        members = d.get("members") or []
        if not isinstance(members, list):
            raise ProtocolError("probe report: 'members' must be a list")
        gpu = d.get("gpu")
        again = d.get("again", False)
        if not isinstance(again, bool):
            raise ProtocolError(f"probe report: 'again' must be true or false, got {again!r}")
        return cls(
            job=_int(d, "job"),
            since=_num(d, "since"),
            window_s=_num(d, "window_s"),
            members=tuple(ProbeMember.from_wire(m) for m in members),
            gpu=None if gpu is None else _int(d, "gpu"),
            again=again,
        )

    def with_gpu(self, gpu: int) -> ProbeReport:
        return replace(self, gpu=gpu)


def _int(d: dict[str, Any], key: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f"probe report: {key!r} must be an integer, got {v!r}")
    return v


def _num(d: dict[str, Any], key: str) -> float:
    v = d.get(key, 0.0)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProtocolError(f"probe report: {key!r} must be a number, got {v!r}")
    return v


def _rate(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise ProtocolError(f"probe member: {key!r} must be a number or null, got {v!r}")
    return v


def _str(d: dict[str, Any], key: str, default: str) -> str:
    v = d.get(key, default)
    if not isinstance(v, str):
        raise ProtocolError(f"probe member: {key!r} must be a string, got {v!r}")
    return v
