"""A node whose shared pool is its highest GPUs (`shared = "2-3"` of 4): Slurm numbers a
node's GPUs in the order of the types in slurm.conf's `Gres=`, so the generated lines list
them by device index, and a job gets the GPU slurm-colo placed it on; a node whose Gres=
lists them otherwise gets no placement."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from waiting import wait_for

from . import labtools as lt

ENV = "env | grep -E '^(SLURM_JOB_GPUS|CUDA_MPS_PIPE_DIRECTORY)='"


def _lab_with(shared: str) -> None:
    lt.stop_agent()  # the agent reads the layout at start
    lt.lab_up(shared)


@pytest.fixture()
def top_pool(clean: None) -> Iterator[None]:
    _lab_with("2-3")
    try:
        yield
    finally:
        lt.cancel_all()
        _lab_with("0-1")  # the lab as every other test expects it


def _output(job_id: int) -> dict[str, str]:
    text = (lt.OUT / f"{job_id}.out").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_a_job_gets_the_gpu_it_was_placed_on_when_the_pool_is_the_highest_gpus(
    top_pool: None,
) -> None:
    shared = lt.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", script=ENV)
    assert shared.rc == 0 and shared.job_id is not None, shared.stderr
    placed = re.search(r"GPU (\d) of ", shared.stderr)
    assert placed and placed.group(1) in ("2", "3"), shared.stderr
    whole = [lt.sbatch("--gres=gpu:1", script=f"{ENV}; sleep 5") for _ in range(2)]
    assert all(w.rc == 0 and w.job_id is not None for w in whole)
    lt.wait_done(shared.job_id, *(w.job_id for w in whole if w.job_id is not None))
    env = _output(shared.job_id)
    gpu = placed.group(1)
    assert env["SLURM_JOB_GPUS"] == gpu, env  # the GPU the agent placed it on
    assert re.search(rf"/mps/GPU-1ab0000{gpu}-[^/]*/pipe$", env["CUDA_MPS_PIPE_DIRECTORY"]), env
    # plain whole-GPU jobs take the whole GPUs (the lowest indices) first
    assert sorted(_output(w.job_id)["SLURM_JOB_GPUS"] for w in whole if w.job_id) == ["0", "1"]
    gres = re.search(r"Gres=(\S+)", open("/etc/slurm/slurm.conf").read())
    assert gres and gres.group(1) == "gpu:v100:2,gpu:v100_s2:1,gpu:v100_s3:1,shard:8"


def _slurm_with_gres(line: str) -> None:
    """Restart slurmctld and slurmd with ``line`` as the node's Gres= (GRES changes need a
    restart); the agent keeps running and sees it at its next look at Slurm."""
    conf = Path("/etc/slurm/slurm.conf")
    conf.write_text(re.sub(r"Gres=\S+", f"Gres={line}", conf.read_text()))
    lt.run(["bash", str(lt.REPO / "contrib/lab/single/down.sh"), "--slurm-only"], check=True)
    lt.run(["slurmctld"], check=True)
    wait_for(lambda: "UP" in lt.run(["scontrol", "ping"]).stdout, 20, 0.2, "slurmctld up")
    lt.run(["slurmd"], check=True)
    wait_for(
        lambda: lt.run(["sinfo", "-h", "-o", "%T"]).stdout.strip() == "idle", 30, 0.2, "node idle"
    )
    lt.agent_refresh()


def test_a_node_slurm_numbers_pool_first_gets_no_placement_until_fixed(top_pool: None) -> None:
    """slurm.conf's Gres= listed pool first, as slurm-colo generated it before: Slurm would
    number shared GPU 2 as 0. The agent reads that from Slurm and places nothing there; a
    job it had placed there that has not started yet is held until the node is fixed and
    until it may start (its own start time, --begin, kept), then released onto its GPU."""
    # placed at submission (a job submitted with a --begin ahead would be held until it may
    # start, keeping no place), then given a start time ahead by hand
    later = lt.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", "-H")
    assert later.rc == 0 and later.job_id is not None, later.stderr
    at = re.search(r"GPU (\d) of ", later.stderr)
    assert at and at.group(1) in ("2", "3"), later.stderr
    lt.run(["scontrol", "update", f"JobId={later.job_id}", "StartTime=now+3600"], check=True)
    lt.run(["scontrol", "release", str(later.job_id)], check=True)
    begin = lt.squeue()[later.job_id]["start_time"]
    _slurm_with_gres("gpu:v100_s2:1,gpu:v100_s3:1,gpu:v100:2,shard:8")
    held = lt.squeue()[later.job_id]
    assert held["job_state"] == "PENDING" and held["state_reason"] == "JobHeldAdmin", held
    assert f"held=v100_s{at.group(1)}" in held["admin_comment"], held
    assert held["comment"].startswith("colo: held: node "), held
    st = json.loads(lt.agent_cli("status", "--json").stdout)
    why = st["nodes_refused"][socket.gethostname().split(".")[0]]
    assert "Slurm lists its GPUs as gpu:v100_s2:1,gpu:v100_s3:1,gpu:v100:2 " in why, why
    own = lt.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", script=ENV)
    assert own.rc == 0 and own.job_id is not None, own.stderr
    job = lt.squeue()[own.job_id]
    assert "shard" not in str(job.get("tres_per_node")), job
    assert "own GPU" in job["comment"] and "closed to placement" in job["comment"], job
    _slurm_with_gres("gpu:v100:2,gpu:v100_s2:1,gpu:v100_s3:1,shard:8")  # the generated line
    st = json.loads(lt.agent_cli("status", "--json").stdout)
    assert st["nodes_refused"] == {}
    # fixed, but the job may not start before its begin time: held until then
    [waits] = [h["waits_to_start"] for h in st["held"] if h["job_id"] == later.job_id]
    assert waits == "its begin time"
    assert lt.squeue()[later.job_id]["start_time"] >= begin - 60  # not made to start now
    lt.run(["scontrol", "update", f"JobId={later.job_id}", "StartTime=now+3"], check=True)
    back = wait_for(
        lambda: (
            lt.agent_refresh()
            or (j := lt.squeue()[later.job_id])["state_reason"] != "JobHeldAdmin"
            and j
        ),
        40,
        0.5,
        "the held job released",
    )
    assert f"gpu={socket.gethostname().split('.')[0]}:{at.group(1)}" in back["admin_comment"]
    assert "held=" not in back["admin_comment"], back
    lt.run(["scancel", str(later.job_id)], check=True)
    placed = lt.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", script=ENV)
    assert placed.rc == 0 and placed.job_id is not None, placed.stderr
    gpu = re.search(r"GPU (\d) of ", placed.stderr)
    assert gpu and gpu.group(1) in ("2", "3"), placed.stderr
    lt.wait_done(own.job_id, placed.job_id)
    assert _output(placed.job_id)["SLURM_JOB_GPUS"] == gpu.group(1)
