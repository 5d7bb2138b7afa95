"""Placement: pure functions of (job, cluster view, scores, config). No I/O here."""

from .policy import explore_draw, occupant_for, place, plan
from .view import ClusterView, Decision, GpuView, JobRequest, Occupant

__all__ = ["place", "plan", "occupant_for", "explore_draw", "ClusterView", "Decision",
           "GpuView", "JobRequest", "Occupant"]
