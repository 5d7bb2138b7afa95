"""How the real scontrol refuses the agent's changes when its user lacks the right (not
root, not SlurmUser, no Operator level): each refusal must read as a missing right
(agent/rights.py), so the agent stops holding jobs only it could release."""

from __future__ import annotations

import json
from typing import Any

from rights_probe import REFUSALS_SCRIPT, check_refusals

from .labtools import (
    LAB_DIR,
    PY,
    Submitted,
    agent_cli,
    agent_refresh,
    agent_with,
    run,
    sbatch,
    squeue,
    wait_for,
    wait_running,
)


def test_a_change_to_another_users_job_is_refused_for_the_right(clean: None) -> None:
    job = sbatch("--time=5", user="bob", sleep=60)
    assert job.job_id is not None, job.stderr
    before = wait_running(job.job_id)[job.job_id]
    # alice may change only her own jobs
    p = run([PY, "-c", REFUSALS_SCRIPT, str(job.job_id)], user="alice", timeout=60)
    assert p.returncode == 0, p.stderr
    check_refusals(p.stdout)
    after = squeue()[job.job_id]
    assert after["job_state"] == before["job_state"]
    assert after["time_limit"] == before["time_limit"]


def _colo(cls: str, sleep: float) -> Submitted:
    return sbatch(
        "--colocate", f"--colocate-class={cls}", "--gres=gpu:1", user="alice", sleep=sleep
    )


def test_an_agent_without_the_right_holds_no_new_job_and_says_so(clean: None) -> None:
    agent_log = LAB_DIR / "agent.log"
    mark = agent_log.stat().st_size if agent_log.exists() else 0
    # the whole agent, with every scontrol it runs run as bob: Slurm refuses it alice's jobs
    with agent_with('unplaced = "hold"\n', scontrol_as="bob"):
        # the two shared GPUs take one incompatible job each; the third fits neither
        a, b = _colo("recommendation-bs512", 40), _colo("resnet50-bs16", 40)
        wait_running(a.job_id, b.job_id)
        # not refused yet: held at submission, for the agent to release
        c = _colo("recommendation-bs8192", 3)
        assert c.rc == 0 and "held until a shared GPU fits" in c.stderr, c.stderr
        # the agent's first change (making c's hold the administrator's) is refused

        def refused() -> dict[str, Any] | None:
            agent_refresh()
            st: dict[str, Any] = json.loads(agent_cli("status", "--json").stdout)
            return st if st["slurm_changes"]["refused"] else None

        st = wait_for(refused, 30, 0.5, "the agent to find itself refused")
        assert "Invalid user id" in st["slurm_changes"]["refused"]
        assert "NOT made" in agent_cli("status").stdout
        # from now on an unplaced job is not held: it keeps its own-GPU request and runs
        d = _colo("recommendation-bs8192", 3)
        assert d.rc == 0 and "held" not in d.stderr, d.stderr
        qd = squeue()[d.job_id]
        assert qd["priority"] > 0 and "gpu" in (qd["tres_per_node"] or "")
        assert qd["comment"].endswith("not held: Slurm refuses the agent the right to release it")
        wait_for(
            lambda: squeue()[d.job_id]["job_state"] == "COMPLETED", 60, 1.0, "d to run and end"
        )
        # c, held before the refusal, still waits: the admin's `held --release` lets it go
        assert squeue()[c.job_id]["job_state"] == "PENDING"
        out = agent_cli("held", "--release")
        assert out.returncode == 0 and f"job {c.job_id}" in out.stdout, out.stdout + out.stderr
        wait_for(
            lambda: squeue()[c.job_id]["job_state"] == "COMPLETED", 90, 1.0, "c released and run"
        )
        # logged once, naming c, whatever the agent tried again meanwhile
        with agent_log.open("rb") as f:
            f.seek(mark)
            log = f.read().decode("utf-8", "replace")
        assert log.count("Slurm refuses the agent the right to change jobs") == 1
        assert f"of job {c.job_id}: " in log.split("Slurm refuses the agent the right")[1][:200]
