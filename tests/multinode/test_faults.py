"""Faults of a real cluster: the controller's agent unreachable for a minute while a job
ends on a GPU node, and a GPU node dying under a job."""

from __future__ import annotations

import os
import signal
import time

import pytest

from .mntools import (
    CLI,
    agent_status,
    in_node,
    lab_up,
    node_pids,
    node_status,
    records_of,
    sbatch,
    spool_pending,
    squeue,
    start_agent,
    stop_agent,
    wait_done,
    wait_for,
    wait_running,
)


def _pending(node: str, job_id: int) -> list[str]:
    return [f for f in spool_pending(node) if f"_{job_id}_" in f]


def test_agent_down_for_a_minute_records_arrive_later_exactly_once(mclean: None) -> None:
    j = sbatch(
        "-w",
        "colo-gpu1",
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        body="sleep 4",
    )
    wait_running(j.job_id)
    wait_for(lambda: j.job_id in node_status("colo-gpu1")["jobs"], 20, 0.5, "Prolog done")
    stop_agent()
    t_down = time.monotonic()
    try:
        q = wait_done(j.job_id)
        assert q[j.job_id]["job_state"] == "COMPLETED"
        # the Epilog spooled the record on the node; it cannot reach the head
        wait_for(lambda: _pending("colo-gpu1", j.job_id), 20, 0.5, "record spooled on colo-gpu1")
        assert records_of(j.job_id) == []
        time.sleep(max(0.0, 60 - (time.monotonic() - t_down)))
        assert _pending("colo-gpu1", j.job_id) and records_of(j.job_id) == []  # still waiting
    finally:
        start_agent()
    # the node's detached ingest retries with a growing pause (up to 60 s) and gets through
    wait_for(lambda: records_of(j.job_id), 75, 1, "the record in the head's history")
    wait_for(lambda: not _pending("colo-gpu1", j.job_id), 10, 0.5, "spool emptied")
    in_node("colo-gpu1", CLI, "spool", "ingest", check=True)  # a later run sends nothing again
    recs = records_of(j.job_id)
    assert len(recs) == 1 and recs[0]["node"] == "colo-gpu1" and recs[0]["state"] == "COMPLETED"


@pytest.mark.parametrize("down_s", [0, 30], ids=["back-at-once", "back-late"])
def test_node_killed_mid_job_record_kept_and_gpu_freed(mclean: None, down_s: int) -> None:
    """``down_s``: how long the node stays dead after Slurm marks it DOWN. Back at once,
    slurmctld has slurmd run the dead job's Epilog as the node registers; back 30 s later
    it does not (measured), and the next job's hooks recover the record. Either way the
    record says the job failed when it died."""
    a = sbatch(
        "-w",
        "colo-gpu3",
        "--no-requeue",
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        body="sleep 300",
    )
    q = wait_running(a.job_id)
    assert q[a.job_id]["gres_detail"] == ["shard:1(IDX:0)"]
    wait_for(lambda: a.job_id in node_status("colo-gpu3")["jobs"], 20, 0.5, "Prolog done")

    def counted() -> bool:
        return any(str(a.job_id) in str(g["occupants"]) for g in agent_status()["gpus"])

    wait_for(counted, 10, 0.5, "the agent counting the job")

    # the node dies: its slurmd, the job's slurmstepd and processes, its MPS daemon (by pid)
    pids = node_pids("colo-gpu3")
    assert pids
    t_kill = time.time()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        wait_for(lambda: squeue()[a.job_id]["job_state"] == "NODE_FAIL", 60, 1, "job NODE_FAIL")
        # the agent no longer counts the job on that GPU (nor anywhere)
        wait_for(lambda: not counted(), 15, 0.5, "the job gone from the agent's view")
        g = next(g for g in agent_status()["gpus"] if (g["node"], g["index"]) == ("colo-gpu3", 0))
        assert str(a.job_id) not in str(g["occupants"])
        assert records_of(a.job_id) == []  # nothing could be sent yet
        time.sleep(down_s)
    finally:
        lab_up()  # the node comes back: slurmd restarted (ReturnToService=2)

    def gpu0_free() -> bool:
        g = next(g for g in agent_status()["gpus"] if (g["node"], g["index"]) == ("colo-gpu3", 0))
        return g["available"] and not g["occupants"]

    wait_for(gpu0_free, 20, 0.5, "colo-gpu3 GPU 0 free again in the agent's view")
    # the next job on the node: its hooks recover the dead job's record (unless the dead
    # job's own Epilog has spooled it) and its Epilog ships what is spooled
    b = sbatch(
        "-w",
        "colo-gpu3",
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        body="sleep 1",
    )
    wait_done(b.job_id, timeout=90)
    wait_for(lambda: records_of(a.job_id) and records_of(b.job_id), 40, 1, "both records")
    ra = records_of(a.job_id)
    assert len(ra) == 1 and ra[0]["node"] == "colo-gpu3", ra
    # failed, and ended when it was last seen alive (its profile's last write), not when
    # the node came back
    assert ra[0]["state"] == "FAILED", ra
    assert ra[0]["start_time"] < ra[0]["end_time"] <= t_kill + 1, (ra, t_kill)
    assert len(records_of(b.job_id)) == 1
    assert a.job_id not in node_status("colo-gpu3")["jobs"]
