"""One MPS control daemon per GPU: start on demand, health-check, recover, stop.

All functions here are called with the GPU's lock held (see :func:`fsutil.locked`), so two
Prologs landing on one GPU at the same moment cannot both start a daemon.

Outcomes of :func:`ensure_daemon` (never raises for a problem it can handle):

- ``ok``       the daemon answers; the job may use MPS (``pipe_dir``/``log_dir`` set).
- ``refused``  another user's jobs hold this GPU's MPS daemon: MPS serves one UID at a
               time, so this job runs without MPS and is told so.
- ``broken``   the daemon cannot be (re)started or keeps crashing (restart loop); the GPU
               is set back to DEFAULT compute mode so the job still runs, time-sliced.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_colo.errors import MPSError
from slurm_colo.fsutil import atomic_write_json, chown_if_root, read_json
from slurm_colo.node import journal, procs
from slurm_colo.node.gpu.mps import (
    MpsControl,
    MpsHung,
    control_argv,
    log_line_time,
    parse_fault_lines,
)
from slurm_colo.node.gpu.nvml import COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS, Gpu, NullGpu
from slurm_colo.node.layout import NodeLayout

if TYPE_CHECKING:
    from slurm_colo.config import Config

log = logging.getLogger("slurm_colo.node.gpu.mps_daemon")

#: this many daemon crashes within CRASH_WINDOW_S marks the GPU's MPS broken (restart loop)
MAX_CRASHES = 3
CRASH_WINDOW_S = 600.0


#: the fields of a saved daemon state and the types they must have
_STATE_TYPES: dict[str, tuple[type, ...]] = {
    "uuid": (str,),
    "device": (str,),
    "pipe_dir": (str,),
    "log_dir": (str,),
    "uid": (int,),
    "pid": (int, type(None)),
    "started": (int, float),
    "boot_id": (str,),
    "compute_mode_set": (bool,),
}


def state_of(raw: object) -> dict:
    """A saved daemon state as read (``mps.json``), or {} when it is not one: a damaged
    file then counts as no daemon known, as a missing or unparsable one does, instead of
    failing the hook that reads it."""
    if not isinstance(raw, dict):
        return {}
    for key, types in _STATE_TYPES.items():
        v = raw.get(key)
        if key in raw and (not isinstance(v, types) or (isinstance(v, bool) and bool not in types)):
            return {}
    return raw


def saved_state(path: Path) -> dict:
    """The daemon state saved at ``path`` (``mps.json``); {} when missing or damaged."""
    return state_of(read_json(path))


def saved_crashes(path: Path) -> list[float]:
    """The daemon crash times saved at ``path`` (``crashes.json``); a damaged file or entry
    counts as no crash remembered."""
    saved = read_json(path)
    return [
        float(t)
        for t in (saved if isinstance(saved, list) else [])
        if isinstance(t, (int, float)) and not isinstance(t, bool) and abs(t) < 1e300
    ]


@dataclass
class MpsOutcome:
    state: str  # ok | refused | broken
    message: str = ""
    pipe_dir: str = ""
    log_dir: str = ""
    log_offset: int = 0
    server_log_offset: int = 0
    events: list[str] = field(default_factory=list)
    #: False when the GPU is left unusable for a job (still in EXCLUSIVE_PROCESS compute
    #: mode after a failed reset): the Prolog then refuses the job (exit 100) instead of
    #: letting it fail on a GPU it cannot open
    gpu_usable: bool = True


@dataclass
class GpuMps:
    """The MPS side of one GPU on this node."""

    layout: NodeLayout
    index: int
    argv: tuple[str, ...]
    timeout_s: float
    #: opens the NVML view of this GPU lazily (only needed to start/stop a daemon)
    open_gpu: Callable[[int], Gpu]
    extra_env: tuple[tuple[str, str], ...] = ()
    #: False leaves the GPU's compute mode as it is (``slurm-colo node selftest
    #: --keep-compute-mode``); the hooks always set it
    set_compute_mode: bool = True

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict:
        """The GPU's daemon state; {} (no daemon known) when missing or damaged."""
        return saved_state(self.layout.mps_state(self.index))

    def _save(self, st: dict) -> None:
        atomic_write_json(self.layout.mps_state(self.index), st, fsync=False)

    def control(self, st: dict) -> MpsControl:
        return MpsControl(
            tuple(self.argv),
            Path(st["pipe_dir"]),
            Path(st["log_dir"]),
            st.get("device", str(self.index)),
            self.timeout_s,
            self.extra_env,
        )

    def _crashes(self, now: float) -> list[float]:
        return [
            t for t in saved_crashes(self.layout.crashes(self.index)) if now - t < CRASH_WINDOW_S
        ]

    def _note_crash(self, kind: str, detail: str) -> None:
        now = time.time()
        crashes = self._crashes(now) + [now]
        atomic_write_json(self.layout.crashes(self.index), crashes, fsync=False)
        journal.append(
            self.layout.journal(self.index),
            {"ev": "fault", "kind": kind, "detail": detail, "t": now},
        )

    # -- health --------------------------------------------------------------------------
    def probe(self, st: dict) -> str:
        """``ok``, ``dead`` or ``hung`` for the recorded daemon."""
        ctl = self.control(st)
        if not procs.alive(st.get("pid") or ctl.daemon_pid()):
            return "dead"
        try:
            ctl.server_list()
            return "ok"
        except MpsHung:
            return "hung"
        except MPSError:
            return "dead"

    # -- start / stop --------------------------------------------------------------------
    def ensure_daemon(self, job_id: int, uid: int) -> MpsOutcome:
        st = self.state()
        events = journal.read(self.layout.journal(self.index))
        others = [s for s in journal.active(events) if s.job != job_id]
        if st.get("pid"):
            if st.get("uid") != uid and others:
                return MpsOutcome(
                    "refused",
                    f"GPU {self.index} runs MPS for uid {st.get('uid')}; "
                    f"MPS serves one user at a time, so job {job_id} runs "
                    "without MPS",
                )
            health = self.probe(st) if st.get("uid") == uid else "other-user"
            if health == "ok":
                ctl = self.control(st)
                return MpsOutcome(
                    "ok",
                    "",
                    st["pipe_dir"],
                    st["log_dir"],
                    ctl.log_size(),
                    ctl.log_size("server.log"),
                )
            if health in ("dead", "hung"):
                self._note_crash(
                    f"daemon_{health}", f"MPS daemon {st.get('pid')} on GPU {self.index} {health}"
                )
            log.warning(
                "GPU %d: MPS daemon %s is %s; cleaning up", self.index, st.get("pid"), health
            )
            self.stop(st, reason=health)
        else:
            self.clean_stale()
        now = time.time()
        if len(self._crashes(now)) >= MAX_CRASHES:
            usable = self._set_mode(COMPUTE_DEFAULT) or not self._exclusive()
            return MpsOutcome(
                "broken",
                f"MPS on GPU {self.index} crashed {MAX_CRASHES} times "
                f"in {CRASH_WINDOW_S / 60:.0f} min (restart loop); job {job_id} "
                "runs time-sliced without MPS; run 'slurm-colo node cleanup'",
                gpu_usable=usable,
            )
        return self._start(uid)

    def _start(self, uid: int) -> MpsOutcome:
        import shutil

        gpu = self.open_gpu(self.index)
        if isinstance(gpu, NullGpu) and gpu.absent:  # e.g. gres.conf naming a GPU not here
            return MpsOutcome(
                "refused", f"GPU {self.index}: {gpu.errors[0]}; no MPS daemon started"
            )
        uuid = gpu.uuid() or f"gpu{self.index}"
        root = self.layout.mps_root(uuid)
        pipe, logd = root / "pipe", root / "log"
        try:
            for d in (pipe, logd):
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir(parents=True, mode=0o700)
            # the pipe directory is the job user's (their server creates its pipes there);
            # the log directory stays root's, so a user cannot redirect root's log writes
            # through a symlink; the user's server may append to its own server.log
            logd.chmod(0o755)
            server_log = logd / "server.log"
            server_log.touch(mode=0o600)
            chown_if_root(server_log, uid)
            root.chmod(0o711)
        except OSError as e:  # a full disk, or a file where the directory belongs
            return MpsOutcome(
                "broken",
                f"GPU {self.index}: cannot make the MPS directories in {root} ({e}); "
                "no MPS daemon started",
            )
        device = uuid if uuid.startswith(("GPU-", "MIG-")) else str(self.index)
        st = {
            "uuid": uuid,
            "device": device,
            "pipe_dir": str(pipe),
            "log_dir": str(logd),
            "uid": uid,
            "pid": None,
            "started": time.time(),
            "boot_id": procs.boot_id(),
        }
        mode_set = self._set_mode(COMPUTE_EXCLUSIVE_PROCESS, gpu)
        st["compute_mode_set"] = mode_set
        try:
            self._save(st)  # saved before start: a crash mid-start still gets cleaned up
        except OSError as e:  # a full disk: no daemon without its state file
            if mode_set:
                self._set_mode(COMPUTE_DEFAULT, gpu)
            return MpsOutcome(
                "broken",
                f"GPU {self.index}: cannot write {self.layout.mps_state(self.index)} ({e}); "
                "no MPS daemon started",
                gpu_usable=not self._exclusive(),
            )
        ctl = self.control(st)
        try:
            ctl.start()
            st["pid"] = ctl.daemon_pid()  # read while the directory is still root's
            self._save(st)
            chown_if_root(pipe, uid)
            ctl.start_server(uid)
        except MPSError as e:
            self._note_crash("daemon_start_failed", str(e))
            self.stop(st, reason="start failed")
            return MpsOutcome(
                "broken",
                f"MPS daemon for GPU {self.index} did not start: {e}; "
                "the job runs time-sliced without MPS",
                gpu_usable=not self._exclusive(),
            )
        log.info("GPU %d: started MPS daemon %s for uid %d (%s)", self.index, st["pid"], uid, pipe)
        return MpsOutcome(
            "ok", "", str(pipe), str(logd), ctl.log_size(), ctl.log_size("server.log")
        )

    def stop(self, st: dict | None = None, reason: str = "last job left") -> list[str]:
        """Quit the daemon, make sure no MPS process of this GPU is left, reset the GPU.

        Returns problems found (empty when the shutdown was clean)."""
        import shutil

        st = st if st is not None else self.state()
        problems: list[str] = []
        if st.get("pipe_dir"):
            ctl = self.control(st)
            if reason != "hung" and procs.alive(st.get("pid") or ctl.daemon_pid()):
                try:
                    ctl.quit()
                except MPSError as e:
                    problems.append(f"quit failed: {e}")
                    if isinstance(e, MpsHung):
                        self._note_crash(
                            "daemon_hung",
                            f"MPS daemon {st.get('pid')} on GPU {self.index} hung at quit",
                        )
            deadline = time.monotonic() + 1.0
            left = procs.mps_processes(st["pipe_dir"])
            while left and time.monotonic() < deadline:
                time.sleep(0.02)
                left = procs.mps_processes(st["pipe_dir"])
            if left:
                problems.append(f"MPS processes left after quit: {left}; killed")
                still = procs.kill_all(left)
                if still:
                    problems.append(f"could not kill {still}")
            shutil.rmtree(st["pipe_dir"], ignore_errors=True)
        if st.get("compute_mode_set", True):
            self._set_mode(COMPUTE_DEFAULT)
        self.layout.mps_state(self.index).unlink(missing_ok=True)
        for p in problems:
            log.warning("GPU %d (%s): %s", self.index, reason, p)
        return problems

    def clean_stale(self) -> list[int]:
        """Kill MPS processes of this GPU left from before (crashed node/daemon)."""
        import shutil

        killed: list[int] = []
        mps_dir = self.layout.run_dir / "mps"
        if not mps_dir.is_dir():
            return killed
        uuid = None
        for root in mps_dir.iterdir():
            pipe = root / "pipe"
            if not pipe.is_dir():
                continue
            if uuid is None:
                uuid = self.open_gpu(self.index).uuid() or f"gpu{self.index}"
            if root.name != uuid:
                continue
            left = procs.mps_processes(str(pipe))
            if left:
                log.warning("GPU %d: killing stale MPS processes %s", self.index, left)
                procs.kill_all(left)
                killed += left
            shutil.rmtree(pipe, ignore_errors=True)
        return killed

    def _exclusive(self) -> bool:
        """True when NVML says the GPU is (still) in EXCLUSIVE_PROCESS compute mode."""
        return self.open_gpu(self.index).compute_mode() == COMPUTE_EXCLUSIVE_PROCESS

    def _set_mode(self, mode: int, gpu: Gpu | None = None) -> bool:
        if not self.set_compute_mode:
            return True
        g = gpu or self.open_gpu(self.index)
        ok = g.set_compute_mode(mode)
        if not ok:
            log.warning(
                "GPU %d: could not set compute mode %d (%s)",
                self.index,
                mode,
                "; ".join(g.errors[-1:]) or "no NVML",
            )
        return ok

    # -- faults --------------------------------------------------------------------------
    def scan_faults(
        self, log_offset: int, server_log_offset: int = 0, query_servers: bool = False
    ) -> list[dict]:
        """Fault events since the offsets in control.log and server.log, a dead daemon,
        and (``query_servers``, used when the job failed) servers in FAULT state.

        New ones are appended to the GPU journal once (deduplicated by their text among
        this daemon's), so every job that shared the GPU at that moment is flagged,
        whichever Epilog runs first.
        """
        st = self.state()
        found: list[dict] = []
        if st.get("pipe_dir"):
            ctl = self.control(st)
            lines = parse_fault_lines(ctl.log_text(log_offset)) + parse_fault_lines(
                ctl.log_text(server_log_offset, "server.log")
            )
            for line in lines:
                ev: dict[str, Any] = {"ev": "fault", "kind": "client_fatal", "detail": line}
                t = log_line_time(line)  # when it happened, not when we noticed
                if t is not None:
                    ev["t"] = t
                found.append(ev)
            # liveness only (no control call): a hang is caught by the next Prolog's probe
            # or by the timed-out quit when the daemon is stopped
            if not procs.alive(st.get("pid") or ctl.daemon_pid()):
                found.append(
                    {
                        "ev": "fault",
                        "kind": "daemon_dead",
                        "detail": f"MPS daemon {st.get('pid')} on GPU {self.index} dead",
                    }
                )
            elif query_servers:
                try:  # two control calls: the list, then every server's status at once
                    for spid, status in ctl.server_statuses(ctl.server_list()).items():
                        if status == "FAULT":
                            found.append(
                                {
                                    "ev": "fault",
                                    "kind": "client_fatal",
                                    "detail": f"MPS server {spid} on GPU {self.index} "
                                    "in FAULT state",
                                }
                            )
                except MPSError:
                    pass  # a hung daemon is dealt with by the next Prolog's probe
        # this daemon's faults only: the journal keeps an idle GPU's faults of the last day,
        # and a later daemon's fault may read the same
        since = float(st.get("started") or 0.0) - 60
        events = journal.read(self.layout.journal(self.index))
        known = {e.get("detail") for e in journal.faults(events, since, math.inf)}
        for ev in found:
            if ev["detail"] not in known:
                journal.append(self.layout.journal(self.index), dict(ev))
                known.add(ev["detail"])
        return found


def lock_wait(cfg: Config) -> float:
    """How long a hook waits for a GPU's lock: a daemon start or stop by another hook
    can take a few control-call timeouts."""
    return max(5.0, 3 * cfg.node.mps_timeout_s)


class LazyNvml:
    """Opens NVML only when a daemon must be started/stopped (keeps hooks fast)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.gate: Any = None

    def __call__(self, index: int) -> Gpu:
        if self.gate is None:
            from slurm_colo.node.gpu.nvml import open_nvml

            try:
                self.gate = open_nvml(
                    self.cfg.node.nvml_backend, self.cfg.node.nvml_scenario, self.cfg.node.run_dir
                )
            except Exception as e:
                log.warning("NVML unavailable: %s", e)
                return NullGpu(index, str(e))
        return self.gate.gpu(index)


_warned: set[str] = set()


def gpu_mps(cfg: Config, index: int, open_gpu: Callable[[int], Gpu] | None = None) -> GpuMps:
    """The daemon of GPU ``index`` as the node's configuration says to run it."""
    if cfg.node.mps_backend == "emulator" and "emu" not in _warned:
        _warned.add("emu")
        log.warning(
            "MPS emulator backend in use (%s): no real MPS on this node", cfg.node.mps_control
        )
    return GpuMps(
        NodeLayout.of_config(cfg),
        index,
        tuple(control_argv(cfg.node.mps_backend, cfg.node.mps_control)),
        cfg.node.mps_timeout_s,
        open_gpu or LazyNvml(cfg),
    )


def stop_if_idle(cfg: Config, g: int) -> list[str]:
    """Stop GPU ``g``'s daemon if no job uses it any more, under the GPU lock (run by the
    detached helper the Epilog starts). Returns the problems of the shutdown (empty when
    clean or when there was nothing to stop: a new job arrived first and reuses the daemon,
    or it is already stopped). TimeoutError when the lock cannot be had."""
    from slurm_colo.fsutil import locked

    gm = gpu_mps(cfg, g)
    problem = gm.layout.gpu_files_problem(g)
    if problem is not None:
        log.warning("GPU %d: %s; MPS stop left to 'slurm-colo node cleanup'", g, problem)
        return [problem]
    with locked(gm.layout.gpu_lock(g), timeout_s=lock_wait(cfg)):
        if journal.active(journal.read(gm.layout.journal(g))) or not gm.state():
            return []
        return gm.stop()


def main(argv: list[str]) -> int:
    """``python -m slurm_colo.node.gpu.mps_daemon stop GPU``: :func:`stop_if_idle` by hand
    (the Epilog's helper is :mod:`.handoff`, which also ingests)."""
    import sys

    from slurm_colo.config import load_config

    if len(argv) != 2 or argv[0] != "stop" or not argv[1].isdigit():
        print("usage: python -m slurm_colo.node.gpu.mps_daemon stop GPU_INDEX", file=sys.stderr)
        return 2
    from slurm_colo.logsetup import setup_logging

    setup_logging("mps-stop")  # detached: syslog is where an admin looks
    return 1 if stop_if_idle(load_config(), int(argv[1])) else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
