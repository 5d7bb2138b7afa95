"""Held jobs as the placement policy sees them: what a probe's verdict does to the newcomer,
and where a held job may go. Pure: plain data in, decisions out (no Slurm, no I/O).

A job is *held* until a GPU takes it:

* requeued after a harmful probe (``placement.undo = "requeue"``): Slurm 22.05 cannot
  change the GRES of a pending job that has one, so it may only go to a GPU of its own
  shard type, and must be predicted to keep :func:`~.retract.undone_floor`
  (:func:`requeued`);
* held at submission (``placement.unplaced = "hold"``): held without a GPU request, so it
  may go to any shared GPU (of the GPU model it asked for).

The re-aim places held jobs oldest first (:func:`oldest_first`); a GPU the starvation guard
(:mod:`.guard`) drained for a held job is open to it, and to it only (:func:`place_held`).
The agent (:mod:`slurm_colo.agent.undo`, :mod:`slurm_colo.agent.held`) turns the results
into ``scontrol`` actions; the simulator (:mod:`slurm_colo.sim.ours`) uses :func:`requeued`
and the guard's drain order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..config import PlacementConfig
from ..contracts.enums import LeftBehind, Undo
from ..contracts.placement import ANY_SHARED, held_for_text
from ..scores import PairScore, ScoreTable
from .by_model import ScoreBook, place_by_model
from .guard import HeldWait, Reservation, held_drain, kept
from .policy import place
from .retract import Member, judge, rate_floor
from .view import ClusterView, Decision, GpuView, JobRequest


@dataclass
class HeldJob:
    """A job held in Slurm until a GPU takes it: requeued by an undo (a GPU of its shard
    type), or held at submission (any shared GPU of its model)."""

    job_id: int
    token: str
    #: gres_type set: the requeued job's fixed shard type; empty: any shared GPU
    request: JobRequest
    since: float
    reason: str
    #: requeued after a harmful probe (else held at submission, placement.unplaced = "hold")
    undone: bool = True
    #: the GPU model the job asked for ("" any); for a job held without a GPU request
    model: str = ""
    #: its hold is the administrator's (a job without a GPU request must not start by hand)
    locked: bool = False
    #: after Slurm refused the administrator's hold: when to try it again
    lock_retry_at: float = 0.0
    #: not released before this time (just requeued: its old run's launch credential)
    release_after: float = 0.0
    #: pending on a node closed to placement when held (keeps its own start time)
    withdrawn: bool = False
    #: the GPU request of its own it already has (a task of a held array whose release
    #: Slurm refused after the update that gave it the request): it is released with it,
    #: as it is, where no shared GPU takes it, and at once where Slurm cannot change it
    own_gpu: str = ""

    @property
    def any_gpu(self) -> bool:
        """Held without a GPU request: its shard type is chosen when it is released."""
        return not self.request.gres_type

    @property
    def gres_type(self) -> str:
        """The type it waits for, as its tag says it (``*``: any shared GPU)."""
        return self.request.gres_type or ANY_SHARED

    def waits_for(self) -> str:
        return held_for_text(self.gres_type, self.model)


def requeued(req: JobRequest, gres_type: str, cfg: PlacementConfig) -> JobRequest:
    """The request of a job requeued by an undo: a GPU of ``gres_type`` only, where it is
    predicted to keep the undone job's rate floor."""
    return replace(req, gres_type=gres_type, rate_floor=rate_floor(cfg, undone=True))


# ---- the probe's verdict ------------------------------------------------------------------
@dataclass(frozen=True)
class Newcomer:
    """What is known of the job a probe judges (the newest member of the set)."""

    #: placed by the agent on a shared GPU of a configured node
    placed: bool
    #: Slurm may requeue it (not ``--no-requeue``)
    requeue: bool = True
    #: its tag says it was requeued once already
    undone: bool = False
    #: while it runs: seconds until its time limit ends it (None unknown)
    ends_in_s: float | None = None
    #: the set judged is one left behind by a job leaving a set this job's probe kept
    again: bool = False


@dataclass(frozen=True)
class ProbeJudgement:
    """``keep`` the set, ``undo`` it (requeue the newcomer), or ``harmful`` (left running:
    ``why_not``); ``observed``: the pair throughputs the set showed."""

    verdict: str
    reason: str
    observed: dict[tuple[str, str], PairScore] = field(default_factory=dict)
    why_not: str = ""

    def reply(self) -> dict[str, Any]:
        """The answer to the node's PROBE."""
        if self.verdict == "harmful":
            return {"verdict": "harmful", "reason": f"{self.reason}; left running: {self.why_not}"}
        return {"verdict": self.verdict, "reason": self.reason}


def judge_probe(
    job_key: str,
    members: Sequence[Member],
    scores: ScoreTable,
    cfg: PlacementConfig,
    newcomer: Newcomer,
    throughput: bool = True,
) -> ProbeJudgement:
    """Judge a measured set (:func:`~.retract.judge`; ``throughput``: whether the policy's
    throughput path was open when the newcomer was placed) and say whether its newcomer is
    to be undone: at most once, only a job the agent placed that Slurm may requeue, not one
    whose time limit ends it within ``probe_s`` anyway, and only with ``undo = "requeue"``."""
    v = judge(job_key, members, scores, cfg, throughput)
    if not v.undo:
        return ProbeJudgement("keep", v.reason, v.observed)
    why_not = why_not_undone(cfg, newcomer)
    return ProbeJudgement("harmful" if why_not else "undo", v.reason, v.observed, why_not)


def why_not_undone(cfg: PlacementConfig, n: Newcomer) -> str:
    """Why a harmful set's newcomer is left running ("" when it is to be undone)."""
    if cfg.undo != Undo.REQUEUE:
        return "placement.undo is off"
    if not n.placed:
        return "the job was not placed by the agent"
    if not n.requeue:
        return "Slurm may not requeue the job (--no-requeue)"
    if n.undone:
        return "the job was requeued once already"
    if n.again and cfg.left_behind != LeftBehind.UNDO:
        return f'a set left behind, placement.left_behind = "{cfg.left_behind}"'
    if n.ends_in_s is not None and 0 < n.ends_in_s < cfg.probe_s:
        return "its time limit ends it sooner than a restart would help"
    return ""


def undo_tag(
    token: str, req: JobRequest, reason: str, gres_type: str, model: str = "", undone: bool = True
) -> str:
    """The tag of a job requeued by an undo: held for a GPU of ``gres_type`` (``*``: any
    shared GPU of ``model``, where Slurm can change a pending job's GRES). ``undone`` False:
    a pending job held back from a node closed to placement (nothing of it was undone)."""
    return (
        Decision("exclusive", reason)
        .placement(token, req.cls, req.mode, undone=undone, held=gres_type, model=model)
        .to_tag()
    )


#: how the comment of a pending job held back from a node closed to placement begins
WITHDRAWN = "colo: held: node "


def withdrawn_comment(node: str) -> str:
    """The comment of a pending job held back from a node closed to placement."""
    return (
        f"{WITHDRAWN}{node} is closed to placement (slurm-colo status); "
        "released onto a shared GPU once one takes it"
    )


def undo_comment(cfg: PlacementConfig, reason: str) -> str:
    return f"colo: requeued after {cfg.probe_s:g}s together: {reason}"


# ---- the re-aim ---------------------------------------------------------------------------
def queue_head(
    held: Iterable[HeldJob],
    view: ClusterView,
    partitions: Mapping[str, tuple[str, ...]] | None = None,
) -> float | None:
    """Since when the held job waiting longest has waited, among those some shared GPU of
    ``view`` may take (its type or any, its model, its partitions, the memory of a GPU):
    the one :func:`waits_behind` makes newer jobs wait for. A job no GPU can take (it waits
    for an administrator) holds up nobody. None when no held job qualifies."""
    for h in oldest_first(held):
        wait = HeldWait(h.job_id, h.gres_type, h.since, h.model, h.request.partition)
        d = held_drain(wait, view, _never, partitions)
        need = h.request.memory_gib or 0.0
        if any(g.memory_gib >= need for g in [*d.idle, *(g for _, g in d.busy)]):
            return h.since
    return None


def rivals(h: HeldJob, held: Iterable[HeldJob]) -> list[HeldJob]:
    """The held jobs that may want a GPU ``h`` may take: every one for a job held for any
    shared GPU; for a job bound to one shard type, those held for that type or for any
    shared GPU. A job held for GPUs of another type takes nothing from it, so it holds up
    nothing of it either (:func:`queue_heads`)."""
    return list(held) if h.any_gpu else wanting(h.gres_type, held)


def wanting(gres_type: str, held: Iterable[HeldJob]) -> list[HeldJob]:
    """The held jobs that may want a GPU of shard type ``gres_type``: those held for that
    type or for any shared GPU. A job about to take such a GPU waits its turn behind these
    only (:func:`waits_behind`)."""
    return [o for o in held if o.any_gpu or o.gres_type == gres_type]


def queue_heads(
    held: Sequence[HeldJob],
    view: ClusterView,
    partitions: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, float | None]:
    """:func:`queue_head` for each shard type a held job waits for (``*``: any shared
    GPU), among that job's :func:`rivals`: the one each held job waits its turn behind."""
    out: dict[str, float | None] = {}
    for h in held:
        if h.gres_type not in out:
            out[h.gres_type] = queue_head(rivals(h, held), view, partitions)
    return out


def _never(g: GpuView) -> float:
    return 0.0


def waits_behind(since: float, oldest: float | None, now: float, cfg: PlacementConfig) -> bool:
    """Bounded queue jumping: whether a job waiting since ``since`` (its submission, or its
    requeue) must not be placed yet, because the job waiting longest (since ``oldest``;
    None: none waits) has waited ``placement.reserve_after_h`` and came more than
    ``placement.bypass_h`` before it. Newer jobs then wait their turn instead of taking every
    slot that frees up, so shared GPUs drain for the old one (the starvation guard, and the
    re-aim oldest first, give it the first); jobs close behind it still pass. 0 for either
    setting turns this off."""
    if oldest is None or cfg.bypass_h <= 0 or cfg.reserve_after_h <= 0:
        return False
    return now - oldest >= cfg.reserve_after_h * 3600.0 and since - oldest > cfg.bypass_h * 3600.0


def oldest_first(held: Iterable[HeldJob]) -> list[HeldJob]:
    """The order held jobs are aimed in: the one held longest first."""
    return sorted(held, key=lambda h: h.since)


def place_held(
    h: HeldJob,
    view: ClusterView,
    scores: ScoreTable | ScoreBook,
    cfg: PlacementConfig,
    reservation: Reservation | None,
) -> Decision:
    """:func:`~.policy.place` for a held job; a GPU the starvation guard drained for it is
    open to it, and to it only (``view`` is left as it was). With a :class:`ScoreBook`
    (a job held for any shared GPU on a site with per-model sets) each GPU is judged with
    its own model's set (:func:`~.by_model.place_by_model`)."""
    r = reservation
    opened = (
        [g for g in kept(r, view) if g.closed_for == h.job_id and not g.occupants]
        if r is not None and r.job_id == h.job_id
        else []
    )
    for g in opened:
        g.closed_for = None
        view.touch(g)
    try:
        if isinstance(scores, ScoreBook):
            return place_by_model(h.request, view, scores, cfg).decision
        return place(h.request, view, scores, cfg)
    finally:
        for g in opened:  # closed again until Slurm shows the job running
            g.closed_for = h.job_id
            view.touch(g)


def must_lock(h: HeldJob, now: float, state_reason: str) -> bool:
    """A job held without a GPU request that stays held gets the administrator's hold (it
    must not start on its own), unless it has it or Slurm refused it a moment ago."""
    return h.any_gpu and not h.locked and now >= h.lock_retry_at and state_reason != "JobHeldAdmin"


@dataclass(frozen=True)
class Release:
    """A held job placed: its new tag, the comment for Slurm and the reason to explain."""

    job_id: int
    decision: Decision
    tag: str
    comment: str
    note: str


def release(h: HeldJob, d: Decision) -> Release:
    """What to tell Slurm and ``slurm-colo explain`` when ``h`` goes to ``d``'s GPU."""
    tag = d.placement(h.token, h.request.cls, h.request.mode, undone=h.undone).to_tag()
    if h.withdrawn:
        return Release(
            h.job_id,
            d,
            tag,
            f"colo: held off a node closed to placement; now GPU {d.index} of {d.node}",
            f"held while its node was closed to placement ({h.reason}); then {d.reason}",
        )
    if h.undone:
        return Release(
            h.job_id,
            d,
            tag,
            f"colo: requeued after a harmful pairing; now GPU {d.index} of {d.node}",
            f"requeued after its probe ({h.reason}); then {d.reason}",
        )
    return Release(
        h.job_id,
        d,
        tag,
        f"colo: released onto GPU {d.index} of {d.node}: {d.reason}",
        f"held at submission; then {d.reason}",
    )


def _model_of(h: HeldJob, view: ClusterView, book: ScoreBook) -> str:
    """Whose score set judges held job ``h``: its shard type's GPU model, or the model it
    asked for ("" the site default)."""
    if h.request.gres_type:
        pos = view.positions_of_type(h.request.gres_type)
        return book.model_for(view.gpus[pos[0]].model) if pos else ""
    return book.model_for(h.model)


def judge_for(h: HeldJob, view: ClusterView, book: ScoreBook) -> ScoreTable | ScoreBook:
    """Bound to one GPU model: that model's set; held for any shared GPU: the book, each
    GPU judged with its own model's set."""
    bound = bool(h.request.gres_type or h.model) or not book.by_model
    return book.table(_model_of(h, view, book)) if bound else book
