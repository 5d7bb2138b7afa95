"""The agent's STATUS answer: what ``slurm-colo status`` shows and the metrics endpoint
renders, read from the agent's state (:class:`.state.AgentState`). No I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..placement.candidates import throughput_open

if TYPE_CHECKING:
    from .state import AgentState


def status_report(state: AgentState, now: float) -> dict[str, Any]:
    """The GPUs and their jobs, the queue, the reservation, the score sets, the counters
    and the held jobs, as of ``now``."""
    occ, led = state.occupancy, state.ledger
    gpus = occ.gpu_rows(state.scores, now)
    for g in gpus:
        for o in g["occupants"]:
            # minutes added to the job's time limit for the time sharing cost it
            o["time_limit_added_min"] = state.credit.given_min(o["job_id"] or 0)
    return {
        "gpus": gpus,
        "pending_placements": led.pending_count(),
        # jobs waiting for a GPU at the last snapshot: the throughput path needs a queue
        "queue": {
            "waiting": occ.queue,
            "per_gpu": state.view.queue_per_gpu,
            # hours until none waits at the rate the queue has shrunk lately (None: not
            # shrinking, or too little seen yet)
            "drain_h": state.view.queue_drain_h,
            "throughput_path": throughput_open(state.view, state.cfg.placement),
        },
        "reservation": occ.reservation_row(now),
        # placement.time_limit (whether limits are raised now: slurm_changes)
        "time_limits": {"setting": str(state.cfg.placement.time_limit)},
        # why the agent changes no job in Slurm (undo, holds, re-plans, time limits)
        "slurm_changes": {"refused": state.rights.refused, "since": state.rights.since},
        "scores": {
            "id": state.scores.id,
            "created": state.scores.created,
            "error": state.live.error,
            # the GPU models with a set of their own, and files that failed to load
            "models": {
                m: {"id": t.id, "created": t.created, "error": state.live.model_errors.get(m)}
                for m, t in sorted(state.live.models.items())
            }
            | {
                m: {"id": None, "created": None, "error": e}
                for m, e in state.live.model_errors.items()
                if m not in state.live.models
            },
        },
        "decisions": dict(led.decisions),
        "probes": dict(led.probes),
        "learned_pairs": len(state.live.learned),
        "held": [
            {
                "job_id": h.job_id,
                "gres_type": h.gres_type,
                "waits_for": h.waits_for(),
                "cls": h.request.cls,
                "waiting_s": now - h.since,
                "reason": h.reason,
                # what Slurm waits for before it lets the job start at all, if anything
                "waits_to_start": state.holds.to_start.get(h.job_id),
            }
            for h in sorted(state.held.values(), key=lambda h: h.since)
        ],
        "fallbacks": dict(led.fallbacks),
        # nodes closed to placement: Slurm numbers their GPUs otherwise than the devices
        "nodes_refused": dict(occ.gres_refused),
        "snapshot_age_s": now - occ.snapshot_time if occ.snapshot_time else None,
    }
