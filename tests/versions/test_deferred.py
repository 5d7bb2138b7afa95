"""Jobs that may not start yet (``--dependency``, ``--begin``) on Slurm 24.11 and 26.05:
held at submission without a GPU request, and released onto a shared GPU once Slurm lets
them start (its JSON lists what a held job waits for as 22.05's does)."""

from __future__ import annotations

from .vlab import SHARED_GPUS, VersionLab, wait_for

HELD = "colo: held until it may start (a dependency or a begin time), then placed"


def test_jobs_waiting_for_a_dependency_or_a_begin_time_are_placed_once_they_may_start(
    vclean: VersionLab,
) -> None:
    lab = vclean
    args = ("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1")
    first = lab.sbatch(*args, script="sleep 10")
    assert first.rc == 0 and first.job_id is not None, first.stderr
    after = lab.sbatch(*args, f"--dependency=afterok:{first.job_id}", script="sleep 30")
    later = lab.sbatch(*args, "--begin=now+20", script="sleep 30")
    for r in (after, later):
        assert r.rc == 0 and r.job_id is not None, r.stderr
        assert "held until its dependency or begin time lets it start" in r.stderr
    ids = (after.job_id, later.job_id)

    def both_locked() -> dict[int, dict[str, object]] | None:
        q = lab.jobs()
        return q if all(q[i]["state_reason"] == "JobHeldAdmin" for i in ids) else None

    q = wait_for(both_locked, 30, what=f"both held by the agent on {lab.version}")
    for i in ids:
        assert q[i]["comment"] == HELD and q[i]["tres_per_node"] == "", q[i]
    waiting = {h["job_id"]: h["waits_to_start"] for h in lab.status()["held"]}
    assert waiting[after.job_id].startswith("its dependency (afterok:"), waiting
    assert waiting[later.job_id] == "its begin time", waiting
    for i in (later.job_id, after.job_id):
        j = lab.wait_running(i, timeout=150)[i]
        assert str(j["comment"]).startswith("colo: released onto GPU "), j
        assert j["tres_per_node"].startswith("gres/shard:v100_s"), j
        [(name, _, _, idx)] = j["gres"]
        assert name == "shard" and set(idx) <= SHARED_GPUS, j
