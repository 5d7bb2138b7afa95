"""Helpers for the tests on the version labs (contrib/lab/versions/, `up.sh SUITE --colo`):
Slurm 24.11 (Debian trixie) and 26.05 (Debian sid), each in a chroot run in its own
namespaces, with slurm-colo installed inside. Every command runs inside the lab through
`exec.sh SUITE`, with the chroot's own Slurm clients and the chroot's slurm-colo venv."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
VERSIONS = REPO / "contrib" / "lab" / "versions"
VERSIONS_ROOT = Path(os.environ.get("VERSIONS_ROOT", "/var/lib/slurm-colo-versions"))
#: Slurm version -> Debian suite of its lab
SUITES = {"24.11": "trixie", "26.05": "sid"}
#: inside the chroot (contrib/lab/versions/colo.sh)
CLAB = "/opt/slurm-colo-lab"
CLI = f"{CLAB}/venv/bin/slurm-colo"
PY = f"{CLAB}/venv/bin/python"
CONFIG = "/etc/slurm-colo/config.toml"
SHARED_GPUS = {0, 1}
ACTIVE = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING")


def selected_versions() -> list[str]:
    """The versions to test: $SLURM_VERSIONS ("24.11 26.05", commas allowed), else all.
    22.05 is the host lab (tests/slurm) and has no entry here."""
    raw = os.environ.get("SLURM_VERSIONS", "").replace(",", " ").split()
    return [v for v in (raw or list(SUITES)) if v in SUITES]


@dataclass
class Submitted:
    rc: int
    job_id: int | None
    stdout: str
    stderr: str


class VersionLab:
    def __init__(self, version: str) -> None:
        self.version = version
        self.suite = SUITES[version]
        self.node = f"colo-{self.suite}"
        self.root = VERSIONS_ROOT / self.suite

    # -- lab life cycle (host side) -------------------------------------------------------
    def _script(self, name: str, *args: str, timeout: float = 900) -> str:
        p = subprocess.run(
            ["bash", str(VERSIONS / name), self.suite, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_clean_env(),
        )
        if p.returncode != 0:
            raise RuntimeError(
                f"{name} {self.suite} failed ({p.returncode}):\n"
                f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
            )
        return p.stdout

    def build(self) -> str:
        return self._script("build-chroot.sh")

    def up(self) -> str:
        return self._script("up.sh", "--colo")

    def down(self) -> str:
        return self._script("down.sh", timeout=60)

    def host_path(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    # -- inside the lab ---------------------------------------------------------------------
    def x(
        self, *argv: str, timeout: float = 60, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(
            ["bash", str(VERSIONS / "exec.sh"), self.suite, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_clean_env(),
        )
        if check and p.returncode != 0:
            raise AssertionError(f"{argv} failed ({p.returncode}): {p.stdout}{p.stderr}")
        return p

    def sbatch(self, *args: str, script: str = "sleep 8") -> Submitted:
        p = self.x("sbatch", "--parsable", "-o", f"{CLAB}/out/%j.out", *args, "--wrap", script)
        out = p.stdout.strip()
        jid = int(out.split(";")[0]) if p.returncode == 0 and out else None
        return Submitted(p.returncode, jid, p.stdout, p.stderr)

    def squeue(self) -> dict[int, dict[str, Any]]:
        """Slurm's own JSON, unparsed (job_state is a list on 24.11+)."""
        doc = json.loads(self.x("squeue", "--json", check=True).stdout)
        return {int(j["job_id"]): j for j in doc["jobs"]}

    def backend(self, *ids: int) -> dict[str, Any]:
        """What slurm-colo's own JSON backend (as the agent uses it) reads: the queue, plus
        the jobs ``ids`` looked up one by one (on 24.11+ a finished job is no longer in the
        plain ``squeue --json`` but still answers ``squeue --json --jobs ID``)."""
        code = (
            "import json, sys; from slurm_colo.slurm import open_backend\n"
            "b = open_backend('json')\n"
            "jobs = {j.job_id: j for j in b.jobs()}\n"
            "for i in map(int, sys.argv[1:]):\n"
            "    if i not in jobs and (j := b.job(i)) is not None: jobs[i] = j\n"
            "print(json.dumps({'version': list(b.version or ()), 'jobs': {j.job_id: {"
            "'state': j.state, 'tres_per_node': j.tres_per_node, 'comment': j.comment,"
            "'admin_comment': j.admin_comment, 'nodes': j.nodes, 'state_reason': j.state_reason,"
            "'gres': [[g.name, g.type, g.count, list(g.indices)] for g in j.gres]}"
            " for j in jobs.values()}}))"
        )
        out = json.loads(self.x(PY, "-c", code, *map(str, ids), check=True).stdout)
        out["jobs"] = {int(k): v for k, v in out["jobs"].items()}
        return out

    def jobs(self, *ids: int) -> dict[int, dict[str, Any]]:
        return self.backend(*ids)["jobs"]

    def wait_running(self, *ids: int, timeout: float = 40) -> dict[int, dict[str, Any]]:
        def ok() -> dict[int, dict[str, Any]] | None:
            q = self.jobs()
            return q if all(q.get(i, {}).get("state") == "RUNNING" for i in ids) else None

        return wait_for(ok, timeout, what=f"jobs {ids} RUNNING on {self.version}")

    def wait_done(self, *ids: int, timeout: float = 60) -> dict[int, dict[str, Any]]:
        def ok() -> dict[int, dict[str, Any]] | None:
            q = self.jobs(*ids)
            return q if all(q.get(i, {}).get("state") not in ACTIVE for i in ids) else None

        return wait_for(ok, timeout, what=f"jobs {ids} finished on {self.version}")

    def cancel_all(self) -> None:
        self.x("scancel", "--full", "--state=PENDING")
        self.x("scancel", "--full", "--state=RUNNING")
        wait_for(
            lambda: not any(j["state"] in ACTIVE for j in self.jobs().values()),
            60,
            what="empty queue",
        )

    def job_env(self, job_id: int) -> dict[str, str]:
        """KEY=VALUE lines the job printed with `env` (its output file)."""
        text = self.host_path(f"{CLAB}/out/{job_id}.out").read_text()
        return dict(
            line.split("=", 1)
            for line in text.splitlines()
            if re.match(r"^[A-Z_][A-Z0-9_]*=", line)
        )

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.x("env", f"SLURM_COLO_CONFIG={CONFIG}", CLI, *args, timeout=timeout)

    def agent_pid(self) -> int | None:
        pidfile = f"{CLAB}/agent.pid"
        alive = f"[ -s {pidfile} ] && kill -0 $(cat {pidfile}) && cat {pidfile}"
        p = self.x("/bin/sh", "-c", alive)
        return int(p.stdout) if p.returncode == 0 and p.stdout.strip() else None

    def restart_agent(self, config: str = CONFIG) -> None:
        """Stop the lab's agent (the PID it was started with, inside the lab) and start it
        again with ``config`` (a path inside the chroot)."""
        pid = self.agent_pid()
        if pid:
            self.x("kill", str(pid), check=True)
            wait_for(lambda: self.agent_pid() is None, 15, 0.2, "the agent to stop")
        self.x(
            "/bin/sh",
            "-c",
            f"SLURM_COLO_CONFIG={config} setsid nohup {CLI} agent >>{CLAB}/agent.log 2>&1 "
            f"</dev/null & echo $! > {CLAB}/agent.pid",
            check=True,
        )
        ping = (
            "import sys; from slurm_colo.config import load_config; "
            "from slurm_colo.contracts.client import ping; "
            f"sys.exit(0 if ping(load_config({config!r})) else 1)"
        )
        wait_for(lambda: self.x(PY, "-c", ping).returncode == 0, 20, 0.3, "the agent answering")


def _clean_env() -> dict[str, str]:
    """The caller's environment without PYTHONPATH: the lab scripts start daemons."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
