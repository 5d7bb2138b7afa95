"""Jobs of two users on Slurm 24.11 and 26.05 (the lab's alice and bob): with
placement.cross_user = "never" (the lab's setting) an MPS GPU holds one user's jobs only;
with "shard" users mix on a GPU by plain shard sharing, without MPS."""

from __future__ import annotations

import json
import uuid

from gate import gated_script

from .vlab import SHARED_GPUS, VersionLab, wait_for

PRINT_ENV = "env | grep -E '^(CUDA_|SLURM_SHARDS_ON_NODE)'"
ENV = f"{PRINT_ENV}; sleep 6"
CLASS = "--colocate-class=resnet18-bs32"


def _gpu(job: dict) -> int:
    (idx,) = job["gres"][0][3]
    return int(idx)


def test_mps_pairs_jobs_of_one_user_only(vclean: VersionLab) -> None:
    lab = vclean
    gate = f"/tmp/users-{uuid.uuid4().hex}"
    script = gated_script(PRINT_ENV, gate)
    a = lab.sbatch("--colocate", CLASS, "--gres=gpu:1", user="alice", script=script)
    b = lab.sbatch("--colocate", CLASS, "--gres=gpu:1", user="bob", script=script)
    c = lab.sbatch("--colocate", CLASS, "--gres=gpu:1", user="bob", script=script)
    assert a.rc == b.rc == c.rc == 0, (a.stderr, b.stderr, c.stderr)
    q = lab.wait_running(a.job_id, b.job_id, c.job_id)
    assert [q[j]["user"] for j in (a.job_id, b.job_id, c.job_id)] == ["alice", "bob", "bob"]
    ga, gb, gc = (_gpu(q[j]) for j in (a.job_id, b.job_id, c.job_id))
    # bob's two compatible jobs share a GPU; alice's job has the other one to itself
    assert gb == gc and ga != gb and {ga, gb} == SHARED_GPUS
    assert "predicted delta" in q[c.job_id]["comment"], q[c.job_id]

    # Slurm lists a job as running while its Prolog still runs; the Prolog starts the
    # GPU's MPS daemon first and records the job on the GPU after
    def both_on_gpu() -> dict | None:
        node = json.loads(lab.cli("node", "status", "--json").stdout)
        g = node["gpus"][str(gb)]
        return g if set(g["jobs"]) == {b.job_id, c.job_id} else None

    g = wait_for(both_on_gpu, 30, 0.5, f"bob's jobs on GPU {gb} in node status")
    assert g["mps_uid"] == int(lab.x("id", "-u", "bob").stdout)
    lab.host_path(gate).touch()
    lab.wait_done(a.job_id, b.job_id, c.job_id)
    eb, ec = lab.job_env(b.job_id), lab.job_env(c.job_id)
    assert eb["CUDA_MPS_PIPE_DIRECTORY"] == ec["CUDA_MPS_PIPE_DIRECTORY"]
    assert lab.job_env(a.job_id)["CUDA_MPS_PIPE_DIRECTORY"] != eb["CUDA_MPS_PIPE_DIRECTORY"]


def test_with_cross_user_shard_users_mix_by_plain_shard_sharing(vclean: VersionLab) -> None:
    lab = vclean
    with lab.agent_config(cross_user="shard"):
        a = lab.sbatch("--colocate", CLASS, "--gres=gpu:1", user="alice", script=ENV)
        b = lab.sbatch("--colocate", CLASS, "--gres=gpu:1", user="bob", script=ENV)
        assert a.rc == b.rc == 0, (a.stderr, b.stderr)
        q = lab.wait_running(a.job_id, b.job_id)
        assert _gpu(q[a.job_id]) == _gpu(q[b.job_id])
        assert q[a.job_id]["tres_per_node"] == q[b.job_id]["tres_per_node"]
        assert q[b.job_id]["tres_per_node"].startswith("gres/shard:v100_s")
        ex = json.loads(lab.cli("explain", "--json", str(b.job_id)).stdout)
        assert ex["mechanism"] == "shard", ex
        lab.wait_done(a.job_id, b.job_id)
        for jid in (a.job_id, b.job_id):
            env = lab.job_env(jid)
            assert env["CUDA_VISIBLE_DEVICES"] == str(_gpu(q[a.job_id])), env
            assert env["SLURM_SHARDS_ON_NODE"] == "1", env
            # time-slicing only: no MPS daemon, no MPS limits
            assert not any(k.startswith("CUDA_MPS_") for k in env), env
