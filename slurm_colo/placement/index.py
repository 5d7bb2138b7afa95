"""Per-GPU cached set state, so one placement is a few vector operations over all GPUs.

For every GPU ``g`` and every job class ``c`` the index keeps what the set on ``g`` would
look like if one job of class ``c`` joined it (same rules as
:meth:`slurm_colo.scores.ScoreTable.set_throughputs`, multiplicative composition):

* ``new_rate[g, c]``: the newcomer's predicted normalised throughput;
* ``min_rate[g, c]``: the lowest throughput of the whole new set;
* ``sum_rate[g, c]``: the new set's total throughput (``before[g]`` is the current total);
* ``var[g, c]``: the summed variance of its pair predictions;
* ``never``, ``known`` and ``unproven`` (a pair with the newcomer never measured).

A GPU's row is recomputed only when its occupants change (``ClusterView.add_occupant``,
``remove_occupant``, ``touch``). The index belongs to one score table and one config; a
new table rebuilds it. Pure: numpy arithmetic only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import PlacementConfig
from ..scores import ScoreTable
from .view import ClusterView, GpuView


class PlacementIndex:
    def __init__(self, view: ClusterView, scores: ScoreTable, cfg: PlacementConfig) -> None:
        self.scores = scores
        self.cfg = cfg
        self.gpus = view.gpus
        names = set(scores.classes)
        for a, b in scores.pairs:
            names.update((a, b))
        for g in view.gpus:
            names.update(o.cls for o in g.occupants)
        self._set_classes(sorted(names))
        n = len(view.gpus)
        self.open = np.zeros(n, dtype=bool)
        self.count = np.zeros(n, dtype=np.int64)
        self.free = np.zeros(n, dtype=float)
        self.owner = np.zeros(n, dtype=np.int64)  # uid; -1 mixed users; -2 idle
        self.before = np.zeros(n, dtype=float)
        self._alloc_rows()
        for i in range(n):
            self.update(i)

    # ---- classes -----------------------------------------------------------------------
    def _set_classes(self, names: list[str]) -> None:
        self.names = names
        self.cix = {c: i for i, c in enumerate(names)}
        k = len(names)
        s = self.scores
        self.N = np.ones((k, k))
        self.S2 = np.zeros((k, k))
        self.NEVER = np.zeros((k, k), dtype=bool)
        self.KNOWN = np.ones((k, k), dtype=bool)
        self.OBS = np.zeros((k, k), dtype=bool)
        for a, i in self.cix.items():
            for b, j in self.cix.items():
                p = s.pair(a, b)
                self.N[i, j] = p.n_a
                self.S2[i, j] = p.sd * p.sd
                self.NEVER[i, j] = p.never
                self.KNOWN[i, j] = p.known
                self.OBS[i, j] = p.observed
        self.NT = np.ascontiguousarray(self.N.T)
        self._lists = (self.N.tolist(), self.S2.tolist(), self.NEVER.tolist(), self.KNOWN.tolist())

    def _alloc_rows(self) -> None:
        n, k = len(self.gpus), len(self.names)
        # class-major (C x GPUs): a placement reads one contiguous row per array
        self.new_rate = np.ones((k, n))
        self.min_rate = np.full((k, n), np.inf)
        self.sum_rate = np.ones((k, n))
        self.var = np.zeros((k, n))
        self.never = np.zeros((k, n), dtype=bool)
        self.known = np.ones((k, n), dtype=bool)
        self.unproven = np.zeros((k, n), dtype=bool)
        #: accepted for an ``auto`` job without / with exploration (memory and user aside)
        self.acc = np.zeros((k, n), dtype=bool)
        self.acc_explore = np.zeros((k, n), dtype=bool)

    def ensure_class(self, cls: str) -> int:
        """Column of ``cls``, adding it (and recomputing every row) when it is new."""
        i = self.cix.get(cls)
        if i is not None:
            return i
        self._set_classes(sorted([*self.names, cls]))
        self._alloc_rows()
        for g in range(len(self.gpus)):
            self.update(g)
        return self.cix[cls]

    # ---- rows --------------------------------------------------------------------------
    def update(self, i: int) -> None:
        g: GpuView = self.gpus[i]
        cfg = self.cfg
        occ = g.occupants
        for o in occ:
            if o.cls not in self.cix:
                self.ensure_class(o.cls)
                return  # ensure_class recomputed every row
        k = len(occ)
        self.count[i] = k
        self.open[i] = g.available and g.exclusive_job is None and g.free_slots > 0
        self.free[i] = g.memory_gib * (1.0 - cfg.memory_headroom) - g.used_memory_gib()
        if k == 0:
            self.owner[i] = -2
            self.before[i] = 0.0
            self.new_rate[:, i] = 1.0
            self.min_rate[:, i] = np.inf
            self.sum_rate[:, i] = 1.0
            self.var[:, i] = 0.0
            self.never[:, i] = False
            self.known[:, i] = True
            self.unproven[:, i] = False
            self.acc[:, i] = False
            self.acc_explore[:, i] = False
            return
        uids = {o.uid for o in occ}
        self.owner[i] = next(iter(uids)) if len(uids) == 1 else -1
        cix = self.cix
        m = [cix[o.cls] for o in occ]
        N, S2, NEVER, KNOWN = self._lists
        rates = [1.0] * k
        var0 = 0.0
        never0 = False
        known0 = True
        for x in range(k):
            a = m[x]
            for y in range(x + 1, k):
                b = m[y]
                rates[x] *= N[a][b]
                rates[y] *= N[b][a]
                var0 += S2[a][b]
                never0 = never0 or NEVER[a][b]
                known0 = known0 and KNOWN[a][b]
        self.before[i] = sum(rates) if k > 1 else 1.0
        rows = self.N[m]  # n(member | c), k x C
        joined = np.asarray(rates)[:, None] * rows
        new = self.NT[m].prod(axis=0)  # n(c | member), multiplied over members
        self.new_rate[:, i] = new
        self.min_rate[:, i] = joined.min(axis=0)
        self.sum_rate[:, i] = new + joined.sum(axis=0)
        self.var[:, i] = var0 + self.S2[m].sum(axis=0)
        self.never[:, i] = never0 | self.NEVER[m].any(axis=0)
        self.known[:, i] = known0 & self.KNOWN[m].all(axis=0)
        self.unproven[:, i] = ~self.OBS[m].all(axis=0)
        minn = np.minimum(new, self.min_rate[:, i])
        delta = (k + 1) * minn
        sure = delta - cfg.risk_aversion * (k + 1) * np.sqrt(self.var[:, i]) >= cfg.min_delta
        base = ~self.never[:, i] & (minn >= 1.0 / cfg.max_slowdown)
        self.acc[:, i] = base & self.known[:, i] & sure
        self.acc_explore[:, i] = base & (sure | (self.unproven[:, i] & (delta >= cfg.min_delta)))

    # ---- queries -----------------------------------------------------------------------
    def candidates(self, c: int, uid: int | None, est: float, aggressive: bool,
                   explore: bool, rows: np.ndarray | None = None) -> "Candidates":
        """The GPUs that would take a job of class column ``c`` (only positions ``rows``
        if given): ``idle`` ones, and ``busy`` ones whose new set is accepted, with their
        predictions. ``auto`` jobs use the acceptance rows kept by :meth:`update`, so the
        arithmetic runs only on accepted GPUs."""
        cfg = self.cfg
        if rows is None:
            mask = self.open & (self.free >= est)
        else:
            mask = np.zeros(len(self.open), dtype=bool)
            mask[rows] = self.open[rows] & (self.free[rows] >= est)
        if uid is not None:
            mask &= (self.owner == uid) | (self.owner == -2)
        idle = np.flatnonzero(mask & (self.count == 0))
        min_delta = cfg.aggressive_min_delta if aggressive else cfg.min_delta
        if aggressive:
            b = np.flatnonzero(mask & (self.count > 0))
            k1 = self.count[b] + 1
            minn = np.minimum(self.new_rate[c][b], self.min_rate[c][b])
            delta = k1 * minn
            sd = k1 * np.sqrt(self.var[c][b])
            sure = delta - cfg.risk_aversion * sd >= min_delta
            keep = ~self.never[c][b] & (
                sure | (self.unproven[c][b] & (delta >= min_delta)) if explore else sure)
            b, delta, sd, explored = b[keep], delta[keep], sd[keep], ~sure[keep]
        else:
            b = np.flatnonzero(mask & (self.acc_explore[c] if explore else self.acc[c]))
            k1 = self.count[b] + 1
            delta = k1 * np.minimum(self.new_rate[c][b], self.min_rate[c][b])
            sd = k1 * np.sqrt(self.var[c][b])
            explored = (delta - cfg.risk_aversion * sd < min_delta) if explore else \
                np.zeros(b.size, dtype=bool)
        gain = self.sum_rate[c][b] - self.before[b]
        return Candidates(idle=idle, busy=b, delta=delta, sd=sd, gain=gain,
                          score=gain - cfg.risk_aversion * sd, rate=self.new_rate[c][b],
                          explored=explored)

    def outcome(self, c: int, uid: int | None, est: float, aggressive: bool, explore: bool,
                pos: int) -> str:
        """:meth:`candidates` for one GPU: ``"idle"``, ``"share"`` or ``"no"``."""
        if not self.open[pos] or self.free[pos] < est:
            return "no"
        owner = self.owner[pos]
        if owner == -2:
            return "idle"
        if uid is not None and owner != uid:
            return "no"
        if aggressive:
            m = self.candidates(c, uid, est, aggressive, explore,
                                rows=np.array([pos], dtype=np.int64))
            return "share" if m.busy.size else "no"
        return "share" if (self.acc_explore if explore else self.acc)[c, pos] else "no"

    def refusal_counts(self, uid: int | None, est: float) -> tuple[int, int]:
        """(busy GPUs with a free slot this job may use, how many of them lack memory)."""
        mask = self.open & (self.count > 0)
        if uid is not None:
            mask &= self.owner == uid
        busy = int(mask.sum())
        return busy, int((mask & (self.free < est)).sum())


class Candidates:
    """Result of :meth:`PlacementIndex.candidates`: positions of idle GPUs, positions of
    accepted busy GPUs (``busy``) and, aligned with ``busy``, their predictions."""

    __slots__ = ("idle", "busy", "delta", "sd", "gain", "score", "rate", "explored")

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)

    def best(self) -> int:
        """Index into ``busy`` of the highest score (lowest position on ties), or -1."""
        if self.busy.size == 0:
            return -1
        return int(np.argmax(self.score))
