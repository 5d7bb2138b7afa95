"""The node side on the lab: one MPS daemon per shared GPU while co-located jobs run, the
limits in the jobs' environment, the daemon gone after the last job, a record per job."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from gate import gated_script

from .labtools import OUT, agent_cli, gpu_of, run, sbatch, squeue, wait_done, wait_for, wait_running


def _env(job_id: int) -> dict[str, str]:
    text = (OUT / f"{job_id}.out").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _node_status() -> dict:
    return json.loads(agent_cli("node", "status", "--json").stdout)


def test_colocated_jobs_get_one_daemon_their_limits_and_records(clean: None) -> None:
    gate = Path(f"/tmp/node-side-{uuid.uuid4().hex}")
    script = gated_script("env | grep -E '^(CUDA_|SLURM_GRES|SLURM_COLO_)' | sort", str(gate))
    a = sbatch(
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        user="alice",
        script=script,
    )
    b = sbatch(
        "--colocate",
        "--colocate-class=resnet18-bs64",
        "--gres=gpu:1",
        user="alice",
        script=script,
    )
    plain = sbatch("--gres=gpu:1", user="alice", script=script)
    q = wait_running(a.job_id, b.job_id, plain.job_id)
    idx = min(gpu_of(q[a.job_id]))
    assert gpu_of(q[b.job_id]) == {idx}

    # the Prolog may first wait on the GPU's lock (up to 3 MPS timeouts, 15 s) while the
    # previous test's last job has its daemon stopped by the Epilog's detached helper
    try:
        st = wait_for(
            lambda: (
                (s := _node_status())
                and s["gpus"][str(idx)]["mps_alive"]
                and set(s["gpus"][str(idx)]["jobs"]) == {a.job_id, b.job_id}
                and s
            ),
            30,
            0.5,
            "the MPS daemon serving both jobs",
        )
    except AssertionError as e:
        raise AssertionError(f"{e}; node status: {json.dumps(_node_status())}") from None
    g = st["gpus"][str(idx)]
    assert set(g["jobs"]) == {a.job_id, b.job_id} and g["mps_uid"] == int(
        run(["id", "-u", "alice"]).stdout
    )
    assert (
        sum(1 for x in st["gpus"].values() if x["mps_alive"]) == 1
    )  # one daemon, for the GPU in use

    gate.touch()
    try:
        wait_done(a.job_id, b.job_id, plain.job_id)
    finally:
        gate.unlink()
    ea, eb, ep = _env(a.job_id), _env(b.job_id), _env(plain.job_id)
    for e in (ea, eb):
        assert e["CUDA_MPS_PIPE_DIRECTORY"] == ea["CUDA_MPS_PIPE_DIRECTORY"]  # the GPU's daemon
        assert 1 <= int(e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) <= 100
        assert e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].startswith("0=")
        assert e["SLURM_GRES"] == "shard:1"
    assert (
        not any(k.startswith("CUDA_MPS_") for k in ep) and "SLURM_GRES" not in ep
    )  # untouched job

    # the daemon is stopped once the last co-located job has left
    wait_for(
        lambda: not _node_status()["gpus"][str(idx)]["mps_alive"], 20, 0.5, "MPS daemon stopped"
    )

    def records() -> dict[int, dict]:
        agent_cli("spool", "ingest")
        out = agent_cli("history", "--json", "--limit", "20").stdout
        return {r["job_id"]: r for r in map(json.loads, out.splitlines())}

    recs = wait_for(
        lambda: (r := records()) and {a.job_id, b.job_id} <= set(r) and r,
        20,
        1,
        "records in the DB",
    )
    ra, rb = recs[a.job_id], recs[b.job_id]
    assert (
        ra["shared"]
        and ra["mechanism"] == "mps"
        and ra["co_runners"] == 1
        and rb["co_runners"] == 1
    )
    assert ra["cls"] == "resnet18-bs32" and ra["state"] == "COMPLETED" and not ra["mps_fault"]
    assert squeue()[plain.job_id]["job_state"] == "COMPLETED"
