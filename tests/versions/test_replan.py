"""What Slurm 24.11 and 26.05 allow beyond 22.05: a pending job's GRES changes, so the agent
moves a --colocate job that waits in the queue for a whole GPU onto a shared GPU that
takes it (placement.replan = "auto", agent/replan.py), with one `scontrol update` of its
TresPerNode, ReqNodeList and comments."""

from __future__ import annotations

import json

from .vlab import VersionLab, wait_for

ENV = "env | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_SHARDS_ON_NODE)'"


def test_a_job_waiting_for_a_whole_gpu_is_moved_onto_a_shared_gpu_that_frees(
    vclean: VersionLab,
) -> None:
    lab = vclean
    # the two whole GPUs (type v100) are busy for a minute
    whole = [lab.sbatch("--gres=gpu:v100:1", user="bob", script="sleep 60") for _ in range(2)]
    # the shared GPUs take one job each that no third class pairs with; a's ends soon
    a = lab.sbatch(
        "--colocate",
        "--colocate-class=recommendation-bs512",
        "--gres=gpu:1",
        user="alice",
        script="sleep 10",
    )
    b = lab.sbatch(
        "--colocate",
        "--colocate-class=resnet50-bs16",
        "--gres=gpu:1",
        user="alice",
        script="sleep 60",
    )
    ids = [j.job_id for j in (*whole, a, b)]
    assert all(i is not None for i in ids)
    q = lab.wait_running(*ids)  # type: ignore[arg-type]
    assert a.job_id is not None and b.job_id is not None
    (gpu_a,) = q[a.job_id]["gres"][0][3]
    # no shared GPU takes c now: it keeps its own-GPU request and waits in the queue (typed:
    # an untyped gpu:1 could take a shared GPU whole the moment it is idle, before the agent)
    c = lab.sbatch(
        "--colocate",
        "--colocate-class=recommendation-bs8192",
        "--gres=gpu:v100:1",
        user="alice",
        script=f"{ENV}; sleep 2",
    )
    assert c.rc == 0 and c.job_id is not None, c.stderr
    waiting = lab.jobs()[c.job_id]
    assert waiting["state"] == "PENDING" and "shard" not in waiting["tres_per_node"], waiting
    assert waiting["comment"].startswith("colo: own GPU"), waiting

    # a ends: its GPU takes c, which the agent moves there while the whole GPUs stay busy
    def moved() -> dict | None:
        j = lab.jobs(c.job_id).get(c.job_id, {})
        return j if j.get("state") in ("RUNNING", "COMPLETED") else None

    j = wait_for(moved, 40, 0.5, "the waiting job moved onto the freed shared GPU")
    assert f"re-planned onto GPU {gpu_a} of {lab.node}" in j["comment"], j
    assert j["tres_per_node"] == f"gres/shard:v100_s{gpu_a}:1", j
    assert all(lab.jobs()[w.job_id]["state"] == "RUNNING" for w in whole)  # type: ignore[index]
    done = lab.wait_done(c.job_id, timeout=30)
    assert done[c.job_id]["state"] == "COMPLETED"
    env = lab.job_env(c.job_id)
    assert env["CUDA_VISIBLE_DEVICES"] == str(gpu_a) and env["SLURM_SHARDS_ON_NODE"] == "1"
    ex = json.loads(lab.cli("explain", "--json", str(c.job_id)).stdout)
    assert ex["reason"].startswith("waited for a whole GPU; then"), ex
