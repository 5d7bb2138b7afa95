"""Placement: pure functions of (job, cluster view, scores, config). No I/O here."""

from .policy import place
from .view import ClusterView, Decision, GpuView, JobRequest, Occupant

__all__ = ["place", "ClusterView", "Decision", "GpuView", "JobRequest", "Occupant"]
