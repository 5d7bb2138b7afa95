"""Process helpers on Linux ``/proc``: liveness, MPS process scans, job liveness."""

from __future__ import annotations

import functools
import os
import signal
import time
from pathlib import Path

from slurm_colo.contracts.digits import decimal

#: ``comm`` of both nvidia-cuda-mps-control and nvidia-cuda-mps-server (15-char limit)
MPS_COMM_PREFIX = "nvidia-cuda-mps"


def alive(pid: int | None) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    return pid is not None and pid > 0 and _live(pid, "/proc")


def is_sampler_of(pid: int, job_id: int, proc: str = "/proc") -> bool:
    """True if ``pid`` runs ``slurm_colo.node.sampler JOB_ID``: a saved sampler pid may
    belong to another process by now (the sampler died, the pid was reused)."""
    try:
        argv = Path(f"{proc}/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"slurm_colo.node.sampler" in argv and str(job_id).encode() in argv


def _environ(pid: int, proc: str = "/proc") -> dict[str, str]:
    try:
        raw = Path(f"{proc}/{pid}/environ").read_bytes()
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


#: where Slurm's cgroup plugins put job cgroups (v2, then v1 layouts). A job's directory is
#: ``job_<id>``, or on Slurm 26.05 and later with cgroup/v2 its SLUID (``sEKNKTV3WPV500``),
#: unless cgroup.conf has ``CgroupJobIdPaths=yes``.
_CGROUP_ROOTS = (
    "/sys/fs/cgroup/system.slice/slurmstepd.scope",
    "/sys/fs/cgroup/memory/slurm/uid_*",
    "/sys/fs/cgroup/cpuset/slurm/uid_*",
)
#: the cgroup v2 file system (the paths in ``/proc/PID/cgroup`` are relative to it)
CGROUP_FS = "/sys/fs/cgroup"
#: digits of a SLUID: Crockford's base 32 (Slurm's src/common/sluid.c)
_SLUID_DIGITS = frozenset("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
#: SLUID -> job id, once a job's slurmstepd has told (a SLUID is never reused)
_SLUID_JOBS: dict[str, int] = {}


def is_sluid(name: str) -> bool:
    """True for a SLUID as Slurm prints it: "s" and 13 digits of Crockford's base 32."""
    return len(name) == 14 and name[0] == "s" and all(c in _SLUID_DIGITS for c in name[1:])


def _job_dir_name(name: str) -> bool:
    return (name.startswith("job_") and name[4:].isdigit()) or is_sluid(name)


def stepd_job_id(pid: int | str, proc: str = "/proc") -> int | None:
    """The job id in a slurmstepd's process title (``slurmstepd: [3385.batch]``, also
    ``[3385.0 stepmgr]``, ``[3385+1.0]``); None for any other process."""
    try:
        if Path(f"{proc}/{pid}/comm").read_text().strip() != "slurmstepd":
            return None
        title = Path(f"{proc}/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, UnicodeDecodeError):
        return None
    _, bracket, rest = title.partition("[")
    digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
    return int(digits) if bracket and digits else None


def sluid_dir_job(job_dir: str, proc: str = "/proc") -> int | None:
    """The job a SLUID-named cgroup directory belongs to, from the slurmstepd processes in
    its ``step_*/slurm`` directories (a SLUID does not contain the job id); None when no
    slurmstepd is there (the job is starting or ending)."""
    name = os.path.basename(job_dir.rstrip("/"))
    if name in _SLUID_JOBS:
        return _SLUID_JOBS[name]
    import glob

    for procs_file in sorted(glob.glob(f"{job_dir}/step_*/slurm/cgroup.procs")):
        try:
            pids = Path(procs_file).read_text().split()
        except OSError:
            continue
        for pid in pids:
            job = stepd_job_id(pid, proc)
            if job is not None:
                if len(_SLUID_JOBS) > 4096:
                    _SLUID_JOBS.clear()
                _SLUID_JOBS[name] = job
                return job
    return None


def job_alive(
    job_id: int,
    prolog_boot_id: str,
    since: float | None = None,
    roots: tuple[str, ...] = _CGROUP_ROOTS,
    proc: str = "/proc",
    sampler_pid: int | None = None,
) -> bool:
    """Best guess whether a job still runs on this node (to clean up after crashes).

    A job from before the last reboot is dead, and so is one that died with its node's
    slurmd (:func:`died_with_slurmd`; ``sampler_pid``: the job's sampler, if it has one).
    Otherwise the job is dead only when Slurm's
    cgroup tree is evidently in use here (it holds job directories of other jobs), the job
    has none, and the job started more than a minute ago (its cgroup may not exist yet
    right after the Prolog). A job directory is ``job_<id>`` or a SLUID (26.05 cgroup/v2);
    a SLUID directory is matched to its job through its slurmstepd, and one whose job
    cannot be told keeps the answer "alive". In every other case we cannot tell, and say
    alive: a wrong "dead" would end a running job's record early.
    """
    if prolog_boot_id and prolog_boot_id != boot_id():
        return False
    if since is not None and died_with_slurmd(job_id, since, sampler_pid, proc):
        return False
    if since is not None and time.time() - since < 60:
        return True
    import glob

    dirs = [p for r in roots for p in glob.glob(f"{r}/*") if _job_dir_name(os.path.basename(p))]
    if not dirs:
        return True
    if any(os.path.basename(p) == f"job_{job_id}" for p in dirs):
        return True
    for p in dirs:
        if is_sluid(os.path.basename(p)):
            owner = sluid_dir_job(p, proc)
            if owner is None or owner == job_id:
                return True
    return False


# -- a job that died with its node's slurmd (no reboot: the node's processes were killed) ---


def _stat_after_comm(pid: int | str, proc: str) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, ...)."""
    raw = Path(f"{proc}/{pid}/stat").read_bytes()
    return raw.rsplit(b")", 1)[1].decode().split()


def _live(pid: int | str, proc: str) -> bool:
    try:
        return _stat_after_comm(pid, proc)[0] != "Z"
    except (OSError, IndexError):
        return False


def started_at(pid: int | str, proc: str = "/proc") -> float | None:
    """When a process started (seconds since the epoch, to about a second), or None."""
    try:
        ticks = int(_stat_after_comm(pid, proc)[19])
        btime = next(
            int(line.split()[1])
            for line in Path(f"{proc}/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return btime + ticks / os.sysconf("SC_CLK_TCK")


@functools.lru_cache(maxsize=8)
def slurmd_started(pid: int | None = None, proc: str = "/proc") -> float | None:
    """When the slurmd that this process (a Prolog or Epilog) runs under started: the start
    of its nearest ``slurmd`` ancestor. None when it runs under none (a command run by
    hand, a hook run by slurmstepd). Looked up once per process (a hook's recovery asks
    for every other job on the node)."""
    cur = pid if pid is not None else os.getpid()
    for _ in range(32):
        try:
            comm = Path(f"{proc}/{cur}/comm").read_text().strip()
            ppid = int(_stat_after_comm(cur, proc)[1])
        except (OSError, IndexError, ValueError):
            return None
        if comm == "slurmd":
            return started_at(cur, proc)
        if ppid <= 1:
            return None
        cur = ppid
    return None


def job_processes(job_id: int, proc: str = "/proc") -> list[int]:
    """Live processes of a job: its slurmstepd processes and those with the job's
    ``SLURM_JOB_ID`` in their environment (its tasks, its own Prolog or Epilog)."""
    out = []
    for entry in os.scandir(proc):
        if not entry.name.isdigit() or not _live(entry.name, proc):
            continue
        pid = int(entry.name)
        if stepd_job_id(pid, proc) == job_id or _environ(pid, proc).get("SLURM_JOB_ID") == str(
            job_id
        ):
            out.append(pid)
    return out


#: a slurmd must have started this much later than the job's Prolog (start times are
#: known to about a second)
_RESTART_MARGIN_S = 2.0


def slurmd_restarted_since(t: float, proc: str = "/proc") -> bool:
    """True when the slurmd this process runs under started after time ``t``."""
    start = slurmd_started(proc=proc)
    return start is not None and start >= t + _RESTART_MARGIN_S


def died_with_slurmd(
    job_id: int, since: float, sampler_pid: int | None = None, proc: str = "/proc"
) -> bool:
    """True when a job evidently died with its node's slurmd, the node not rebooted (the
    node's processes killed, an OOM massacre): the slurmd this hook runs under started
    after the job's Prolog (``since``), the job's sampler is gone, and no process of the job
    is left. Slurm runs no Epilog for such a job when the node returns late, and without
    cgroups nothing else tells it from a running one. A job without steps (an ``salloc``
    allocation, ``PrologFlags=Alloc`` without ``Contain``) has no process either: the
    sampler is what shows that one alive."""
    if not slurmd_restarted_since(since, proc):
        return False
    if sampler_pid and _live(sampler_pid, proc):
        return False
    return not job_processes(job_id, proc)


def job_of_pid(pid: int, proc: str = "/proc", cgroup_fs: str = CGROUP_FS) -> int | None:
    """The Slurm job a process belongs to, from its cgroup path (``job_<id>``, or a SLUID
    directory below ``slurmstepd.scope`` resolved through its slurmstepd) or, failing
    that, its environment."""
    try:
        cg = Path(f"{proc}/{pid}/cgroup").read_text()
    except OSError:
        cg = ""
    for line in cg.splitlines():
        path = line.split(":", 2)[-1]
        parts = path.split("/")
        for i, part in enumerate(parts):
            if part.startswith("job_") and part[4:].isdigit():
                return int(part[4:])
            if is_sluid(part) and i > 0 and parts[i - 1].endswith("slurmstepd.scope"):
                job = sluid_dir_job(cgroup_fs + "/".join(parts[: i + 1]), proc)
                if job is not None:
                    return job
    env = _environ(pid, proc).get("SLURM_JOB_ID", "")
    return decimal(env, 12)  # the job's processes set their own environment
