"""The simulator's mirror of the node's probe (:class:`slurm_colo.node.probe.Prober`), for
:class:`~.ours.PolicyScheduler`: a job started on a shared GPU is probed ``probe_s`` later.
If the set changes first, its probe is dropped (the engine's version check) and:

* a job *arriving* leaves the set to that job's own probe; the overtaken job may still
  look again within two probe windows of that arrival;
* a job *leaving* (undone by its probe, or ended) that leaves two or more behind has the
  newest of them, if its own probe has not judged it yet, judge the set left behind
  ``probe_s`` later (at most :data:`~slurm_colo.contracts.probe.PROBE_LOOKS` times) --
  else a set whose probe a third job overtook would run unjudged once that job was undone;
* a job whose probe *kept* its set judges once more the set left behind when a job leaves
  it the newest of two or more (looking at most ``PROBE_LOOKS`` times): a pair that ran
  well next to a third job may not run well once that job is gone, and no probe of its
  own ever judged it.

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
        #: jobs whose probe kept their set -> looks at a set left behind so far (one or more:
        #: the job's next verdict is its second look, and its last)
        self._kept: dict[int, int] = {}

    def _watch_start(self, jid: int, pos: int) -> None:
        """Job ``jid`` started on GPU ``pos`` (alone, or next to others)."""
        p = self.cfg.probe_s
        if not self.learn or p <= 0:
            return
        sim = self.sim
        self._kept.pop(jid, None)  # a new set: its own probe judges it
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
                self._kept.pop(m, None)
            return
        newest = max(members, key=lambda j: (sim.runs[j].seg_start, j))
        for m in members:
            if m != newest:
                self._kept.pop(m, None)  # not the newest: it stops looking again
        w = self._probing.get(newest)
        if w is None:
            self._look_again(newest)
            return
        if sim.now > w[1] or w[0] >= PROBE_LOOKS:
            del self._probing[newest]
            return
        self._probing[newest] = (w[0] + 1, math.inf)
        sim.schedule_probe(newest, self.cfg.probe_s)

    def _look_again(self, jid: int) -> None:
        """A job left ``jid``'s set, ``jid`` the newest of those left: if its probe kept the
        set it joined, it judges the set left behind ``probe_s`` later."""
        looks = self._kept.get(jid)
        if looks is None or looks >= PROBE_LOOKS:
            return
        self._kept[jid] = looks + 1
        self.sim.schedule_probe(jid, self.cfg.probe_s)

    def _watch_judged(self, jid: int, kept: bool) -> bool:
        """Job ``jid``'s probe judged its set (``kept``: and kept it); returns whether that
        was a second look, at a set left behind. A first verdict that kept the set lets the
        job judge once more a set left behind (:meth:`_look_again`); a second is its last."""
        again = self._kept.get(jid, 0) > 0
        self._watch_done(jid)
        if kept and not again:
            self._kept[jid] = 0
        return again

    def _watch_done(self, jid: int) -> None:
        """Job ``jid``'s probe judged, or the job left its GPU."""
        self._probing.pop(jid, None)
        self._kept.pop(jid, None)
