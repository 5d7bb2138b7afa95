"""Backend on pyslurm's new object API (``pyslurm.Jobs.load()`` / ``pyslurm.Nodes.load()``).

pyslurm builds only against one Slurm major.minor; :func:`pyslurm_matches` checks that.
The attribute names are those of pyslurm's releases for 22.05 (tag ``v22.5.3``) and 24.11
(``v24.11.0``); ``tests/fixtures/slurm/pyslurm-22.5.3.json`` is what a real build answered
on the lab, beside Slurm's JSON. A running job's node is ``allocated_nodes``; the GRES it
holds, with their indices, come from ``Job.get_resource_layout_per_node()`` (Slurm's
``gres_detail``, as squeue's JSON gives it), the request (``gres_per_node``) where a job
has no layout. pyslurm 24.11.0 on Slurm 24.11 gives no layout for any job
(``pyslurm-24.11.0.json``): there a shard job's GPU follows from its GRES type, as before,
and the agent takes an untyped exclusive job's GPUs from the Prolog's report (JOBSTART).
pyslurm has no per-job GPU request (``--gpus``, squeue's ``tres_per_job``), so such a job is
seen as a GPU job only once it runs.
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

from ..errors import SlurmError
from ..gres_layout import tres_gres
from .model import GresAlloc, SlurmJob, SlurmNode, parse_indices

#: Slurm's errno for a job it does not know (slurm_errno.h), in pyslurm's RPCError
ESLURM_INVALID_JOB_ID = 2017


def _version_tuple(text: str) -> tuple[int, int] | None:
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def pyslurm_matches(module: ModuleType, slurm_version: str) -> bool:
    """True when the imported pyslurm was built for the installed Slurm's major.minor.
    pyslurm versions follow Slurm's (25.11.2 is for Slurm 25.11); 22.5.x for 22.05."""
    mine = _version_tuple(str(getattr(module, "__version__", "")))
    theirs = _version_tuple(slurm_version)
    return mine is not None and theirs is not None and mine == theirs


def _gres_key(key: Any) -> str:
    """``gpu:v100`` from pyslurm's GRES key: 22.5 strips Slurm's ``gres:`` prefix, 24.11
    keeps the ``gres/`` one it gets from 24.11 (``gres/shard:v100_s0``)."""
    text = str(key)
    for prefix in ("gres/", "gres:"):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text


def _gres_items(gres: Any) -> tuple[GresAlloc, ...]:
    if not isinstance(gres, dict):
        return ()
    out = []
    for key, count in gres.items():
        name, _, typ = _gres_key(key).partition(":")
        try:
            out.append(GresAlloc(name, typ, int(count), ()))
        except (TypeError, ValueError):
            continue
    return tuple(out)


def _held_gres(j: Any) -> tuple[GresAlloc, ...] | None:
    """The GRES a job holds, with their indices, from pyslurm's
    ``get_resource_layout_per_node()`` (``{node: {"gres": {"gpu:v100": {"count": "2",
    "indexes": "2-3"}, "gpu:v100_s0": 0, "shard": {...}}}}``); None where it has none (a
    job not started). An entry in another shape raises :class:`SlurmError`, as an unknown
    ``gres_detail`` item does for the JSON backend: a job on a GPU the agent cannot see must
    not be taken for a job on no GPU."""
    layout = getattr(j, "get_resource_layout_per_node", None)
    if layout is None or not getattr(j, "allocated_nodes", None):
        return None  # (a pending job has no node: its layout is not worked out)
    try:
        per_node = layout() or {}
    except Exception as e:  # pyslurm parses Slurm's text itself
        raise SlurmError(
            f"pyslurm: the GPUs of job {getattr(j, 'id', '?')} could not be read ({e!r})",
            hint="set agent.slurm_backend = json",
        ) from None
    out: list[GresAlloc] = []
    for node in per_node.values() if isinstance(per_node, dict) else ():
        gres = node.get("gres") if isinstance(node, dict) else None
        for key, v in (gres or {}).items():
            name, _, typ = _gres_key(key).partition(":")
            try:
                if isinstance(v, dict):
                    out.append(
                        GresAlloc(name, typ, int(v["count"]), parse_indices(str(v["indexes"])))
                    )
                else:
                    out.append(GresAlloc(name, typ, int(v), ()))
            except (KeyError, TypeError, ValueError):
                raise SlurmError(
                    f"pyslurm: job {getattr(j, 'id', '?')} holds GRES {key}={v!r}, "
                    "a shape slurm-colo does not know",
                    hint="set agent.slurm_backend = json, and report it with your pyslurm version",
                ) from None
    return tuple(out) if out else None


def _s(v: Any) -> str:
    return "" if v is None else str(v)


def _tres_text(gres: Any, version: tuple[int, int] | None = None) -> str:
    """The request as Slurm ``version``'s ``tres_per_node`` text (``gres:gpu:1`` /
    ``gres/gpu:1``), as squeue shows it."""
    if not isinstance(gres, dict):
        return ""
    return tres_gres(",".join(f"gres:{_gres_key(k)}:{v}" for k, v in gres.items()), version)


def job_from_pyslurm(j: Any, version: tuple[int, int] | None = None) -> SlurmJob:
    return SlurmJob(
        job_id=int(j.id),
        name=_s(getattr(j, "name", "")),
        user=_s(getattr(j, "user_name", "")),
        uid=int(getattr(j, "user_id", 0) or 0),
        state=_s(getattr(j, "state", "")),
        nodes=_s(getattr(j, "allocated_nodes", "")),
        node_count=int(getattr(j, "num_nodes", 1) or 1),
        gres=_held_gres(j) or _gres_items(getattr(j, "gres_per_node", None)),
        tres_per_node=_tres_text(getattr(j, "gres_per_node", None), version),
        comment=_s(getattr(j, "comment", "")),
        admin_comment=_s(getattr(j, "admin_comment", "")),
        start_time=float(getattr(j, "start_time", 0) or 0),
        submit_time=float(getattr(j, "submit_time", 0) or 0),
        end_time=float(getattr(j, "end_time", 0) or 0),
        state_reason=_s(getattr(j, "state_reason", "")),
        partition=_s(getattr(j, "partition", "")),
        requeue=bool(getattr(j, "is_requeueable", True)),
        required_nodes=_s(getattr(j, "required_nodes", "")),
        excluded_nodes=_s(getattr(j, "excluded_nodes", "")),
        array_tasks=_s(getattr(j, "array_tasks_waiting", "")),
        array_task=_record_task(j),
        dependency=_dependency(j),
        eligible_time=float(getattr(j, "eligible_time", 0) or 0),
    )


def _dependency(j: Any) -> str:
    """What the job waits for before it may start, as text ("" none). pyslurm gives it as a
    dict of kinds (``{"afterok": [12], "singleton": False, "satisfy": "all"}``) or as
    Slurm's text, by release."""
    deps = getattr(j, "dependencies", None)
    if deps is None:
        return _s(getattr(j, "dependency", ""))
    if not isinstance(deps, dict):
        return _s(deps)
    parts = []
    for kind, v in deps.items():
        if v is True:
            parts.append(str(kind))
        elif isinstance(v, (list, tuple)) and v:
            parts.append(f"{kind}:{':'.join(map(str, v))}")
    return ",".join(parts)


def _record_task(j: Any) -> int | None:
    """The task id of a job array's own record (its array id is its id), else None.
    pyslurm names the array id ``array_id`` in some releases, ``array_job_id`` in others."""
    task = getattr(j, "array_task_id", None)
    array = getattr(j, "array_id", None)
    if array is None:
        array = getattr(j, "array_job_id", None)
    return int(task) if task is not None and array is not None and array == j.id else None


def node_from_pyslurm(n: Any) -> SlurmNode:
    cfg = getattr(n, "configured_gres", {}) or {}
    used = getattr(n, "allocated_gres", {}) or {}
    fmt = lambda d: ",".join(f"{k}:{v}" for k, v in d.items()) if isinstance(d, dict) else _s(d)  # noqa: E731
    return SlurmNode(
        name=_s(n.name),
        state=_s(getattr(n, "state", "")),
        gres=fmt(cfg),
        gres_used=fmt(used),
        features=tuple(getattr(n, "active_features", None) or ()),
        partitions=tuple(getattr(n, "partitions", None) or ()),
    )


class PyslurmBackend:
    name = "pyslurm"

    def __init__(self, module: ModuleType) -> None:
        self.pyslurm = module
        #: pyslurm runs only on the Slurm major.minor it was built for (pyslurm_matches)
        self.version = _version_tuple(str(getattr(module, "__version__", "")))

    def jobs(self) -> list[SlurmJob]:
        try:
            loaded = self.pyslurm.Jobs.load()
        except Exception as e:  # pyslurm raises its own RPCError
            raise SlurmError(f"pyslurm: loading jobs failed: {e}") from None
        return [job_from_pyslurm(j, self.version) for j in loaded.values()]

    def job(self, job_id: int) -> SlurmJob | None:
        try:
            return job_from_pyslurm(self.pyslurm.Job.load(job_id), self.version)
        except Exception as e:  # pyslurm's RPCError carries Slurm's errno
            if getattr(e, "errno", None) == ESLURM_INVALID_JOB_ID:
                return None
            raise SlurmError(f"pyslurm: loading job {job_id} failed: {e}") from None

    def nodes(self) -> list[SlurmNode]:
        try:
            loaded = self.pyslurm.Nodes.load()
        except Exception as e:
            raise SlurmError(f"pyslurm: loading nodes failed: {e}") from None
        return [node_from_pyslurm(n) for n in loaded.values()]
