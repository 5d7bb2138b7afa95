"""Slurm snapshots taken in a child process, so the agent never parses Slurm's output itself.

In Slurm 22.05 ``squeue --json`` ignores its filter options and lists every job slurmctld
still holds, finished ones included (for ``MinJobAge``, 300 s by default): megabytes of JSON
on a busy cluster. Parsing that inside the agent holds Python's interpreter lock for
hundreds of milliseconds at every refresh, and placement requests from slurmctld wait
behind it. So the agent's periodic refresh runs ``python -m slurm_colo.slurm.snapshot``:
the child reads Slurm through the configured backend and prints only what the agent's
view needs (jobs pending or running, all nodes) as one compact JSON document, which the
agent decodes in about a millisecond.

:func:`encode` and :func:`decode` are pure; :class:`ChildSnapshots` runs the child.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict

from ..errors import SlurmError
from .model import GresAlloc, SlurmJob, SlurmNode

FORMAT = "slurm-colo-snapshot/1"


def wanted(job: SlurmJob) -> bool:
    """Jobs the agent's view uses: running (or about to end) and pending ones."""
    return job.active or job.state == "PENDING"


def encode(jobs: list[SlurmJob], nodes: list[SlurmNode]) -> str:
    doc = {
        "format": FORMAT,
        "jobs": [asdict(j) for j in jobs if wanted(j)],
        "nodes": [asdict(n) for n in nodes],
    }
    return json.dumps(doc, separators=(",", ":"))


def decode(text: str) -> tuple[list[SlurmJob], list[SlurmNode]]:
    """The child's output back into records; anything malformed raises :class:`SlurmError`."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} document")
        jobs = []
        for j in doc["jobs"]:
            gres = tuple(
                GresAlloc(g["name"], g["type"], int(g["count"]), tuple(g["indices"]))
                for g in j.pop("gres")
            )
            jobs.append(SlurmJob(**j, gres=gres))
        nodes = [
            SlurmNode(
                **(n | {"features": tuple(n["features"]), "partitions": tuple(n["partitions"])})
            )
            for n in doc["nodes"]
        ]
    except (ValueError, KeyError, TypeError) as e:
        raise SlurmError(f"slurm snapshot: malformed output ({e})") from None
    return jobs, nodes


class ChildSnapshots:
    """Takes snapshots through ``python -m slurm_colo.slurm.snapshot --backend KIND``."""

    def __init__(self, kind: str, timeout_s: float = 30.0, python: str = sys.executable) -> None:
        self.kind = kind
        self.timeout_s = timeout_s
        self.argv = [python, "-m", "slurm_colo.slurm.snapshot", "--backend", kind]

    def take(self) -> tuple[list[SlurmJob], list[SlurmNode]]:
        try:
            p = subprocess.run(
                self.argv, capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise SlurmError(f"slurm snapshot timed out after {self.timeout_s:g}s") from None
        except OSError as e:
            raise SlurmError(f"slurm snapshot could not start: {e.strerror}") from None
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["no message"])[-1]
            raise SlurmError(f"slurm snapshot failed ({p.returncode}): {last[:300]}")
        return decode(p.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m slurm_colo.slurm.snapshot",
        description="Print the agent's compact view of Slurm (jobs and nodes).",
    )
    ap.add_argument("--backend", default="auto", choices=("auto", "json", "pyslurm"))
    a = ap.parse_args(argv)
    from .gate import open_backend

    try:
        backend = open_backend(a.backend)
        out = encode(backend.jobs(), backend.nodes())
    except SlurmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
