"""The simulator's mirror of the node's probe (:class:`slurm_colo.node.probe.Prober`), for
:class:`~.ours.PolicyScheduler`: a job started on a shared GPU is probed ``probe_s`` later.
If the set changes first, its probe is dropped (the engine's version check) and:

* a job *arriving* leaves the set to that job's own probe; the overtaken job may still
  look again within two probe windows of that arrival;
* a job *leaving* (undone by its probe, or ended) that leaves two or more behind has the
  newest of them, if its own probe has not judged it yet, judge the set left behind
  ``probe_s`` later (at most :data:`~slurm_colo.contracts.probe.PROBE_LOOKS` times) --
  else a set whose probe a third job overtook would run unjudged once that job was undone.

Pure bookkeeping over the engine's state.
"""

from __future__ import annotations

import math

from ..config import PlacementConfig
from ..contracts.probe import PROBE_LOOKS
from .engine import Sim


class ProbeWatch:
    """Mixed into :class:`~.ours.PolicyScheduler`: the attributes below are its."""

    sim: Sim
    cfg: PlacementConfig
    learn: bool

    def _watch_reset(self) -> None:
        #: jobs whose probe has not judged yet -> (looks again so far, until when a job
        #: leaving may still have it look again)
        self._probing: dict[int, tuple[int, float]] = {}

    def _watch_start(self, jid: int, pos: int) -> None:
        """Job ``jid`` started on GPU ``pos`` (alone, or next to others)."""
        p = self.cfg.probe_s
        if not self.learn or p <= 0:
            return
        sim = self.sim
        members = sim.gpus[pos].jobs
        for m in members:
            w = self._probing.get(m)
            if m == jid or w is None:
                continue
            if sim.now > w[1]:
                del self._probing[m]  # it looked, found itself alone, and stopped
            else:
                self._probing[m] = (w[0], sim.now + 2 * p)  # overtaken by an arrival
        if len(members) > 1:
            self._probing[jid] = (0, math.inf)
            sim.schedule_probe(jid, p)
        else:
            self._probing[jid] = (0, sim.now + p)  # alone: stops at its look unless joined

    def _watch_left(self, pos: int) -> None:
        """A job left GPU ``pos``: the newest of those left may judge the set left behind."""
        sim = self.sim
        members = sim.gpus[pos].jobs
        if len(members) < 2:
            for m in members:
                self._probing.pop(m, None)  # alone at its look: it stops
            return
        newest = max(members, key=lambda j: (sim.runs[j].seg_start, j))
        w = self._probing.get(newest)
        if w is None:
            return
        if sim.now > w[1] or w[0] >= PROBE_LOOKS:
            del self._probing[newest]
            return
        self._probing[newest] = (w[0] + 1, math.inf)
        sim.schedule_probe(newest, self.cfg.probe_s)

    def _watch_done(self, jid: int) -> None:
        """Job ``jid``'s probe judged, or the job left its GPU."""
        self._probing.pop(jid, None)
