"""Submit-time behaviour on the real Slurm 22.05 lab: options, rewrites, untouched jobs."""

from __future__ import annotations

import re

import pytest

from .labtools import (
    AGENT_LOG,
    OUT,
    SHARED_GPUS,
    agent_cli,
    agent_with,
    gpu_of,
    kind_of,
    run,
    sbatch,
    sbatch_array,
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


def test_a_job_array_is_held_and_each_task_released_onto_a_shared_gpu_or_its_own(
    clean: None,
) -> None:
    """Slurm 22.05 cannot change a waiting task's GPU request, and this lab has whole GPUs
    to wait for: the array is held without a GPU request; each task a shared GPU takes is
    released there, each task none takes with its own GPU request (a few at a time)."""
    r = sbatch_array("0-11", sleep=6)
    assert "slurm-colo: job array held" in r.stderr, r.stderr
    assert "else with its own GPU request" in r.stderr, r.stderr
    token = squeue()[r.job_id]["admin_comment"].split("tok=")[1].split()[0]

    gpus: dict[int, set[int]] = {}  # the GPUs of each task, seen while it runs

    def all_done() -> list[dict] | None:
        ts = [j for j in squeue().values() if j.get("array_job_id") == r.job_id]
        gpus.update({j["job_id"]: gpu_of(j) for j in ts if j["job_state"] == "RUNNING"})
        return ts if len(ts) == 12 and all(j["job_state"] == "COMPLETED" for j in ts) else None

    ts = wait_for(all_done, 150, 0.5, "the array's twelve tasks released and completed")
    assert len(gpus) == 12, gpus
    shared = [j for j in ts if j["tres_per_node"].startswith("gres:shard:v100_s")]
    own = [j for j in ts if j["tres_per_node"] == "gres:gpu:1"]
    # the two shared GPUs take at most 4 each (their shards): the others got a GPU each
    assert shared and own and len(shared) + len(own) == 12, ts
    toks = {j["admin_comment"].split("tok=")[1].split()[0] for j in shared}
    assert len(toks) == len(shared) and token not in toks  # each its own placement
    for j in shared:
        assert "released onto GPU" in j["comment"] and gpus[j["job_id"]] <= SHARED_GPUS, j
    for j in own:
        assert j["comment"] == (
            "colo: job array task: no shared GPU took it; released with its own GPU request"
        ), j
        assert f"tok={token} " in j["admin_comment"] and "held=" not in j["admin_comment"], j
        assert len(gpus[j["job_id"]]) == 1, j
    said = agent_cli("explain", str(own[0]["job_id"])).stdout
    assert "each with its own GPU request where none takes it" in said, said


def test_a_throttled_arrays_tasks_are_released_no_faster_than_they_may_run(
    clean: None,
) -> None:
    """``--array=0-7%2``: Slurm runs at most two of its tasks at once, and the agent
    releases no more than that which have not ended (none waits on ``JobArrayTaskLimit``
    holding a place on a shared GPU)."""
    r = sbatch_array("0-7%2", sleep=3)
    most = 0  # tasks released and not ended, at any one look of the test's

    def all_done() -> list[dict] | None:
        nonlocal most
        ts = [j for j in squeue().values() if j.get("array_job_id") == r.job_id]
        out = [
            j
            for j in ts
            if j["job_state"] == "RUNNING"
            or (j["job_state"] == "PENDING" and not j["state_reason"].startswith("JobHeld"))
        ]
        most = max(most, len(out))
        assert not [j for j in out if j["state_reason"] == "JobArrayTaskLimit"], out
        return ts if len(ts) == 8 and all(j["job_state"] == "COMPLETED" for j in ts) else None

    try:
        wait_for(all_done, 150, 0.3, "the array's eight tasks completed, two at a time")
    except AssertionError as e:
        seen = [
            (j["job_id"], j["array_task_id"], j["job_state"], j["state_reason"], j["comment"])
            for j in squeue().values()
            if j.get("array_job_id") == r.job_id
        ]
        raise AssertionError(f"{e}; the array's tasks: {seen}") from None
    assert most == 2, most


def test_an_array_throttled_to_one_task_runs_each_task_once(clean: None) -> None:
    """``--array=0-2%1``: one task released per look, so the record is left waiting as task
    2 alone, no task listed in it; Slurm refuses a node change to ``JobId=ARRAY`` and the
    agent names that task. Each task runs once, on the shared GPU."""
    log_from = AGENT_LOG.stat().st_size
    r = sbatch_array("0-2%1", sleep=2)

    def done() -> list[dict] | None:
        ts = [j for j in squeue().values() if j.get("array_job_id") == r.job_id]
        return ts if len(ts) == 3 and all(j["job_state"] == "COMPLETED" for j in ts) else None

    ts = wait_for(done, 90, 0.5, "the array's three tasks completed")
    assert sorted(j["array_task_id"] for j in ts) == [0, 1, 2], ts
    assert all("released onto GPU" in j["comment"] for j in ts), ts
    assert all(j["restart_cnt"] == 0 for j in ts), ts
    with AGENT_LOG.open("rb") as f:
        f.seek(log_from)
        log = f.read().decode(errors="replace")
    assert "aim failed" not in log, log


#: before the agent's scontrol: refuse the release of the first task given a request of
#: ``{kind}`` (``gpu``: its own GPU; ``shard``: a shared GPU's), after the update that split
#: it from its array, as a slurmctld timeout would; with ``{restore_too}`` set, also the
#: update that sets its comments back to a held tag
REFUSE_FIRST_RELEASE = """
case "$1" in
update)
  case "$*" in *TresPerNode=gres:{kind}*) echo "$2" >> "$STATE/split" ;; esac
  if [ -n "{restore_too}" ] && [ "JobId=$(cat "$STATE/refused" 2>/dev/null)" = "$2" ] \\
     && [ ! -e "$STATE/restore-refused" ]; then
    touch "$STATE/restore-refused"
    echo "slurm_update error: Socket timed out on send/recv operation" >&2
    exit 1
  fi ;;
release)
  if [ ! -e "$STATE/refused" ] && grep -qx "JobId=$2" "$STATE/split" 2>/dev/null; then
    echo "$2" > "$STATE/refused"
    echo "slurm_release error: Socket timed out on send/recv operation" >&2
    exit 1
  fi ;;
esac
"""


@pytest.mark.parametrize(("kind", "restore_too"), [("gpu", ""), ("shard", ""), ("gpu", "1")])
def test_a_task_whose_release_slurm_refused_after_its_split_runs_all_the_same(
    clean: None, kind: str, restore_too: str
) -> None:
    """The update that gives a held array's task its GPU request splits it from the array;
    Slurm refusing the release after it left the task held with nobody to release it. The
    agent sets its comments back to a held tag of its own, adopts it at its next look and
    releases it with the request it has, which 22.05 cannot change: its own GPU, or a
    shard of the shared GPU it was placed on. Where Slurm refuses that update too, the
    next look finds the task held with the release's tag and releases it again."""
    wrapper = REFUSE_FIRST_RELEASE.replace("{kind}", kind).replace("{restore_too}", restore_too)
    with agent_with(scontrol_before=wrapper):
        # long enough that the shared GPUs are still full at the look that adopts the task
        r = sbatch_array("0-9", sleep=10)
        token = squeue()[r.job_id]["admin_comment"].split("tok=")[1].split()[0]
        tasks: dict[int, dict] = {}  # by task id, as last seen

        def all_done() -> list[dict] | None:
            ts = [j for j in squeue().values() if j.get("array_job_id") == r.job_id]
            tasks.update({j["array_task_id"]: j for j in ts})
            return ts if len(ts) == 10 and all(j["job_state"] == "COMPLETED" for j in ts) else None

        wait_for(all_done, 150, 0.5, "the array's ten tasks completed, the refused one too")
        log = AGENT_LOG.read_text(errors="replace")
        failed = rf"job {r.job_id}: aim failed: scontrol release {r.job_id}_(\d+) failed"
        [refused] = re.findall(failed, log)
        j = tasks[int(refused)]  # split, held again under its own token, then released
        # (the release's own tag where its comments could not be set back)
        own = token if restore_too and kind == "gpu" else f"{token}-{refused}"
        assert f"tok={own} " in j["admin_comment"] + " ", j
        assert "held=" not in j["admin_comment"], j
        if restore_too:
            assert f"job {j['job_id']}: a task whose release Slurm refused is still held" in (
                AGENT_LOG.read_text(errors="replace")
            )
        if kind == "gpu":
            assert j["tres_per_node"] == "gres:gpu:1", j
            assert j["comment"] == (
                "colo: job array task: no shared GPU took it; released with its own GPU request"
            ), j
            said = agent_cli("explain", str(j["job_id"])).stdout
            assert "each with its own GPU request where none takes it" in said, said
        else:  # the shard type it had: the same shared GPU
            assert j["tres_per_node"].startswith("gres:shard:v100_s"), j
            assert "GPU" in j["comment"], j


def test_a_heterogeneous_job_is_left_as_submitted(clean: None) -> None:
    # The hook's answer only: on a one-node cluster a hetjob never starts (Slurm's backfill
    # plans each component on nodes of its own). The multi-node lab runs one to its end.
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
