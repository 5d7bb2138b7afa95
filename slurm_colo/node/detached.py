"""The processes the node's hooks start and leave running: the job's NVML sampler, and the
Epilog's one detached helper (:mod:`.handoff`) that stops the MPS daemon of a GPU the last
job left and ingests the spool. Each starts at lower CPU priority in its own session, so
neither the hook that started it nor the job waits for it."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from slurm_colo.node.gpu.mps_daemon import LazyNvml, gpu_mps, lock_wait
from slurm_colo.node.gpu.nvml import Gpu

from ..config import Config
from ..fsutil import locked
from . import jobstate, journal, procs
from .layout import NodeLayout

log = logging.getLogger("slurm_colo.node")


@dataclass
class Handoff:
    """What an Epilog leaves to one detached helper (:mod:`.handoff`) once the records are
    spooled: stop the MPS daemons of the GPUs the last job left, then ingest the spool.
    One process for all of it instead of one per GPU plus one for the ingest."""

    stop_gpus: list[int] = field(default_factory=list)
    ingest: bool = False

    def args(self) -> list[str]:
        out = [a for g in self.stop_gpus for a in ("--stop", str(g))]
        return out + (["--ingest"] if self.ingest else [])


def start_sampler(cfg: Config, job_id: int) -> int | None:
    """Start the job's NVML sampler as a detached process; its PID (None on failure)."""
    try:
        return _detached(cfg, "slurm_colo.node.sampler", str(job_id))
    except OSError as e:
        log.warning("job %d: sampler not started: %s", job_id, e)
        return None


def stop_sampler(lay: NodeLayout, job_id: int, pid: int | None, wait_s: float = 0.25) -> bool:
    """SIGTERM the sampler and wait (briefly) for its final summary in profile.json.

    Returns True when the final summary is there; otherwise the last periodic one is used.
    """
    from ..fsutil import read_json

    if not pid or not procs.alive(pid):
        return False
    if not procs.is_sampler_of(pid, job_id):
        log.warning("job %d: pid %d is not its sampler any more; not signalled", job_id, pid)
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    path = lay.job_dir(job_id) / "profile.json"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if (read_json(path) or {}).get("final"):
            return True
        if not procs.alive(pid):
            return bool((read_json(path) or {}).get("final"))
        time.sleep(0.002)
    return False


def stop_if_idle(
    cfg: Config,
    lay: NodeLayout,
    g: int,
    opener: Callable[[int], Gpu],
    detach: bool = True,
    handoff: Handoff | None = None,
) -> None:
    """The last job left GPU ``g``: stop its MPS daemon and compact the journal.

    ``detach``: the stop (quit, process check, compute mode back to DEFAULT through NVML)
    runs in a detached process that takes the GPU lock, so the Epilog does not wait for it;
    a Prolog arriving meanwhile waits on the lock and then finds the GPU clean. With
    ``handoff`` the GPU is only noted there; :func:`start_handoff` starts that process.
    """
    if lay.gpu_files_problem(g) is not None:  # close_stays said so
        return
    try:
        with locked(lay.gpu_lock(g), timeout_s=lock_wait(cfg)):
            # compact always (a GPU that is never idle would grow its journal forever);
            # a no-op while the journal is small and jobs are on the GPU
            journal.compact(lay.journal(g), set(jobstate.job_ids(lay)))
            if journal.active(journal.read(lay.journal(g))):
                return
            gm = gpu_mps(cfg, g, opener)
            if not gm.state():
                return
            if not detach:
                gm.stop()
                return
    except TimeoutError:
        log.warning(
            "GPU %d: lock busy; MPS stop left to the next hook or 'slurm-colo node cleanup'", g
        )
        return
    if handoff is not None:
        if g not in handoff.stop_gpus:
            handoff.stop_gpus.append(g)
        return
    try:
        _detached(cfg, "slurm_colo.node.gpu.mps_daemon", "stop", str(g))
    except OSError as e:
        log.warning("GPU %d: cannot start the MPS stop helper (%s); stopping inline", g, e)
        _stop_inline(cfg, lay, g, opener)


def _stop_inline(cfg: Config, lay: NodeLayout, g: int, opener: Callable[[int], Gpu]) -> None:
    try:
        with locked(lay.gpu_lock(g), timeout_s=lock_wait(cfg)):
            if not journal.active(journal.read(lay.journal(g))):
                gpu_mps(cfg, g, opener).stop()
    except TimeoutError:
        log.warning(
            "GPU %d: lock busy; MPS stop left to the next hook or 'slurm-colo node cleanup'", g
        )


def start_handoff(cfg: Config, handoff: Handoff) -> int | None:
    """Start the detached helper for ``handoff`` (nothing to do: None). If it cannot be
    started, the MPS stops run inline and the ingest is left to the next Epilog or
    ``slurm-colo spool ingest`` (the records are in the spool already)."""
    if not handoff.stop_gpus and not handoff.ingest:
        return None
    try:
        return _detached(cfg, "slurm_colo.node.handoff", *handoff.args())
    except OSError as e:
        log.warning("cannot start the detached helper (%s): MPS stop inline, ingest later", e)
        lay = NodeLayout.of_config(cfg)
        opener = LazyNvml(cfg)
        for g in handoff.stop_gpus:
            _stop_inline(cfg, lay, g, opener)
        return None


def _which(name: str) -> str | None:
    """``shutil.which`` without importing shutil (hook start-up time)."""
    for d in os.get_exec_path():
        path = os.path.join(d, name)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def _detached(cfg: Config, module: str, *args: str) -> int:
    """Start ``python -m module args`` in its own session at lower CPU priority (it must
    not slow the hook that started it or the job), detached from our stdio."""
    nice = _which("nice")
    prefix = [nice, "-n", "10"] if nice else []  # nice execs python: same PID
    p = subprocess.Popen(
        [*prefix, sys.executable, "-m", module, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env=_child_env(cfg),
    )
    return p.pid


def _child_env(cfg: Config) -> dict[str, str]:
    env = dict(os.environ)
    if os.path.exists(cfg.source):
        env["SLURM_COLO_CONFIG"] = cfg.source
    return env
