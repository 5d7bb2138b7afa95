"""Undoing a harmful pairing, and the guard for a job held too long, on Slurm 24.11 and 26.05:
the probe after placement.probe_s (15 s in the lab) requeues the newcomer, which runs again
at once on the other shared GPU (these versions change a pending job's GRES); a job held
without a GPU request has a GPU drained for it after placement.reserve_after_h and is
released there (`scontrol update TresPerNode=gres/shard:…`, which 24.11 and later apply to
a pending job, unlike 22.05)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from .vlab import CLAB, VersionLab, number, wait_for

OUT = f"{CLAB}/out"
ENV = "env | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_SHARDS_ON_NODE)'"


@pytest.fixture()
def fresh_agent(vclean: VersionLab) -> Iterator[VersionLab]:
    """The agent keeps what probes measured across restarts too: forget it afterwards, so
    later tests (and runs) see the lab's scores as they are."""
    yield vclean
    vclean.forget_probe_measurements()


def test_a_harmful_newcomer_is_requeued_and_runs_again_on_its_own(
    fresh_agent: VersionLab,
) -> None:
    lab = fresh_agent
    marker = f"{OUT}/undo-marker-{time.time_ns()}"
    run = lab.standin_cmd()
    a = lab.sbatch(
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        user="alice",
        script=f"{run} 30 --slowed-by {marker}",
    )
    lab.wait_running(a.job_id)
    time.sleep(6)  # the incumbent runs alone first: its solo speed is measured
    b = lab.sbatch(
        "--colocate",
        "--colocate-class=resnet18-bs64",
        "--gres=gpu:1",
        "--open-mode=append",
        user="alice",
        script=f"{run} 25 --requeued-seconds 4 --slows {marker}",
    )
    q = lab.wait_running(a.job_id, b.job_id)
    (gpu,) = q[a.job_id]["gres"][0][3]
    assert q[b.job_id]["gres"][0][3] == [gpu], q[b.job_id]
    assert "predicted delta" in q[b.job_id]["comment"]

    # after the 15 s probe: the incumbent ran at 0.3x its solo speed -> b is requeued. Slurm
    # 24.11+ changes a pending job's GRES, so b need not wait for a GPU of its old shard type
    # (22.05 must, tests/slurm/test_undo.py): the agent releases it at once onto the other
    # shared GPU, with that GPU's shard, while the incumbent still runs
    def requeued() -> dict | None:
        j = lab.squeue().get(b.job_id, {})
        return j if j.get("restart_cnt", 0) >= 1 else None

    j = wait_for(requeued, 40, 0.5, "the newcomer requeued")
    assert "requeued" in j["comment"], j["comment"]
    assert (
        "below 1/" in j["comment"]
        or "combined throughput" in j["comment"]
        or ("now GPU" in j["comment"])
    ), j["comment"]
    other = ({0, 1} - {gpu}).pop()
    moved = wait_for(
        lambda: (x := lab.jobs(b.job_id).get(b.job_id)) and "now GPU" in x["comment"] and x,
        30,
        0.5,
        "the requeued newcomer released again",
    )
    assert f"now GPU {other} of {lab.node}" in moved["comment"], moved
    assert moved["tres_per_node"] == f"gres/shard:v100_s{other}:1", moved
    ex = json.loads(lab.cli("explain", "--json", str(b.job_id)).stdout)
    assert "requeued after its probe" in ex["reason"], ex

    done = lab.wait_done(a.job_id, b.job_id, timeout=60)
    assert done[a.job_id]["state"] == done[b.job_id]["state"] == "COMPLETED", done
    raw_all = lab.squeue_all()
    raw = raw_all[b.job_id]
    assert raw["restart_cnt"] == 1 and "undone=1" in raw["admin_comment"], raw
    assert "held=" not in raw["admin_comment"]
    # its second run started while the incumbent still ran: it did not wait for that GPU
    assert number(raw["start_time"]) < number(raw_all[a.job_id]["end_time"]), raw
    text = lab.host_path(f"{OUT}/{b.job_id}.out").read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith(("run ", "done"))]
    assert lines == ["run 0", "run 1", "done"], text  # cut short once, then to the end
    status = lab.status()
    assert status["probes"].get("undone", 0) >= 1 and status["held"] == []
    assert status["learned_pairs"] >= 1


def test_a_set_kept_by_its_probe_is_judged_again_when_a_job_leaves_it(
    fresh_agent: VersionLab,
) -> None:
    """Three jobs on one GPU: the newest one's probe keeps them. When the third ends, the
    incumbent slows to 0.3x next to the newest alone; the newest job's second look finds
    the pair harmful, and the agent requeues it and releases it onto the other GPU."""
    lab = fresh_agent
    stamp = time.time_ns()
    new_marker, third_marker = f"{OUT}/again-new-{stamp}", f"{OUT}/again-third-{stamp}"
    run = lab.standin_cmd()

    def alice(cls: str, script: str, *extra: str) -> int:
        job = lab.sbatch(
            "--colocate",
            f"--colocate-class={cls}",
            "--gres=gpu:1",
            *extra,
            user="alice",
            script=script,
        )
        return job.job_id

    a = alice("resnet18-bs32", f"{run} 120 --slowed-by {new_marker} --unless {third_marker}")
    lab.wait_running(a)
    time.sleep(4)  # the incumbent runs alone first
    c = alice("resnet18-bs16", f"{run} 30 --slows {third_marker}")
    lab.wait_running(c)
    time.sleep(3)
    b = alice(
        "resnet18-bs64", f"{run} 90 --requeued-seconds 3 --slows {new_marker}", "--open-mode=append"
    )
    q = lab.wait_running(a, b, c)
    (gpu,) = q[a]["gres"][0][3]
    assert q[b]["gres"][0][3] == q[c]["gres"][0][3] == [gpu], q

    # b's own probe keeps the three: nothing is requeued while c runs
    wait_for(lambda: lab.jobs(c).get(c, {}).get("state") == "COMPLETED", 60, 0.5, "the third job")
    assert lab.squeue()[b]["restart_cnt"] == 0
    assert lab.status()["probes"].get("kept", 0) >= 1

    # then b judges the pair left behind, is requeued, and runs again on the other GPU
    other = ({0, 1} - {gpu}).pop()
    moved = wait_for(
        lambda: (x := lab.jobs(b).get(b)) and "now GPU" in x["comment"] and x,
        60,
        0.5,
        "the newest job requeued at its second look and released again",
    )
    assert f"now GPU {other} of {lab.node}" in moved["comment"], moved
    assert lab.squeue_all()[b]["restart_cnt"] == 1
    assert lab.jobs()[a]["state"] == "RUNNING"
    log = lab.host_path(f"{CLAB}/agent.log").read_text(errors="replace").splitlines()
    assert any(
        f"job {b}: probe of the set left behind harmful" in x and "requeued" in x for x in log
    )
    ex = json.loads(lab.cli("explain", "--json", str(b)).stdout)
    assert "requeued after its probe" in ex["reason"], ex
    assert lab.status()["probes"].get("undone", 0) >= 1


def test_a_job_held_too_long_has_a_gpu_drained_for_it(vclean: VersionLab) -> None:
    lab = vclean
    with lab.agent_config(unplaced="hold", reserve_after_h=0.002):  # the guard after 7.2 s
        # the two shared GPUs take one incompatible job each; a's time limit ends first
        a = lab.sbatch(
            "--colocate",
            "--colocate-class=recommendation-bs512",
            "--gres=gpu:1",
            "-t",
            "2",
            user="alice",
            script="sleep 14",
        )
        b = lab.sbatch(
            "--colocate",
            "--colocate-class=resnet50-bs16",
            "--gres=gpu:1",
            "-t",
            "10",
            user="alice",
            script="sleep 60",
        )
        q = lab.wait_running(a.job_id, b.job_id)
        (gpu_a,) = q[a.job_id]["gres"][0][3]
        c = lab.sbatch(
            "--colocate",
            "--colocate-class=recommendation-bs8192",
            "--gres=gpu:1",
            user="alice",
            script=f"{ENV}; sleep 2",
        )
        assert c.rc == 0 and "held until a shared GPU fits" in c.stderr, c.stderr
        # held without a GPU request: the agent gives it one when it releases it
        held = lab.squeue()[c.job_id]
        assert held["job_state"] == ["PENDING"] and number(held["priority"]) == 0, held
        assert "held=*" in held["admin_comment"] and held["tres_per_node"] in ("", None), held

        def reserved() -> dict | None:
            r = lab.status().get("reservation")
            return r if r and r["job_id"] == c.job_id else None

        r = wait_for(reserved, 30, 0.5, "the agent to drain a GPU for the held job")
        assert r["waits_for"] == "a shared GPU" and r["gpus"] == [gpu_a], r
        # a job that would pair well with a is kept off a's GPU now
        d = lab.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="alice")
        assert f"v100_s{gpu_a}" not in lab.jobs()[d.job_id]["tres_per_node"]
        # a ends: c is released onto the GPU kept for it, then the reservation ends
        done = wait_for(
            lambda: (j := lab.jobs(c.job_id).get(c.job_id)) and j["state"] == "COMPLETED" and j,
            40,
            1.0,
            "the held job released onto the drained GPU and finished",
        )
        assert f"released onto GPU {gpu_a} of {lab.node}" in done["comment"], done
        assert done["tres_per_node"] == f"gres/shard:v100_s{gpu_a}:1", done
        env = lab.job_env(c.job_id)
        assert env["CUDA_VISIBLE_DEVICES"] == str(gpu_a) and env["SLURM_SHARDS_ON_NODE"] == "1"
        assert lab.jobs()[b.job_id]["state"] == "RUNNING"
        wait_for(lambda: lab.status().get("reservation") is None, 20, 0.5, "reservation ends")
