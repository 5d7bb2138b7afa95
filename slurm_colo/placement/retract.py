"""Judging a shared set after its probe window: keep it, or undo the newest placement.

A set formed by a placement is watched for ``placement.probe_s``. Then each member's
normalised throughput ``n`` (its speed next to the others over its speed alone) is read --
measured where the job reports progress, else the score table's prediction -- and the set
is *harmful* when

* the members' combined throughput ``sum(n)`` is below 1 (running them one after another
  would finish sooner: Gandiva's retraction test), or
* a member not in ``aggressive`` mode runs below ``1 / max_slowdown`` of its solo speed
  (``1 / throughput_max_slowdown`` when the set's combined throughput reaches
  ``placement.min_throughput`` and the newcomer was placed while the policy's throughput
  path was open, :func:`~.candidates.throughput_open`: a set is judged by the rule it was
  placed under, so one formed while the queue was about to run out keeps every member
  above ``1 / max_slowdown``).

A harmful set is undone by requeueing its newest member (it has run only the probe window,
so it loses at most that much work even without checkpoints). Either way what the set showed
becomes pair observations (:func:`observed_pairs`) the placement uses at once, ahead of the
next nightly retrain. Pure: the simulator and the agent call the same functions.
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_colo.contracts.enums import Mode

from ..config import PlacementConfig
from ..scores import PairScore, ScoreTable, log_rate, slowdown_shares


@dataclass(frozen=True)
class Member:
    """One job of a probed set."""

    key: str
    cls: str
    mode: str  # --colocate mode: auto, aggressive
    #: normalised throughput next to the rest of the set (1.0 = solo speed)
    n: float
    #: measured from the job's own progress (False: the score table's prediction)
    measured: bool = True


@dataclass(frozen=True)
class Verdict:
    undo: bool
    reason: str
    #: pair throughputs the set showed, (newcomer class, member class) -> PairScore
    observed: dict[tuple[str, str], PairScore] = field(default_factory=dict)


def judge(
    newcomer: str,
    members: Sequence[Member],
    scores: ScoreTable,
    cfg: PlacementConfig,
    throughput: bool = True,
) -> Verdict:
    """Keep or undo the set ``members`` whose newest member is the job ``newcomer``;
    ``throughput``: whether the policy's throughput path was open when it was placed
    (:attr:`~.view.Decision.throughput_open`)."""
    new = next((m for m in members if m.key == newcomer), None)
    if new is None or len(members) < 2:
        return Verdict(False, "no shared set to judge")
    obs = observed_pairs(new, members, scores) if any(m.measured for m in members) else {}
    total = sum(m.n for m in members)
    # a set that pays in combined throughput may slow a member more (the policy's
    # throughput path, placement.min_throughput), while that path is open
    paid = throughput and cfg.min_throughput > 0 and total >= cfg.min_throughput
    limit = cfg.throughput_max_slowdown if paid else cfg.max_slowdown
    floor = 1.0 / limit
    slow = [m for m in members if m.mode != Mode.AGGRESSIVE and m.n < floor]
    rates = ", ".join(f"{m.key} {m.n:.2f}{'' if m.measured else ' (predicted)'}" for m in members)
    if not any(m.measured for m in members):
        return Verdict(False, f"kept: no member reports progress ({rates})")
    if total < 1.0:
        return Verdict(True, f"harmful: combined throughput {total:.2f} < 1 ({rates})", obs)
    if slow:
        return Verdict(
            True,
            f"harmful: job {slow[0].key} at {slow[0].n:.2f}x solo speed, below "
            f"1/{limit:g} ({rates})",
            obs,
        )
    return Verdict(False, f"kept: combined throughput {total:.2f} ({rates})", obs)


def undone_floor(cfg: PlacementConfig) -> float:
    """The normalised throughput a job requeued by an undo must be predicted to keep when it
    is placed again: halfway between the ``max_slowdown`` floor and solo speed (0.83 for
    1.5). It lost the work of its probe window, so it has less slowdown to spare; and its
    GPU takes no new partner while it runs (``Occupant.no_partners``). Its running time then
    stays within ``max_slowdown`` of its solo run if it runs at least ``lost / (max_slowdown
    - 1 / floor)``: 33 minutes for a 10-minute probe."""
    return (1.0 + 1.0 / cfg.max_slowdown) / 2.0


def rate_floor(cfg: PlacementConfig, undone: bool) -> float:
    """A job's own rate floor: :func:`undone_floor` for a job requeued by an undo, else 0."""
    return undone_floor(cfg) if undone else 0.0


def _predicted(cls: str, others: Sequence[str], scores: ScoreTable) -> float:
    n = 1.0
    for o in others:
        n *= scores.pair(cls, o).n_a
    return n


def members_from_report(
    report: dict[str, Any], scores: ScoreTable, modes: dict[str, str] | None = None
) -> list[Member]:
    """The members of a node's probe report (:mod:`slurm_colo.node.probe`) with their
    normalised throughput.

    * The newcomer: its progress rate over its class's solo progress rate at this site
      (``progress_rate`` in the score set) -- both in the job's own units.
    * A member that was there before: its rate now over its rate before the newcomer came,
      times the predicted throughput of the set it was in before (1 when it was alone).
    * Without progress figures (the job does not report progress, or its class has no solo
      progress rate yet): the score table's prediction, marked not measured.

    A measured ``n`` is at most 1: a job is not faster next to others than alone, and the
    progress figures are the job's own (a job reporting a made-up rate must not teach the
    agent that its class gains from every partner); a bit above 1 is noise, read as 1.
    """
    modes = modes or {}
    new_key = str(report["job"])
    rows = [m for m in report.get("members") or [] if isinstance(m, dict)]
    classes = {str(m["job"]): str(m.get("cls", "default")) for m in rows}
    out = []
    for m in rows:
        key, cls = str(m["job"]), str(m.get("cls", "default"))
        others = [c for k, c in classes.items() if k != key]
        n, measured = _predicted(cls, others, scores), False
        rate = _pos(m.get("rate"))
        if key == new_key:
            info = scores.classes.get(cls)
            solo = info.progress_rate if info is not None else None
            if rate is not None and solo:
                n, measured = rate / solo, True
        else:
            before = _pos(m.get("rate_before"))
            if rate is not None and before:
                prev = [str(c) for c in m.get("before") or []]
                n, measured = rate / before * _predicted(cls, prev, scores), True
        out.append(
            Member(key, cls, modes.get(key, "auto"), min(n, 1.0) if measured else n, measured)
        )
    return out


def _pos(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def observed_pairs(
    new: Member, members: Sequence[Member], scores: ScoreTable
) -> dict[tuple[str, str], PairScore]:
    """Pair throughputs read from a set: exact for two jobs; for more, the newcomer's effect
    on each member is that member's rate over the predicted effect of the others, and the
    newcomer's own slowdown is split between its partners as the table predicts it
    (:func:`split_slowdown`). A side that was not measured keeps the table's prediction; a
    pair with neither side measured is left out."""
    others = [m for m in members if m.key != new.key]
    k = len(others)
    n_new = split_slowdown(new.n, [scores.pair(new.cls, m.cls).n_a for m in others])
    out: dict[tuple[str, str], PairScore] = {}
    for m, n_new_m in zip(others, n_new, strict=True):
        if not (new.measured or m.measured):
            continue
        pred = _predicted(m.cls, [o.cls for o in others if o.key != m.key], scores)
        n_m = min(m.n / pred, 1.0) if pred > 0 else m.n
        table = scores.pair(new.cls, m.cls)
        out[(new.cls, m.cls)] = PairScore(
            n_new_m if new.measured else table.n_a,
            n_m if m.measured else table.n_b,
            0.02 if k == 1 else 0.05,
            observed=True,
        )
    return out


def split_slowdown(rate: float, predicted: Sequence[float]) -> list[float]:
    """A job's measured ``rate`` next to several partners, split into one rate per partner
    whose product is ``rate`` (multiplicative composition), by
    :func:`~slurm_colo.scores.slowdown_shares` of ``predicted`` (the job's predicted rate
    next to each partner alone): a partner predicted not to slow the job takes none. Evenly
    (the geometric mean) when no partner is predicted to slow it, or the job made no
    progress."""
    r = max(rate, 0.0)
    k = len(predicted)
    if k <= 1:
        return [r] * k
    if r == 0.0:
        return [r ** (1.0 / k)] * k
    return [r**s for s in slowdown_shares([log_rate(p) for p in predicted])]


def with_pairs(t: ScoreTable, obs: dict[tuple[str, str], PairScore]) -> ScoreTable:
    """A copy of ``t`` with observed pairs replacing its predictions."""
    if not obs:
        return t
    pairs = dict(t.pairs)
    for (a, b), p in obs.items():
        pairs.pop((b, a), None)
        pairs[(a, b)] = p
    return replace(t, pairs=pairs, id=f"{t.id}+{len(obs)}obs")


#: jobs of a class no score set knows that must have come (placed by the agent, arrived in
#: the simulator) before a probe's measurement of it is learnt: a job name used once
#: (``run-00042``) never comes back, and each class learnt is a row and a column of the
#: placement index, built afresh when one is added
RECURRING = 2


def recurring_only(
    obs: dict[tuple[str, str], PairScore], known: Container[str], came: Mapping[str, int]
) -> dict[tuple[str, str], PairScore]:
    """The pairs of ``obs`` whose classes are all ``known`` or have come ``RECURRING``
    times (``came``: jobs per class that no score set knows)."""
    return {
        k: p for k, p in obs.items() if all(c in known or came.get(c, 0) >= RECURRING for c in k)
    }
