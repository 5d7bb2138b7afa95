"""Jobs that may not start yet (``--dependency``, ``--begin``), on the real Slurm: held at
submission, keeping no place on a shared GPU while they wait, and placed once they may
start."""

from __future__ import annotations

from slurm_colo.contracts.placement import Placement

from .labtools import (
    SHARED_GPUS,
    agent_cli,
    agent_status,
    gpu_of,
    kind_of,
    sbatch,
    squeue,
    wait_for,
    wait_running,
)

HELD = "colo: held until it may start (a dependency or a begin time), then placed"


def test_jobs_waiting_for_a_dependency_or_a_begin_time_are_placed_once_they_may_start(
    clean: None,
) -> None:
    first = sbatch(
        "--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="alice", sleep=10
    )
    assert first.rc == 0 and first.job_id is not None, first.stderr
    after = sbatch(
        "--colocate",
        "--colocate-class=resnet18-bs64",
        "--gres=gpu:1",
        f"--dependency=afterok:{first.job_id}",
        user="alice",
        sleep=30,
    )
    later = sbatch(
        "--colocate", "--colocate-class=resnet18-bs64", "--gres=gpu:1", "--begin=now+20",
        user="alice", sleep=30,
    )  # fmt: skip
    for r in (after, later):
        assert r.rc == 0 and r.job_id is not None, r.stderr
        assert "held until its dependency or begin time lets it start" in r.stderr
    ids = (after.job_id, later.job_id)

    def both_locked() -> dict[int, dict[str, object]] | None:
        q = squeue()
        return q if all(q[i]["state_reason"] == "JobHeldAdmin" for i in ids) else None

    q = wait_for(both_locked, 30, what="both held by the agent (no GPU request of their own)")
    for i in ids:
        assert q[i]["comment"] == HELD and kind_of(q[i]) == "none", q[i]
    st = agent_status()
    waiting = {h["job_id"]: h["waits_to_start"] for h in st["held"]}
    assert waiting[after.job_id].startswith("its dependency (afterok:")
    assert waiting[later.job_id] == "its begin time"
    # no place is kept for them: no GPU lists either, by job or by its placement's token
    theirs = set(map(str, ids))
    for i in ids:
        tag = Placement.from_tag(str(q[i]["admin_comment"]))
        assert tag is not None and tag.held == "*", q[i]
        theirs.add(tag.token)
    occupants = [o for g in st["gpus"] for o in g.get("occupants") or []]
    assert not {str(o.get("job_id")) for o in occupants} & theirs, occupants
    assert not {str(o.get("key")) for o in occupants} & theirs, occupants
    out = agent_cli("status").stdout
    assert f"held: job {after.job_id} " in out and "may not start yet" in out
    # Slurm lets each start (the begin time passes; the first job ends and Slurm clears the
    # dependency of a held job at its next pass, up to a minute later): each is released
    # onto a shared GPU
    for i in (later.job_id, after.job_id):
        q = wait_running(i, timeout=150)
        assert kind_of(q[i]) == "shard" and gpu_of(q[i]) <= SHARED_GPUS, q[i]
        assert str(q[i]["comment"]).startswith("colo: released onto GPU "), q[i]
