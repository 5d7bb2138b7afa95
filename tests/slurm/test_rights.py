"""How the real scontrol refuses the agent's changes when its user lacks the right (not
root, not SlurmUser, no Operator level): each refusal must read as a missing right
(agent/rights.py), so the agent stops holding jobs only it could release."""

from __future__ import annotations

from rights_probe import REFUSALS_SCRIPT, check_refusals

from .labtools import PY, run, sbatch, squeue, wait_running


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
