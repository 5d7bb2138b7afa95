"""Per-job NVML sampler: ``python -m slurm_colo.node.sampler JOB_ID``.

Started detached by the Prolog, stopped with SIGTERM by the Epilog. Reads the job's state
file for its GPUs, samples each interval (``node.sampler_interval_s``) through the NVML
gate, and rewrites ``<run_dir>/jobs/<id>/profile.json`` atomically every few ticks and on
exit. Memory stays bounded: only streaming summaries are kept. Exits by itself when the
job's state directory disappears. Memory is bounded by design (streaming summaries, no
sample list), so it runs as long as the job.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from slurm_colo.contracts.enums import Mechanism
from slurm_colo.contracts.jobstate import JobState
from slurm_colo.errors import ProtocolError
from slurm_colo.node.gpu.nvml import NOT_SUPPORTED, Gpu, NvmlGate, open_nvml

from ..clock import WallClock
from ..config import Config, load_config
from ..fsutil import atomic_write_json
from . import jobstate, journal, procs
from .layout import NodeLayout
from .probe import Prober
from .profile_acc import ProfileAccumulator, Reading

log = logging.getLogger("slurm_colo.node.sampler")

#: write profile.json every this many seconds (and on exit)
FLUSH_EVERY_S = 10.0
_DCGM_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libdcgm.so.3",
    "/usr/lib64/libdcgm.so.3",
    "/usr/lib/aarch64-linux-gnu/libdcgm.so.3",
    "/usr/local/dcgm/lib64/libdcgm.so.3",
)


def dcgm_status() -> str:
    """``present`` when DCGM's library is installed (fields not read yet), else ``absent``."""
    return "present" if any(os.path.exists(p) for p in _DCGM_PATHS) else "absent"


class _Journals:
    """Is another job on any of our GPUs right now? Re-reads a journal only when it changed."""

    def __init__(self, layout: NodeLayout, gpus: list[int], job_id: int) -> None:
        self.paths = [layout.journal(g) for g in gpus]
        self.job_id = job_id
        self._mtimes: list[float] = [-1.0] * len(self.paths)
        self._shared = [False] * len(self.paths)

    def shared(self) -> bool:
        for i, p in enumerate(self.paths):
            try:
                m = p.stat().st_mtime_ns
            except OSError:
                m = -1
            if m != self._mtimes[i]:
                self._mtimes[i] = m
                self._shared[i] = any(s.job != self.job_id for s in journal.active(journal.read(p)))
        return any(self._shared)


class Sampler:
    def __init__(
        self,
        gate: NvmlGate,
        gpus: list[int],
        job_id: int,
        layout: NodeLayout,
        interval_s: float,
        under_mps: bool = False,
    ) -> None:
        self.gate, self.job_id, self.layout = gate, job_id, layout
        #: the job is an MPS client: NVML's SM samples are its server's, not its own
        self.under_mps = under_mps
        self.gpus: list[Gpu] = [gate.gpu(i) for i in gpus]
        #: the NVML product name of the job's first GPU ("" if NVML did not say)
        self.gpu_name = next((n for n in (g.name() for g in self.gpus[:1]) if n), "")
        self.acc = ProfileAccumulator(interval_s=interval_s)
        self.journals = _Journals(layout, gpus, job_id)
        self.not_supported: set[str] = set()
        self._job_pids: dict[int, bool] = {}
        self._since_us = 0
        self.dcgm = dcgm_status()
        #: the probe of a new shared set (set by :func:`run`)
        self.prober: Prober | None = None
        #: the last flush could not write the profile (logged once until one can)
        self.flush_failed = False
        #: steps of the node's wall clock seen while the job ran, seconds (the last few)
        self.clock_steps: list[float] = []

    def _mine(self, pid: int) -> bool:
        if pid not in self._job_pids:
            if len(self._job_pids) > 4096:
                self._job_pids.clear()
            self._job_pids[pid] = procs.job_of_pid(pid) == self.job_id
        return self._job_pids[pid]

    def read(self) -> Reading:
        sm: list[float] = []
        bw: list[float] = []
        mem: list[float] = []
        pw: list[float] = []
        clk: list[float] = []
        jm: list[float] = []
        jsm: list[float] = []
        for g in self.gpus:
            if g.lost:
                continue
            u = g.utilization()
            if u is NOT_SUPPORTED:
                self.not_supported.add("utilization")
            elif isinstance(u, tuple):
                sm.append(u[0])
                bw.append(u[1])
            m = g.memory()
            if m is not None:
                mem.append(m[0])
            for name, v, dest in (("power", g.power_w(), pw), ("clocks", g.sm_clock_mhz(), clk)):
                if v is NOT_SUPPORTED:
                    self.not_supported.add(name)
                elif isinstance(v, (int, float)):
                    dest.append(float(v))
            ps = g.processes()
            mine: list[int] = []
            if ps is not None:
                mine = [used for pid, used in ps.items() if self._mine(pid)]
                if mine:
                    jm.append(sum(mine))
            pu = g.process_sm_util(self._since_us)
            if pu is NOT_SUPPORTED:
                self.not_supported.add("process_utilization")
            elif isinstance(pu, dict) and pu and not self.under_mps:
                mine_sm = [v for pid, v in pu.items() if self._mine(pid)]
                # under MPS NVML lists the clients' memory but samples only the server's
                # SM use: a job whose processes are on the GPU but not in the samples has
                # no reading of its own (None), only a job with no process there has 0
                if mine_sm or not mine:
                    jsm.append(sum(mine_sm))
        self._since_us = int(time.time() * 1e6) - int(2e6)

        def avg(xs: list[float]) -> float | None:
            return sum(xs) / len(xs) if xs else None

        return Reading(
            avg(sm),
            avg(bw),
            sum(mem) if mem else None,
            avg(pw),
            avg(clk),
            sum(jm) if jm else None,
            avg(jsm),
        )

    def clock_stepped(self, step: float) -> None:
        """The node's wall clock stepped by ``step`` seconds (slurm_colo/clock.py): noted in
        the summary, so the job's record leaves out its progress rates, whose points lie
        on either side of the step (record_build.py); the probe gives its window up."""
        self.clock_steps = [*self.clock_steps[-9:], round(step, 1)]
        log.warning(
            "job %d: the node's clock stepped %+.1f s; its progress rates are left out of "
            "its record",
            self.job_id,
            step,
        )
        if self.prober is not None:
            self.prober.clock_stepped(step)

    def tick(self, dt: float | None = None) -> None:
        self.acc.add(self.read(), self.journals.shared(), dt)

    def summary(self) -> dict[str, Any]:
        out = self.acc.summary()
        out.update(
            interval_s=self.acc.interval_s,
            nvml=self.gate.source if self.gate.available else f"unavailable: {self.gate.reason}",
            gpu_lost=[g.index for g in self.gpus if g.lost],
            not_supported=sorted(self.not_supported),
            dcgm=self.dcgm,
            gpu_name=self.gpu_name,
            errors=[e for g in self.gpus for e in g.errors][-5:],
        )
        if self.prober is not None and self.prober.result is not None:
            out["probe"] = self.prober.result
        if self.clock_steps:
            out["clock_steps_s"] = list(self.clock_steps)
        return out

    def flush(self, final: bool = False) -> None:
        """Write the summary; a write that fails (a full disk) is logged once and tried
        again at the next flush, sampling on meanwhile."""
        out = self.summary()
        out["final"] = final
        path = self.layout.job_dir(self.job_id) / "profile.json"
        jobstate.copy_profile(self.layout, self.job_id, out)  # and seen alive now
        try:
            atomic_write_json(path, out, fsync=False)
        except OSError as e:
            if not self.flush_failed:
                log.warning("job %d: cannot write %s (%s); sampling on", self.job_id, path, e)
            self.flush_failed = True
            return
        self.flush_failed = False


def run(cfg: Config, job_id: int, max_ticks: int | None = None) -> int:
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    state_path = lay.job_dir(job_id) / "state.json"
    try:
        st = jobstate.read_state(lay, job_id) or JobState(job_id)
    except ProtocolError:
        st = JobState(job_id)  # no GPUs to sample; it ends once its Epilog sets the job aside
    gpus = st.gpus
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    gate = open_nvml(cfg.node.nvml_backend, cfg.node.nvml_scenario, cfg.node.run_dir)
    # as the Prolog decides whether the job gets the MPS environment (all its GPUs ok)
    outs = [o.state for o in st.mps.values()]
    under_mps = st.mechanism == Mechanism.MPS and bool(outs) and all(o == "ok" for o in outs)
    s = Sampler(gate, gpus, job_id, lay, cfg.node.sampler_interval_s, under_mps)
    shared = st.placement is not None and st.placement.shared
    s.prober = (
        Prober(cfg, lay, job_id, gpus, st.placement.probe_s)
        if shared and st.placement is not None
        else None
    )
    cap = max_ticks or 0
    clock = WallClock()  # a step of it spoils the job's rates (Sampler.clock_stepped)
    ticks, last_flush = 0, time.monotonic()
    interval = max(0.01, cfg.node.sampler_interval_s)
    nxt = time.monotonic()
    try:
        while not stop.is_set():
            s.tick()
            ticks += 1
            now, step = clock.read()
            if step:
                s.clock_stepped(step)
                s.flush()  # in the profile at once (and the probe's end, if it waited)
            elif s.prober is not None and s.prober.pending and s.prober.maybe(now):
                s.flush()  # the verdict in the profile at once
            # the first summary right away: proof of life, and a profile for short jobs
            if ticks == 1 or time.monotonic() - last_flush >= FLUSH_EVERY_S:
                if not state_path.exists():
                    return 0  # the Epilog has finished with this job
                s.flush()
                last_flush = time.monotonic()
            if cap and ticks >= cap:
                break
            nxt += interval
            stop.wait(max(0.0, nxt - time.monotonic()))
        if state_path.parent.exists():
            s.flush(final=True)
    finally:
        gate.close()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m slurm_colo.node.sampler JOB_ID", file=sys.stderr)
        return 2
    from slurm_colo.logsetup import setup_logging

    setup_logging("sampler")  # detached: syslog is where an admin looks
    try:
        cfg = load_config()
    except Exception as e:
        print(f"slurm-colo sampler: {e}", file=sys.stderr)
        return 1
    return run(cfg, int(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
