"""Run several schedulers on the same trace and seed, and collect their results. Pure
except for the wall-clock time it measures."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from slurm_colo.contracts.enums import CrossUser, Unplaced

from ..config import PlacementConfig
from ..errors import ModelError
from ..gavel import GavelData
from ..scores import ScoreTable
from .engine import Scheduler, Sim, SimConfig, SimError
from .metrics import Result, summarize
from .ours import PolicyScheduler
from .policies import ExclusiveFifo, GandivaRandom, SlurmShard
from .trace import SimJob
from .truth import Truth, oracle_scores, split_pairs

POLICIES = (
    "exclusive-fifo",
    "exclusive-backfill",
    "slurm-shard",
    "gandiva-random",
    "ours",
    "ours-submit",
    "oracle",
)
#: policies run only when named: ``oracle-error`` is the oracle with every measured pair
#: off by up to ``Setup.oracle_error`` (how much one seed tells, docs/simulator.md)
EXTRA_POLICIES = ("oracle-error",)
KNOWN_POLICIES = POLICIES + EXTRA_POLICIES


@dataclass(frozen=True)
class Setup:
    """Everything a comparison depends on besides the trace."""

    sim: SimConfig
    placement: PlacementConfig
    #: share of the measured pairs hidden from the model (it predicts them)
    hidden_share: float = 0.3
    #: the ``oracle-error`` policy's error on each measured throughput (0.01: ±1 %)
    oracle_error: float = 0.01


def predicted_scores(data: GavelData, train: list[tuple[str, str]], seed: int) -> ScoreTable:
    """The retraining model's score table, trained on ``train`` pairs only."""
    try:
        from ..model import fit_gavel  # type: ignore[attr-defined]
    except ImportError as e:
        raise ModelError(f"the compatibility model is not available ({e})") from None
    return fit_gavel(data, set(train), seed)


def missing_classes(scores: ScoreTable, classes: Iterable[str]) -> list[str]:
    """Classes the score set knows nothing of: neither a class entry nor a pair."""
    known = set(scores.classes) | {c for pair in scores.pairs for c in pair}
    return sorted(set(classes) - known)


def unscored_pairs(scores: ScoreTable, classes: Iterable[str]) -> int:
    """How many pairs of ``classes`` (each once, a class with itself included) the score set
    has no score for: the policy has no data on them (the set's prior, unknown)."""
    cl = sorted(set(classes))
    return sum(
        1
        for i, a in enumerate(cl)
        for b in cl[i:]
        if (a, b) not in scores.pairs and (b, a) not in scores.pairs
    )


def make_scheduler(
    name: str, setup: Setup, data: GavelData, predicted: Callable[[], ScoreTable]
) -> Scheduler:
    if name == "exclusive-fifo":
        return ExclusiveFifo(backfill=False)
    if name == "exclusive-backfill":
        return ExclusiveFifo(backfill=True)
    if name == "slurm-shard":
        return SlurmShard()
    if name == "gandiva-random":
        # under MPS (cross_user = "never") it may pair only one user's jobs, like ours
        return GandivaRandom(
            setup.sim.seed, same_user=setup.placement.cross_user == CrossUser.NEVER
        )
    if name == "ours":
        # the agent where Slurm can change a pending job's GRES (23.11+): placement.replan
        # re-places waiting jobs, and an undone job may go to any shared GPU
        return PolicyScheduler(
            "ours",
            predicted(),
            setup.placement,
            learn=True,
            retype_after_undo=True,
        )
    if name == "ours-submit":
        return PolicyScheduler(
            "ours-submit",
            predicted(),
            setup.placement,
            learn=True,
            submit_time=True,
            hold=setup.placement.unplaced != Unplaced.OWN_GPU,
        )  # all GPUs shared
    if name == "oracle":
        return PolicyScheduler("oracle", oracle_scores(data), setup.placement, learn=False)
    if name == "oracle-error":
        if not 0.0 <= setup.oracle_error < 1.0:
            raise SimError(f"oracle error {setup.oracle_error:g}: give a share from 0 to below 1")
        scores = oracle_scores(data, setup.oracle_error, setup.sim.seed)
        return PolicyScheduler("oracle-error", scores, setup.placement, learn=False)
    raise SimError(f"unknown policy {name!r}; known: {', '.join(KNOWN_POLICIES)}")


def simulate(
    trace: Sequence[SimJob],
    data: GavelData,
    setup: Setup,
    policies: Sequence[str] = POLICIES,
    scores: ScoreTable | None = None,
) -> list[Result]:
    """Run each policy on ``trace``. ``scores``: the table ``ours`` uses; by default the
    model is trained on a seeded ``1 - hidden_share`` of the measured pairs."""
    truth = Truth(data)
    cache: list[ScoreTable] = []

    def predicted() -> ScoreTable:
        if scores is not None:
            return scores
        if not cache:
            train, _ = split_pairs(data, setup.hidden_share, setup.sim.seed)
            cache.append(predicted_scores(data, train, setup.sim.seed))
        return cache[0]

    out = []
    for name in policies:
        sched = make_scheduler(name, setup, data, predicted)
        t0 = time.perf_counter()
        sim = Sim(trace, truth, setup.sim, sched).run()
        wall = time.perf_counter() - t0
        out.append(summarize(sim, setup.placement.max_slowdown, wall))
    return out


def with_cross_user(setup: Setup, cross_user: str) -> Setup:
    return replace(setup, placement=replace(setup.placement, cross_user=CrossUser(cross_user)))
