"""Backend on Slurm's own JSON output: ``squeue --json`` for jobs; for nodes
``scontrol show nodes --json`` where it exists (23.02+) and ``sinfo --json`` before.

Build the command (:func:`squeue_argv`, :func:`nodes_argv`: pure, the one place that knows
which command a version needs), run it in one place (:meth:`JsonBackend._run`, argv list,
timeout), parse separately (:func:`parse_squeue`, :func:`parse_nodes`: pure, tested on
output recorded from Slurm 22.05, 24.11 and 26.05).

No ``--json=VERSION`` pin: 22.05 accepts no argument, and the data parser versions a
release offers move on (26.05 has dropped v0.0.40 and v0.0.41). The fields read here have the
same names in openapi v0.0.38 and data_parser v0.0.42 to v0.0.45; what changed is their
shape (numbers as ``{"set", "infinite", "number"}``, states as lists, the per-GPU
``gres_detail`` of shard jobs), and every shape is read explicitly: one the parser does not
know raises :class:`SlurmError` rather than being dropped.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import SlurmError
from ..gres_layout import expand_hostlist
from .command import run_slurm
from .model import SlurmJob, SlurmNode, parse_gres_detail
from .version import InstalledVersion, Version, has_scontrol_json


def _str(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        raise ValueError(f"expected text, got {v!r}")
    return str(v)


def _num(v: Any) -> float:
    """A number: plain (22.05) or ``{"set": bool, "infinite": bool, "number": N}`` (24.11+);
    unset or infinite read as 0 (unknown)."""
    if isinstance(v, dict):
        if "number" not in v:
            raise ValueError(f"expected a number, got {v!r}")
        if v.get("set") is False or v.get("infinite"):
            return 0.0
        v = v["number"]
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"expected a number, got {v!r}")
    return float(v)


#: job state flags that 22.05's one-word state shows instead of the base state
_STATE_SHOWN_FLAGS = ("COMPLETING", "CONFIGURING")


def _state(v: Any) -> str:
    """``"RUNNING"`` (22.05) or ``["RUNNING"]`` / ``["COMPLETED", "COMPLETING"]`` (24.11+: base
    state first, then flags), as the one word 22.05 prints."""
    if isinstance(v, list):
        words = [str(s) for s in v]
        return next((f for f in _STATE_SHOWN_FLAGS if f in words), words[0] if words else "")
    return _str(v)


def _job(j: Any) -> SlurmJob:
    return SlurmJob(
        job_id=int(_num(j["job_id"])),
        name=_str(j.get("name")),
        user=_str(j.get("user_name")),
        uid=int(_num(j.get("user_id"))),
        state=_state(j.get("job_state")),
        nodes=_str(j.get("nodes")),
        node_count=int(_num(j.get("node_count")) or 1),
        gres=tuple(parse_gres_detail(j.get("gres_detail"))),
        tres_per_node=_str(j.get("tres_per_node")),
        tres_per_job=_str(j.get("tres_per_job")),
        comment=_str(j.get("comment")),
        admin_comment=_str(j.get("admin_comment")),
        start_time=_num(j.get("start_time")),
        submit_time=_num(j.get("submit_time")),
        end_time=_num(j.get("end_time")),
        state_reason=_str(j.get("state_reason")),
        partition=_str(j.get("partition")),
        requeue=bool(j.get("requeue", True)) and bool(j.get("batch_flag", True)),
        required_nodes=_str(j.get("required_nodes")),
        excluded_nodes=_str(j.get("excluded_nodes")),
        array_tasks=_str(j.get("array_task_string")),
        array_task=_record_task(j),
        dependency=_str(j.get("dependency")),
        eligible_time=_num(j.get("eligible_time")),
    )


def _record_task(j: Any) -> int | None:
    """The task id of a job array's own record (its ``array_job_id`` is its ``job_id``);
    None for any other job, and for a record whose ``array_task_id`` is unset (several
    tasks wait in it)."""
    task = j.get("array_task_id")
    if task is None or (isinstance(task, dict) and (not task.get("set") or task.get("infinite"))):
        return None
    array = _num(j.get("array_job_id"))
    return int(_num(task)) if array and int(array) == int(_num(j["job_id"])) else None


def parse_squeue(doc: Any) -> list[SlurmJob]:
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SlurmError("squeue --json: unexpected output (no 'jobs' list)")
    out: list[SlurmJob] = []
    for j in doc["jobs"]:
        try:
            out.append(_job(j))
        except SlurmError as e:
            raise SlurmError(f"squeue --json: job {_job_id(j)}: {e.message}", hint=e.hint) from None
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise SlurmError(
                f"squeue --json: job {_job_id(j)}: unexpected record ({e!r})",
                hint="report it with your Slurm version (sinfo --version)",
            ) from None
    return out


def _job_id(j: Any) -> str:
    try:
        return str(int(_num(j["job_id"])))
    except (KeyError, TypeError, ValueError):
        return "?"


def _node_state(n: dict[str, Any]) -> str:
    """``"mixed"`` + ``state_flags`` (22.05) or ``["IDLE", "DRAIN"]`` (24.11+) as one string."""
    state = n.get("state", "")
    if isinstance(state, list):
        state = "+".join(str(s) for s in state)
    flags = n.get("state_flags") or []
    if flags:
        state = "+".join([str(state), *map(str, flags)])
    return str(state)


def _names(v: Any) -> tuple[str, ...]:
    if isinstance(v, list):
        return tuple(str(x) for x in v if x)
    return tuple(x for x in _str(v).split(",") if x)


def _node(n: dict[str, Any]) -> SlurmNode:
    """A per-node record: 22.05 ``sinfo --json`` ``nodes[]``, 23.02+ ``scontrol show nodes
    --json`` ``nodes[]``."""
    feats = n.get("active_features") or n.get("features") or ""
    return SlurmNode(
        name=_str(n.get("name") or n.get("hostname")),
        state=_node_state(n),
        gres=_str(n.get("gres")),
        gres_used=_str(n.get("gres_used")),
        features=_names(feats),
        partitions=_names(n.get("partitions") or []),
    )


def _grouped(doc: dict[str, Any]) -> list[SlurmNode]:
    """23.02+ ``sinfo --json``: ``sinfo[]`` groups of nodes (per partition, and per state,
    GRES...); every host of a group gets the group's values, a node in several partitions
    is merged. The GRES in use are the group's, so this is exact only for groups of one
    node: :class:`JsonBackend` reads ``scontrol show nodes --json`` on these versions."""
    by_name: dict[str, SlurmNode] = {}
    for e in doc["sinfo"]:
        group, gres = e.get("nodes") or {}, e.get("gres") or {}
        feats = (e.get("features") or {}).get("active") or (e.get("features") or {}).get("total")
        part = _str((e.get("partition") or {}).get("name"))
        for expr in group.get("nodes") or []:
            for name in expand_hostlist(str(expr)):
                old = by_name.get(name)
                by_name[name] = SlurmNode(
                    name=name,
                    state=_node_state(e.get("node") or {}),
                    gres=_str(gres.get("total")),
                    gres_used=_str(gres.get("used")),
                    features=_names(feats or ""),
                    partitions=(old.partitions if old else ()) + ((part,) if part else ()),
                )
    return list(by_name.values())


def parse_nodes(doc: Any) -> list[SlurmNode]:
    """``scontrol show nodes --json`` (23.02+) or ``sinfo --json`` (22.05 per node, 23.02+
    grouped)."""
    if not isinstance(doc, dict):
        raise SlurmError("sinfo/scontrol --json: unexpected output")
    try:
        if isinstance(doc.get("nodes"), list):
            return [_node(n) for n in doc["nodes"]]
        if isinstance(doc.get("sinfo"), list):
            return _grouped(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SlurmError(
            f"sinfo/scontrol --json: unexpected node record ({e!r})",
            hint="report it with your Slurm version (sinfo --version)",
        ) from None
    raise SlurmError("sinfo/scontrol --json: unexpected output (no 'nodes' or 'sinfo' list)")


parse_sinfo = parse_nodes  # the name before scontrol's output was read too


def _text(v: Any) -> str:
    return v.strip() if isinstance(v, str) else ""


def reported_error(doc: Any) -> str | None:
    """What Slurm put in the document's ``errors`` list, or None when it is empty. Slurm
    22.05 cannot reach slurmctld and still exits 0, with an error here and an empty
    ``jobs`` or ``nodes`` list: read as it stands, that says the cluster is empty."""
    errors = doc.get("errors") if isinstance(doc, dict) else None
    if not isinstance(errors, list) or not errors:
        return None
    texts = []
    for e in errors:
        if isinstance(e, dict):
            what = _text(e.get("description")) or _text(e.get("error")) or "an error"
            source = _text(e.get("source"))
            texts.append(f"{what} ({source})" if source else what)
        else:
            texts.append(str(e))
    return "; ".join(texts)[:300]


def squeue_argv(squeue: str = "squeue", job_id: int | None = None) -> list[str]:
    """The same on every version (22.05 ignores ``--jobs`` with ``--json``: callers filter).
    One job is looked up in every state: 24.11 and 26.05 leave a finished job out of
    ``squeue --json --jobs ID`` a few seconds after it ends unless ``--states=all`` is given
    (22.05 lists it as COMPLETED either way)."""
    one = ["--jobs", str(job_id), "--states=all"] if job_id is not None else []
    return [squeue, "--json", "--all", *one]


def nodes_argv(
    version: Version | None, sinfo: str = "sinfo", scontrol: str = "scontrol"
) -> list[str]:
    """One record per node: ``scontrol show nodes --json`` where it exists, else (22.05, or
    the version unknown) ``sinfo --json``."""
    if has_scontrol_json(version):
        return [scontrol, "show", "nodes", "--json"]
    return [sinfo, "--json"]


#: how squeue says a job is not (or no longer) known (``slurm_strerror(ESLURM_INVALID_JOB_ID)``)
UNKNOWN_JOB = "Invalid job id specified"


class JsonBackend:
    name = "json"

    def __init__(
        self,
        timeout_s: float = 10.0,
        squeue: str = "squeue",
        sinfo: str = "sinfo",
        scontrol: str = "scontrol",
        slurm_version: str | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.squeue = squeue
        self.sinfo = sinfo
        self.scontrol = scontrol
        self._version = InstalledVersion(slurm_version)

    @property
    def version(self) -> Version | None:
        """The installed Slurm's (major, minor), read once (``sinfo --version``)."""
        return self._version.get()

    def _run(self, argv: list[str]) -> Any:
        p = run_slurm(argv, self.timeout_s)
        try:
            doc = json.loads(p.stdout)
        except json.JSONDecodeError as e:
            raise SlurmError(f"{' '.join(argv)}: output is not JSON ({e.msg})") from None
        except (ValueError, RecursionError) as e:  # a 4,300-digit integer, nested too deeply
            raise SlurmError(f"{' '.join(argv)}: output is not usable JSON ({e})") from None
        error = reported_error(doc)
        if error:
            raise SlurmError(
                f"{' '.join(argv[:3])}: Slurm reported an error: {error}",
                hint="is slurmctld up and reachable? (scontrol ping)",
            )
        return doc

    def jobs(self) -> list[SlurmJob]:
        return parse_squeue(self._run(squeue_argv(self.squeue)))

    def job(self, job_id: int) -> SlurmJob | None:
        try:
            doc = self._run(squeue_argv(self.squeue, job_id))
            if isinstance(doc, dict) and isinstance(doc.get("jobs"), list):
                # Slurm 22.05 ignores --jobs with --json: pick the job before parsing
                doc = {
                    "jobs": [
                        j for j in doc["jobs"] if isinstance(j, dict) and _job_id(j) == str(job_id)
                    ]
                }
            found = parse_squeue(doc)
        except SlurmError as e:
            if UNKNOWN_JOB in e.message:  # 24.11 and 26.05 exit 1 for such a job
                return None
            raise
        return next((j for j in found if j.job_id == job_id), None)

    def nodes(self) -> list[SlurmNode]:
        return parse_nodes(self._run(nodes_argv(self.version, self.sinfo, self.scontrol)))
