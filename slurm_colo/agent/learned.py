"""Pair throughputs the probes measured: laid over the live score set, kept across restarts.

The agent lays what its probes measured over the live score set until a score set made
after the measurement is loaded (:class:`LiveScores`). They are saved next to the
live score set (``learned.json`` in the directory of ``scores.path``) after each probe that
learnt something, and read back when the agent starts, so a restart does not put jobs back
into a pair that has just proved harmful. The nightly retrain does not need this file: the
job records carry the same episodes into the history.

A file that cannot be read is set aside (``learned.json.bad``) with a warning; the agent
starts without the measurements instead of refusing to start.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime
from pathlib import Path

from ..config import Config
from ..placement.by_model import ScoreBook
from ..placement.retract import RECURRING, recurring_only, with_pairs
from ..scores import PairScore, ScoreTable
from . import kept
from .kept import KeptFileError

log = logging.getLogger("slurm_colo.agent")

FORMAT = "slurm-colo-learned/1"
#: classes no score set in use knows whose measured pairs are kept: the most recently
#: measured ones. A job named afresh for each run (``run-00042``) is such a class and never
#: comes back, and each class kept is a row and a column of the placement index, built
#: again at the next look when one is added: without a bound a day of such probes on a
#: large site grows it past the Lua hook's deadline. The next score set starts afresh.
MAX_NEW_CLASSES = 256
#: classes no score set knows whose placements are counted at once (beyond it, those
#: placed once are forgotten)
MAX_COUNTED = 100_000
#: (class a, class b) -> (the pair as measured, when), as LiveScores.learned keeps them
Learned = dict[tuple[str, str], tuple[PairScore, float]]


class LearnedError(KeptFileError):
    """The saved probe measurements cannot be read."""


def learned_path(cfg: Config) -> Path:
    return Path(cfg.scores.path).with_name("learned.json")


def to_json(learned: Learned) -> bytes:
    pairs = [
        {"a": a, "b": b, "n_a": p.n_a, "n_b": p.n_b, "sd": p.sd, "never": p.never, "at": t}
        for (a, b), (p, t) in sorted(learned.items())
    ]
    return json.dumps({"format": FORMAT, "pairs": pairs}, indent=1).encode() + b"\n"


def from_json(raw: bytes, source: str) -> Learned:
    d = kept.document(raw, source, FORMAT, LearnedError)
    out: Learned = {}
    for k, p in enumerate(d.get("pairs") or []):
        try:
            a, b = str(p["a"]), str(p["b"])
            vals = [float(p["n_a"]), float(p["n_b"]), float(p.get("sd", 0.0)), float(p["at"])]
        except (KeyError, TypeError, ValueError) as e:
            raise LearnedError(
                f"{source}: pairs[{k}] is malformed ({type(e).__name__}: {e})"
            ) from None
        if not all(math.isfinite(v) and v >= 0 for v in vals) or max(vals[:3]) > 10:
            raise LearnedError(f"{source}: pairs[{k}] has a value out of range")
        never = p.get("never", False)
        if not isinstance(never, bool):  # bool("false") is true
            raise LearnedError(f"{source}: pairs[{k}].never is not true or false")
        out[(a, b)] = (PairScore(vals[0], vals[1], vals[2], observed=True, never=never), vals[3])
    return out


def save(path: Path, learned: Learned) -> None:
    """Write ``learned`` atomically; a failure is logged (the measurements stay in memory)."""
    kept.save(path, to_json(learned), "probe measurements")


def load(path: Path) -> Learned:
    """The saved measurements; none when the file is missing. An unreadable file is set
    aside as ``<name>.bad`` and reported (the agent starts without it)."""
    return kept.load(path, from_json, "probe measurements") or {}


def _timestamp(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


class LiveScores:
    """The live score set with what probes measured since it was made laid over it; on a
    site with several GPU models, the sets of the models that have their own too (each
    with the measurements made after it), as a :class:`ScoreBook`."""

    def __init__(self, table: ScoreTable | None = None) -> None:
        #: pair throughputs probes measured since the score set was made, laid over it
        self.learned: Learned = {}
        self._pending = False
        #: bumped whenever ``learned`` gains a measurement (the agent then saves it)
        self.changes = 0
        #: why the last score file could not be loaded (the set in use is kept)
        self.error: str | None = None
        #: the sets of the GPU models that have their own, as loaded, and what probes
        #: measured laid over them; why a model's file could not be loaded (set kept)
        self._models: dict[str, ScoreTable] = {}
        self._model_tables: dict[str, ScoreTable] = {}
        self.model_errors: dict[str, str] = {}
        self._book: ScoreBook | None = None
        #: the score sets in use and the classes they know (:meth:`known_classes`)
        self._known: tuple[tuple[ScoreTable, ...], set[str]] | None = None
        #: classes no score set knows -> jobs of each placed since the site default set
        #: was loaded, up to RECURRING (:meth:`placed`)
        self._unknown_placed: dict[str, int] = {}
        self._base = ScoreTable()
        self.load(table or ScoreTable())

    @property
    def table(self) -> ScoreTable:
        return self._table

    @property
    def book(self) -> ScoreBook:
        """The site default set and the per-model sets (the same object until one of them
        changes: the agent's prepared decision is kept while it is)."""
        if self._book is None:
            self._book = ScoreBook(self._table, dict(self._model_tables))
        return self._book

    @property
    def models(self) -> dict[str, ScoreTable]:
        """The per-model sets in use (with the probes' measurements laid over them)."""
        return dict(self._model_tables)

    def load(self, table: ScoreTable) -> None:
        """Use a new score set; measurements older than it are dropped."""
        if table is not self._base:
            self._unknown_placed.clear()
        self._base = table
        made = _timestamp(table.created)
        self.learned = {k: v for k, v in self.learned.items() if made is None or v[1] > made}
        self._table = with_pairs(table, {k: v[0] for k, v in self.learned.items()})
        self._model_tables = {m: self._overlay(t) for m, t in self._models.items()}
        self._book = None

    def load_model(self, gpu_model: str, table: ScoreTable | None) -> None:
        """Use ``table`` for the GPUs of ``gpu_model`` (None: they use the site default)."""
        if table is None:
            self._models.pop(gpu_model, None)
            self._model_tables.pop(gpu_model, None)
        else:
            self._models[gpu_model] = table
            self._model_tables[gpu_model] = self._overlay(table)
        self._book = None

    def _overlay(self, table: ScoreTable) -> ScoreTable:
        """``table`` with the measurements made after it laid over it."""
        made = _timestamp(table.created)
        newer = {k: v[0] for k, v in self.learned.items() if made is None or v[1] > made}
        return with_pairs(table, newer) if newer else table

    def learn(
        self, observed: dict[tuple[str, str], PairScore], now: float, at_once: bool = False
    ) -> None:
        """Use pair throughputs a probe measured (until a newer score set): ``at_once`` (a
        harmful set: the caller rebuilds the view), else from the next look at Slurm, so a
        kept set costs no rebuild of the placement cache on a hook's request. A pair with a
        class no score set knows is used only once that class recurs (:meth:`placed`)."""
        # a class learnt costs a build of the placement index at the next look (0.1 s over
        # 2,000 GPUs with tens of classes, 0.5-1.4 s with 500)
        observed = recurring_only(observed, self.known_classes(), self._unknown_placed)
        if not observed:
            return
        for (a, b), ps in observed.items():
            self.learned.pop((b, a), None)
            self.learned[(a, b)] = (ps, now)
        self._bound_new_classes()
        self._pending = True
        self.changes += 1
        if at_once:  # the caller rebuilds the view
            self.apply()

    def restore(self, learned: Learned) -> None:
        """Measurements saved before a restart, laid over the score set unless it was made
        after them."""
        self.learned = dict(learned)
        self._bound_new_classes()
        self.load(self._base)

    def placed(self, cls: str) -> None:
        """The agent placed a job of ``cls`` (whatever it decided): a class no score set
        knows counts as recurring from its second job (:data:`RECURRING`), and only then
        are probes' measurements of it laid over the set."""
        if cls in self.known_classes():
            return
        n = self._unknown_placed.get(cls, 0)
        if n + 1 < RECURRING and len(self._unknown_placed) >= MAX_COUNTED:
            self._unknown_placed = {c: k for c, k in self._unknown_placed.items() if k >= RECURRING}
        self._unknown_placed[cls] = min(n + 1, RECURRING)

    def known_classes(self) -> set[str]:
        """The classes the score sets in use have a profile or a pair for (computed once
        per set of tables; the probes' measurements aside)."""
        tables = (self._base, *self._models.values())
        if (
            self._known is None
            or len(self._known[0]) != len(tables)
            or any(a is not b for a, b in zip(self._known[0], tables, strict=True))
        ):
            self._known = (tables, set().union(*(t.known_classes() for t in tables)))
        return self._known[1]

    def _bound_new_classes(self) -> None:
        """Keep the measurements of at most ``MAX_NEW_CLASSES`` classes that no score set in
        use knows (by the time each was last measured); those of known classes all stay."""
        known = self.known_classes()
        last: dict[str, float] = {}
        for pair, (_, at) in self.learned.items():
            for c in pair:
                if c not in known:
                    last[c] = max(last.get(c, at), at)
        if len(last) <= MAX_NEW_CLASSES:
            return
        drop = set(sorted(last, key=lambda c: last[c])[: len(last) - MAX_NEW_CLASSES])
        self.learned = {k: v for k, v in self.learned.items() if drop.isdisjoint(k)}
        log.info(
            "probe measurements of %d job class(es) no score set knows were dropped (the "
            "oldest; at most %d such classes are kept until the next score set)",
            len(drop),
            MAX_NEW_CLASSES,
        )

    def apply(self) -> None:
        """Lay the pairs probes measured over the score set."""
        if self._pending:
            self._pending = False
            self.load(self._base)
