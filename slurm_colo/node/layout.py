"""Where the node side keeps its files (all under ``node.run_dir`` and ``node.spool_dir``).

::

    <run_dir>/gpu/<index>/lock            flock serialising hooks touching this GPU
    <run_dir>/gpu/<index>/journal.jsonl   occupancy journal (see journal.py)
    <run_dir>/gpu/<index>/mps.json        the GPU's MPS daemon state (pid, uid, dirs)
    <run_dir>/gpu/<index>/crashes.json    recent daemon crash times (restart-loop guard)
    <run_dir>/mps/<uuid>/pipe, .../log    the daemon's pipe and log dirs (job user, 0700)
    <run_dir>/jobs/<id>/state.json        what the Prolog knew (root only)
    <run_dir>/jobs/<id>/ended.json        written first by the Epilog (end time, exit code)
    <run_dir>/jobs/<id>/profile.json      the sampler's summary (rewritten periodically)
    <run_dir>/jobs/<id>/user/task.json    what the TaskProlog exports (job user only)
    <run_dir>/jobs/<id>/user/progress.json  written by slurm_colo.progress in the job
    <spool_dir>/<record id>.json          records waiting for ingest
    <spool_dir>/running/<id>.state        a copy of state.json on disk: the record of a
                                          job the node's reboot ended (run_dir is a tmpfs)
    <spool_dir>/running/<id>.profile      a copy of profile.json on disk, for that record
    <run_dir>/spool-fallback/             used when the spool is full or unwritable
    <run_dir>/trash/                      job directories of spooled jobs, to be deleted
    <run_dir>/damaged/                    job directories whose state.json was damaged
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_colo.contracts.digits import decimal
from slurm_colo.spool.directory import SpoolDirs

if TYPE_CHECKING:
    from slurm_colo.config import Config


@dataclass(frozen=True)
class NodeLayout:
    run_dir: Path
    spool_dir: Path

    @classmethod
    def of(cls, run_dir: str, spool_dir: str) -> NodeLayout:
        return cls(Path(run_dir), Path(spool_dir))

    @classmethod
    def of_config(cls, cfg: Config) -> NodeLayout:
        return cls.of(cfg.node.run_dir, cfg.node.spool_dir)

    def gpu_dir(self, index: int) -> Path:
        return self.run_dir / "gpu" / str(index)

    def gpu_indexes(self) -> list[int]:
        """The GPUs this node's hooks have a directory for, in order."""
        try:
            names = [e.name for e in os.scandir(self.run_dir / "gpu") if e.is_dir()]
        except OSError:
            return []
        return sorted(i for i in (decimal(n, 9) for n in names) if i is not None)

    def gpu_files_problem(self, index: int) -> str | None:
        """Why the hooks cannot use GPU ``index``'s directory, lock, journal or MPS state
        (the directory missing, or a file there that is not a regular file: a directory, a
        FIFO, a link), else None. A missing file is fine: the hooks create them."""
        gpu_dir = self.gpu_dir(index)
        if not gpu_dir.is_dir():
            return f"{gpu_dir} is {'not a directory' if os.path.lexists(gpu_dir) else 'missing'}"
        for path in (self.gpu_lock(index), self.journal(index), self.mps_state(index)):
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue
            except OSError as e:
                return f"{path}: {e.strerror or e}"
            if not stat.S_ISREG(mode):
                return f"{path} is not a regular file"
        return None

    def gpu_lock(self, index: int) -> Path:
        return self.gpu_dir(index) / "lock"

    def journal(self, index: int) -> Path:
        return self.gpu_dir(index) / "journal.jsonl"

    def mps_state(self, index: int) -> Path:
        return self.gpu_dir(index) / "mps.json"

    def crashes(self, index: int) -> Path:
        return self.gpu_dir(index) / "crashes.json"

    def mps_root(self, uuid: str) -> Path:
        return self.run_dir / "mps" / uuid

    def jobs_dir(self) -> Path:
        return self.run_dir / "jobs"

    def job_dir(self, job_id: int) -> Path:
        return self.jobs_dir() / str(job_id)

    def user_dir(self, job_id: int) -> Path:
        return self.job_dir(job_id) / "user"

    def spool_dirs(self) -> SpoolDirs:
        return SpoolDirs.of(self.run_dir, self.spool_dir)

    def fallback_spool(self) -> Path:
        return self.spool_dirs().fallback

    def running_dir(self) -> Path:
        return self.spool_dir / "running"

    def running_copy(self, job_id: int) -> Path:
        """The on-disk copy of the job's ``state.json`` (see :func:`.jobstate.write_state`)."""
        return self.running_dir() / f"{job_id}.state"

    def running_profile(self, job_id: int) -> Path:
        """The on-disk copy of the job's ``profile.json`` (the sampler writes both)."""
        return self.running_dir() / f"{job_id}.profile"

    def trash_dir(self) -> Path:
        return self.run_dir / "trash"

    def damaged_dir(self) -> Path:
        return self.run_dir / "damaged"
