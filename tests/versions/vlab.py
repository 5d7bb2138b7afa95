"""Helpers for the tests on the version labs (contrib/lab/versions/, `up.sh SUITE --colo`):
Slurm 24.11 (Debian trixie) and 26.05 (Debian sid), each in a chroot run in its own
namespaces, with slurm-colo installed inside. Every command runs inside the lab through
`exec.sh SUITE`, with the chroot's own Slurm clients and the chroot's slurm-colo venv."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from standin import standin_text
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
STATE = f"{CLAB}/state"
#: the lab's users (colo.sh makes them, with the host lab's uids where the host has them)
USERS = ("alice", "bob")
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
    def _script(
        self, name: str, *args: str, timeout: float = 900, env: dict[str, str] | None = None
    ) -> str:
        p = subprocess.run(
            ["bash", str(VERSIONS / name), self.suite, *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**_clean_env(), **(env or {})},
        )
        if p.returncode != 0:
            raise RuntimeError(
                f"{name} {self.suite} failed ({p.returncode}):\n"
                f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
            )
        return p.stdout

    def build(self) -> str:
        return self._script("build-chroot.sh")

    def up(self, **settings: str) -> str:
        """``up.sh --colo``; ``settings``: its environment settings (``NODE_GRES``), a
        changed one restarting the lab."""
        return self._script("up.sh", "--colo", env=settings)

    def down(self) -> str:
        return self._script("down.sh", timeout=60)

    def restart_slurm(self, gres: str) -> None:
        """Restart slurmctld and slurmd in place with ``gres`` as the node's ``Gres=`` (a
        GRES change needs a restart), keeping the jobs: ``up`` would start a fresh
        cluster. The next :meth:`up` sees the changed slurm.conf and starts afresh."""
        conf = self.host_path("/etc/slurm/slurm.conf")
        conf.write_text(re.sub(r"Gres=\S+", f"Gres={gres}", conf.read_text()))
        for daemon in ("slurmd", "slurmctld"):
            self.x("pkill", "-x", daemon)
            wait_for(
                lambda d=daemon: self.x("pgrep", "-x", d).returncode != 0,
                30,
                0.2,
                f"{daemon} gone",
            )
        self.x("slurmctld", check=True)
        wait_for(lambda: "UP" in self.x("scontrol", "ping").stdout, 30, 0.2, "slurmctld up")
        self.x("slurmd", check=True)
        wait_for(
            lambda: self.x("sinfo", "-h", "-n", self.node, "-o", "%T").stdout.strip() == "idle",
            40,
            0.2,
            f"{self.node} idle",
        )

    def host_path(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    # -- inside the lab ---------------------------------------------------------------------
    def x(
        self, *argv: str, timeout: float = 60, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(
            ["bash", str(VERSIONS / "exec.sh"), self.suite, *argv],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_clean_env(),
        )
        if check and p.returncode != 0:
            raise AssertionError(f"{argv} failed ({p.returncode}): {p.stdout}{p.stderr}")
        return p

    def sbatch(self, *args: str, script: str = "sleep 8", user: str | None = None) -> Submitted:
        """Submit as root, or as ``user``; the job's output goes to ``CLAB/out/JOBID.out``."""
        who = ("runuser", "-u", user, "--") if user else ()
        argv = ("sbatch", "--parsable", "-o", f"{CLAB}/out/%j.out", *args, "--wrap", script)
        p = self.x(*who, *argv)
        out = p.stdout.strip()
        jid = int(out.split(";")[0]) if p.returncode == 0 and out else None
        return Submitted(p.returncode, jid, p.stdout, p.stderr)

    def squeue(self) -> dict[int, dict[str, Any]]:
        """Slurm's own JSON, unparsed (job_state is a list on 24.11+)."""
        doc = json.loads(self.x("squeue", "--json", check=True).stdout)
        return {int(j["job_id"]): j for j in doc["jobs"]}

    def squeue_all(self) -> dict[int, dict[str, Any]]:
        """As :meth:`squeue`, finished jobs included (``--states=all``: on 24.11+ a finished
        job leaves the plain listing a few seconds after it ends)."""
        doc = json.loads(self.x("squeue", "--json", "--states=all", check=True).stdout)
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
            "'user': j.user, 'start_time': j.start_time,"
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

    def job_output(self, job_id: int) -> str:
        """What the job has written to its output file so far ("" before it has one)."""
        try:
            return self.host_path(f"{CLAB}/out/{job_id}.out").read_text()
        except FileNotFoundError:
            return ""

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
        self.stop_agent()
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

    def records(self, since: float, limit: int = 50) -> dict[int, dict[str, Any]]:
        """Job records in the history (after ``slurm-colo spool ingest``) of jobs that started
        at ``since`` or later, by job id: job ids start at 1 again with every fresh lab, and
        the history keeps the records of earlier runs."""
        self.cli("spool", "ingest")
        out = self.cli("history", "--json", "--limit", str(limit)).stdout
        recs = [r for r in map(json.loads, out.splitlines()) if r["start_time"] >= since]
        return {r["job_id"]: r for r in sorted(recs, key=lambda r: r["start_time"])}

    def wait_agent_idle(self, timeout: float = 30) -> None:
        """Wait until the agent's view has no job on any shared GPU (after
        :meth:`cancel_all`): a job that never ran has no Epilog to report its end, and the
        agent drops it only at its next look at Slurm, where the next test would find it."""
        wait_for(
            lambda: not any(g["occupants"] for g in self.status()["gpus"]),
            timeout,
            0.5,
            f"the agent's view empty on {self.version}",
        )

    def status(self) -> dict[str, Any]:
        """The agent's ``slurm-colo status --json``."""
        p = self.cli("status", "--json")
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(p.stdout)

    def write_file(self, inside: str, text: str) -> str:
        """Write a file readable by the lab's users (a job script); returns ``inside``."""
        path = self.host_path(inside)
        path.write_text(text)
        path.chmod(0o644)
        return inside

    def standin_cmd(self) -> str:
        """The lab's stand-in training job (contrib/lab/standin_job.py) inside the chroot,
        where the jobs' user can read it; returns how to run it."""
        return f"{PY} {self.write_file(f'{CLAB}/out/standin_job.py', standin_text())}"

    @contextmanager
    def agent_config(self, **placement: str | float) -> Iterator[None]:
        """The agent restarted with these ``[placement]`` settings (a copy of the lab's
        config), and with the lab's own config again afterwards."""
        text = self.host_path(CONFIG).read_text()
        for key, value in placement.items():
            line = f"{key} = {json.dumps(value)}"
            text, n = re.subn(rf"(?m)^{key} = .*$", line, text)
            if n == 0:
                text = text.replace("[placement]\n", f"[placement]\n{line}\n", 1)
        path = self.write_file(f"{CLAB}/test-config.toml", text)
        self.restart_agent(path)
        try:
            yield
        finally:
            self.cancel_all()
            self.restart_agent()

    def forget_probe_measurements(self) -> None:
        """Restart the agent without what its probes measured (``learned.json``), so that a
        test that taught it a harmful pair leaves the lab's scores as they were."""
        self.stop_agent()
        self.host_path(f"{STATE}/learned.json").unlink(missing_ok=True)
        self.restart_agent()

    @contextmanager
    def history_kept(self) -> Iterator[None]:
        """The lab's history, score set and probe measurements as they are now, put back
        afterwards (for a test that records faults and retrains); the agent is stopped for
        the copy and for the restore."""
        state = self.host_path(STATE)
        saved = state.with_name("state.saved")
        self.stop_agent()
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(state, saved)
        self.restart_agent()
        try:
            yield
        finally:
            self.cancel_all()
            self.stop_agent()
            shutil.rmtree(state)
            saved.rename(state)
            self.restart_agent()

    def stop_agent(self) -> None:
        pid = self.agent_pid()
        if pid:
            self.x("kill", str(pid), check=True)
            wait_for(lambda: self.agent_pid() is None, 15, 0.2, "the agent to stop")


def number(value: Any) -> Any:
    """A number of Slurm's JSON: plain (22.05) or ``{"set", "infinite", "number"}`` (24.11+)."""
    return value.get("number") if isinstance(value, dict) else value


def _clean_env() -> dict[str, str]:
    """The caller's environment without PYTHONPATH: the lab scripts start daemons."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
