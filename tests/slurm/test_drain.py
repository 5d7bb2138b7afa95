"""The starvation guard on the real cluster: a job waiting for a whole GPU gets the shared
GPU expected to drain first, and new --colocate jobs stay off it meanwhile."""

from __future__ import annotations

import json

from .labtools import (
    agent_cli,
    agent_with,
    gpu_of,
    kind_of,
    run,
    sbatch,
    squeue,
    wait_for,
    wait_running,
)

RESERVE_AFTER_H = 0.002  # 7.2 s


def test_a_job_waiting_for_a_whole_gpu_gets_the_shared_gpu_that_drains_first(clean: None) -> None:
    with agent_with(f"reserve_after_h = {RESERVE_AFTER_H}\n"):
        # every GPU busy: the two exclusive ones by typed jobs, the two shared ones by one
        # user each (MPS keeps users apart); bob's job has the shorter time limit
        pool = [sbatch("--gres=gpu:v100:1", sleep=90) for _ in range(2)]
        a = sbatch(
            "--colocate",
            "--colocate-class=resnet18-bs32",
            "--gres=gpu:1",
            "-t",
            "10",
            user="alice",
            sleep=90,
        )
        b = sbatch(
            "--colocate",
            "--colocate-class=resnet18-bs32",
            "--gres=gpu:1",
            "-t",
            "2",
            user="bob",
            sleep=90,
        )
        q = wait_running(*(p.job_id for p in pool), a.job_id, b.job_id)
        gpu_b = gpu_of(q[b.job_id])
        assert kind_of(q[b.job_id]) == "shard" and gpu_b != gpu_of(q[a.job_id])

        w = sbatch("--gres=gpu:1", "-t", "1", sleep=2)  # a whole GPU, any: none is free

        def reserved() -> dict[str, object] | None:
            st = json.loads(agent_cli("status", "--json").stdout)
            r = st.get("reservation")
            return r if r and r["job_id"] == w.job_id else None

        r = wait_for(reserved, 40, 0.5, "the agent to drain a GPU for the waiting job")
        assert set(r["gpus"]) == gpu_b  # bob's job is expected to end first

        # bob's next compatible job would join his GPU; it is kept off it now
        c = sbatch(
            "--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="bob", sleep=2
        )
        qc = squeue()[c.job_id]
        assert kind_of(qc) == "gpu", qc.get("tres_per_node")
        assert f"kept free for job {w.job_id}" in qc["comment"]

        # bob's job ends: the waiting job (older than c) takes the drained GPU
        run(["scancel", str(b.job_id)], check=True)
        qw = wait_running(w.job_id, timeout=60)
        assert gpu_of(qw[w.job_id]) == gpu_b
        wait_for(
            lambda: json.loads(agent_cli("status", "--json").stdout).get("reservation") is None,
            20,
            0.5,
            "the reservation to end",
        )
