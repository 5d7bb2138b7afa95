"""What the Prolog knew about a job on one node: ``<run_dir>/jobs/<id>/state.json``.

Written by the Prolog (and by its sampler's start), read by the Epilog, the sampler and
the crash recovery of a later hook, which may belong to a newer slurm-colo: fields have
defaults, unknown keys are ignored, a value of the wrong type raises
:class:`~slurm_colo.errors.ProtocolError`. Standard library only: the hooks import this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurm_colo.contracts.digits import number, whole
from slurm_colo.contracts.enums import Mechanism, Mode
from slurm_colo.contracts.placement import Placement, whole_in_limits
from slurm_colo.contracts.records import UID_MAX
from slurm_colo.errors import ProtocolError

#: the largest process id Linux hands out (``pid_max`` is at most 2^22)
PID_MAX = 2**22


def _pid(v: Any) -> int | None:
    """A saved process id, None when none was saved; a number no process can have is a
    damaged file (``ValueError``)."""
    if v is None:
        return None
    pid = int(v)
    if not 0 < pid <= PID_MAX:
        raise ValueError(f"sampler_pid {pid} is not a process id")
    return pid


@dataclass(frozen=True)
class GpuMpsStart:
    """How the job's MPS daemon on one GPU started (``ok``, ``refused``, ``broken``) and
    where its control and server logs stood then (the Epilog scans for faults from there)."""

    state: str
    log_offset: int = 0
    server_log_offset: int = 0
    message: str = ""


def _gpu(v: Any) -> int:
    """A GPU index (a JSON number, or its text as a key of ``mps``)."""
    return whole_in_limits(v, "gpu", "GPU index")


def _list(v: Any, name: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise TypeError(f"{name}: not a list: {v!r}")
    return v


@dataclass
class JobState:
    job: int
    user: str = ""
    uid: int = -1
    node: str = ""
    gpus: list[int] = field(default_factory=list)
    cls: str = "default"
    mode: Mode = Mode.OFF
    start: float = 0.0
    #: the kernel's boot id at the Prolog: a job "alive" after a reboot is not
    boot_id: str = ""
    cluster: str = "default"
    #: the agent's placement (None: a job only profiled, ``node.profile = "all"``)
    placement: Placement | None = None
    mechanism: Mechanism | None = None
    #: per GPU index
    mps: dict[int, GpuMpsStart] = field(default_factory=dict)
    gpu_uuids: list[str] = field(default_factory=list)
    sampler_pid: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "user": self.user,
            "uid": self.uid,
            "node": self.node,
            "gpus": list(self.gpus),
            "cls": self.cls,
            "mode": str(self.mode),
            "start": self.start,
            "boot_id": self.boot_id,
            "cluster": self.cluster,
            "placement": self.placement.to_wire() if self.placement else None,
            "mechanism": None if self.mechanism is None else str(self.mechanism),
            "mps": {
                str(g): {
                    "state": m.state,
                    "log_offset": m.log_offset,
                    "server_log_offset": m.server_log_offset,
                    "message": m.message,
                }
                for g, m in self.mps.items()
            },
            "gpu_uuids": list(self.gpu_uuids),
            "sampler_pid": self.sampler_pid,
        }

    @classmethod
    def from_json(cls, d: Any, job: int | None = None) -> JobState:
        """Read :meth:`to_json`'s object (``job``: the id its directory gives, used when the
        object lacks one)."""
        if not isinstance(d, dict):
            raise ProtocolError("job state: not an object")
        try:
            placement = Placement.from_wire(d["placement"]) if d.get("placement") else None
            mech = d.get("mechanism")
            return cls(
                job=int(d["job"]) if d.get("job") is not None else int(job),  # type: ignore[arg-type]
                user=str(d.get("user", "")),
                uid=whole(d.get("uid", -1), "uid", -1, UID_MAX),
                node=str(d.get("node", "")),
                gpus=[_gpu(g) for g in _list(d.get("gpus"), "gpus")],
                cls=str(d.get("cls") or "default"),
                mode=Mode(d.get("mode") or "off"),
                start=number(d.get("start", 0.0), "start", 0, 2**40),
                boot_id=str(d.get("boot_id", "")),
                cluster=str(d.get("cluster") or "default"),
                placement=placement,
                mechanism=None if mech is None else Mechanism(mech),
                mps={
                    _gpu(g): GpuMpsStart(
                        str(m.get("state", "")),
                        whole(m.get("log_offset", 0), "log_offset", 0, 2**62),
                        whole(m.get("server_log_offset", 0), "server_log_offset", 0, 2**62),
                        str(m.get("message", "")),
                    )
                    for g, m in (d.get("mps") or {}).items()
                },
                gpu_uuids=[str(u) for u in _list(d.get("gpu_uuids"), "gpu_uuids")],
                sampler_pid=_pid(d.get("sampler_pid")),
            )
        except (TypeError, ValueError, AttributeError, OverflowError) as e:
            raise ProtocolError(f"job state: {e}") from None
