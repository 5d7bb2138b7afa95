"""Prometheus text exposition (format 0.0.4) of an agent status snapshot. Pure: no I/O.

The agent builds the snapshot; :func:`render` turns it into the text its metrics endpoint
serves. Snapshot shape::

    {"gpus": [{"node": "gpu01", "index": 1, "gres_type": "v100_s1",
               "occupants": [{"job_id": 42, "cls": "resnet50", "user": "ana",
                              "pending": False, "thread_pct": 50}],
               "predicted_delta": 1.3, "observed_slowdown": 1.1}],
     "decisions": {"share:compatible": 12},   # "<action>:<reason_code>" -> count
     "fallbacks": {"agent_unavailable": 1},   # reason -> count
     "scores": {"id": "2026-11-22T03", "age_s": 3600.0},  # or "created": ISO time
     "requests_total": 40,
     "request_seconds": {"sum": 0.8, "count": 40},
     "place_lock_wait_seconds": {"sum": 0.1, "count": 40, "max": 0.02}}

Optional, when present: ``slots``, ``exclusive_job``, ``closed_for`` and ``available``
per GPU, ``pending_placements``, ``probes`` (verdict -> count), ``held`` (jobs held for the
agent to release: requeued by an undo, or held at submission) and ``nodes_refused`` (node
-> why the agent places nothing there).
Missing keys are treated as empty; ``None`` values produce no sample.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "slurm_colo_"

Labels = Mapping[str, object]


def escape_label(value: object) -> str:
    """Escape a label value: backslash, double quote and newline."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(v: float | bool) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    f = float(v)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    return repr(f)


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items()) + "}"


class _Family:
    def __init__(self, name: str, kind: str, help_text: str) -> None:
        self.name = PREFIX + name
        self.kind = kind
        self.help = help_text
        self.samples: list[str] = []

    def add(
        self, value: float | bool | None, labels: Labels | None = None, suffix: str = ""
    ) -> None:
        if value is None:
            return
        self.samples.append(f"{self.name}{suffix}{_labels(labels or {})} {format_value(value)}")

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {escape_help(self.help)}"
        yield f"# TYPE {self.name} {self.kind}"
        yield from self.samples


def _num(v: Any) -> float | int | None:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    return None


def _score_age(scores: Mapping[str, Any], now: float | None) -> float | None:
    """``age_s`` if given, else the age of the ISO ``created`` time at ``now`` (epoch s)."""
    age = _num(scores.get("age_s"))
    if age is not None or not scores.get("created"):
        return age
    try:
        created = datetime.fromisoformat(str(scores["created"]))
    except ValueError:
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return max(0.0, (time.time() if now is None else now) - created.timestamp())


def render(snapshot: Mapping[str, Any], now: float | None = None) -> str:
    """Render ``snapshot`` as Prometheus text exposition; ends with a newline. ``now``
    (epoch seconds, default the current time) dates a score set given only ``created``."""
    occupants = _Family(
        "gpu_occupants", "gauge", "Jobs running on a shared GPU (placed, not pending)."
    )
    pending = _Family(
        "gpu_pending_occupants",
        "gauge",
        "Jobs placed on a shared GPU by the agent but not yet started.",
    )
    occ_info = _Family(
        "gpu_occupant_thread_percent",
        "gauge",
        "MPS active thread percentage of each job on a shared GPU.",
    )
    delta = _Family(
        "gpu_predicted_delta",
        "gauge",
        "Predicted combined speedup of the jobs sharing the GPU (1 = no gain).",
    )
    slowdown = _Family(
        "gpu_observed_slowdown",
        "gauge",
        "Slowdown against running alone of the slowest job of the set on the GPU, as the "
        "set's probe measured it (no sample before that, or once the set changed).",
    )
    slots = _Family("gpu_slots", "gauge", "Jobs a shared GPU can hold (its shards).")
    exclusive = _Family(
        "gpu_exclusive", "gauge", "1 when an exclusive (gres:gpu) job holds the shared GPU, else 0."
    )
    drained = _Family(
        "gpu_drained",
        "gauge",
        "1 while the shared GPU takes no new partners because a job waiting "
        "for whole GPUs gets it next (starvation guard), else 0.",
    )
    available = _Family(
        "gpu_available",
        "gauge",
        "1 when the shared GPU's node takes placements, 0 while it is down, drained or "
        "closed by the agent (see nodes_closed).",
    )
    for gpu in snapshot.get("gpus") or ():
        gl = {
            "node": gpu.get("node", ""),
            "gpu": gpu.get("index", ""),
            "gres_type": gpu.get("gres_type", ""),
        }
        occ = list(gpu.get("occupants") or ())
        n_pending = sum(1 for o in occ if o.get("pending"))
        occupants.add(len(occ) - n_pending, gl)
        pending.add(n_pending, gl)
        for o in occ:
            job = o.get("job_id")
            occ_info.add(
                _num(o.get("thread_pct")),
                {
                    # a placement not yet seen in Slurm has no job id: its token keeps the series unique
                    **gl,
                    "job_id": o.get("key", "") if job is None else job,
                    "class": o.get("cls", ""),
                    "user": o.get("user", ""),
                    "pending": "true" if o.get("pending") else "false",
                },
            )
        slots.add(_num(gpu.get("slots")), gl)
        if "exclusive_job" in gpu:
            exclusive.add(gpu["exclusive_job"] is not None, gl)
        if "closed_for" in gpu:
            drained.add(gpu["closed_for"] is not None, gl)
        if "available" in gpu:
            available.add(bool(gpu["available"]), gl)
        delta.add(_num(gpu.get("predicted_delta")), gl)
        slowdown.add(_num(gpu.get("observed_slowdown")), gl)

    decisions = _Family(
        "decisions_total", "counter", "Placement decisions by action and reason code."
    )
    for key, count in sorted((snapshot.get("decisions") or {}).items()):
        action, _, reason = str(key).partition(":")
        decisions.add(_num(count), {"action": action, "reason": reason})

    fallbacks = _Family(
        "fallbacks_total", "counter", "Jobs that got the fallback placement, by reason."
    )
    for reason, count in sorted((snapshot.get("fallbacks") or {}).items()):
        fallbacks.add(_num(count), {"reason": reason})

    probes = _Family(
        "probes_total",
        "counter",
        "New shared sets judged after their probe: kept, undone (newest job "
        "requeued), harmful (harmful, left running) or undo_failed (Slurm refused "
        "the requeue).",
    )
    for verdict, count in sorted((snapshot.get("probes") or {}).items()):
        probes.add(_num(count), {"verdict": verdict})
    held = _Family(
        "held_jobs",
        "gauge",
        "Jobs held until a GPU fits (requeued after a harmful probe: one of their "
        "shard type; held at submission: any shared GPU).",
    )
    if "held" in snapshot:
        held.add(len(snapshot.get("held") or []))

    closed = _Family(
        "nodes_closed",
        "gauge",
        "Nodes the agent places no job on because Slurm numbers their GPUs otherwise than "
        "their devices (slurm.conf Gres= not in device index order); value 1.",
    )
    for node in sorted(snapshot.get("nodes_refused") or {}):
        closed.add(1, {"node": node})

    scores = snapshot.get("scores") or {}
    score_info = _Family("scores_info", "gauge", "The live compatibility score set (value 1).")
    score_age = _Family("scores_age_seconds", "gauge", "Age of the live score set in seconds.")
    if scores.get("id") is not None:
        score_info.add(1, {"id": scores["id"]})
    score_age.add(_score_age(scores, now))

    pending_total = _Family(
        "pending_placements", "gauge", "Placements handed out and not yet seen in Slurm."
    )
    pending_total.add(_num(snapshot.get("pending_placements")))

    requests = _Family("requests_total", "counter", "Placement requests answered by the agent.")
    requests.add(_num(snapshot.get("requests_total")))

    rs = snapshot.get("request_seconds") or {}
    duration = _Family(
        "request_duration_seconds", "summary", "Time the agent spent answering placement requests."
    )
    duration.add(_num(rs.get("sum")), suffix="_sum")
    duration.add(_num(rs.get("count")), suffix="_count")
    pw = snapshot.get("place_lock_wait_seconds") or {}
    lock_wait = _Family(
        "place_lock_wait_seconds",
        "summary",
        "Time placement requests waited for the agent's lock (a look at Slurm holds it).",
    )
    lock_wait.add(_num(pw.get("sum")), suffix="_sum")
    lock_wait.add(_num(pw.get("count")), suffix="_count")
    lock_wait_max = _Family(
        "place_lock_wait_max_seconds",
        "gauge",
        "Longest wait of one placement request for the agent's lock since the agent started.",
    )
    lock_wait_max.add(_num(pw.get("max")))

    families = [
        occupants,
        pending,
        occ_info,
        slots,
        exclusive,
        drained,
        available,
        delta,
        slowdown,
        decisions,
        fallbacks,
        probes,
        held,
        closed,
        score_info,
        score_age,
        pending_total,
        requests,
        duration,
        lock_wait,
        lock_wait_max,
    ]
    out: list[str] = []
    for fam in families:
        out.extend(fam.lines())
    return "\n".join(out) + "\n"
