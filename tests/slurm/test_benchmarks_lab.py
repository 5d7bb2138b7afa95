"""The two benchmarks that submit jobs (``submit_latency.py``, ``submit_rate.py``), run small
on the lab: that they run and print their figures, cancel only their own jobs, leave the
lab's slurm.conf and job_submit.lua as they found them, and refuse to report figures that
the hook's fail-open path made. How fast anything was is not checked (figures at these
sizes say nothing)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import labtools as lt

CONF = Path("/etc/slurm/slurm.conf")
HOOK = Path("/etc/slurm/job_submit.lua")


def bench(*argv: str, timeout: float = 420) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=lt.REPO,
        check=False,
    )


@pytest.fixture()
def bystander(clean: None) -> Iterator[int]:
    """A held job of the lab's own, which the benchmarks must not cancel."""
    r = lt.sbatch("--hold", "-J", "not-the-bench", "--gres=gpu:1")
    assert r.job_id is not None, r.stderr
    yield r.job_id


def _rows(out: str) -> dict[str, list[float]]:
    """The latency table's rows: kind -> min, median, p90, p99, ratio."""
    rows: dict[str, list[float]] = {}
    for line in out.splitlines():
        m = re.match(r"(without|plugin|with)\s+([\d. ]+)$", line.strip())
        if m:
            rows[m.group(1)] = [float(x) for x in m.group(2).split()]
    return rows


def _left(queue: dict[int, dict[str, object]], name: str) -> list[int]:
    """Jobs named ``name`` still pending or running (cancelled ones stay listed a while)."""
    active = ("PENDING", "RUNNING", "CONFIGURING")
    return [i for i, j in queue.items() if j["name"] == name and j["job_state"] in active]


def _min_job_age() -> str:
    out = lt.run(["scontrol", "show", "config"], check=True).stdout
    return next(ln for ln in out.splitlines() if ln.startswith("MinJobAge"))


def test_submit_latency_reports_and_cancels_only_its_jobs(bystander: int) -> None:
    hook = HOOK.read_bytes()
    p = bench("benchmarks/submit_latency.py", "--n", "4")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = _rows(p.stdout)
    assert sorted(rows) == ["plugin", "with", "without"], p.stdout
    assert all(len(v) == 5 and v[0] <= v[1] <= v[2] <= v[3] for v in rows.values()), rows
    assert rows["without"][4] == 1.0  # each median against the plain one's
    assert re.search(r"median ratio with/without \d+\.\d{3} .* p99 difference [+-]\d", p.stdout)
    queue = lt.squeue()
    assert _left(queue, "not-the-bench") == [bystander], "it cancelled a job not its own"
    assert not _left(queue, "colo-latency-bench")
    assert HOOK.read_bytes() == hook


def test_submit_latency_floor_puts_the_hook_back(clean: None) -> None:
    hook = HOOK.read_bytes()
    node = socket.gethostname().split(".")[0]
    p = bench("benchmarks/submit_latency.py", "--n", "3", "--floor", f"{node}:v100_s0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "(floor: minimal hook, no agent)" in p.stdout
    assert HOOK.read_bytes() == hook
    r = lt.sbatch("--hold", "--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1")
    assert r.job_id is not None, r.stderr
    assert "benchmark floor" not in lt.squeue()[r.job_id]["comment"]


def test_submit_latency_refuses_the_fail_open_path(restore_agent: None) -> None:
    lt.stop_agent()
    p = bench("benchmarks/submit_latency.py", "--n", "2")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "5 of 5 'with' jobs got the hook's fail-open answer" in p.stderr, p.stderr
    assert "not the suite's" in p.stderr
    assert not _left(lt.squeue(), "colo-latency-bench")


def test_submit_rate_reports_and_puts_the_lab_back(bystander: int) -> None:
    conf, hook, age = CONF.read_bytes(), HOOK.read_bytes(), _min_job_age()
    p = bench("benchmarks/submit_rate.py", "--seconds", "2", "--rounds", "1", "--clients", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    for setup in ("hook", "minimal", "none"):
        m = re.search(rf"^{setup}\s+mean\s+([\d.]+) submissions/s", p.stdout, re.M)
        assert m and float(m.group(1)) > 0, p.stdout
    assert "restored: JobSubmitPlugins=lua" in p.stdout
    assert re.search(r"hook/minimal \d+\.\d{3} \(target >= 0\.95\)", p.stdout)
    assert CONF.read_bytes() == conf
    assert HOOK.read_bytes() == hook
    assert _min_job_age() == age  # slurmctld runs the lab's configuration again
    assert _left(lt.squeue(), "not-the-bench") == [bystander], "it cancelled a job not its own"
