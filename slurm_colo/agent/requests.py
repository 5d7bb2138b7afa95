"""The PLACE request: what the agent answers the Lua hook for a job at submission.

:class:`PlaceRequests` is the part of :class:`~slurm_colo.agent.state.AgentState` that
decides a new job's placement (a shared GPU, its own GPU, held for the agent, or, for a job
array, its tasks left to the re-planner) and records it in the ledger and the view; the
state it reads and writes is the agent state's (the attributes declared below). The
decision itself is :func:`~slurm_colo.placement.by_model.place_by_model`'s; this module
adds the prepared answer for a stream of similar requests, the bounded queue jumping past
held jobs, and the reply the hook applies.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..config import Config
from ..contracts.enums import Mode, Replan
from ..contracts.options import derive_class, parse_mode
from ..contracts.placement import ANY_SHARED, Placement
from ..contracts.records import UID_MAX
from ..errors import OptionError
from ..placement import ClusterView, Decision, JobRequest
from ..placement.by_model import BookDecision, ModelViews, ScoreBook, place_by_model
from ..placement.held import queue_head, waits_behind, wanting
from .arrays import HELD, HELD_OR_OWN, NOT_SHARED, array_decision, array_reply, array_way
from .held import HELD_TO_START, HeldJobs, can_hold, hold_unplaced
from .learned import LiveScores
from .ledger import Ledger
from .occupancy import Occupancy
from .rights import Rights

log = logging.getLogger("slurm_colo.agent")


def _new_token() -> str:
    return "p" + secrets.token_hex(4)


def nothing() -> None:
    """The follow-up of a request that has nothing to record."""


def _hold_reply(tag: Placement, comment: str, user_msg: str) -> dict[str, str]:
    """The answer that holds a job without a GPU request (the Lua hook drops it; the agent
    sets one when it releases the job): its tag says ``held=*``."""
    return {
        "action": "hold",
        "gres": "none",
        "tag": tag.to_tag(),
        "comment": comment,
        "user_msg": user_msg,
    }


def _partner_text(keys: tuple[str, ...]) -> str:
    """Job ids where known; a placement not yet seen in Slurm has only its token."""
    ids = [k for k in keys if k.isdigit()]
    fresh = len(keys) - len(ids)
    parts = [f"job(s) {','.join(ids)}"] if ids else []
    if fresh:
        parts.append(f"{fresh} just-submitted job(s)")
    return " and ".join(parts)


class PlaceRequests:
    """PLACE requests, as part of the agent state (which holds the attributes below)."""

    cfg: Config
    live: LiveScores
    ledger: Ledger
    occupancy: Occupancy
    holds: HeldJobs
    rights: Rights
    #: (request key, view, view version, score book, token, decision) prepared after the
    #: last placement for the next request of the same kind; see :meth:`decide`
    _prepared: tuple[Any, ...] | None
    #: the view's parts per GPU model's score set, kept between requests
    _model_views: ModelViews

    @property
    def view(self) -> ClusterView:
        return self.occupancy.view

    @property
    def book(self) -> ScoreBook:
        """The site default set and the sets of the GPU models that have their own."""
        return self.live.book

    def place_request(self, fields: dict[str, str], now: float) -> dict[str, str]:
        """Decide and record in one go (see :meth:`decide` for the split form)."""
        reply, record = self.decide(fields, now)
        record()
        return reply

    def decide(
        self, fields: dict[str, str], now: float
    ) -> tuple[dict[str, str], Callable[[], None]]:
        """The answer to one PLACE request, and the bookkeeping to run once it is sent.

        The caller must run the returned ``record`` before deciding anything else (the
        agent holds its lock across both): it adds the placement to the view, writes the
        explanation and the log line, and prepares the answer to the next request of the
        same kind (same user, class, mode and filters), which :meth:`decide` then returns
        at once if nothing in the view, the scores or the config changed meanwhile -- the
        same decision :func:`~slurm_colo.placement.place` would compute, with its token
        drawn in advance.
        """
        try:
            uid = int(fields.get("uid", "-1"))
            if not -1 <= uid <= UID_MAX:  # -1: unknown; a larger one would break the index
                raise ValueError(f"uid {fields['uid'][:20]} is not a user id")
            mode = parse_mode(fields.get("mode"))
            cls = derive_class(
                fields.get("name"),
                fields.get("class") or None,
                self.cfg.placement.class_name_numbers,
            )
        except (OptionError, ValueError) as e:
            self.ledger.decisions["exclusive:bad-input"] += 1
            return {"action": "exclusive", "comment": f"colo: not shared ({e})"}, nothing
        if fields.get("array") == "1":
            return self._array(fields, cls, mode, now)
        if (
            fields.get("deferred") == "1"
            and self.rights.refused is None
            and can_hold(self.occupancy, fields)
        ):
            return self._deferred(fields, cls, mode, now)
        key = (
            uid,
            fields.get("user", ""),
            cls,
            mode,
            fields.get("partition", ""),
            fields.get("gpu_type", ""),
            fields.get("req_nodes", ""),
            fields.get("exc_nodes", ""),
        )
        ready = self._prepared
        self._prepared = None
        if (
            ready is not None
            and ready[0] == key
            and ready[1] is self.view
            and ready[2] == self.view.version
            and ready[3] is self.book
        ):
            token, bd = ready[4], ready[5]
        else:
            token = _new_token()
            bd = self._place(token, key, fields)
        d = bd.decision
        oldest = self._queue_head(now, d.gres_type) if d.shared else None
        if d.shared and waits_behind(now, oldest, now, self.cfg.placement):
            d = Decision(
                "exclusive",
                "own GPU: waits its turn behind a job held for "
                f"{(now - (oldest or now)) / 3600:.1f} h (placement.bypass_h)",
                memory_gib=d.memory_gib,
            )
            bd = replace(bd, decision=d)
        tag = d.placement(token, cls, mode).to_tag()
        would_hold = not d.shared and hold_unplaced(self.cfg) and can_hold(self.occupancy, fields)
        # a held job waits for the agent's release: none while Slurm refuses it the right
        hold = would_hold and self.rights.refused is None
        if hold:
            # held without a GPU request: the agent sets it when it releases the job onto
            # whichever shared GPU fits it first (agent/held.py, HeldJobs.reaim)
            reply = _hold_reply(
                d.placement(token, cls, mode, held=ANY_SHARED, model=fields.get("gpu_type", "")),
                f"colo: held until a shared GPU fits ({d.reason.removeprefix('own GPU: ')})",
                "slurm-colo: held until a shared GPU fits; "
                "the job is released there by the placement agent",
            )
        elif not d.shared:
            why = f"colo: {d.reason}" + (
                "; not held: Slurm refuses the agent the right to release it" if would_hold else ""
            )
            reply = {"action": "exclusive", "comment": why, "tag": tag}
        else:
            short = f"colo: GPU {d.index} of {d.node}" + (
                f" with {_partner_text(d.partners)}, predicted delta {d.predicted_delta:.2f}"
                if d.partners
                else " (opened for sharing)"
            )
            reply = {
                "action": "share",
                "gres": self.occupancy.layouts[d.node or ""].shard_request(d.index or 0),
                "node": d.node or "",
                "comment": short,
                "tag": tag,
                "user_msg": f"slurm-colo: {short[6:]}",
            }

        def record() -> None:
            self._record(token, key, fields, bd, now, held=hold)
            if hold:
                self.ledger.note(token, reply["comment"][6:])

        return reply, record

    def _array(
        self, fields: dict[str, str], cls: str, mode: Mode, now: float
    ) -> tuple[dict[str, str], Callable[[], None]]:
        """A job array is never placed as one job (agent/arrays.py): held for the agent to
        release its tasks one by one (onto shared GPUs; where ``placement.unplaced`` keeps
        jobs on a GPU of their own, a task none takes with its own GPU request), or left
        with its own-GPU request for the re-planner to move its waiting tasks, or not
        shared."""
        rights = self.rights.refused is None
        hold = hold_unplaced(self.cfg)
        can, replan = self.holds.retype_after_undo, self.cfg.placement.replan == Replan.AUTO
        # the view is filtered (can_hold) only where the answer depends on it: not for an
        # array whose tasks are moved as they wait
        may_hold = rights and (hold or not (can and replan)) and can_hold(self.occupancy, fields)
        way = array_way(hold, may_hold, can, replan)
        why_not = (
            "Slurm refuses the agent the right to release it"
            if not rights
            else "no shared GPU it may use"
        )
        d = array_decision(way, why_not)
        token = _new_token()
        held = (
            {"held": ANY_SHARED, "model": fields.get("gpu_type", "")}
            if way in (HELD, HELD_OR_OWN)
            else {}
        )
        reply = array_reply(way, d.placement(token, cls, mode, **held).to_tag(), why_not)

        def record() -> None:
            user, name = fields.get("user", ""), fields.get("name", "")
            if way != NOT_SHARED:  # explained by its tag, which every task carries
                self.ledger.remember(token, name, user, cls, str(mode), d, now, "")
            self.ledger.decisions[
                "hold:job array" if reply["action"] == "hold" else "exclusive:job array"
            ] += 1
            log.info("placement %s (%s, user %s, class %s): %s", token, name, user, cls, d.reason)

        return reply, record

    def _deferred(
        self, fields: dict[str, str], cls: str, mode: Mode, now: float
    ) -> tuple[dict[str, str], Callable[[], None]]:
        """A job that may not start yet (a dependency, a begin time ahead, as the Lua hook
        saw it) is held without a GPU request and placed once Slurm lets it start
        (agent/held.py): a place kept for it on a shared GPU meanwhile would keep partners
        away for as long as it waits. Where no shared GPU takes it then, it gets its own
        GPU request, or waits held for one where every GPU is shared."""
        token = _new_token()
        d = Decision("exclusive", HELD_TO_START)
        reply = _hold_reply(
            d.placement(token, cls, mode, held=ANY_SHARED, model=fields.get("gpu_type", "")),
            f"colo: {HELD_TO_START}",
            "slurm-colo: held until its dependency or begin time lets it start; "
            "the placement agent then releases it onto a GPU",
        )

        def record() -> None:
            user, name = fields.get("user", ""), fields.get("name", "")
            self.ledger.remember(token, name, user, cls, str(mode), d, now, "")
            self.ledger.decisions["hold:waits to start"] += 1
            log.info("placement %s (%s, user %s, class %s): %s", token, name, user, cls, d.reason)

        return reply, record

    def _request(self, token: str, key: tuple[Any, ...]) -> JobRequest:
        uid, user, cls, mode, partition = key[:5]
        return JobRequest(key=token, user=user, uid=uid, cls=cls, mode=mode, partition=partition)

    def _place(self, token: str, key: tuple[Any, ...], fields: dict[str, str]) -> BookDecision:
        """The placement, each GPU judged with its own model's score set
        (:func:`~slurm_colo.placement.by_model.place_by_model`: one ``place`` call on the
        whole view when the site has one set)."""
        view = self.occupancy.candidate_view(fields)
        # the kept parts belong to the whole view; a filtered one is split afresh
        cache = self._model_views if view is self.view else None
        return place_by_model(self._request(token, key), view, self.book, self.cfg.placement, cache)

    def _record(
        self,
        token: str,
        key: tuple[Any, ...],
        fields: dict[str, str],
        bd: BookDecision,
        now: float,
        held: bool = False,
    ) -> None:
        req = self._request(token, key)
        self.live.placed(req.cls)
        led = self.ledger
        d = bd.decision
        led.remember(
            token,
            fields.get("name", ""),
            req.user,
            req.cls,
            req.mode,
            d,
            now,
            bd.scores.id,
            scores_model=bd.model if self.book.by_model else None,
        )
        log.info(
            "placement %s (%s, user %s, class %s): %s",
            token,
            fields.get("name"),
            req.user,
            req.cls,
            d.reason,
        )
        if held:
            led.decisions["hold:no partner now"] += 1
        elif not d.shared:
            led.decisions["exclusive:" + d.reason.split(":")[0]] += 1
        else:
            led.add(token, req, d, now, self.view)
            led.decisions["share:" + ("partner" if d.partners else "open")] += 1
        # the next job of a stream (job arrays, sweeps) usually asks the same question
        nxt = _new_token()
        self._prepared = (
            key,
            self.view,
            self.view.version,
            self.book,
            nxt,
            self._place(nxt, key, fields),
        )

    def _queue_head(self, now: float, gres_type: str | None = None) -> float | None:
        """:func:`~slurm_colo.placement.held.queue_head` among the held jobs that may want a
        GPU of shard type ``gres_type`` (None: any shared GPU), looked for only once a held
        job has waited ``placement.reserve_after_h`` (before that :func:`waits_behind` holds
        nobody up): the answer path pays nothing for it until then."""
        cfg, jobs = self.cfg.placement, self.holds.jobs
        if not jobs or cfg.bypass_h <= 0 or cfg.reserve_after_h <= 0:
            return None
        if now - min(h.since for h in jobs.values()) < cfg.reserve_after_h * 3600.0:
            return None
        waiting = self.holds.waiting_for_shared()
        held = waiting if gres_type is None else wanting(gres_type, waiting)
        return queue_head(held, self.view)
