"""The per-job record the Epilog writes and the history store ingests.

One JSON object per job, written to the node-local spool and ingested idempotently:
``record_id`` (cluster, job id, node, start time) is the key, so a record ingested twice is
stored once. This module is the contract between the node side and the store.

Version 2 added the GPU the job ran on: ``gpu_model`` (the model part of the GPU's GRES
type, ``v100`` for ``v100_s1``: what score sets are kept per), ``gres_type`` and
``gpu_name`` (the NVML product name, where NVML answered). A version-1 record has none of
them and reads with empty strings: the store then takes the model of its node from the
configuration (:mod:`slurm_colo.train.retrain`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

RECORD_VERSION = 2
#: the largest uid: an unsigned 32-bit number, as Slurm and the kernel give it (-1: unknown)
UID_MAX = 2**32 - 1


@dataclass
class CoRunner:
    """Another job on the same GPU during [start, end] (epoch seconds)."""

    job_id: int
    cls: str
    user: str
    start: float
    end: float


@dataclass
class JobRecord:
    job_id: int
    node: str
    user: str
    uid: int
    cls: str
    start: float
    end: float
    cluster: str = "default"
    mode: str = "auto"
    gpus: list[int] = field(default_factory=list)
    gpu_uuids: list[str] = field(default_factory=list)
    shared: bool = False
    mechanism: str | None = None  # "mps", "shard" or None (own GPU)
    thread_pct: int | None = None
    mem_limit_gib: float | None = None
    co_runners: list[CoRunner] = field(default_factory=list)
    #: sampler summary: sm_util_mean, sm_util_p95, mem_used_mean_gib, mem_peak_gib,
    #: mem_bw_util_mean, power_w_mean, samples, solo_s (seconds with no co-runner), ...
    profile: dict[str, Any] = field(default_factory=dict)
    #: job-reported progress: {"iterations": int, "rate": float, "solo_rate": float|None}
    progress: dict[str, Any] | None = None
    exit_code: int = 0
    state: str = "COMPLETED"
    mps_fault: bool = False
    version: int = RECORD_VERSION
    #: the GPU model as the site's GRES types name it (``v100``); "" = unknown
    gpu_model: str = ""
    #: the GRES type of the GPU the job ran on (``v100_s1``; ``v100`` outside the pool)
    gres_type: str = ""
    #: the NVML product name (``Tesla V100-SXM2-16GB``); "" where NVML did not answer
    gpu_name: str = ""

    @property
    def record_id(self) -> str:
        return f"{self.cluster}:{self.job_id}:{self.node}:{int(self.start)}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["record_id"] = self.record_id
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobRecord:
        d = dict(d)
        d.pop("record_id", None)
        d["co_runners"] = [CoRunner(**c) for c in d.get("co_runners", [])]
        return cls(**d)
