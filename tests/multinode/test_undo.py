"""Probe and undo between two jobs on a GPU node, judged by the agent on the head node: the
sampler's PROBE travels over munge-authenticated TCP, the agent requeues the newcomer
(scontrol on the head) and aims it at a GPU of its type again once one fits. The GPU
nodes' configs have no placement.probe_s: the window comes from the agent's JOBSTART reply."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .mntools import (
    AGENT_LOG,
    CLI,
    HEAD,
    MN_DIR,
    OUT,
    agent_status,
    in_node,
    sbatch,
    squeue,
    standin_cmd,
    start_agent,
    stop_agent,
    wait_for,
    wait_running,
)

LEARNED = MN_DIR / "nodes" / HEAD / "state" / "learned.json"


def _forget_learned() -> None:
    """What probes measured is kept across agent restarts: start the next test without it."""
    stop_agent()
    LEARNED.unlink(missing_ok=True)
    start_agent()


@pytest.fixture()
def fresh(mclean: None) -> Iterator[None]:
    _forget_learned()
    yield
    _forget_learned()


def test_probe_and_undo_between_two_jobs_on_a_gpu_node(fresh: None) -> None:
    node_cfg = (MN_DIR / "nodes" / "colo-gpu1" / "slurm-colo" / "config.toml").read_text()
    assert "probe_s" not in node_cfg  # the 15 s window must come from the agent
    marker = OUT / f"undo-marker-{time.time_ns()}"
    run = standin_cmd()
    pin = ("--colocate", "-w", "colo-gpu2", "--gres=gpu:1", "--open-mode=append")
    a = sbatch(*pin, "--colocate-class=resnet18-bs32", body=f"{run} 45 --slowed-by {marker}")
    wait_running(a.job_id)
    time.sleep(6)  # the incumbent runs alone first: its solo speed is measured
    b = sbatch(*pin, "--colocate-class=resnet18-bs64", body=f"{run} 25 --slows {marker}")
    q = wait_running(a.job_id, b.job_id)
    assert q[a.job_id]["nodes"] == q[b.job_id]["nodes"] == "colo-gpu2"
    assert str(a.job_id) in q[b.job_id]["comment"]  # placed with the incumbent

    # after 15 s together the incumbent runs at 0.3x its solo speed: b is requeued and held
    def requeued() -> dict[str, Any] | None:
        j = squeue().get(b.job_id, {})
        ok = j.get("restart_cnt", 0) >= 1 and j.get("job_state") == "PENDING"
        return j if ok and "requeued" in j.get("comment", "") else None

    j = wait_for(requeued, 60, what="the newcomer requeued by the agent")
    assert "held=" in j["admin_comment"] and j["priority"] == 0
    assert squeue()[a.job_id]["job_state"] == "RUNNING"
    st = agent_status()
    assert st["probes"].get("undone", 0) >= 1 and st["learned_pairs"] >= 1
    ex = json.loads(in_node(HEAD, CLI, "explain", "--json", str(b.job_id), check=True).stdout)
    assert "requeued after its probe" in ex["reason"]

    # once the incumbent ends, b runs again on a GPU of its type, to the end
    def finished() -> dict[str, Any] | None:
        j = squeue().get(b.job_id, {})
        return j if j.get("job_state") == "COMPLETED" else None

    j = wait_for(finished, 120, step=1.0, what="the requeued job to run again and finish")
    assert j["restart_cnt"] == 1 and "undone=1" in j["admin_comment"]
    assert "held=" not in j["admin_comment"] and "now GPU" in j["comment"]
    out = (OUT / f"{b.job_id}.out").read_text().split()
    assert out.count("run") == 2 and out[-1] == "done", out
    assert agent_status()["held"] == []


def test_a_kept_set_is_judged_again_over_tcp_when_a_job_leaves_it(fresh: None) -> None:
    """Three jobs on one GPU of a GPU node: the newest one's probe keeps them. When the
    third ends, the incumbent slows to 0.3x next to the newest alone: the newest job's
    sampler sends a PROBE marked as a second look over TCP, and the agent on the head
    requeues it."""
    stamp = time.time_ns()
    new_marker, third_marker = OUT / f"again-new-{stamp}", OUT / f"again-third-{stamp}"
    run = standin_cmd()
    pin = ("--colocate", "-w", "colo-gpu2", "--gres=gpu:1", "--open-mode=append")
    slowed = f"--slowed-by {new_marker} --unless {third_marker}"
    a = sbatch(*pin, "--colocate-class=resnet18-bs32", body=f"{run} 120 {slowed}")
    wait_running(a.job_id)
    time.sleep(4)  # the incumbent runs alone first
    c = sbatch(*pin, "--colocate-class=resnet18-bs16", body=f"{run} 30 --slows {third_marker}")
    wait_running(c.job_id)
    time.sleep(3)
    b = sbatch(*pin, "--colocate-class=resnet18-bs64", body=f"{run} 90 --slows {new_marker}")
    q = wait_running(a.job_id, b.job_id, c.job_id)
    assert q[a.job_id]["nodes"] == q[b.job_id]["nodes"] == q[c.job_id]["nodes"] == "colo-gpu2"
    assert str(c.job_id) in q[b.job_id]["comment"]  # b joined a and c

    # b's own probe keeps the three: nothing is requeued while c runs
    wait_for(
        lambda: squeue().get(c.job_id, {}).get("job_state") == "COMPLETED",
        60,
        what="the third job to end",
    )
    assert squeue()[b.job_id]["restart_cnt"] == 0
    assert agent_status()["probes"].get("kept", 0) >= 1

    # then b judges the pair left behind and is requeued for it
    def requeued() -> dict[str, Any] | None:
        j = squeue().get(b.job_id, {})
        return j if j.get("restart_cnt", 0) >= 1 and "requeued" in j.get("comment", "") else None

    j = wait_for(requeued, 60, what="the newest job requeued at its second look")
    assert "held=" in j["admin_comment"]
    assert squeue()[a.job_id]["job_state"] == "RUNNING"
    log = AGENT_LOG.read_text(errors="replace").splitlines()
    assert any(
        f"job {b.job_id}: probe of the set left behind harmful" in x and "requeued" in x
        for x in log
    )
