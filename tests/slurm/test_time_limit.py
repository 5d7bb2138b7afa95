"""A shared job's time limit grows by the time sharing costs it (placement.time_limit =
"extend", the default): read back from Slurm, as ``scontrol update TimeLimit=+N`` left it."""

from __future__ import annotations

from typing import Any

from .labtools import (
    LAB_DIR,
    agent_cli,
    gpu_of,
    kind_of,
    sbatch,
    squeue,
    wait_for,
    wait_running,
)


def _limit_min(job: dict[str, Any]) -> int:
    """The job's time limit in minutes (22.05: a number; later: {"set", "number"})."""
    v = job["time_limit"]
    return int(v["number"] if isinstance(v, dict) else v)


def test_a_shared_job_is_given_the_time_sharing_costs_it_and_a_job_alone_is_not(
    clean: None,
) -> None:
    log = LAB_DIR / "agent.log"
    seen = log.stat().st_size if log.exists() else 0
    # 3 minutes: within the agent's margin from the start, so each minute owed is given at
    # once (a longer limit is given its time 10 minutes at a time). Two transformer-bs16
    # jobs run at 0.89 of their solo speed together (the lab's scores): the first two open
    # the two shared GPUs, the third joins one of them.
    args = ("--colocate", "--colocate-class=transformer-bs16", "--gres=gpu:1", "--time=3")
    shared = [sbatch(*args, user="alice", sleep=120) for _ in range(3)]
    own = sbatch("--gres=gpu:1", "--time=3", sleep=120)  # a GPU of its own
    ids = [j.job_id for j in shared]
    q = wait_running(*ids, own.job_id)
    on = {j: gpu_of(q[j]) for j in ids}
    assert all(kind_of(q[j]) == "shard" for j in ids) and kind_of(q[own.job_id]) == "gpu"
    pair = [j for j in ids if sum(on[k] == on[j] for k in ids) == 2]
    (alone,) = set(ids) - set(pair)
    assert len(pair) == 2, on

    def grown() -> dict[int, dict[str, Any]] | None:
        now = squeue()
        return now if all(_limit_min(now[j]) >= 4 for j in pair) else None

    q = wait_for(grown, 30, what="the shared jobs' time limits raised")
    # a minute each, not more: a few seconds shared at 0.89 of solo speed owe seconds; the
    # job alone on the other shared GPU and the job on a GPU of its own owe nothing
    assert [_limit_min(q[j]) for j in pair] == [4, 4]
    assert _limit_min(q[alone]) == _limit_min(q[own.job_id]) == 3
    with log.open("rb") as f:
        f.seek(seen)
        text = f.read().decode(errors="replace")
    shown = agent_cli("explain", str(pair[0]))
    assert "time limit raised by 1 min so far, for the time sharing cost it" in shown.stdout, (
        shown.stdout + shown.stderr
    )
    for j in pair:
        assert f"job {j}: time limit +1 min for the time sharing cost it" in text, text[-2000:]
