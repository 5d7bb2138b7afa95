"""Build a job's :class:`JobRecord` from its state files and the GPU journals (pure-ish:
reads files, writes nothing)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, NamedTuple

from slurm_colo.contracts.enums import Mechanism
from slurm_colo.contracts.records import CoRunner, JobRecord
from slurm_colo.gres_layout import NodeGpus

from . import journal
from .jobstate import read_ended, read_profile, read_progress, read_state
from .layout import NodeLayout

log = logging.getLogger("slurm_colo.node")


def exit_state(exit_code: int, signal: int) -> str:
    if signal:
        return "SIGNALED"
    return "COMPLETED" if exit_code == 0 else "FAILED"


#: a progress value beyond this is neither an iteration count nor a time; bounding them
#: keeps every difference and rate finite
PROGRESS_MAX = 2.0**53


def _progress_value(x: Any) -> float | None:
    """A JSON number within ±:data:`PROGRESS_MAX` as a float; None for anything else (an
    integer of 400 digits, which ``float()`` cannot take, included)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if -PROGRESS_MAX <= x <= PROGRESS_MAX else None  # NaN fails too


def progress_points(prog: dict[str, Any] | None) -> list[tuple[float, float]]:
    """The ``(time, iterations)`` points of a job's progress file, sorted by time. The file
    is written by the job: anything malformed is skipped, never an error."""
    raw = prog.get("points") if isinstance(prog, dict) else None
    out = []
    for p in raw if isinstance(raw, list) else []:
        if isinstance(p, list) and len(p) == 2:
            t, n = _progress_value(p[0]), _progress_value(p[1])
            if t is not None and n is not None:
                out.append((t, n))
    return sorted(out)


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


def progress_summary(
    prog: dict[str, Any] | None, shared: list[tuple[float, float]]
) -> dict[str, Any] | None:
    """``{"iterations", "rate", "solo_rate"}`` from the job's progress points.

    ``solo_rate`` uses only the steps between two points whose midpoint falls outside
    every shared interval (None when the job was never alone or reported too little).
    """
    if not isinstance(prog, dict):
        return None
    pts = progress_points(prog)
    iterations = _progress_value(prog.get("iterations"))
    if iterations is None:
        iterations = pts[-1][1] if pts else None
    out: dict[str, Any] = {"iterations": iterations, "rate": None, "solo_rate": None}
    if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
        out["rate"] = _finite_or_none((pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]))
        solo_it = solo_t = 0.0
        for (t0, i0), (t1, i1) in pairwise(pts):
            mid = (t0 + t1) / 2
            if not any(lo <= mid <= hi for lo, hi in shared):
                solo_it += i1 - i0
                solo_t += t1 - t0
        if solo_t > 0:
            out["solo_rate"] = _finite_or_none(solo_it / solo_t)
    return out


def _profile(p: Any) -> dict[str, Any]:
    if p is None:
        return {}
    if not isinstance(p, dict):
        return {"record_error": f"sampler summary is a {type(p).__name__}, not an object"}
    return p


class GpuIdentity(NamedTuple):
    gpu_model: str
    gres_type: str
    gpu_name: str


def gpu_identity(
    layouts: Sequence[NodeGpus], node: str, gpus: Sequence[int], profile: dict[str, Any]
) -> GpuIdentity:
    """The record's ``gpu_model`` and ``gres_type`` (from the node's ``[[gpus]]`` layout, for
    the job's first GPU) and ``gpu_name`` (the NVML product name the sampler read)."""
    ng = next((g for g in layouts if g.matches(node)), None)
    name = profile.get("gpu_name")
    return GpuIdentity(
        ng.model if ng is not None else "",
        ng.gres_type(gpus[0]) if ng is not None and gpus else "",
        name[:96] if isinstance(name, str) else "",
    )


def build_record(
    layout: NodeLayout, job_id: int, layouts: Sequence[NodeGpus] = ()
) -> JobRecord | None:
    """The record for a job whose Epilog has marked it ended; None if state is missing.
    ``layouts``: the site's GPU layouts (``Config.gpus``), for the GPU model."""
    st = read_state(layout, job_id)
    ended = read_ended(layout, job_id)
    if not st or not ended:
        return None
    start, end = st.start, float(ended["end"])
    co: dict[int, CoRunner] = {}
    shared_iv: list[tuple[float, float]] = []
    fault = False
    for gpu in st.gpus:
        events = journal.read(layout.journal(gpu))
        for stay, lo, hi in journal.overlaps(events, job_id, start, end):
            prev = co.get(stay.job)
            if prev is None:
                co[stay.job] = CoRunner(stay.job, stay.cls, stay.user, lo, hi)
            else:
                prev.start, prev.end = min(prev.start, lo), max(prev.end, hi)
        shared_iv += journal.shared_intervals(events, job_id, start, end)
        if st.mechanism == Mechanism.MPS and journal.faults(events, start, end):
            fault = True
    p = st.placement
    profile = _profile(read_profile(layout, job_id))
    progress = progress_summary(read_progress(layout, job_id), shared_iv)
    if progress is not None and profile.get("clock_steps_s"):
        # the job's points lie on either side of a step of the clock: its iterations are
        # right, no rate over them is
        log.warning(
            "job %d: the node's clock stepped while it ran (%s s); its progress rates are "
            "left out of its record",
            job_id,
            profile["clock_steps_s"],
        )
        progress = {**progress, "rate": None, "solo_rate": None}
    return JobRecord(
        job_id=job_id,
        node=st.node,
        user=st.user,
        uid=st.uid,
        cls=st.cls,
        start=start,
        end=end,
        cluster=st.cluster,
        mode=st.mode,
        gpus=list(st.gpus),
        gpu_uuids=list(st.gpu_uuids),
        shared=bool(p and p.shared),
        mechanism=st.mechanism,
        thread_pct=p.thread_pct if p else None,
        mem_limit_gib=p.mem_limit_gib if p else None,
        co_runners=sorted(co.values(), key=lambda c: (c.start, c.job_id)),
        profile=profile,
        progress=progress,
        exit_code=int(ended.get("exit_code", 0)),
        state=exit_state(int(ended.get("exit_code", 0)), int(ended.get("signal", 0))),
        mps_fault=fault,
        **gpu_identity(layouts, st.node, st.gpus, profile)._asdict(),
    )


def build_minimal_record(
    layout: NodeLayout, job_id: int, error: str, layouts: Sequence[NodeGpus] = ()
) -> JobRecord | None:
    """The record without journal, profile and progress (used when building the full one
    failed): the job is still counted, and ``profile.record_error`` says why it is thin."""
    st = read_state(layout, job_id)
    ended = read_ended(layout, job_id)
    if not st or not ended:
        return None
    code = int(ended.get("exit_code", 0))
    return JobRecord(
        job_id=job_id,
        node=st.node,
        user=st.user,
        uid=st.uid,
        cls=st.cls,
        start=st.start,
        end=float(ended["end"]),
        cluster=st.cluster,
        mode=st.mode,
        gpus=list(st.gpus),
        shared=bool(st.placement and st.placement.shared),
        mechanism=st.mechanism,
        profile={"record_error": error[:500]},
        exit_code=code,
        state=exit_state(code, int(ended.get("signal", 0))),
        **gpu_identity(layouts, st.node, st.gpus, {})._asdict(),
    )
