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
``remove_occupant``, ``touch``). The index belongs to one score table and one config. A
new table that differs from the index's only in some pairs (what was learned, laid over
it) updates the index in place (:meth:`PlacementIndex.rescore`): only the GPUs holding a
class of a changed pair are recomputed. Any other new table rebuilds it. Pure: numpy
arithmetic only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import PlacementConfig
from ..scores import ScoreTable
from .candidates import Candidates, unprofiled_memory
from .view import ClusterView, GpuView

#: what the last index built shares with the next one of the same score table and class
#: list: the class x class matrices (an index for a filtered view -- one partition, one GPU
#: model -- reuses them) and, for the same config too, the rows per class multiset (a view
#: rebuilt from scratch, as the agent does on every Slurm snapshot, reuses them instead of
#: recomputing every GPU)
_SHARED: dict[str, Any] = {"classes": None, "matrices": None, "cfg": None, "rows": {}}

_Row = tuple[Any, ...]

#: the one column every class the score table does not know shares (a job named afresh
#: for each run, as sweeps and dated runs are): all its pairs are the table's prior, so such
#: classes differ in nothing the index computes, and a site with thousands of job names
#: keeps an index the size of its score table
UNKNOWN = "\0unknown"


class PlacementIndex:
    def __init__(self, view: ClusterView, scores: ScoreTable, cfg: PlacementConfig) -> None:
        self.scores = scores
        self.cfg = cfg
        self.gpus = view.gpus
        names = scores.known_classes()
        names.add(UNKNOWN)
        self._set_classes(sorted(names))
        n = len(view.gpus)
        self.open = np.zeros(n, dtype=bool)
        self.count = np.zeros(n, dtype=np.int64)
        self.free = np.zeros(n, dtype=float)
        #: memory assumed on each GPU for a job whose class has no memory profile
        self.unprofiled = np.zeros(n, dtype=float)
        self.owner = np.zeros(n, dtype=np.int64)  # uid; -1 mixed users; -2 idle
        self.closed_for = np.full(n, -1, dtype=np.int64)  # job a GPU is drained for; -1 none
        self.n_closed = 0
        self.off = np.zeros(n, dtype=bool)  # on a node down, drained or closed to placement
        self._type_rows: dict[str, np.ndarray] = {}
        self.before = np.zeros(n, dtype=float)
        #: whether the throughput path is open (:func:`throughput_open`, set by
        #: ``policy.index_for`` from the view on every use)
        self.throughput = cfg.min_throughput > 0
        self._alloc_rows()
        self._build()

    def _build(self) -> None:
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, g in enumerate(self.gpus):
            self._scalars(i, g)
            groups.setdefault(self._key(g), []).append(i)
        for key, pos in groups.items():
            self._put(np.array(pos, dtype=np.int64), self._row(key))

    # ---- classes -----------------------------------------------------------------------
    def _set_classes(self, names: list[str]) -> None:
        self.names = names
        self.cix = {c: i for i, c in enumerate(names)}
        classes = (self.scores, tuple(names))
        same = (
            _SHARED["classes"] is not None
            and _SHARED["classes"][0] is self.scores
            and _SHARED["classes"][1] == classes[1]
        )
        if same:
            (self.N, self.S2, self.NEVER, self.KNOWN, self.OBS, self.NT, self._lists) = _SHARED[
                "matrices"
            ]
        else:
            self._class_matrices()
            _SHARED["classes"] = classes
            _SHARED["matrices"] = self._matrices()
        if not same or _SHARED["cfg"] != self.cfg:
            _SHARED["cfg"] = self.cfg
            _SHARED["rows"] = {}
        self._rows: dict[tuple[str, ...], _Row] = _SHARED["rows"]

    def _class_matrices(self) -> None:
        """Pair predictions between every two classes (read-only once built: shared by
        every index of the same score table and class list)."""
        k = len(self.names)
        t = self.scores
        # every pair the table has no figure for is its prior (ScoreTable.pair); then the
        # pairs it has, each read back to front first, so that where the table holds both
        # orders the pair as written wins, as ScoreTable.pair reads it
        self.N = np.full((k, k), t.prior_n)
        self.S2 = np.full((k, k), t.prior_sd * t.prior_sd)
        self.NEVER = np.zeros((k, k), dtype=bool)
        self.KNOWN = np.zeros((k, k), dtype=bool)
        self.OBS = np.zeros((k, k), dtype=bool)
        cix = self.cix
        for back in (True, False):
            for (a, b), p in t.pairs.items():
                i, j = cix[a], cix[b]
                if back:
                    i, j = j, i
                self.N[i, j] = p.n_b if back else p.n_a
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
        #: accepted for an ``auto`` job without / with exploration (memory and user aside),
        #: by either path / by the delta path alone (the throughput path closed)
        self.acc_all = np.zeros((k, n), dtype=bool)
        self.acc_explore_all = np.zeros((k, n), dtype=bool)
        self.acc_delta = np.zeros((k, n), dtype=bool)
        self.acc_explore_delta = np.zeros((k, n), dtype=bool)

    def column(self, cls: str) -> int:
        """Column of ``cls`` (:data:`UNKNOWN`'s for a class the score table does not know)."""
        i = self.cix.get(cls)
        return self.cix[UNKNOWN] if i is None else i

    def _key(self, g: GpuView) -> tuple[str, ...]:
        """The classes on ``g`` as the rows are kept: by column name, sorted."""
        cix = self.cix
        return tuple(sorted(o.cls if o.cls in cix else UNKNOWN for o in g.occupants))

    def rescore(self, scores: ScoreTable) -> bool:
        """Take ``scores`` in place of the index's table when the two differ only in pairs
        between known classes: the class matrices are patched, and only the rows of GPUs
        holding a class of a changed pair are recomputed (the same numbers a rebuild gives).
        False, leaving the index as it was, when ``scores`` differs in anything else."""
        changed = changed_classes(self.scores, scores)
        if changed is None or not changed <= self.cix.keys():
            return False
        ix = sorted(self.cix[c] for c in changed)
        self.scores = scores
        self.N, self.S2 = self.N.copy(), self.S2.copy()
        self.NEVER, self.KNOWN, self.OBS = self.NEVER.copy(), self.KNOWN.copy(), self.OBS.copy()
        for i in ix:
            for j in range(len(self.names)):
                self._pair_entry(i, j)
                self._pair_entry(j, i)
        self.NT = np.ascontiguousarray(self.N.T)
        self._lists = (self.N.tolist(), self.S2.tolist(), self.NEVER.tolist(), self.KNOWN.tolist())
        rows = {k: r for k, r in self._rows.items() if changed.isdisjoint(k)}
        _SHARED.update(
            classes=(scores, tuple(self.names)), matrices=self._matrices(), cfg=self.cfg, rows=rows
        )
        self._rows = rows
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, g in enumerate(self.gpus):
            key = self._key(g)
            if not changed.isdisjoint(key):
                groups.setdefault(key, []).append(i)
        for key, pos in groups.items():
            self._put(np.array(pos, dtype=np.int64), self._row(key))
        return True

    def rebase(self, old: ClusterView, view: ClusterView) -> bool:
        """Serve ``view``, built afresh for the same GPUs as ``old``, the view this index
        serves (the agent builds a new view at every look at Slurm and every job start and
        end): only the GPUs that differ from ``old``'s, or that changed on it since the index
        last looked, are recomputed, giving the numbers a new index would. False, leaving
        the index as it was, when the two views do not list the same GPUs in order."""
        if old.gpus is not self.gpus or len(view.gpus) != len(self.gpus):
            return False
        pairs = list(zip(self.gpus, view.gpus, strict=True))
        if any((a.node, a.index, a.gres_type) != (b.node, b.index, b.gres_type) for a, b in pairs):
            return False
        stale = set(old.dirty)
        stale.update(i for i, (a, b) in enumerate(pairs) if a != b)
        self.gpus = view.gpus
        for i in sorted(stale):
            self.update(i)
        if old.policy_state is self:  # it serves ``view`` now
            old.policy_state = None
            old.dirty.clear()
        return True

    def _matrices(self) -> tuple[Any, ...]:
        """The class matrices, as ``_SHARED["matrices"]`` keeps them."""
        return (self.N, self.S2, self.NEVER, self.KNOWN, self.OBS, self.NT, self._lists)

    def _pair_entry(self, i: int, j: int) -> None:
        p = self.scores.pair(self.names[i], self.names[j])
        self.N[i, j] = p.n_a
        self.S2[i, j] = p.sd * p.sd
        self.NEVER[i, j] = p.never
        self.KNOWN[i, j] = p.known
        self.OBS[i, j] = p.observed

    # ---- rows --------------------------------------------------------------------------
    def _scalars(self, i: int, g: GpuView) -> None:
        occ = g.occupants
        self.count[i] = len(occ)
        self.open[i] = g.open()
        closed = -1 if g.closed_for is None else g.closed_for
        self.n_closed += (closed >= 0) - (int(self.closed_for[i]) >= 0)
        self.closed_for[i] = closed
        self.off[i] = not g.available
        self.free[i] = g.memory_gib * (1.0 - self.cfg.memory_headroom) - g.used_memory_gib()
        self.unprofiled[i] = unprofiled_memory(g.memory_gib, self.cfg)
        uids = {o.uid for o in occ}
        self.owner[i] = -2 if not uids else (next(iter(uids)) if len(uids) == 1 else -1)

    def _row(self, key: tuple[str, ...]) -> _Row:
        """Everything that depends only on the classes on a GPU, for every joining class."""
        row = self._rows.get(key)
        if row is not None:
            return row
        cfg = self.cfg
        k = len(key)
        ncls = len(self.names)
        if k == 0:
            row = (
                0.0,
                np.ones(ncls),
                np.full(ncls, np.inf),
                np.ones(ncls),
                np.zeros(ncls),
                np.zeros(ncls, dtype=bool),
                np.ones(ncls, dtype=bool),
                np.zeros(ncls, dtype=bool),
                np.zeros(ncls, dtype=bool),
                np.zeros(ncls, dtype=bool),
                np.zeros(ncls, dtype=bool),
                np.zeros(ncls, dtype=bool),
            )
            self._rows[key] = row
            return row
        m = [self.cix[c] for c in key]
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
        joined = np.asarray(rates)[:, None] * self.N[m]  # members' rates with the newcomer
        new = self.NT[m].prod(axis=0)  # the newcomer's rate, for every class
        min_rate = joined.min(axis=0)
        var = var0 + self.S2[m].sum(axis=0)
        never = never0 | self.NEVER[m].any(axis=0)
        known = known0 & self.KNOWN[m].all(axis=0)
        unproven = ~self.OBS[m].all(axis=0)
        minn = np.minimum(new, min_rate)
        delta = (k + 1) * minn
        spread = cfg.risk_aversion * (k + 1) * np.sqrt(var)
        sure = delta - spread >= cfg.min_delta
        base = ~never & (minn >= 1.0 / cfg.max_slowdown)
        before = sum(rates) if k > 1 else 1.0
        total = new + joined.sum(axis=0)
        # the throughput path: the set does more than the GPU did, a member may go slower
        bar = max(before, cfg.min_throughput)
        t_base = ~never & (minn >= 1.0 / cfg.throughput_max_slowdown) & (cfg.min_throughput > 0)
        t_sure = t_base & (total - spread >= bar)
        d_sure = base & sure
        d_explore = base & (sure | (unproven & (delta >= cfg.min_delta)))
        row = (
            before,
            new,
            min_rate,
            total,
            var,
            never,
            known,
            unproven,
            known & (d_sure | t_sure),
            d_explore | t_sure | (t_base & unproven & (total >= bar)),
            known & d_sure,
            d_explore,
        )
        self._rows[key] = row
        return row

    def _put(self, pos: Any, row: _Row) -> None:
        (
            self.before[pos],
            self.new_rate[:, pos],
            self.min_rate[:, pos],
            self.sum_rate[:, pos],
            self.var[:, pos],
            self.never[:, pos],
            self.known[:, pos],
            self.unproven[:, pos],
            self.acc_all[:, pos],
            self.acc_explore_all[:, pos],
            self.acc_delta[:, pos],
            self.acc_explore_delta[:, pos],
        ) = (row[0], *(np.asarray(a)[:, None] if np.ndim(pos) else a for a in row[1:]))

    def update(self, i: int) -> None:
        """Recompute GPU ``i`` after its occupants or state changed."""
        g: GpuView = self.gpus[i]
        self._scalars(i, g)
        self._put(i, self._row(self._key(g)))

    # ---- queries -----------------------------------------------------------------------
    @property
    def acc(self) -> np.ndarray:
        """Accepted for an ``auto`` job that does not explore, by the paths open now."""
        return self.acc_all if self.throughput else self.acc_delta

    @property
    def acc_explore(self) -> np.ndarray:
        """The same for a job that may explore an unmeasured pair."""
        return self.acc_explore_all if self.throughput else self.acc_explore_delta

    def type_rows(self, view: ClusterView, gres_type: str) -> np.ndarray:
        """Positions of the GPUs of one shard type, as an index array (kept: a view's GPU
        list does not change)."""
        rows = self._type_rows.get(gres_type)
        if rows is None:
            rows = np.asarray(view.positions_of_type(gres_type), dtype=np.int64)
            self._type_rows[gres_type] = rows
        return rows

    def candidates(
        self,
        c: int,
        uid: int | None,
        est: float | None,
        aggressive: bool,
        explore: bool,
        rows: np.ndarray | None = None,
    ) -> Candidates:
        """The GPUs that would take a job of class column ``c`` (only positions ``rows``
        if given): ``idle`` ones, and ``busy`` ones whose new set is accepted, with their
        predictions. ``auto`` jobs use the acceptance rows kept by :meth:`update`, so the
        arithmetic runs only on accepted GPUs."""
        cfg = self.cfg
        need = self.unprofiled if est is None else est
        if rows is None:
            mask = self.open & (self.free >= need)
        else:
            mask = np.zeros(len(self.open), dtype=bool)
            mask[rows] = self.open[rows] & (self.free[rows] >= self.need_at(est, rows))
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
                sure | (self.unproven[c][b] & (delta >= min_delta)) if explore else sure
            )
            b, delta, sd, explored = b[keep], delta[keep], sd[keep], ~sure[keep]
        else:
            b = np.flatnonzero(mask & (self.acc_explore[c] if explore else self.acc[c]))
            k1 = self.count[b] + 1
            delta = k1 * np.minimum(self.new_rate[c][b], self.min_rate[c][b])
            sd = k1 * np.sqrt(self.var[c][b])
            # accepted only because the job may explore a pair not measured yet
            explored = ~self.acc[c][b] if explore else np.zeros(b.size, dtype=bool)
        gain = self.sum_rate[c][b] - self.before[b]
        return Candidates(
            idle=idle,
            busy=b,
            delta=delta,
            sd=sd,
            gain=gain,
            score=gain - cfg.risk_aversion * sd,
            rate=self.new_rate[c][b],
            explored=explored,
        )

    def outcome(
        self, c: int, uid: int | None, est: float | None, aggressive: bool, explore: bool, pos: int
    ) -> str:
        """:meth:`candidates` for one GPU: ``"idle"``, ``"share"`` or ``"no"``."""
        if not self.open[pos] or not self.fits(pos, est):
            return "no"
        owner = self.owner[pos]
        if owner == -2:
            return "idle"
        if uid is not None and owner != uid:
            return "no"
        if aggressive:
            m = self.candidates(
                c, uid, est, aggressive, explore, rows=np.array([pos], dtype=np.int64)
            )
            return "share" if m.busy.size else "no"
        return "share" if (self.acc_explore if explore else self.acc)[c, pos] else "no"

    def draining_for(self) -> list[int]:
        """Jobs that shared GPUs are kept free for (the agent's starvation guard)."""
        if not self.n_closed:
            return []
        return sorted(int(j) for j in np.unique(self.closed_for[self.closed_for >= 0]))

    def refusal_counts(self, uid: int | None, est: float | None) -> tuple[int, int]:
        """(busy GPUs with a free slot this job may use, how many of them lack memory)."""
        mask = self.open & (self.count > 0)
        if uid is not None:
            mask &= self.owner == uid
        busy = int(mask.sum())
        need = self.unprofiled if est is None else est
        return busy, int((mask & (self.free < need)).sum())

    def need_at(self, est: float | None, pos: Any) -> Any:
        """Memory a job needs on GPU(s) ``pos``: its estimate, or the GPU's assumption for a
        class with no profile (``est`` None)."""
        return self.unprofiled[pos] if est is None else est

    def fits(self, pos: int, est: float | None) -> bool:
        """Whether GPU ``pos`` has the memory for a job of estimate ``est``."""
        return bool(self.free[pos] >= self.need_at(est, pos))


def changed_classes(old: ScoreTable, new: ScoreTable) -> set[str] | None:
    """The classes of the pairs in which ``new`` differs from ``old`` (either orientation),
    or None when the tables differ in anything but pairs (classes, prior)."""
    if new.prior_n != old.prior_n or new.prior_sd != old.prior_sd:
        return None
    if new.classes is not old.classes and new.classes != old.classes:
        return None
    out: set[str] = set()
    a, b = old.pairs, new.pairs
    for k, p in b.items():
        if a.get(k) != p:
            out.update(k)
    for k in a.keys() - b.keys():
        out.update(k)
    return out


def carry_index(old: ClusterView | None, view: ClusterView) -> None:
    """Give ``view``, built afresh for the same GPUs as ``old``, ``old``'s placement index
    (:meth:`PlacementIndex.rebase`), if it has one that fits; else ``view`` gets a new
    index at its first use."""
    idx = old.policy_state if old is not None else None
    if old is not None and isinstance(idx, PlacementIndex) and idx.rebase(old, view):
        view.policy_state = idx
