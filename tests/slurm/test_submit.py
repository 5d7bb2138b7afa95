"""Submit-time behaviour on the real Slurm 22.05 lab: options, rewrites, untouched jobs."""

from __future__ import annotations

from .labtools import (
    OUT,
    agent_cli,
    gpu_of,
    kind_of,
    run,
    sbatch,
    squeue,
    wait_done,
    wait_for,
    wait_running,
)


def test_sbatch_srun_salloc_list_the_options(clean: None) -> None:
    for cmd in ("sbatch", "srun", "salloc"):
        out = run([cmd, "--help"]).stdout
        assert "--colocate=[mode]" in out, cmd
        assert "--colocate-class=name" in out, cmd


def test_unknown_mode_fails_at_submit_and_creates_no_job(clean: None) -> None:
    before = set(squeue())
    r = sbatch("--colocate=sometimes", "--gres=gpu:1")
    assert r.rc != 0 and r.job_id is None
    assert "accepted values are auto, aggressive, off" in r.stderr
    assert set(squeue()) == before


def test_malformed_class_fails_at_submit_and_creates_no_job(clean: None) -> None:
    before = set(squeue())
    for bad in ("has space", "-leading-dash", "x" * 65, "semi;colon"):
        r = sbatch("--colocate", f"--colocate-class={bad}", "--gres=gpu:1")
        assert r.rc != 0 and r.job_id is None, bad
        assert "invalid --colocate-class" in r.stderr, bad
    assert set(squeue()) == before


def test_job_without_colocate_is_untouched(clean: None) -> None:
    r = sbatch("--gres=gpu:1", "-J", "plain", "--comment", "mine")
    assert r.rc == 0
    j = wait_running(r.job_id)[r.job_id]
    assert j["tres_per_node"] == "gres:gpu:1"
    assert j["comment"] == "mine"
    assert not j.get("admin_comment")
    assert "slurm-colo" not in r.stderr


def test_colocate_off_is_untouched(clean: None) -> None:
    r = sbatch("--colocate=off", "--gres=gpu:1")
    assert r.rc == 0
    j = squeue()[r.job_id]
    assert j["tres_per_node"] == "gres:gpu:1" and not j.get("admin_comment")


def test_gres_and_gpus_styles_are_both_rewritten_to_one_shared_gpu(clean: None) -> None:
    a = sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1")
    b = sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gpus=1")
    assert a.rc == 0 and b.rc == 0, (a.stderr, b.stderr)
    q = wait_running(a.job_id, b.job_id)
    for jid in (a.job_id, b.job_id):
        assert q[jid]["tres_per_node"].startswith("gres:shard:v100_s"), q[jid]
        assert not q[jid].get("tres_per_job")


def test_per_gpu_cpus_and_memory_are_kept_when_the_request_becomes_a_shard(clean: None) -> None:
    # with the gpu GRES gone, Slurm would reject --cpus-per-gpu / --mem-per-gpu
    a = sbatch(
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        "--cpus-per-gpu=2",
        "--mem-per-gpu=100",
        sleep=3,
    )
    assert a.rc == 0, a.stderr
    q = wait_running(a.job_id)
    assert q[a.job_id]["tres_per_node"].startswith("gres:shard:v100_s")
    show = run(["scontrol", "show", "job", str(a.job_id)], check=True).stdout
    assert (
        "NumCPUs=2" in show and "CpusPerTres=gres:shard:2" in show and "MinMemoryNode=100M" in show
    )
    wait_done(a.job_id)
    assert squeue()[a.job_id]["job_state"] == "COMPLETED"


def test_jobs_setting_gpu_clocks_or_tasks_per_gpu_are_accepted_on_their_own_gpu(
    clean: None,
) -> None:
    # Slurm would reject --gpu-freq on a shard request; clocks are the whole GPU's anyway
    a = sbatch("--colocate", "--gres=gpu:1", "--gpu-freq=high", sleep=1)
    assert a.rc == 0, a.stderr
    j = squeue()[a.job_id]
    assert j["tres_per_node"] == "gres:gpu:1" and "not shared (--gpu-freq" in j["comment"]
    b = sbatch("--colocate", "--gres=gpu:1", "--ntasks-per-gpu=1", sleep=1)
    assert b.rc == 0, b.stderr
    assert "not shared (--ntasks-per-gpu)" in squeue()[b.job_id]["comment"]


def test_multi_gpu_and_multi_node_jobs_are_accepted_untouched(clean: None) -> None:
    a = sbatch("--colocate", "--gres=gpu:2")
    b = sbatch("--colocate", "-N", "2", "--gres=gpu:1")  # one node in the lab: stays pending
    c = sbatch("--colocate", "--gpus=2")
    assert a.rc == 0 and c.rc == 0, (a.stderr, c.stderr)
    q = squeue()
    assert q[a.job_id]["tres_per_node"] == "gres:gpu:2"
    assert "never shared" in q[a.job_id]["comment"]
    assert kind_of(q[c.job_id]) == "gpu" and "never shared" in q[c.job_id]["comment"]
    if b.rc == 0:  # Slurm may refuse -N 2 on a one-node cluster itself; if accepted, untouched
        assert kind_of(q[b.job_id]) == "gpu" and "never shared" in q[b.job_id]["comment"]
    else:
        assert "slurm-colo" not in b.stderr


def test_a_job_array_runs_as_submitted_each_task_on_a_gpu_of_its_own(clean: None) -> None:
    # one submission for every task: a placement would have sent all of them to one GPU
    # (four running there, the rest waiting for it while the other GPUs were idle)
    r = sbatch("--array=0-3", "--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1")
    assert r.rc == 0 and r.job_id is not None, r.stderr
    assert "slurm-colo: job arrays are not shared" in r.stderr

    def tasks_running() -> list[dict] | None:
        rows = [j for j in squeue().values() if j.get("array_job_id") == r.job_id]
        running = [j for j in rows if j["job_state"] == "RUNNING"]
        return running if len(running) == 4 else None

    tasks = wait_for(tasks_running, 40, 0.5, "the array's 4 tasks running at once")
    assert sorted(j["array_task_id"] for j in tasks) == [0, 1, 2, 3]
    gpus = [gpu_of(j) for j in tasks]
    assert all(len(g) == 1 for g in gpus) and len(set().union(*gpus)) == 4, gpus
    for j in tasks:
        assert kind_of(j) == "gpu" and j["tres_per_node"] == "gres:gpu:1", j
        assert j["comment"] == "colo: job array not shared (each task keeps its own GPU request)"
        assert not j.get("admin_comment"), j
    said = agent_cli("explain", str(tasks[0]["job_id"])).stdout
    assert 'its comment says "colo: job array not shared' in said, said


def test_a_heterogeneous_job_is_left_as_submitted(clean: None) -> None:
    script = OUT / "hetjob.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --colocate --gres=gpu:1\n#SBATCH hetjob\n#SBATCH --gres=gpu:1\n"
        "sleep 1\n"
    )
    p = run(["sbatch", "--parsable", "-o", "/dev/null", str(script)], user="alice")
    assert p.returncode == 0, p.stderr
    lead = int(p.stdout.strip().split(";")[0].split("+")[0])
    assert p.stderr.count("slurm-colo: heterogeneous jobs are not shared") == 1, p.stderr
    parts = [j for j in squeue().values() if j.get("het_job_id") == lead]
    assert sorted(j["het_job_offset"] for j in parts) == [0, 1], parts
    for j in parts:
        assert j["tres_per_node"] == "gres:gpu:1" and not j.get("admin_comment"), j
        assert j["comment"].startswith("colo: heterogeneous job not shared"), j
    run(["scancel", str(lead)])


def test_srun_and_salloc_with_colocate_run_on_their_own_gpu(clean: None) -> None:
    # Slurm 22.05 cannot run a job step on a typed shard it inherits, and srun fixes its
    # step's GPU request before job_submit runs: interactive jobs are accepted untouched.
    p = run(
        [
            "srun",
            "--colocate",
            "--colocate-class=resnet18-bs32",
            "--gres=gpu:1",
            "-t",
            "1",
            "bash",
            "-c",
            "echo CVD=$CUDA_VISIBLE_DEVICES SHARDS=$SLURM_SHARDS_ON_NODE MODE=$SLURM_SPANK_COLOCATE",
        ]
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("CVD=") and "SHARDS= " in p.stdout
    assert "interactive jobs (srun/salloc) are not shared" in p.stderr
    p = run(
        [
            "salloc",
            "--colocate=aggressive",
            "--gres=gpu:1",
            "-t",
            "1",
            "srun",
            "bash",
            "-c",
            "echo SHARDS=$SLURM_SHARDS_ON_NODE MODE=$SLURM_SPANK_COLOCATE",
        ]
    )
    assert p.returncode == 0, p.stderr
    assert "SHARDS= " in p.stdout
    assert "interactive jobs (srun/salloc) are not shared" in p.stderr


def test_batch_job_steps_run_on_the_shared_gpu(clean: None) -> None:
    r = sbatch(
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        script="srun bash -c 'echo STEP SHARDS=$SLURM_SHARDS_ON_NODE CVD=$CUDA_VISIBLE_DEVICES'",
    )
    assert r.rc == 0
    wait_done(r.job_id)
    out = (OUT / f"{r.job_id}.out").read_text()
    assert "STEP SHARDS=1 CVD=" in out, out
