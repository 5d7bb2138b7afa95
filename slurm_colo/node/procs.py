"""Process helpers on Linux ``/proc``: liveness, MPS process scans, job liveness."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

#: ``comm`` of both nvidia-cuda-mps-control and nvidia-cuda-mps-server (15-char limit)
MPS_COMM_PREFIX = "nvidia-cuda-mps"


def alive(pid: int | None) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        return stat.rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def mps_processes(pipe_dir: str) -> list[int]:
    """PIDs of MPS control daemons and servers whose pipe directory is ``pipe_dir``.

    Matches on the process name and on ``CUDA_MPS_PIPE_DIRECTORY`` in its environment
    (readable by root, or by the owner), so daemons of other GPUs are left alone.
    """
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if not comm.startswith(MPS_COMM_PREFIX) or not alive(pid):
            continue
        if _environ(pid).get("CUDA_MPS_PIPE_DIRECTORY", "").rstrip("/") == pipe_dir.rstrip("/"):
            out.append(pid)
    return sorted(out)


def kill_all(pids: list[int], grace_s: float = 1.0) -> list[int]:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL. Returns the PIDs still alive after."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.01)
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.01)
    return [p for p in pids if alive(p)]


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


#: where Slurm's cgroup plugins put job cgroups (v2, then v1 layouts): directories job_<id>
_CGROUP_ROOTS = (
    "/sys/fs/cgroup/system.slice/slurmstepd.scope",
    "/sys/fs/cgroup/memory/slurm/uid_*",
    "/sys/fs/cgroup/cpuset/slurm/uid_*",
)


def job_alive(
    job_id: int,
    prolog_boot_id: str,
    since: float | None = None,
    roots: tuple[str, ...] = _CGROUP_ROOTS,
) -> bool:
    """Best guess whether a job still runs on this node (to clean up after crashes).

    A job from before the last reboot is dead. Otherwise the job is dead only when Slurm's
    cgroup tree is evidently in use here (it holds ``job_*`` directories of other jobs),
    the job has none, and the job started more than a minute ago (its cgroup may not exist
    yet right after the Prolog). In every other case we cannot tell, and say alive: a
    wrong "dead" would end a running job's record early.
    """
    if prolog_boot_id and prolog_boot_id != boot_id():
        return False
    if since is not None and time.time() - since < 60:
        return True
    import glob

    jobs = [p for r in roots for p in glob.glob(f"{r}/job_*")]
    if not jobs:
        return True
    return any(os.path.basename(p) == f"job_{job_id}" for p in jobs)


def job_of_pid(pid: int) -> int | None:
    """The Slurm job a process belongs to, from its cgroup path or environment."""
    try:
        cg = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        cg = ""
    for part in cg.replace("\n", "/").split("/"):
        if part.startswith("job_") and part[4:].isdigit():
            return int(part[4:])
    env = _environ(pid).get("SLURM_JOB_ID", "")
    return int(env) if env.isdigit() else None
