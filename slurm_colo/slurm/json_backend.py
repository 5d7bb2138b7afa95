"""Backend on Slurm's own JSON output (``squeue --json``, ``sinfo --json``).

Build the command, run it in one place (:func:`_run`, argv list, timeout), parse
separately (:func:`parse_squeue`, :func:`parse_sinfo`: pure, tested on recorded output).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from ..errors import SlurmError
from .model import SlurmJob, SlurmNode, parse_gres_detail


def _str(v: Any) -> str:
    return "" if v is None else str(v)


def _num(v: Any) -> float:
    if isinstance(v, dict):  # newer Slurm: {"set": true, "number": N}
        v = v.get("number", 0)
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


def _state(v: Any) -> str:
    if isinstance(v, list):  # newer Slurm: ["RUNNING"]
        return str(v[0]) if v else ""
    return _str(v)


def parse_squeue(doc: Any) -> list[SlurmJob]:
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SlurmError("squeue --json: unexpected output (no 'jobs' list)")
    out: list[SlurmJob] = []
    for j in doc["jobs"]:
        try:
            out.append(SlurmJob(
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
            ))
        except (KeyError, TypeError, ValueError):
            continue  # one odd record must not hide the others
    return out


def parse_sinfo(doc: Any) -> list[SlurmNode]:
    if not isinstance(doc, dict):
        raise SlurmError("sinfo --json: unexpected output")
    nodes = doc.get("nodes")
    if nodes is None and isinstance(doc.get("sinfo"), list):  # newer layout
        nodes = [e.get("node", {}) | {"name": (e.get("nodes", {}).get("nodes") or [""])[0]}
                 for e in doc["sinfo"]]
    if not isinstance(nodes, list):
        raise SlurmError("sinfo --json: unexpected output (no 'nodes' list)")
    out = []
    for n in nodes:
        state = n.get("state", "")
        if isinstance(state, list):
            state = "+".join(str(s) for s in state)
        flags = n.get("state_flags") or []
        if flags:
            state = "+".join([str(state), *map(str, flags)])
        feats = n.get("active_features") or n.get("features") or ""
        if isinstance(feats, list):
            feats = ",".join(feats)
        out.append(SlurmNode(
            name=_str(n.get("name") or n.get("hostname")),
            state=str(state),
            gres=_str(n.get("gres")),
            gres_used=_str(n.get("gres_used")),
            features=tuple(f for f in str(feats).split(",") if f),
            partitions=tuple(str(x) for x in (n.get("partitions") or [])),
        ))
    return out


class JsonBackend:
    name = "json"

    def __init__(self, timeout_s: float = 10.0, squeue: str = "squeue", sinfo: str = "sinfo") -> None:
        self.timeout_s = timeout_s
        self.squeue = squeue
        self.sinfo = sinfo

    def _run(self, argv: list[str]) -> Any:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found: is slurm-client installed?") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{' '.join(argv)} timed out after {self.timeout_s:g}s") from None
        if p.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()[:300]}")
        try:
            return json.loads(p.stdout)
        except json.JSONDecodeError as e:
            raise SlurmError(f"{' '.join(argv)}: output is not JSON ({e.msg})") from None

    def jobs(self) -> list[SlurmJob]:
        return parse_squeue(self._run([self.squeue, "--json", "--all"]))

    def job(self, job_id: int) -> SlurmJob | None:
        try:
            doc = self._run([self.squeue, "--json", "--all", "--jobs", str(job_id)])
            if isinstance(doc, dict) and isinstance(doc.get("jobs"), list):
                # Slurm 22.05 ignores --jobs with --json: pick the job before parsing
                doc = {"jobs": [j for j in doc["jobs"]
                                if isinstance(j, dict) and _num(j.get("job_id")) == job_id]}
            found = parse_squeue(doc)
        except SlurmError:
            return None
        return next((j for j in found if j.job_id == job_id), None)

    def nodes(self) -> list[SlurmNode]:
        return parse_sinfo(self._run([self.sinfo, "--json"]))
