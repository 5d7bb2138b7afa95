"""Read the stored episodes of a time window in bulk, as arrays.

Members are stored with their records' figures; their normalised throughput ``n`` is
computed here, vectorised, against the solo reference of the window (which moves as solo
runs arrive), with the same rules as :func:`.episode_build.job_n`. The solo reference is
that of the episode's GPU model: a job shared on a K80 is compared with solo runs on K80s.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Select, case, func, select
from sqlalchemy.engine import Connection, Engine

from .engine import db_errors, require_schema
from .episode_build import SKEW_TOLERANCE_S, EpisodeView, SoloRef, solo_reference
from .episode_fetch import CLOCK_STEPPED
from .schema import Episode, EpisodeSource, Profile

log = logging.getLogger("slurm_colo.store")

#: source codes of :attr:`WindowEpisodes.source`
SOURCES = ("null", "progress", "duration")
#: rows converted to arrays at a time (bounds the memory of Python row objects)
FETCH = 100_000


@dataclass
class WindowEpisodes:
    """Episodes (arrays per episode) and their members (arrays per member, grouped by
    episode, by job id within one); ``n`` is NaN and ``source`` 0 when unknown."""

    classes: list[str]
    ids: np.ndarray
    start: np.ndarray
    end: np.ndarray
    fault: np.ndarray
    oom: np.ndarray
    episode: np.ndarray
    job_id: np.ndarray
    cls: np.ndarray
    n: np.ndarray
    source: np.ndarray
    ref: SoloRef = field(default_factory=SoloRef)
    skewed_intervals: int = 0
    #: the GPU models of the episodes read ("" = unknown), by episode count
    models: dict[str, int] = field(default_factory=dict)
    #: episode rows skipped for having fewer than two member rows
    corrupt: int = 0
    #: records of the window whose node's clock stepped while the job ran: no figures
    clock_stepped: int = 0

    def __len__(self) -> int:
        return int(self.start.shape[0])


def db_solo_reference(
    conn: Connection, since: float | None, gpu_model: str | None = None
) -> SoloRef:
    """Solo figures over all nodes: built records with no co-runner that did not run out
    of memory (ending at or after ``since``; of GPU model ``gpu_model``, or of any)."""
    return db_solo_references(conn, since, gpu_model, pooled=True)[""]


def _in_window(q: Select[Any], since: float | None, gpu_model: str | None) -> Select[Any]:
    """``q`` over episode sources, kept to those ending at or after ``since`` (all if
    None) and, with ``gpu_model``, on GPUs of that model."""
    if since is not None:
        q = q.where(EpisodeSource.end_time >= since)
    if gpu_model is not None:
        q = q.where(EpisodeSource.gpu_model == gpu_model)
    return q


def db_solo_references(
    conn: Connection, since: float | None, gpu_model: str | None = None, pooled: bool = False
) -> dict[str, SoloRef]:
    """:func:`db_solo_reference` per GPU model (``pooled``: all in one, under "")."""
    q = select(
        EpisodeSource.gpu_model,
        EpisodeSource.cls,
        EpisodeSource.rate,
        EpisodeSource.start_time,
        EpisodeSource.end_time,
    ).where(EpisodeSource.solo)
    q = _in_window(q, since, gpu_model)
    runs: dict[str, list[tuple[str, float | None, float]]] = {"": []}
    for m, c, r, st, en in conn.execute(q):
        runs.setdefault("" if pooled else m, []).append((c, r, en - st))
    return {m: solo_reference(v) for m, v in runs.items()}


def member_n(
    cls: np.ndarray,
    rate: np.ndarray,
    solo: np.ndarray,
    total: np.ndarray,
    shared: np.ndarray,
    ref_rate: np.ndarray,
    ref_dur: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`.episode_build.job_n`: (n, source code) per member; NaN for
    unknown figures, ``ref_*`` per class index (NaN: none)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (total > 0) & (shared > 0)  # False for NaN: no record
        own = np.isfinite(solo) & (solo != 0)
        s = np.where(own, solo, ref_rate[cls])
        prog = ok & np.isfinite(rate) & (rate != 0) & np.isfinite(s) & (s != 0)
        d = ref_dur[cls]
        dur = ok & ~prog & (d > 0)
        n_job = np.where(prog, rate / s, np.minimum(1.0, d / total))
        n = np.clip((n_job * total - (total - shared)) / shared, 0.0, 1.5)
    src = np.where(prog, 1, np.where(dur, 2, 0)).astype(np.int8)
    n[src == 0] = np.nan
    return n, src


#: one row per member with its episode's figures; members scanned (their ``end_time`` is
#: the episode's), episodes looked up by key
_WINDOW_SQL = (
    "SELECT m.episode_id, m.job_id, m.cls, e.gpu_model, m.rate, m.solo_rate, m.total_s, "
    "m.shared_s, e.start_time, e.end_time, e.mps_fault, e.oom "
    "FROM episode_members m JOIN episodes e ON e.id = m.episode_id"
)


def _rows(conn: Connection, since: float | None, gpu_model: str | None) -> Iterator[np.ndarray]:
    """The window's member rows, as object arrays of up to :data:`FETCH` rows: plain DB-API
    tuples (a third of the cost of result rows at a million members)."""
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    where: list[str] = []
    args: list[object] = []
    if since is not None:
        where.append(f"m.end_time >= {mark}")
        args.append(since)
    if gpu_model is not None:
        where.append(f"e.gpu_model = {mark}")
        args.append(gpu_model)
    sql = _WINDOW_SQL + (" WHERE " + " AND ".join(where) if where else "")
    cur = conn.connection.cursor()
    try:
        cur.execute(sql, tuple(args))
        while part := cur.fetchmany(FETCH):
            yield np.array(part, dtype=object).reshape(len(part), 12)
    finally:
        cur.close()


def _floats(col: np.ndarray) -> np.ndarray:
    return np.array(col.tolist(), dtype=float)  # None -> NaN


class _Index(dict[str, int]):
    """Class name -> index, numbering new names as they come (lookups of known names stay
    in C: a million members cost a few hundredths of a second)."""

    def __missing__(self, key: str) -> int:
        self[key] = len(self)
        return self[key]


def _columns(
    conn: Connection, since: float | None, gpu_model: str | None, ix: _Index, models: _Index
) -> list[np.ndarray]:
    """episode id, job id, class index (into ``ix``, filled in), GPU model index (into
    ``models``), rate, solo rate, total and shared seconds, episode start, end, fault and
    out-of-memory flags, per member."""
    types = (np.int64, np.int64, np.int64, np.int64) + (float,) * 6 + (bool, bool)
    cols: list[list[np.ndarray]] = [[] for _ in types]
    for o in _rows(conn, since, gpu_model):
        o[:, 2] = np.fromiter(map(ix.__getitem__, o[:, 2].tolist()), np.int64, len(o))
        o[:, 3] = np.fromiter(map(models.__getitem__, o[:, 3].tolist()), np.int64, len(o))
        for k, t in enumerate(types):
            cols[k].append(_floats(o[:, k]) if t is float else o[:, k].astype(t))
    return [np.concatenate(c) if c else np.zeros(0, t) for c, t in zip(cols, types, strict=True)]


def read_window(
    engine: Engine, since: float | None, gpu_model: str | None = None
) -> WindowEpisodes:
    """The stored episodes ending at or after ``since`` (all if None) and their members;
    with ``gpu_model``, only those on GPUs of that model ("": of unknown model). Each
    member's ``n`` is computed against the solo runs of its episode's GPU model; ``ref``
    is the reference of ``gpu_model`` (of all solo runs when None)."""
    require_schema(engine)
    # co-runner intervals left out for clock skew, and records across a clock step: one
    # pass over the window's sources (a record has at most one profile)
    counts = _in_window(
        select(
            func.coalesce(func.sum(EpisodeSource.skewed), 0),
            func.coalesce(func.sum(case((CLOCK_STEPPED, 1), else_=0)), 0),
        )
        .select_from(EpisodeSource)
        .outerjoin(Profile, Profile.record_id == EpisodeSource.record_id),
        since,
        gpu_model,
    )
    ix, mx = _Index(), _Index()
    with db_errors(engine), engine.connect() as conn:
        refs = db_solo_references(conn, since, gpu_model)
        ref = (
            refs.get(gpu_model, SoloRef())
            if gpu_model is not None
            else db_solo_reference(conn, since)
        )
        skewed, stepped = (int(v or 0) for v in conn.execute(counts).one())
        m_eid, m_jid, m_cls, m_model, rate, solo, total, shared, start, end, fault, oom = _columns(
            conn, since, gpu_model, ix, mx
        )
    classes = list(ix)
    # members by episode (in id order), then job id; an episode needs two members
    mo = np.lexsort((m_jid, m_eid))
    m_eid = m_eid[mo]
    first = (
        np.flatnonzero(np.r_[True, m_eid[1:] != m_eid[:-1]])
        if len(m_eid)
        else np.zeros(0, np.int64)
    )
    k = np.diff(np.r_[first, len(m_eid)])
    keep_e = k >= 2
    episode = np.repeat(np.cumsum(keep_e) - 1, k)
    keep_m = np.repeat(keep_e, k)
    mo, episode = mo[keep_m], episode[keep_m]
    e_at = mo[np.searchsorted(episode, np.arange(int(keep_e.sum())))]  # a member per episode
    n = np.full(len(mo), np.nan)
    src = np.zeros(len(mo), np.int8)
    model_of = m_model[mo]
    for code, model in enumerate(mx):  # each GPU model against its own solo runs
        r = refs.get(model, SoloRef())
        sel = np.flatnonzero(model_of == code)
        at = mo[sel]
        n[sel], src[sel] = member_n(
            m_cls[at],
            rate[at],
            solo[at],
            total[at],
            shared[at],
            np.array([r.rate.get(c, np.nan) for c in classes], float),
            np.array([r.duration.get(c, np.nan) for c in classes], float),
        )
    corrupt = int((~keep_e).sum())
    if corrupt:
        log.warning(
            "%d episode row(s) with fewer than two members skipped "
            "(slurm-colo retrain --rebuild rebuilds them)",
            corrupt,
        )
    if skewed:
        log.warning(
            "%d co-runner interval(s) lie outside their job's run by more than %.0f s "
            "(clock skew or corrupt records): ignored",
            skewed,
            SKEW_TOLERANCE_S,
        )
    if stepped:
        log.warning(
            "%d record(s) ran across a step of their node's clock: no figures taken from "
            "them (their profiles list clock_steps_s)",
            stepped,
        )
    return WindowEpisodes(
        classes,
        m_eid[first[keep_e]],
        start[e_at],
        end[e_at],
        fault[e_at],
        oom[e_at],
        episode,
        m_jid[mo],
        m_cls[mo],
        n,
        src,
        ref,
        skewed,
        dict(zip(mx, np.bincount(m_model[e_at], minlength=len(mx)).tolist(), strict=True)),
        corrupt,
        stepped,
    )


def load_episodes(engine: Engine, since: float | None = None) -> list[EpisodeView]:
    """The stored episodes ending at or after ``since`` (all if None) as views, ``n``
    against the solo reference of the records ending at or after ``since``. For
    inspection and tests: the retrain reads :func:`read_window`."""
    w = read_window(engine, since)
    with db_errors(engine), engine.connect() as conn:
        where = {
            eid: (node, gpu)
            for eid, node, gpu in conn.execute(select(Episode.id, Episode.node, Episode.gpu))
        }
    bounds = np.searchsorted(w.episode, np.arange(len(w) + 1))
    out = []
    for i, eid in enumerate(w.ids.tolist()):
        sl = slice(int(bounds[i]), int(bounds[i + 1]))
        members = [
            (j, w.classes[c], None if math.isnan(x) else x, SOURCES[s])
            for j, c, x, s in zip(
                w.job_id[sl].tolist(),
                w.cls[sl].tolist(),
                w.n[sl].tolist(),
                w.source[sl].tolist(),
                strict=True,
            )
        ]
        node, gpu = where.get(eid, ("?", "?"))
        out.append(
            EpisodeView(
                node,
                gpu,
                float(w.start[i]),
                float(w.end[i]),
                members,
                bool(w.fault[i]),
                bool(w.oom[i]),
            )
        )
    out.sort(key=lambda e: (e.start, e.node, e.gpu))
    return out
