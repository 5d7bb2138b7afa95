"""Placement: pure functions of (job, cluster view, scores, config). No I/O here."""

from .policy import explore_draw, occupant_for, place, plan
from .view import ClusterView, Decision, GpuView, JobRequest, Occupant

__all__ = [
    "ClusterView",
    "Decision",
    "GpuView",
    "JobRequest",
    "Occupant",
    "explore_draw",
    "occupant_for",
    "place",
    "plan",
]
