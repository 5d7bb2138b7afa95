"""The checks of ``slurm-colo simulate``'s options and its ``--scores`` set: every bad value
is a clear error naming the option before anything runs (a run can take many minutes)."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

import typer

from ..config import PlacementConfig, load_config
from ..contracts.enums import CrossUser, Undo, Unplaced
from ..errors import ScoresError
from ..gavel import GavelData
from ..scores import ScoreTable

E = TypeVar("E", bound=StrEnum)


def word(kind: type[E], option: str, value: str) -> E:
    """One of the words of ``kind`` (a placement setting's enum), or a clear error."""
    try:
        return kind(value)
    except ValueError:
        accepted = ", ".join(m.value for m in kind)
        from ..sim.engine import SimError

        raise SimError(f"{option} {value!r}: accepted values are {accepted}") from None


#: jobs one simulated GPU may hold: MPS serves at most 48 clients per GPU (Volta and later)
MAX_SLOTS = 48

#: the largest campaign ``simulate`` generates: a typo of a few zeros must fail at once,
#: not fill the memory for an hour
MAX_SIZES = {"jobs": 1_000_000, "gpus": 100_000, "users": 100_000, "slots": MAX_SLOTS}


def check_sizes(**sizes: int) -> None:
    from ..sim.engine import SimError

    for name, n in sizes.items():
        if n > MAX_SIZES[name]:
            raise SimError(f"--{name} {n}: at most {MAX_SIZES[name]:,}")


def check_numbers(
    load: float, seed: int, hidden_share: float, aggressive_share: float, max_duration_h: float
) -> None:
    """The trace options' ranges, checked before anything runs (a NaN load never ends)."""
    from ..sim.engine import SimError

    if not 0.01 <= load <= 100:
        raise SimError(f"--load {load:g}: give an offered load from 0.01 to 100")
    if seed < 0:
        raise SimError(f"--seed {seed}: give a non-negative seed")
    if not 0 <= hidden_share < 1:
        raise SimError(
            f"--hidden-share {hidden_share:g}: give a share from 0 to below 1 "
            "(the model must see some pairs)"
        )
    if not 0 <= aggressive_share <= 1:
        raise SimError(f"--aggressive-share {aggressive_share:g}: give a share from 0 to 1")
    if not 0 <= max_duration_h < math.inf:
        raise SimError(f"--max-duration-h {max_duration_h:g}: give hours, 0 for no cap")


def limit_factors(text: str) -> tuple[float, float]:
    """``--time-limits``: ``LOW-HIGH`` or one factor (both ends the same)."""
    from ..sim.engine import SimError

    low, sep, high = text.strip().partition("-")
    try:
        lo = float(low)
        hi = float(high) if sep else lo
    except ValueError:
        raise SimError(
            f"--time-limits {text!r}: give LOW-HIGH factors of the solo duration, e.g. 1-3"
        ) from None
    if not 1.0 <= lo <= hi < math.inf:
        raise SimError(
            f"--time-limits {text!r}: give finite 1 <= LOW <= HIGH (a limit covers the run)"
        )
    return lo, hi


def score_set(path: Path, data: GavelData) -> ScoreTable:
    """The score set of ``--scores``; every defect is a :class:`ScoresError` naming the file.
    Classes of ``data`` it lacks are warned about (the policies treat them as the live agent
    does: no data); a set with none of them is refused."""
    from ..scores import load_scores
    from ..sim.run import missing_classes, unscored_pairs

    try:
        table = load_scores(path, pipe=True)
    except UnicodeDecodeError:
        raise ScoresError(f"score file {path} is corrupt (not UTF-8 text)") from None
    except ScoresError as e:
        if f"score file {path}" in e.message:
            raise
        msg = e.message.removeprefix(f"{path}: ")  # scores_from_dict names the path alone
        raise ScoresError(f"score file {path}: {msg}", hint=e.hint) from None
    missing = missing_classes(table, data.classes)
    if len(missing) == len(data.classes):
        theirs = sorted(set(table.classes) | {c for p in table.pairs for c in p})
        raise ScoresError(
            f"score file {path} (score set {table.id}) has none of the "
            f"{len(data.classes)} classes of the {data.gpu} data "
            f"({_names(data.classes)}); it has: {_names(theirs) or 'no classes'}"
        )
    if missing:
        typer.echo(
            f"warning: score set {table.id} ({path}) lacks {len(missing)} of the "
            f"{len(data.classes)} classes of the {data.gpu} data: {_names(missing)}; "
            f"our policies have no data on their pairs",
            err=True,
        )
    n = len(data.classes) * (len(data.classes) + 1) // 2
    lacking = unscored_pairs(table, data.classes)
    if lacking and not missing:
        typer.echo(
            f"warning: score set {table.id} ({path}) has no score for {lacking} of the "
            f"{n} pairs of the {data.gpu} data's classes",
            err=True,
        )
    if table.gpu_model and table.gpu_model != data.gpu:
        typer.echo(
            f"warning: score set {table.id} ({path}) is for GPU type "
            f"{table.gpu_model!r}, the measured data for {data.gpu!r}",
            err=True,
        )
    return table


def _names(names: list[str], most: int = 8) -> str:
    more = len(names) - most
    return ", ".join(names[:most]) + (f" and {more} more" if more > 0 else "")


def policy_names(text: str, known: list[str]) -> list[str]:
    """``--policies``: the comma-separated names, each a known policy, at least one."""
    from ..sim.engine import SimError

    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in known]
    if bad:
        raise SimError(f"unknown policy {bad[0]!r}; known: {', '.join(known)}")
    if not names:
        raise SimError(f"--policies names no policy; known: {', '.join(known)}")
    return names


def placement_settings(
    config: Path | None, cross_user: str, undo: str, unplaced: str
) -> PlacementConfig:
    """The ``[placement]`` settings of ``--config`` (else the defaults) with the three
    overrides of the command line."""
    pcfg = load_config(config, missing_ok=False).placement if config else PlacementConfig()
    if cross_user:
        pcfg = replace(pcfg, cross_user=word(CrossUser, "--cross-user", cross_user))
    if undo:
        pcfg = replace(pcfg, undo=word(Undo, "--undo", undo))
    if unplaced:
        pcfg = replace(pcfg, unplaced=word(Unplaced, "--unplaced", unplaced))
    return pcfg


def check_percent_and_memory(oracle_error: float, gpu_memory_gib: float) -> None:
    """``--oracle-error`` (a percentage below 100) and ``--gpu-memory-gib`` (0 or a size)."""
    from ..sim.engine import SimError

    if not 0 <= oracle_error < 100:
        raise SimError(f"--oracle-error {oracle_error:g}: give a percentage from 0 to below 100")
    if not gpu_memory_gib >= 0 or gpu_memory_gib == math.inf:
        raise SimError(
            f"--gpu-memory-gib {gpu_memory_gib:g}: give a positive size in GiB (0: the GPU model's)"
        )


@dataclass(frozen=True)
class TraceOptions:
    """Where the jobs come from: a site's ``sacct`` export, or a Philly-like trace generated
    with these options (checked when made: :meth:`checked`)."""

    sacct: Path | None
    jobs: int
    load: float
    users: int
    multi_gpu: bool
    max_duration_h: float
    aggressive_share: float
    limit_factors: tuple[float, float] | None

    @classmethod
    def checked(
        cls,
        sacct: Path | None,
        jobs: int,
        load: float,
        users: int,
        multi_gpu: bool,
        max_duration_h: float,
        aggressive_share: float,
        time_limits: str,
    ) -> TraceOptions:
        from ..sim.engine import SimError

        factors = limit_factors(time_limits) if time_limits else None
        if factors is not None and sacct:
            raise SimError("--time-limits is for generated traces: a --sacct export has its own")
        return cls(sacct, jobs, load, users, multi_gpu, max_duration_h, aggressive_share, factors)

    def options(self) -> str:
        """These options on a command line (a replay of the run)."""
        if self.sacct:
            return f"--sacct {shlex.quote(str(self.sacct))}"
        words = [
            f"--jobs {self.jobs} --load {self.load:g} --users {self.users} "
            f"--max-duration-h {self.max_duration_h:g}"
        ]
        if self.multi_gpu:
            words.append("--multi-gpu")
        if self.aggressive_share:
            words.append(f"--aggressive-share {self.aggressive_share:g}")
        if self.limit_factors is not None:
            lo, hi = self.limit_factors
            words.append(f"--time-limits {lo:g}-{hi:g}")
        return " ".join(words)
