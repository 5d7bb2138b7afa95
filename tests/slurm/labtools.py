"""Helpers for tests against the single-node lab cluster (contrib/lab/up.sh --single)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import standin
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
LAB_DIR = Path(os.environ.get("LAB_DIR", "/var/lib/slurm-colo-lab"))
OUT = LAB_DIR / "out"
AGENT_PID = LAB_DIR / "agent.pid"
AGENT_LOG = LAB_DIR / "agent.log"
SOCKET = Path("/run/slurm-colo/agent.sock")
CTLD_LOG = Path("/var/log/slurm/slurmctld.log")
SCORES = LAB_DIR / "state" / "scores.json"
#: pairs the agent's probes measured, read back when it starts (agent/learned.py)
LEARNED = LAB_DIR / "state" / "learned.json"
LAB_CONFIG = Path("/etc/slurm-colo/config.toml")
#: the lab's installed copy (contrib/lab/up.sh --single), as the hooks and the agent run it
CLI = os.environ.get("LAB_CLI", "/opt/slurm-colo-lab/venv/bin/slurm-colo")
PY = "/opt/slurm-colo-lab/venv/bin/python"
SHARED_GPUS = {0, 1}
RETRY_AFTER_S = 2.0  # agent.retry_after_s in the lab config


@dataclass
class Submitted:
    rc: int
    job_id: int | None
    stdout: str
    stderr: str
    seconds: float


def run(
    argv: list[str], user: str | None = None, timeout: float = 60, check: bool = False
) -> subprocess.CompletedProcess[str]:
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=check, cwd="/tmp"
    )


def sbatch(
    *args: str, user: str | None = None, sleep: float = 8, script: str | None = None
) -> Submitted:
    body = script if script is not None else f"sleep {sleep}"
    argv = ["sbatch", "--parsable", "-o", str(OUT / "%j.out"), *args, "--wrap", body]
    t0 = time.perf_counter()
    p = run(argv, user=user)
    dt = time.perf_counter() - t0
    jid = int(p.stdout.strip().split(";")[0]) if p.returncode == 0 and p.stdout.strip() else None
    return Submitted(p.returncode, jid, p.stdout, p.stderr, dt)


def sbatch_array(spec: str, sleep: float) -> Submitted:
    """A ``--colocate --array=SPEC`` job array of alice's ``resnet18-bs32``, each task asking
    one GPU and sleeping ``sleep`` seconds; it must be accepted."""
    r = sbatch(
        f"--array={spec}",
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        user="alice",
        sleep=sleep,
    )
    assert r.rc == 0 and r.job_id is not None, r.stderr
    return r


def squeue() -> dict[int, dict[str, Any]]:
    p = run(["squeue", "--json", "--all"], check=True)
    return {int(j["job_id"]): j for j in json.loads(p.stdout)["jobs"]}


def gpu_of(job: dict[str, Any]) -> set[int]:
    """GPU indices a running job holds, read from Slurm's gres_detail."""
    from slurm_colo.slurm.model import parse_gres_detail

    out: set[int] = set()
    for g in parse_gres_detail(job.get("gres_detail")):
        if g.name in ("gpu", "shard") and g.count > 0:
            out.update(g.indices)
    return out


def kind_of(job: dict[str, Any]) -> str:
    tpn = str(job.get("tres_per_node") or "") + str(job.get("tres_per_job") or "")
    return "shard" if "shard" in tpn else "gpu" if "gpu" in tpn else "none"


def wait_running(*ids: int, timeout: float = 40) -> dict[int, dict[str, Any]]:
    def ok() -> dict[int, dict[str, Any]] | None:
        q = squeue()
        return q if all(q.get(i, {}).get("job_state") == "RUNNING" for i in ids) else None

    return wait_for(ok, timeout, what=f"jobs {ids} RUNNING")


def wait_done(*ids: int, timeout: float = 60) -> None:
    active = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING")
    wait_for(
        lambda: all(squeue().get(i, {}).get("job_state") not in active for i in ids),
        timeout,
        what=f"jobs {ids} finished",
    )


def agent_refresh() -> None:
    """Make the agent re-read Slurm now (instead of at its next refresh tick)."""
    from slurm_colo.contracts.client import request

    try:
        request(str(SOCKET), "RELOAD", {}, 5.0)
    except Exception:
        pass


def cancel_all() -> None:
    run(["scancel", "--full", "--state=PENDING"])
    run(["scancel", "--full", "--state=RUNNING"])
    active = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING")
    wait_for(
        lambda: not any(j["job_state"] in active for j in squeue().values()), 60, what="empty queue"
    )
    agent_refresh()


def ctld_log_mark() -> int:
    return CTLD_LOG.stat().st_size


def ctld_log_since(mark: int) -> str:
    with CTLD_LOG.open("rb") as f:
        f.seek(mark)
        return f.read().decode("utf-8", "replace")


def agent_pid() -> int | None:
    try:
        pid = int(AGENT_PID.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return None
    return None if state == "Z" else pid


def stop_agent() -> None:
    pid = agent_pid()
    if pid:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: agent_pid() is None, 10, 0.1, "agent exit")


def lab_up(shared: str | None = None) -> None:
    """``up.sh --single``; ``shared``: the GPUs of the lab's shared pool (``LAB_SHARED``,
    default 0-1)."""
    env = {**os.environ, "LAB_SHARED": shared} if shared is not None else None
    p = subprocess.run(
        ["bash", str(REPO / "contrib" / "lab" / "up.sh"), "--single"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    if p.returncode != 0:
        raise RuntimeError(
            f"contrib/lab/up.sh --single failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )


def start_agent() -> None:
    lab_up()  # idempotent: starts only what is missing


def forget_probe_measurements() -> None:
    """Restart the agent without what its probes measured, so a test that taught it a
    harmful pair leaves the lab's scores as they are for the tests after it."""
    stop_agent()
    LEARNED.unlink(missing_ok=True)
    start_agent()


def start_agent_only(config: Path = LAB_CONFIG, path_first: Path | None = None) -> None:
    """Start just the agent (up.sh would also re-create a missing score file), optionally
    with another configuration file, and with ``path_first`` ahead in its PATH."""
    from slurm_colo.contracts.client import request

    env = dict(os.environ, SLURM_COLO_CONFIG=str(config))
    if path_first is not None:
        env["PATH"] = f"{path_first}:{env.get('PATH', '/usr/bin:/bin')}"
    with AGENT_LOG.open("ab") as log:
        p = subprocess.Popen(
            [CLI, "agent"], stdout=log, stderr=log, env=env, start_new_session=True
        )
    AGENT_PID.write_text(f"{p.pid}\n")

    def up() -> bool:
        try:
            request(str(SOCKET), "PING", {}, 0.5)
            return True
        except Exception:
            return False

    wait_for(up, 15, 0.1, "agent answering")


@contextmanager
def agent_with(
    placement: str = "", scontrol_as: str | None = None, scontrol_before: str = ""
) -> Iterator[None]:
    """The agent restarted with ``placement`` lines added to the lab config's
    ``[placement]``, and with the lab's own config again afterwards. ``scontrol_as``: every
    ``scontrol`` the agent runs, runs as that user (an agent whose user Slurm does not let
    change other users' jobs). ``scontrol_before``: shell lines run before each of the
    agent's ``scontrol`` commands, with its arguments in ``$@`` and a scratch directory in
    ``$STATE`` (one that exits refuses the command the way Slurm would)."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "config.toml"
        cfg.write_text(
            LAB_CONFIG.read_text().replace("[placement]\n", f"[placement]\n{placement}", 1)
        )
        bin_dir = None
        if scontrol_as or scontrol_before:
            bin_dir = Path(tmp) / "bin"
            bin_dir.mkdir()
            wrapper = bin_dir / "scontrol"
            real = "/usr/bin/scontrol"
            run_as = f"runuser -u {scontrol_as} -- " if scontrol_as else ""
            wrapper.write_text(
                f'#!/bin/sh\nSTATE={tmp}\n{scontrol_before}\nexec {run_as}{real} "$@"\n'
            )
            wrapper.chmod(0o755)
        stop_agent()
        start_agent_only(cfg, bin_dir)
        try:
            yield
        finally:
            stop_agent()
            start_agent_only()


def agent_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run([CLI, *args], timeout=30)


def agent_status() -> dict[str, Any]:
    """The agent's ``slurm-colo status --json``."""
    p = agent_cli("status", "--json")
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip() or p.stdout.strip())
    return json.loads(p.stdout)


def standin_cmd() -> str:
    """The lab's stand-in training job, copied where the jobs' user can read it; returns how
    to run it."""
    return standin.standin_cmd(OUT, PY)
