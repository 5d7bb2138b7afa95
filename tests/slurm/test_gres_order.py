"""A node whose shared pool is its highest GPUs (`shared = "2-3"` of 4): Slurm numbers a
node's GPUs in the order of the types in slurm.conf's `Gres=`, so the generated lines list
them by device index, and a job gets the GPU slurm-colo placed it on."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

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
