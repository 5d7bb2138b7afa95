"""Training data of the compatibility model: per-class profiles and pairwise observations.

An *entry* is one measured value ``n(a | b)``: the normalised throughput of a job of class
``a`` (rate while sharing a GPU with a job of class ``b`` / rate alone). A pair measured
together gives two entries, ``n(a | b)`` and ``n(b | a)``; a self-pair (two jobs of one class)
gives one. Entries carry a weight (hours of evidence, recency-discounted) and a censored flag
(the value was clipped at 1.0 and means "at least"). Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import ModelError

#: normalised throughputs are clipped to this range before taking logs
N_MIN = 0.02
N_MAX = 1.5

_BS_RE = re.compile(r"^(.*?)-bs(\d+)$")


def family_and_batch(cls: str) -> tuple[str, int | None]:
    """``'resnet18-bs64'`` -> ``('resnet18', 64)``; ``'a3c'`` -> ``('a3c', None)``."""
    m = _BS_RE.match(cls)
    if m:
        return m.group(1), int(m.group(2))
    return cls, None


@dataclass
class ClassProfile:
    """What is known about a class from its solo runs (any field may be unknown)."""

    solo_rate: float | None = None
    memory_gib: float | None = None
    sm_util: float | None = None
    #: job-reported progress rate of solo runs (site history; the jobs' own units)
    progress_rate: float | None = None


def _finite_pos(v: float | None) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


@dataclass
class Observations:
    """Class profiles plus pairwise entries; build with :meth:`add_class` / :meth:`add_pair`."""

    classes: dict[str, ClassProfile] = field(default_factory=dict)
    #: unordered pairs (a <= b) that must never share a GPU (out of memory)
    never: set[tuple[str, str]] = field(default_factory=set)
    #: unordered pair -> number of fatal MPS faults seen while sharing
    faults: dict[tuple[str, str], float] = field(default_factory=dict)
    _a: list[str] = field(default_factory=list)
    _b: list[str] = field(default_factory=list)
    _n: list[float] = field(default_factory=list)
    _w: list[float] = field(default_factory=list)
    _c: list[bool] = field(default_factory=list)
    #: entries refused by :meth:`add_entry` (NaN, negative, zero weight), for the report
    rejected: int = 0
    #: bulk entries: (class list, ia, ib, n, weight, censored) with indexes into the list
    _chunks: list[tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = (
        field(default_factory=list)
    )

    def add_class(
        self,
        cls: str,
        solo_rate: float | None = None,
        memory_gib: float | None = None,
        sm_util: float | None = None,
        progress_rate: float | None = None,
    ) -> None:
        """Register a class; later non-None values fill unknown fields."""
        p = self.classes.setdefault(cls, ClassProfile())
        if p.progress_rate is None:
            p.progress_rate = _finite_pos(progress_rate)
        if p.solo_rate is None:
            p.solo_rate = _finite_pos(solo_rate)
        if p.memory_gib is None:
            p.memory_gib = _finite_pos(memory_gib)
        if p.sm_util is None:
            u = _finite_pos(sm_util)
            p.sm_util = min(u, 1.0) if u is not None else None

    def add_entry(
        self, a: str, b: str, n: float, weight: float = 1.0, censored: bool = False
    ) -> bool:
        """Add ``n(a | b)``. NaN/inf/negative values and non-positive weights are refused
        (counted in :attr:`rejected`); returns whether the entry was kept."""
        try:
            n = float(n)
            weight = float(weight)
        except (TypeError, ValueError):
            self.rejected += 1
            return False
        if not (math.isfinite(n) and n >= 0 and math.isfinite(weight) and weight > 0):
            self.rejected += 1
            return False
        self.add_class(a)
        self.add_class(b)
        self._a.append(a)
        self._b.append(b)
        self._n.append(n)
        self._w.append(weight)
        self._c.append(bool(censored))
        return True

    def add_pair(
        self, a: str, b: str, n_a: float, n_b: float, weight: float = 1.0, censored: bool = False
    ) -> None:
        """A pair measured together: both directions (one entry for a self-pair)."""
        self.add_entry(a, b, n_a, weight, censored)
        if a != b:
            self.add_entry(b, a, n_b, weight, censored)

    def add_arrays(
        self,
        classes: list[str],
        ia: np.ndarray,
        ib: np.ndarray,
        n: np.ndarray,
        weight: np.ndarray,
        censored: np.ndarray | None = None,
    ) -> int:
        """Bulk entries ``n(classes[ia] | classes[ib])``; invalid rows are refused (counted).
        Returns how many were kept."""
        ia = np.asarray(ia, np.int64)
        ib = np.asarray(ib, np.int64)
        n = np.asarray(n, float)
        weight = np.asarray(weight, float)
        cens = np.zeros(len(n), bool) if censored is None else np.asarray(censored, bool)
        ok = np.isfinite(n) & (n >= 0) & np.isfinite(weight) & (weight > 0)
        self.rejected += int((~ok).sum())
        for c in classes:
            self.add_class(c)
        if ok.any():
            self._chunks.append((list(classes), ia[ok], ib[ok], n[ok], weight[ok], cens[ok]))
        return int(ok.sum())

    def add_never(self, a: str, b: str) -> None:
        self.add_class(a)
        self.add_class(b)
        self.never.add((min(a, b), max(a, b)))

    def add_fault(self, a: str, b: str, count: float = 1.0) -> None:
        self.add_class(a)
        self.add_class(b)
        k = (min(a, b), max(a, b))
        self.faults[k] = self.faults.get(k, 0.0) + count

    def __len__(self) -> int:
        return len(self._n) + sum(len(ch[3]) for ch in self._chunks)

    def observed_pairs(self) -> set[tuple[str, str]]:
        out = {(min(a, b), max(a, b)) for a, b in zip(self._a, self._b)}
        for cl, ia, ib, *_ in self._chunks:
            lo, hi = np.minimum(ia, ib), np.maximum(ia, ib)
            for x in np.unique(lo * len(cl) + hi):
                a, b = cl[int(x) // len(cl)], cl[int(x) % len(cl)]
                out.add((min(a, b), max(a, b)))
        return out

    def pair_counts(self) -> dict[tuple[str, str], float]:
        """Unordered pair -> number of raw entries (for the fault rule)."""
        out: dict[tuple[str, str], float] = {}
        for a, b in zip(self._a, self._b):
            k = (min(a, b), max(a, b))
            out[k] = out.get(k, 0.0) + 1.0
        for cl, ia, ib, *_ in self._chunks:
            lo, hi = np.minimum(ia, ib), np.maximum(ia, ib)
            keys, cnt = np.unique(lo * len(cl) + hi, return_counts=True)
            for x, c in zip(keys, cnt):
                a, b = cl[int(x) // len(cl)], cl[int(x) % len(cl)]
                k = (min(a, b), max(a, b))
                out[k] = out.get(k, 0.0) + float(c)
        return out

    def class_weights(self) -> dict[str, float]:
        """Per class, the summed weight of the entries it takes part in (as either side);
        a class with only a solo profile or a never pair has 0."""
        out = dict.fromkeys(self.classes, 0.0)
        for a, b, w in zip(self._a, self._b, self._w):
            out[a] += w
            if b != a:
                out[b] += w
        for cl, ia, ib, _, cw, _ in self._chunks:
            by = np.bincount(ia, weights=cw, minlength=len(cl))
            by += np.bincount(ib, weights=np.where(ia != ib, cw, 0.0), minlength=len(cl))
            for c, v in zip(cl, by.tolist()):
                out[c] += v
        return out

    def restricted(self, keep: set[str]) -> Observations:
        """The same observations between the classes in ``keep`` only."""
        pick = [k for k, (a, b) in enumerate(zip(self._a, self._b)) if a in keep and b in keep]
        chunks = []
        for cl, ia, ib, cn, cw, cc in self._chunks:
            inside = np.array([c in keep for c in cl], dtype=bool)
            ok = inside[ia] & inside[ib]
            if ok.any():  # the chunk's class list without the others, its indexes moved
                new_ix = np.cumsum(inside) - 1
                kept = [c for c, i in zip(cl, inside.tolist()) if i]
                chunks.append((kept, new_ix[ia[ok]], new_ix[ib[ok]], cn[ok], cw[ok], cc[ok]))
        return Observations(
            classes={c: p for c, p in self.classes.items() if c in keep},
            never={k for k in self.never if k[0] in keep and k[1] in keep},
            faults={k: v for k, v in self.faults.items() if k[0] in keep and k[1] in keep},
            _a=[self._a[k] for k in pick],
            _b=[self._b[k] for k in pick],
            _n=[self._n[k] for k in pick],
            _w=[self._w[k] for k in pick],
            _c=[self._c[k] for k in pick],
            rejected=self.rejected,
            _chunks=chunks,
        )

    def copy(self) -> Observations:
        return Observations(
            classes=self.classes,
            never=set(self.never),
            faults=dict(self.faults),
            _a=list(self._a),
            _b=list(self._b),
            _n=list(self._n),
            _w=list(self._w),
            _c=list(self._c),
            rejected=self.rejected,
            _chunks=list(self._chunks),
        )

    def aggregate(self, class_order: list[str]) -> Entries:
        """One entry per ordered pair: weighted mean of log n, summed weight; censored only
        if every contributing value was."""
        ix = {c: i for i, c in enumerate(class_order)}
        k = len(class_order)
        if len(self) == 0:
            z = np.zeros(0)
            return Entries(np.zeros(0, np.int64), np.zeros(0, np.int64), z, z, np.zeros(0, bool))
        try:
            ia = [np.fromiter((ix[a] for a in self._a), np.int64, len(self._a))]
            ib = [np.fromiter((ix[b] for b in self._b), np.int64, len(self._b))]
            remaps = [np.array([ix[c] for c in ch[0]], np.int64) for ch in self._chunks]
        except KeyError as e:
            raise ModelError(
                f"observation names class {e.args[0]!r} missing from the class list"
            ) from None
        n = [np.asarray(self._n, float)]
        w = [np.asarray(self._w, float)]
        c = [np.asarray(self._c, bool)]
        for remap, (_, cia, cib, cn, cw, cc) in zip(remaps, self._chunks):
            ia.append(remap[cia])
            ib.append(remap[cib])
            n.append(cn)
            w.append(cw)
            c.append(cc)
        return aggregate_arrays(
            np.concatenate(ia),
            np.concatenate(ib),
            np.concatenate(n),
            np.concatenate(w),
            np.concatenate(c),
            k,
        )


@dataclass
class Entries:
    """Aggregated ordered entries as arrays (class indexes into a class list)."""

    ia: np.ndarray
    ib: np.ndarray
    y: np.ndarray  # log of the normalised throughput
    w: np.ndarray  # summed weight
    censored: np.ndarray

    def __len__(self) -> int:
        return int(self.y.shape[0])


def aggregate_arrays(
    ia: np.ndarray, ib: np.ndarray, n: np.ndarray, w: np.ndarray, censored: np.ndarray, k: int
) -> Entries:
    """Vectorised aggregation of raw entries (used for millions of episodes)."""
    y = np.log(np.clip(n, N_MIN, N_MAX))
    key = ia * k + ib
    uniq, inv = np.unique(key, return_inverse=True)
    wsum = np.bincount(inv, weights=w, minlength=len(uniq))
    ysum = np.bincount(inv, weights=w * y, minlength=len(uniq))
    unc = np.bincount(inv, weights=(~censored).astype(float), minlength=len(uniq))
    return Entries(uniq // k, uniq % k, ysum / wsum, wsum, unc == 0)
