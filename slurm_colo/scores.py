"""Compatibility scores: the file format `slurm-colo retrain` publishes and placement reads.

Format ``slurm-colo-scores/1`` (JSON)::

    {"format": "slurm-colo-scores/1", "id": "...", "created": "2026-11-22T03:00:00+00:00",
     "gpu_model": "v100",
     "prior": {"n": 0.6, "sd": 0.25},
     "classes": {"resnet18-bs64": {"memory_gib": 3.0, "sm_util": 0.55, "solo_rate": 12.0,
                                   "progress_rate": 3.1}},
     "pairs": [{"a": "x", "b": "y", "n_a": 0.81, "n_b": 0.74, "sd": 0.05,
                "observed": true, "never": false}],
     "training": {...}, "metrics": {...}}

``n_a`` is the normalised throughput of ``a`` while sharing a GPU with ``b`` (rate together /
rate alone); ``never`` marks pairs that must not share (out of memory, fatal MPS faults).
Sets of three or more are predicted multiplicatively from the pairs (documented in
docs/model.md); :func:`slowdown_shares` is the rule by which a slowdown measured in such a
set is shared out among the pairs again. Everything here is pure: no I/O except :func:`load_scores` and
:func:`publish_scores`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ScoresError
from .fsutil import atomic_write_bytes, read_regular

FORMAT = "slurm-colo-scores/1"


@dataclass(frozen=True)
class ClassInfo:
    memory_gib: float | None = None
    sm_util: float | None = None
    solo_rate: float | None = None
    #: median job-reported progress rate of the class's solo runs at this site (the jobs'
    #: own units: steps, samples... per second); a probe compares a new job's rate with it
    progress_rate: float | None = None


@dataclass(frozen=True)
class PairScore:
    n_a: float
    n_b: float
    sd: float
    observed: bool = False
    never: bool = False
    known: bool = True  # False when both or one class is unknown and the prior was used

    @property
    def combined(self) -> float:
        return self.n_a + self.n_b

    @property
    def delta(self) -> float:
        """Tabrizian's delta for two jobs of equal solo length: ``2 * min(n_a, n_b)``."""
        return 2.0 * min(self.n_a, self.n_b)


@dataclass
class ScoreTable:
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    pairs: dict[tuple[str, str], PairScore] = field(default_factory=dict)
    prior_n: float = 0.6
    prior_sd: float = 0.25
    id: str = "empty"
    created: str = ""
    gpu_model: str = ""
    training: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    # ---- lookups --------------------------------------------------------------------
    def known_classes(self) -> set[str]:
        """The classes the set has a profile or a pair for (any other class gets the prior)."""
        names = set(self.classes)
        for a, b in self.pairs:
            names.update((a, b))
        return names

    def pair(self, a: str, b: str) -> PairScore:
        p = self.pairs.get((a, b))
        if p is not None:
            return p
        q = self.pairs.get((b, a))
        if q is not None:
            return PairScore(q.n_b, q.n_a, q.sd, q.observed, q.never, q.known)
        return PairScore(self.prior_n, self.prior_n, self.prior_sd, False, False, False)

    def memory_gib(self, cls: str, default: float) -> float:
        info = self.classes.get(cls)
        return info.memory_gib if info and info.memory_gib is not None else default

    def set_throughputs(self, members: list[str]) -> tuple[list[float], float, bool, bool]:
        """Predicted normalised throughput of each member of a co-located set.

        Multiplicative composition: member i runs at ``prod_{j != i} n(i | j)``. Returns
        (throughputs, combined std. dev., any pair marked never, all pairs known).
        """
        k = len(members)
        n = [1.0] * k
        var = 0.0
        never = False
        known = True
        for i in range(k):
            for j in range(i + 1, k):
                p = self.pair(members[i], members[j])
                n[i] *= p.n_a
                n[j] *= p.n_b
                var += p.sd * p.sd
                never = never or p.never
                known = known and p.known
        return n, math.sqrt(var), never, known

    def delta(self, members: list[str]) -> tuple[float, float]:
        """(delta, sd) of a set of equal-length jobs: ``k * min(n_i)``."""
        if len(members) < 2:
            return 1.0, 0.0
        n, sd, never, _ = self.set_throughputs(members)
        if never:
            return 0.0, 0.0
        return len(members) * min(n), len(members) * sd

    # ---- (de)serialisation -----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "id": self.id,
            "created": self.created,
            "gpu_model": self.gpu_model,
            "prior": {"n": self.prior_n, "sd": self.prior_sd},
            "classes": {
                c: {k: v for k, v in vars(i).items() if v is not None}
                for c, i in sorted(self.classes.items())
            },
            "pairs": [
                {
                    "a": a,
                    "b": b,
                    "n_a": round(p.n_a, 6),
                    "n_b": round(p.n_b, 6),
                    "sd": round(p.sd, 6),
                    "observed": p.observed,
                    "never": p.never,
                }
                for (a, b), p in sorted(self.pairs.items())
            ],
            "training": self.training,
            "metrics": self.metrics,
        }


#: the lowest throughput whose log is taken (a job that made no progress counts as this)
LOG_FLOOR = 1e-6
#: partners that together slow a job by less than this (in log throughput) share its
#: slowdown evenly
EVEN_BELOW = 1e-3


def log_rate(n: float) -> float:
    """``log(n)`` with ``n`` clamped to [:data:`LOG_FLOOR`, 1]: 0 for no slowdown."""
    return math.log(min(max(n, LOG_FLOOR), 1.0))


def slowdown_shares(logs: Sequence[float | None]) -> list[float]:
    """How a job's slowdown next to several partners is shared out among them: exponents
    ``s_j`` summing to 1, so that under the multiplicative composition its rate ``n`` gives
    ``n ** s_j`` next to partner ``j``. In proportion to ``logs`` (:func:`log_rate` of its
    throughput next to each partner alone, predicted or measured), so a partner that does
    not slow it takes none; evenly when one is unknown (None) or together they slow it by
    less than :data:`EVEN_BELOW`."""
    k = len(logs)
    total = sum(x for x in logs if x is not None)
    if any(x is None for x in logs) or total > -EVEN_BELOW:
        return [1.0 / k] * k
    return [x / total for x in logs if x is not None]


def _num(v: Any, what: str, lo: float = 0.0, hi: float = math.inf) -> float:
    try:  # a whole number past 1e308 does not convert
        f = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan
    except OverflowError:
        f = math.nan
    if not math.isfinite(f):
        raise ScoresError(f"{what}: expected a finite number, got {repr(v)[:40]}")
    if not lo <= f <= hi:
        raise ScoresError(f"{what}: {f:g} outside [{lo}, {hi}]")
    return f


def _flag(v: Any, what: str) -> bool:
    """A JSON true/false (absent: false). Anything else is refused: ``bool("false")`` is
    true, so a hand-edited ``"never": "false"`` would flip the pair's meaning."""
    if v is None or isinstance(v, bool):
        return bool(v)
    raise ScoresError(f"{what}: expected true or false, got {repr(v)[:40]}")


def _shaped(v: Any, kind: type, what: str, expected: str) -> Any:
    if not isinstance(v, kind):
        raise ScoresError(f"{what} must be {expected}, not {type(v).__name__}")
    return v


def scores_from_dict(d: Any, source: str = "<dict>") -> ScoreTable:
    """Validate and build a table; any defect raises :class:`ScoresError` naming it."""
    if not isinstance(d, dict):
        raise ScoresError(f"{source}: not a score set (top level is not an object)")
    if d.get("format") != FORMAT:
        raise ScoresError(f"{source}: unknown format {d.get('format')!r}, expected {FORMAT!r}")
    try:
        prior = _shaped(d.get("prior", {}), dict, "prior", "an object")
        classes: dict[str, ClassInfo] = {}
        shaped_classes = _shaped(d.get("classes") or {}, dict, "classes", "an object of classes")
        for name, info in shaped_classes.items():
            if not isinstance(info, dict):
                raise ScoresError(f"{source}: class {name!r} is not an object")
            classes[str(name)] = ClassInfo(
                memory_gib=_num(info["memory_gib"], f"{name}.memory_gib")
                if "memory_gib" in info
                else None,
                sm_util=_num(info["sm_util"], f"{name}.sm_util", 0, 1)
                if "sm_util" in info
                else None,
                solo_rate=_num(info["solo_rate"], f"{name}.solo_rate")
                if "solo_rate" in info
                else None,
                progress_rate=_num(info["progress_rate"], f"{name}.progress_rate")
                if "progress_rate" in info
                else None,
            )
        pairs: dict[tuple[str, str], PairScore] = {}
        for k, p in enumerate(_shaped(d.get("pairs") or [], list, "pairs", "a list of pairs")):
            p = _shaped(p, dict, f"pairs[{k}]", "an object")
            missing = [key for key in ("a", "b", "n_a", "n_b") if key not in p]
            if missing:
                raise ScoresError(f"pairs[{k}] lacks {', '.join(map(repr, missing))}")
            a, b = str(p["a"]), str(p["b"])
            pairs[(a, b)] = PairScore(
                n_a=_num(p["n_a"], f"pairs[{k}].n_a", 0, 10),
                n_b=_num(p["n_b"], f"pairs[{k}].n_b", 0, 10),
                sd=_num(p.get("sd", 0.0), f"pairs[{k}].sd", 0, 10),
                observed=_flag(p.get("observed"), f"pairs[{k}].observed"),
                never=_flag(p.get("never"), f"pairs[{k}].never"),
            )
        return ScoreTable(
            classes=classes,
            pairs=pairs,
            prior_n=_num(prior.get("n", 0.6), "prior.n", 0, 10),
            prior_sd=_num(prior.get("sd", 0.25), "prior.sd", 0, 10),
            id=str(d.get("id", "unnamed")),
            created=str(d.get("created", "")),
            gpu_model=str(d.get("gpu_model", "")),
            training=dict(_shaped(d.get("training") or {}, dict, "training", "an object")),
            metrics=dict(_shaped(d.get("metrics") or {}, dict, "metrics", "an object")),
        )
    except ScoresError as e:  # a value out of range: say which file it is in
        if e.message.startswith(f"{source}:"):
            raise
        raise ScoresError(f"{source}: {e.message}", hint=e.hint) from None
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise ScoresError(f"{source}: malformed score set ({type(e).__name__}: {e})") from None


def load_scores(path: str | Path, pipe: bool = False) -> ScoreTable:
    """The score set in ``path``; ``pipe``: it may be a pipe (a file named on the command
    line; never the live set, which the agent reads)."""
    p = Path(path)
    try:
        raw = read_regular(p, pipe).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ScoresError(f"score file {p} is corrupt (not UTF-8 text)") from None
    except FileNotFoundError:
        raise ScoresError(
            f"score file {p} not found", hint="slurm-colo retrain, or slurm-colo scores load FILE"
        ) from None
    except OSError as e:
        raise ScoresError(f"cannot read score file {p}: {e.strerror}") from None
    try:
        d = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ScoresError(
            f"score file {p} is corrupt (not JSON: {e.msg} at line {e.lineno})"
        ) from None
    except RecursionError:
        raise ScoresError(f"score file {p} is corrupt (JSON nested too deeply)") from None
    except ValueError as e:  # not UTF-8, an integer of more than 4,300 digits
        raise ScoresError(f"score file {p} is corrupt ({e})") from None
    return scores_from_dict(d, str(p))


def model_scores_path(path: str | Path, gpu_model: str) -> Path:
    """Where the score set of GPU model ``gpu_model`` lives on a site with several models:
    next to the site default set ``path``, ``live.json`` -> ``live-v100.json`` ("" is the
    site default itself)."""
    p = Path(path)
    return p.with_name(f"{p.stem}-{gpu_model}{p.suffix}") if gpu_model else p


def publish_scores(table: ScoreTable, path: str | Path) -> Path:
    """Write ``table`` to ``path`` atomically: readers see the old or the new file, never a
    half-written one (fsutil.atomic_write_bytes: temporary file in the same directory,
    fsync, rename, fsync the directory, whose failure is raised too). A path that is
    neither a regular file nor a symlink is refused and left as it is."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        mode = p.lstat().st_mode  # the rename would replace a device (as root: /dev/null)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(p))
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise OSError(errno.EINVAL, "not a regular file", str(p))
    data = json.dumps(table.to_dict(), indent=1, sort_keys=False).encode()
    atomic_write_bytes(p, data, mode=0o644, fsync=True, strict=True)
    return p


def table_from_pairs(
    rows: Iterable[tuple[str, str, float, float]],
    classes: dict[str, ClassInfo] | None = None,
    sd: float = 0.02,
    **kw: Any,
) -> ScoreTable:
    """Small helper for tests and hand-written tables: (a, b, n_a, n_b) rows."""
    t = ScoreTable(classes=dict(classes or {}), **kw)
    for a, b, na, nb in rows:
        t.pairs[(a, b)] = PairScore(na, nb, sd, observed=True, never=(na == 0 and nb == 0))
    return t
