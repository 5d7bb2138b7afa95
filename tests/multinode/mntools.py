"""Helpers for tests against the multi-node lab (contrib/lab/multinode/up.sh): a controller
``colo-head`` with the slurm-colo agent and three GPU nodes, each in its own namespaces.
Every command runs inside a node through ``exec.sh``; nothing here talks to the host's
single-node lab."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import standin
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
MN = REPO / "contrib" / "lab" / "multinode"
MN_DIR = Path(os.environ.get("MN_DIR", "/var/lib/slurm-colo-multinode"))
OUT = MN_DIR / "out"
HEAD = "colo-head"
HEAD_ADDR = "10.77.0.1"
AGENT_PORT = 6830
AGENT_PID = MN_DIR / "nodes" / HEAD / "run" / "slurm-colo-agent.pid"
AGENT_LOG = MN_DIR / "nodes" / HEAD / "log" / "slurm-colo-agent.log"
VENV = Path("/opt/slurm-colo-multinode/venv")
CLI = str(VENV / "bin" / "slurm-colo")
PY = str(VENV / "bin" / "python")
ACTIVE = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING")


def _env() -> dict[str, str]:
    # the lab's own venv, never this checkout: no PYTHONPATH into jobs, hooks or the agent
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SLURM_CONF")}


def run(
    argv: list[str], timeout: float = 60, check: bool = False
) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, cwd=str(OUT), env=_env()
    )
    if check and p.returncode != 0:
        raise AssertionError(
            f"{argv} failed ({p.returncode}): {p.stdout[-2000:]} {p.stderr[-2000:]}"
        )
    return p


def in_node(
    node: str, *argv: str, user: str | None = None, timeout: float = 60, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` inside ``node``'s network, mount and UTS namespaces (exec.sh)."""
    pre = ["bash", str(MN / "exec.sh")] + (["--user", user] if user else []) + [node]
    return run([*pre, *argv], timeout=timeout, check=check)


def script(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run(["bash", str(MN / name), *args], timeout=timeout, check=True)


def lab_up() -> None:
    script("up.sh", timeout=900)


@dataclass
class Submitted:
    job_id: int
    stderr: str


def sbatch(*args: str, user: str = "alice", body: str = "sleep 5") -> Submitted:
    p = in_node(
        HEAD, "sbatch", "--parsable", "-o", str(OUT / "%j.out"), *args, "--wrap", body, user=user
    )
    assert p.returncode == 0 and p.stdout.strip(), f"sbatch failed: {p.stdout} {p.stderr}"
    return Submitted(int(p.stdout.strip().split(";")[0]), p.stderr)


def squeue() -> dict[int, dict[str, Any]]:
    p = in_node(HEAD, "squeue", "--json", "--all", check=True)
    return {int(j["job_id"]): j for j in json.loads(p.stdout)["jobs"]}


def gres_detail(job: dict[str, Any]) -> list[str]:
    return [str(x) for x in job.get("gres_detail") or []]


def wait_running(*ids: int, timeout: float = 40) -> dict[int, dict[str, Any]]:
    def ok() -> dict[int, dict[str, Any]] | None:
        q = squeue()
        return q if all(q.get(i, {}).get("job_state") == "RUNNING" for i in ids) else None

    return wait_for(ok, timeout, what=f"jobs {ids} RUNNING")


def wait_done(*ids: int, timeout: float = 60) -> dict[int, dict[str, Any]]:
    def ok() -> dict[int, dict[str, Any]] | None:
        q = squeue()
        return q if all(q.get(i, {}).get("job_state") not in ACTIVE for i in ids) else None

    return wait_for(ok, timeout, what=f"jobs {ids} finished")


def cancel_all() -> None:
    in_node(HEAD, "scancel", "--full", "--state=PENDING")
    in_node(HEAD, "scancel", "--full", "--state=RUNNING")
    wait_for(
        lambda: not any(j["job_state"] in ACTIVE for j in squeue().values()), 60, what="empty queue"
    )


def job_env(job_id: int) -> dict[str, str]:
    text = (OUT / f"{job_id}.out").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def node_status(node: str) -> dict[str, Any]:
    """``slurm-colo node status --json`` inside ``node`` (its own config and run dir)."""
    return json.loads(in_node(node, CLI, "node", "status", "--json", check=True).stdout)


def agent_status() -> dict[str, Any]:
    return json.loads(in_node(HEAD, CLI, "status", "--json", check=True).stdout)


def history(limit: int = 200) -> list[dict[str, Any]]:
    """The head node's SQLite history, newest first."""
    out = in_node(HEAD, CLI, "history", "--json", "--limit", str(limit), check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def records_of(job_id: int) -> list[dict[str, Any]]:
    return [r for r in history() if r["job_id"] == job_id]


def spool_pending(node: str) -> list[str]:
    """Record files the node has spooled and not yet shipped (``done/`` holds the shipped)."""
    d = MN_DIR / "nodes" / node / "colo-spool"
    return sorted(p.name for p in d.glob("*.json")) if d.is_dir() else []


def agent_pid() -> int | None:
    try:
        pid = int(AGENT_PID.read_text().strip())
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (OSError, ValueError, IndexError):
        return None
    return None if state == "Z" else pid


def stop_agent() -> None:
    pid = agent_pid()
    if pid:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: agent_pid() is None, 10, 0.1, "agent exit")


def start_agent() -> None:
    script("colo.sh", "agent", timeout=60)


def node_pids(node: str) -> list[int]:
    """Live processes in ``node``'s mount namespace (its slurmd, slurmstepd, jobs, MPS)."""
    ino = os.stat(MN_DIR / "ns" / f"{node}.mnt").st_ino
    want = f"mnt:[{ino}]"
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if os.readlink(p / "ns" / "mnt") == want and (p / "stat").read_text().split()[2] != "Z":
                pids.append(int(p.name))
        except (OSError, IndexError):
            continue
    return pids


def standin_cmd() -> str:
    """The lab's stand-in training job, copied where the jobs' user can read it on the GPU
    nodes; returns how to run it."""
    return standin.standin_cmd(OUT, PY)
