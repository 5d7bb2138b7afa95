"""Undoing a harmful pairing on the real cluster: the probe after placement.probe_s (15 s in
the lab), the requeue of the newcomer, and its release once a GPU of its type fits; jobs
held at submission (placement.unplaced = "hold"), released onto any shared GPU."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from .labtools import (
    LAB_DIR,
    OUT,
    SHARED_GPUS,
    Submitted,
    agent_cli,
    agent_refresh,
    agent_status,
    agent_with,
    forget_probe_measurements,
    gpu_of,
    run,
    sbatch,
    sbatch_array,
    squeue,
    standin_cmd,
    start_agent_only,
    stop_agent,
    wait_done,
    wait_for,
    wait_running,
)


def _alice(cls: str, script: str, *extra: str) -> Submitted:
    """alice's ``--colocate`` job of class ``cls`` on one GPU."""
    return sbatch(
        "--colocate", f"--colocate-class={cls}", "--gres=gpu:1", *extra, user="alice", script=script
    )


@pytest.fixture()
def fresh_agent(clean: None) -> Iterator[None]:
    """The agent keeps what probes measured until a newer score set, across restarts too:
    forget it afterwards so later tests see the lab's scores as they are."""
    yield
    forget_probe_measurements()


def test_a_harmful_newcomer_is_requeued_and_runs_again_once_its_gpu_is_free(
    fresh_agent: None,
) -> None:
    marker = OUT / f"undo-marker-{time.time_ns()}"
    standin = standin_cmd()
    a = _alice("resnet18-bs32", f"{standin} 40 --slowed-by {marker}")
    wait_running(a.job_id)
    time.sleep(6)  # the incumbent runs alone first: its solo speed is measured
    b = _alice("resnet18-bs64", f"{standin} 25 --slows {marker}", "--open-mode=append")
    q = wait_running(a.job_id, b.job_id)
    gpu = gpu_of(q[a.job_id])
    assert gpu_of(q[b.job_id]) == gpu and str(a.job_id) in q[b.job_id]["comment"]

    # after the 15 s probe: the incumbent ran at 0.3x its solo speed -> b is requeued, held
    def requeued() -> dict | None:
        j = squeue().get(b.job_id, {})
        return (
            j
            if (
                j.get("restart_cnt", 0) >= 1
                and "requeued" in j.get("comment", "")
                and j.get("job_state") == "PENDING"
            )
            else None
        )

    j = wait_for(requeued, 40, what="the newcomer requeued")
    assert "below 1/" in j["comment"] or "combined throughput" in j["comment"]
    assert "held=" in j["admin_comment"] and j["priority"] == 0  # held
    assert squeue()[a.job_id]["job_state"] == "RUNNING"
    ex = json.loads(agent_cli("explain", "--json", str(b.job_id)).stdout)
    assert "requeued after its probe" in ex["reason"]

    # once the incumbent has ended, b is aimed at the same GPU type again and runs to the end
    def finished() -> dict | None:
        agent_refresh()
        j = squeue().get(b.job_id, {})
        return j if j.get("job_state") == "COMPLETED" else None

    j = wait_for(finished, 90, step=1.0, what="the requeued job to run again and finish")
    assert squeue()[a.job_id]["job_state"] == "COMPLETED"
    assert (
        j["restart_cnt"] == 1
        and "undone=1" in j["admin_comment"]
        and "held=" not in j["admin_comment"]
    )
    assert "now GPU" in j["comment"]
    out = (OUT / f"{b.job_id}.out").read_text().split()
    assert out.count("run") == 2 and "1" in out and out[-1] == "done", out
    status = json.loads(agent_cli("status", "--json").stdout)
    assert status["probes"].get("undone", 0) >= 1 and status["held"] == []
    assert run(["scontrol", "show", "job", str(b.job_id)]).stdout.count("Restarts=1") == 1
    # what the probe measured outlives a restart of the agent (learned.json)
    assert status["learned_pairs"] >= 1
    stop_agent()
    start_agent_only()
    assert (
        json.loads(agent_cli("status", "--json").stdout)["learned_pairs"] == status["learned_pairs"]
    )


def test_a_set_kept_by_its_probe_is_judged_again_when_a_job_leaves_it(fresh_agent: None) -> None:
    """Three jobs on one GPU (the scores say these classes do not slow each other down):
    the newest one's probe keeps the three. When the third job ends, the incumbent slows
    to 0.3x next to the newest alone: the newest job's sampler judges the pair left behind
    (a second look) and the agent requeues it."""
    stamp = time.time_ns()
    new_marker, third_marker = OUT / f"again-new-{stamp}", OUT / f"again-third-{stamp}"
    standin = standin_cmd()
    slowed = f"--slowed-by {new_marker} --unless {third_marker}"
    a = _alice("resnet18-bs32", f"{standin} 120 {slowed}")
    wait_running(a.job_id)
    time.sleep(4)  # the incumbent runs alone first
    c = _alice("resnet18-bs16", f"{standin} 30 --slows {third_marker}")
    wait_running(c.job_id)
    time.sleep(3)
    b = _alice(
        "resnet18-bs64",
        f"{standin} 90 --requeued-seconds 3 --slows {new_marker}",
        "--open-mode=append",
    )
    q = wait_running(a.job_id, b.job_id, c.job_id)
    gpu = gpu_of(q[a.job_id])
    assert gpu_of(q[b.job_id]) == gpu_of(q[c.job_id]) == gpu

    # b's own probe (15 s) keeps the three: nothing is requeued while c runs
    def ended(job_id: int) -> dict | None:
        j = squeue().get(job_id, {})
        return j if j.get("job_state") == "COMPLETED" else None

    wait_for(lambda: ended(c.job_id), 60, what="the third job to end")
    j = squeue()[b.job_id]
    assert j["restart_cnt"] == 0 and j["job_state"] == "RUNNING"
    assert json.loads(agent_cli("status", "--json").stdout)["probes"].get("kept", 0) >= 1

    # then b judges the pair left behind and is requeued for it
    def requeued() -> dict | None:
        j = squeue().get(b.job_id, {})
        return j if j.get("restart_cnt", 0) >= 1 and "requeued" in j.get("comment", "") else None

    j = wait_for(requeued, 45, what="the newest job requeued at its second look")
    assert "below 1/" in j["comment"] or "combined throughput" in j["comment"]
    assert "held=" in j["admin_comment"]
    assert squeue()[a.job_id]["job_state"] == "RUNNING"
    status = json.loads(agent_cli("status", "--json").stdout)
    assert status["probes"].get("undone", 0) >= 1
    lines = (LAB_DIR / "agent.log").read_text(errors="replace").splitlines()
    assert any(
        f"job {b.job_id}: probe of the set left behind harmful" in x and "requeued" in x
        for x in lines
    )
    ex = json.loads(agent_cli("explain", "--json", str(b.job_id)).stdout)
    assert "requeued after its probe" in ex["reason"]


def test_with_unplaced_hold_a_job_waits_held_without_a_gpu_request_and_is_released_onto_any_gpu(
    clean: None,
) -> None:
    with agent_with('unplaced = "hold"\n'):
        # the two shared GPUs take one incompatible job each; the third fits neither
        a = sbatch(
            "--colocate",
            "--colocate-class=recommendation-bs512",
            "--gres=gpu:1",
            user="alice",
            sleep=40,
        )
        b = sbatch(
            "--colocate", "--colocate-class=resnet50-bs16", "--gres=gpu:1", user="alice", sleep=12
        )
        q = wait_running(a.job_id, b.job_id)
        gpu_a, gpu_b = gpu_of(q[a.job_id]), gpu_of(q[b.job_id])
        assert gpu_a != gpu_b
        # per-GPU options must survive the dropped GPU request (Slurm would reject them)
        c = sbatch(
            "--colocate",
            "--colocate-class=recommendation-bs8192",
            "--gres=gpu:1",
            "--cpus-per-gpu=1",
            "--mem-per-gpu=100",
            user="alice",
            sleep=3,
        )
        assert c.rc == 0 and "held until a shared GPU fits" in c.stderr
        j = squeue()[c.job_id]
        assert j["job_state"] == "PENDING" and j["priority"] == 0 and "held=*" in j["admin_comment"]
        # held without a GPU request: the agent gives it one when it releases it
        assert j["tres_per_node"] in ("", None) and "held until" in j["comment"]
        # at its next look the agent makes the hold the administrator's: the user cannot
        # start the job without a GPU
        wait_for(
            lambda: agent_refresh() or squeue()[c.job_id]["state_reason"] == "JobHeldAdmin",
            20,
            0.5,
            "the hold to become the administrator's",
        )
        assert run(["scontrol", "release", str(c.job_id)], user="alice").returncode != 0
        # b's GPU frees up first: c is released onto it, whatever its shard type, while a
        # still runs on the other
        done = wait_for(
            lambda: (
                squeue().get(c.job_id, {}).get("job_state") == "COMPLETED" and squeue()[c.job_id]
            ),
            60,
            1.0,
            "the held job released and finished",
        )
        (idx,) = gpu_b
        assert f"released onto GPU {idx} of vm" in done["comment"]
        assert done["tres_per_node"] == f"gres:shard:v100_s{idx}:1"
        assert done["start_time"] >= squeue()[b.job_id]["end_time"]
        assert squeue()[a.job_id]["job_state"] == "RUNNING"
        assert "undone=1" not in done["admin_comment"] and f"gpu=vm:{idx}" in done["admin_comment"]
        assert "held=" not in done["admin_comment"]


def test_with_unplaced_hold_a_job_array_is_held_and_its_tasks_released_onto_shared_gpus(
    clean: None,
) -> None:
    """Slurm 22.05 cannot change a waiting task's GPU request, but sets one on a task that
    has none: the array is held without a GPU request, and the agent releases its tasks
    one by one (``scontrol update JobId=ARRAY_TASK`` splits the task from the array)."""
    with agent_with('unplaced = "hold"\n'):
        r = sbatch_array("0-3", sleep=6)
        assert "slurm-colo: job array held" in r.stderr, r.stderr

        def tasks() -> list[dict]:
            return [j for j in squeue().values() if j.get("array_job_id") == r.job_id]

        def all_done() -> list[dict] | None:
            ts = tasks()
            return ts if len(ts) == 4 and all(j["job_state"] == "COMPLETED" for j in ts) else None

        ts = wait_for(all_done, 90, 1.0, "the array's four tasks released and completed")
        toks = set()
        for j in ts:
            assert j["tres_per_node"].startswith("gres:shard:v100_s"), j
            assert "released onto GPU" in j["comment"] and "held=" not in j["admin_comment"], j
            assert gpu_of(j) <= SHARED_GPUS, j
            toks.add(j["admin_comment"].split("tok=")[1].split()[0])
        assert len(toks) == 4  # each task its own placement
        ex = json.loads(agent_cli("explain", "--json", str(ts[0]["job_id"])).stdout)
        assert ex["reason"].startswith("held at submission; then"), ex


def test_a_job_held_at_submission_with_a_begin_time_ahead_is_released_only_once_it_may_start(
    clean: None,
) -> None:
    """A job held at submission keeps its own start time: the agent releases it only once
    Slurm lists it as free to start, whatever GPU frees before (only a requeued job has its
    start time cleared, the two-minute wait Slurm puts on a requeue)."""
    with agent_with('unplaced = "hold"\n'):
        a = _alice("recommendation-bs512", "sleep 60")
        b = _alice("resnet50-bs16", "sleep 8")
        wait_running(a.job_id, b.job_id)
        c = _alice("recommendation-bs8192", "sleep 3", "--begin=now+3600")
        assert c.rc == 0 and "held until its dependency or begin time" in c.stderr, c.stderr
        begin = squeue()[c.job_id]["start_time"]
        assert begin >= time.time() + 3000, squeue()[c.job_id]
        wait_done(b.job_id)  # b's GPU is free: c is not released onto it
        for _ in range(3):
            agent_refresh()
            time.sleep(1.0)
        j = squeue()[c.job_id]
        assert j["priority"] == 0 and "held=" in j["admin_comment"], j
        assert j["start_time"] >= begin - 60, j
        [waits] = [h["waits_to_start"] for h in agent_status()["held"] if h["job_id"] == c.job_id]
        assert waits == "its begin time"
        # its begin time brought forward: the agent releases it once it has passed
        run(["scontrol", "update", f"JobId={c.job_id}", "StartTime=now+5"], check=True)
        released = wait_for(
            lambda: (
                agent_refresh()
                or (j := squeue()[c.job_id])["priority"] != 0
                and "held=" not in j["admin_comment"]
                and j
            ),
            40,
            0.5,
            "the held job released",
        )
        assert "released onto GPU" in released["comment"], released
        run(["scancel", str(c.job_id)], check=True)


def test_a_job_held_too_long_has_a_gpu_drained_for_it(clean: None) -> None:
    with agent_with('unplaced = "hold"\nreserve_after_h = 0.002\n'):  # the guard after 7.2 s
        a = sbatch(
            "--colocate",
            "--colocate-class=recommendation-bs512",
            "--gres=gpu:1",
            "-t",
            "2",
            user="alice",
            sleep=30,
        )
        b = sbatch(
            "--colocate",
            "--colocate-class=resnet50-bs16",
            "--gres=gpu:1",
            "-t",
            "10",
            user="alice",
            sleep=60,
        )
        q = wait_running(a.job_id, b.job_id)
        gpu_a = gpu_of(q[a.job_id])
        gtype = f"v100_s{min(gpu_a)}"
        c = sbatch(
            "--colocate",
            "--colocate-class=recommendation-bs8192",
            "--gres=gpu:1",
            user="alice",
            sleep=3,
        )
        assert "held=*" in squeue()[c.job_id]["admin_comment"]  # held without a GPU request

        def reserved() -> dict[str, object] | None:
            r = json.loads(agent_cli("status", "--json").stdout).get("reservation")
            return r if r and r["job_id"] == c.job_id else None

        r = wait_for(reserved, 40, 0.5, "the agent to drain a GPU for the held job")
        # the GPU whose occupant's time limit ends first: a's
        assert r["waits_for"] == "a shared GPU" and set(r["gpus"]) == gpu_a  # type: ignore[arg-type]
        # a job that would pair well with a is kept off a's GPU now
        d = sbatch(
            "--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="alice", sleep=2
        )
        assert gtype not in squeue()[d.job_id]["tres_per_node"]
        # a ends: c is released onto the GPU kept for it, then the reservation ends
        done = wait_for(
            lambda: (
                squeue().get(c.job_id, {}).get("job_state") == "COMPLETED" and squeue()[c.job_id]
            ),
            60,
            1.0,
            "the held job released onto the drained GPU and finished",
        )
        assert f"released onto GPU {min(gpu_a)} of vm" in done["comment"]
        assert done["start_time"] >= squeue()[a.job_id]["end_time"]
        wait_for(
            lambda: json.loads(agent_cli("status", "--json").stdout).get("reservation") is None,
            20,
            0.5,
            "the reservation to end",
        )


def test_held_jobs_can_be_released_by_hand_while_the_agent_is_down(clean: None) -> None:
    with agent_with('unplaced = "hold"\n'):
        a = sbatch(
            "--colocate",
            "--colocate-class=recommendation-bs512",
            "--gres=gpu:1",
            user="alice",
            sleep=60,
        )
        b = sbatch(
            "--colocate", "--colocate-class=resnet50-bs16", "--gres=gpu:1", user="alice", sleep=60
        )
        wait_running(a.job_id, b.job_id)
        c = sbatch(
            "--colocate",
            "--colocate-class=recommendation-bs8192",
            "--gres=gpu:1",
            "--cpus-per-gpu=1",
            user="alice",
            sleep=3,
        )
        assert squeue()[c.job_id]["priority"] == 0
        stop_agent()
        listed = agent_cli("held")
        assert listed.returncode == 0 and f"job {c.job_id} (alice" in listed.stdout, (
            listed.stdout + listed.stderr
        )
        assert "waits for a shared GPU" in listed.stdout
        out = agent_cli("held", "--release")
        assert out.returncode == 0 and "released with shard:1" in out.stdout, (
            out.stdout + out.stderr
        )
        # held without a GPU request, it gets untargeted sharing: Slurm's first GPU with a
        # free shard (its --cpus-per-gpu, CPUs per shard since submission, stays valid)
        wait_for(
            lambda: squeue().get(c.job_id, {}).get("job_state") == "COMPLETED",
            30,
            0.5,
            "the released job to run",
        )
        j = squeue()[c.job_id]
        assert "held=" not in j["admin_comment"] and j["tres_per_node"] == "gres:shard:1"
        assert agent_cli("held").stdout.strip() == "no job is held for the agent"
