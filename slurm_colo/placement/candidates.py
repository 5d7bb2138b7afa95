"""Small pieces of the placement policy's arithmetic that need no index: whether the
throughput path is open, the memory assumed for an unprofiled job, and the candidates one
placement looks at (:meth:`~.index.PlacementIndex.candidates`). Pure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import PlacementConfig
from .view import ClusterView


def throughput_open(view: ClusterView, cfg: PlacementConfig) -> bool:
    """Whether the throughput path is open: ``placement.min_throughput`` is set and jobs
    queue for GPUs, at least ``placement.throughput_queue`` waiting jobs per shared GPU
    (``ClusterView.queue_per_gpu``; open when not known), and the queue is not about to run
    out: shrinking as it has lately, it lasts at least ``placement.throughput_drain_h``
    hours (``ClusterView.queue_drain_h``; open when it is not shrinking or not known). A
    set that slows a member down for more total work pays while jobs wait; with a short
    queue, or one about to be gone, a job soon has a GPU of its own, and a long job slowed
    down then is the one the site's last work waits for."""
    if cfg.min_throughput <= 0:
        return False
    q = view.queue_per_gpu
    if not (cfg.throughput_queue <= 0 or q is None or q >= cfg.throughput_queue):
        return False
    d = view.queue_drain_h
    return cfg.throughput_drain_h <= 0 or d is None or d >= cfg.throughput_drain_h


def unprofiled_memory(gpu_memory_gib: float, cfg: PlacementConfig) -> float:
    """Memory assumed for a job of a class with no memory profile on a GPU of this size:
    ``placement.default_memory_share`` of it (each GPU model its own), or
    ``placement.default_memory_gib`` when the share is 0."""
    if cfg.default_memory_share > 0:
        return gpu_memory_gib * cfg.default_memory_share
    return cfg.default_memory_gib


@dataclass(slots=True)
class Candidates:
    """Result of :meth:`PlacementIndex.candidates`: positions of idle GPUs, positions of
    accepted busy GPUs (``busy``) and, aligned with ``busy``, their predictions."""

    idle: np.ndarray
    busy: np.ndarray
    delta: np.ndarray
    sd: np.ndarray
    gain: np.ndarray
    score: np.ndarray
    rate: np.ndarray
    explored: np.ndarray

    def keep(self, ok: np.ndarray) -> Candidates:
        """The same idle GPUs and only the busy ones where ``ok`` (aligned with ``busy``)."""
        return Candidates(
            idle=self.idle,
            busy=self.busy[ok],
            delta=self.delta[ok],
            sd=self.sd[ok],
            gain=self.gain[ok],
            score=self.score[ok],
            rate=self.rate[ok],
            explored=self.explored[ok],
        )

    def best(self) -> int:
        """Index into ``busy`` of the highest score (lowest position on ties), or -1."""
        if self.busy.size == 0:
            return -1
        return int(np.argmax(self.score))
