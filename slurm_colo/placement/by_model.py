"""Placement on a site with several GPU models, each with its own score set.

A :class:`ScoreBook` holds the site default score set and the sets of the GPU models that
have their own (``slurm-colo retrain`` trains one per model on a mixed site). Each GPU is
judged with its own model's set: :func:`place_by_model` splits the view by the set its
GPUs use, calls :func:`~slurm_colo.placement.place` once per part with that part's set and
keeps the best answer by the policy's own rules -- a GPU with partners when the job adds
at least as much there as alone (the highest predicted gain less the uncertainty), else an
idle GPU, else the best GPU with partners, else a GPU of its own. A job whose shard type is
fixed (a requeued job) only looks at the part holding that type.

When every GPU of the view uses the same set (one set for the site, the common case, or a
view of one model) ``place`` is called once on the whole view: the same decision, at the
same speed, as without the book. Pure: no I/O.

One difference from the policy run on all GPUs with one set remains: a part that opens an
idle GPU does not say how good its best GPU with partners was (its gain was below 1). When
that GPU ranked above another part's partner whose gain is 1 or more, the policy on the
whole view would open the idle GPU; here the other part's partner is taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import PlacementConfig
from ..scores import ScoreTable
from .index import carry_index
from .policy import index_for, place
from .view import ClusterView, Decision, GpuView, JobRequest


@dataclass(frozen=True)
class ScoreBook:
    """The site default score set and the sets of the GPU models that have their own."""

    default: ScoreTable
    by_model: Mapping[str, ScoreTable] = field(default_factory=dict)

    def model_for(self, gpu_model: str) -> str:
        """Whose set a GPU of ``gpu_model`` uses: its model's, or "" (the site default)."""
        return gpu_model if gpu_model and gpu_model in self.by_model else ""

    def table(self, model: str) -> ScoreTable:
        """The set of ``model`` as :meth:`model_for` names it ("": the default)."""
        return self.by_model[model] if model else self.default


@dataclass(frozen=True)
class BookDecision:
    """A decision and the score set it was made with (``model``: "" = the site default)."""

    decision: Decision
    model: str
    scores: ScoreTable


def _prints(view: ClusterView) -> list[tuple[Any, ...]]:
    """Per GPU, what a change of its occupants or state changes (compared, not hashed)."""
    return [
        (id(g), g.model, tuple(map(id, g.occupants)), g.available, g.closed_for, g.exclusive_job)
        for g in view.gpus
    ]


class ModelViews:
    """The parts of a view per score set, kept between calls so that each part keeps its
    placement index. When the view changes (its version moves) the GPUs whose occupants or
    state changed are found by comparing a cheap print of each GPU (about 2 ms for 2,000
    GPUs) and marked changed in their part, whose index then updates those rows only; a
    new view, a new book, or GPUs replaced or of another model build the parts afresh,
    each part's index carried over to its new part where it holds the same GPUs
    (:meth:`~.index.PlacementIndex.rebase`)."""

    def __init__(self) -> None:
        self._view: ClusterView | None = None
        self._key: tuple[Any, ...] = ()
        self._version = -1
        self._parts: dict[str, ClusterView] = {}
        self._prints: list[tuple[Any, ...]] = []
        self._part_of: list[str] = []

    def parts(self, view: ClusterView, book: ScoreBook) -> dict[str, ClusterView]:
        key = (id(book), tuple(sorted(book.by_model)), len(view.gpus))
        fresh = self._view is view and self._key == key
        if not fresh or (self._version != view.version and not self._sync(view)):
            self._build(view, book)
        self._view, self._key, self._version = view, key, view.version
        for part in self._parts.values():
            part.queue_from(view)
        return self._parts

    def _build(self, view: ClusterView, book: ScoreBook) -> None:
        groups: dict[str, list[GpuView]] = {}
        self._part_of = []
        for g in view.gpus:
            m = book.model_for(g.model)
            groups.setdefault(m, []).append(g)
            self._part_of.append(m)
        parts = {m: view.part(gs) for m, gs in groups.items()}
        for m, part in parts.items():  # a view built afresh: keep each part's index
            carry_index(self._parts.get(m), part)
        self._parts = parts
        self._prints = _prints(view)

    def _sync(self, view: ClusterView) -> bool:
        """Mark the changed GPUs in their parts; False when the parts must be rebuilt."""
        prints = _prints(view)
        for i, (new, old) in enumerate(zip(prints, self._prints, strict=True)):
            if new != old:
                if new[:2] != old[:2]:  # another GPU object, or another model
                    return False
                self._parts[self._part_of[i]].touch(view.gpus[i])
        self._prints = prints
        return True


def _single(book: ScoreBook, view: ClusterView) -> str | None:
    """The one set every GPU of ``view`` uses, or None when they use several."""
    if not book.by_model:
        return ""
    first: str | None = None
    for g in view.gpus:
        m = book.model_for(g.model)
        if first is None:
            first = m
        elif m != first:
            return None
    return first or ""


def prepare(view: ClusterView, book: ScoreBook, cfg: PlacementConfig, cache: ModelViews) -> None:
    """Build the placement indexes of ``view``'s parts now (a caller that has just built a
    view, off the request path), when its GPUs use several sets."""
    if _single(book, view) is None:
        for m, part in cache.parts(view, book).items():
            index_for(part, book.table(m), cfg)


def _gain(d: Decision, part: ClusterView, job: JobRequest, scores: ScoreTable) -> float:
    """The throughput a shared decision with partners adds (the policy's ranking: predicted
    gain less ``risk_aversion`` times the uncertainty is applied by the caller)."""
    g = part.find(d.node or "", d.index if d.index is not None else -1)
    classes = [o.cls for o in g.occupants] if g is not None else []
    after = sum(scores.set_throughputs([*classes, job.cls])[0])
    before = sum(scores.set_throughputs(classes)[0]) if len(classes) > 1 else 1.0
    return after - before


def place_by_model(
    job: JobRequest,
    view: ClusterView,
    book: ScoreBook,
    cfg: PlacementConfig,
    cache: ModelViews | None = None,
) -> BookDecision:
    """Decide where ``job`` goes, each GPU judged with its own model's score set (see the
    module). ``cache`` keeps the per-set parts of an unchanged view between calls."""
    only = _single(book, view)
    single_gpu = job.mode != "off" and job.nodes == 1 and job.gpus_per_node == 1
    if only is not None or not single_gpu:
        m = only or ""
        return BookDecision(place(job, view, book.table(m), cfg), m, book.table(m))
    parts = (cache or ModelViews()).parts(view, book)
    if job.gres_type:  # a fixed shard type: only the part holding GPUs of that type
        pinned = [m for m, p in parts.items() if p.positions_of_type(job.gres_type)]
        m = pinned[0] if pinned else ""
        where = parts[m] if pinned else view
        return BookDecision(place(job, where, book.table(m), cfg), m, book.table(m))
    order = {m: view.position(p.gpus[0].node, p.gpus[0].index) or 0 for m, p in parts.items()}
    answers = [
        (m, p, place(job, p, book.table(m), cfg))
        for m, p in sorted(parts.items(), key=lambda x: order[x[0]])
    ]
    busy = [
        (_gain(d, p, job, book.table(m)), m, d) for m, p, d in answers if d.shared and d.partners
    ]
    best = max(
        busy, key=lambda x: x[0] - cfg.risk_aversion * (x[2].predicted_sd or 0.0), default=None
    )
    idle = [
        (view.position(d.node or "", d.index if d.index is not None else -1), m, d)
        for m, _, d in answers
        if d.shared and not d.partners
    ]
    if best is not None and (not idle or best[0] >= 1.0):
        return BookDecision(best[2], best[1], book.table(best[1]))
    if idle:
        _, m, d = min(idle, key=lambda x: x[0] if x[0] is not None else len(view.gpus))
        return BookDecision(d, m, book.table(m))
    if best is not None:
        return BookDecision(best[2], best[1], book.table(best[1]))
    return _all_refused(answers, book)


def _all_refused(answers: list[tuple[str, ClusterView, Decision]], book: ScoreBook) -> BookDecision:
    """No part took the job: one decision naming each part's reason."""
    m0, _, d0 = answers[0]
    reasons = "; ".join(
        f"{m or 'other'} GPUs: {d.reason.removeprefix('own GPU: ')}" for m, _, d in answers
    )
    prefix = "own GPU: " if d0.reason.startswith("own GPU") else ""
    return BookDecision(
        Decision("exclusive", prefix + reasons, memory_gib=d0.memory_gib), m0, book.table(m0)
    )
