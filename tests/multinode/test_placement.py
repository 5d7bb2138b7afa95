"""Placement on the right node and GPU of a multi-node cluster, MPS limits applied by the
remote node's hooks, and job records shipped to the head node's history exactly once."""

from __future__ import annotations

import re
import time
from typing import Any

from .mntools import (
    HEAD,
    OUT,
    agent_status,
    gres_detail,
    in_node,
    job_env,
    node_status,
    records_of,
    sbatch,
    spool_pending,
    squeue,
    wait_done,
    wait_for,
    wait_running,
)

ENV_DUMP = "env | grep -E '^(CUDA_|SLURM_GRES|SLURMD_NODENAME)' | sort; sleep 6"


def test_pinned_pair_shares_gpu0_of_that_node_with_mps_limits(mclean: None) -> None:
    a = sbatch(
        "-w",
        "colo-gpu2",
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        body=ENV_DUMP,
    )
    b = sbatch(
        "-w",
        "colo-gpu2",
        "--colocate",
        "--colocate-class=resnet18-bs64",
        "--gres=gpu:1",
        body=ENV_DUMP,
    )
    q = wait_running(a.job_id, b.job_id)
    for j in (a.job_id, b.job_id):
        # Slurm's own view: that node, its shared GPU 0 (shard GRES of the v100_s0 type)
        assert q[j]["nodes"] == "colo-gpu2", q[j]["nodes"]
        assert gres_detail(q[j]) == ["shard:1(IDX:0)"], q[j].get("gres_detail")
        assert "shard:v100_s0:1" in str(q[j].get("tres_per_node")), q[j].get("tres_per_node")
        assert "GPU 0 of colo-gpu2" in str(q[j].get("comment"))

    # the node's view, inside colo-gpu2's namespaces: one MPS daemon for GPU 0, both jobs
    st = wait_for(
        lambda: (s := node_status("colo-gpu2"))["gpus"].get("0", {}).get("mps_alive") and s,
        30,
        0.5,
        "MPS daemon on colo-gpu2",
    )
    assert set(st["gpus"]["0"]["jobs"]) == {a.job_id, b.job_id}
    assert [i for i, g in st["gpus"].items() if g["mps_alive"]] == ["0"]
    for other in ("colo-gpu1", "colo-gpu3"):
        assert not {a.job_id, b.job_id} & set(node_status(other)["jobs"]), other

    # the agent counts them on (colo-gpu2, 0), nowhere else
    rows = {(g["node"], g["index"]): str(g["occupants"]) for g in agent_status()["gpus"]}
    assert str(a.job_id) in rows[("colo-gpu2", 0)] and str(b.job_id) in rows[("colo-gpu2", 0)]
    assert not any(str(a.job_id) in v for k, v in rows.items() if k != ("colo-gpu2", 0))

    wait_done(a.job_id, b.job_id)
    ea, eb = job_env(a.job_id), job_env(b.job_id)
    for e in (ea, eb):  # the remote TaskProlog set the MPS limits
        assert e["SLURMD_NODENAME"] == "colo-gpu2"
        assert e["CUDA_VISIBLE_DEVICES"] == "0" and e["SLURM_GRES"] == "shard:1"
        assert 1 <= int(e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) <= 100
        assert e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].startswith("0=")
        assert e["CUDA_MPS_PIPE_DIRECTORY"] == ea["CUDA_MPS_PIPE_DIRECTORY"]
    assert ea["CUDA_MPS_PIPE_DIRECTORY"].startswith(
        "/run/slurm-colo/mps/GPU-2ab"
    )  # colo-gpu2's GPU


def test_records_reach_the_head_history_exactly_once(mclean: None) -> None:
    t0 = time.time()
    jobs = [
        sbatch(
            "-w",
            node,
            "--colocate",
            "--colocate-class=resnet18-bs32",
            "--gres=gpu:1",
            body="sleep 2",
        )
        for node in ("colo-gpu1", "colo-gpu3")
    ]
    ids = [j.job_id for j in jobs]
    q = wait_done(*ids)
    assert all(q[i]["job_state"] == "COMPLETED" for i in ids), {i: q[i]["job_state"] for i in ids}
    # the Epilog's detached ingest sends them to the agent (RECORDS over TCP)
    recs = wait_for(
        lambda: all(records_of(i) for i in ids) and {i: records_of(i) for i in ids},
        30,
        1,
        "records in the head node's history",
    )
    for i, node in zip(ids, ("colo-gpu1", "colo-gpu3")):
        assert len(recs[i]) == 1, recs[i]
        r = recs[i][0]
        assert r["node"] == node and r["cluster"] == "colomn" and r["user"] == "alice"
        assert r["state"] == "COMPLETED" and r["end_time"] >= t0 - 5
        assert not [f for f in spool_pending(node) if f"_{i}_" in f]  # shipped, nothing left
    time.sleep(2)  # nothing sends them a second time
    assert all(len(records_of(i)) == 1 for i in ids)


def test_a_pair_on_a_gpu_node_has_its_time_limits_raised_by_the_head_nodes_agent(
    mclean: None,
) -> None:
    """The agent on colo-head raises, with scontrol, the limits of two jobs sharing GPU 0 of
    colo-gpu2 by the time sharing costs them (0.89 of solo speed each in the lab's scores),
    and status says so per job."""
    args = ("-w", "colo-gpu2", "--colocate", "--colocate-class=transformer-bs16")
    a = sbatch(*args, "--gres=gpu:1", "--time=3", body="sleep 60")
    b = sbatch(*args, "--gres=gpu:1", "--time=3", body="sleep 60")
    q = wait_running(a.job_id, b.job_id)
    for j in (a.job_id, b.job_id):
        assert gres_detail(q[j]) == ["shard:1(IDX:0)"], q[j].get("gres_detail")

    def limit(job: dict[str, Any]) -> int:
        return int(job["time_limit"])  # minutes (Slurm 22.05)

    def grown() -> dict[int, dict[str, Any]] | None:
        now = squeue()
        return now if all(limit(now[j]) >= 4 for j in (a.job_id, b.job_id)) else None

    q = wait_for(grown, 30, 0.5, "both time limits raised")
    # within three minutes of its end from the start: each minute owed is given at once
    assert limit(q[a.job_id]) == limit(q[b.job_id]) == 4
    occupants = {
        o["job_id"]: o for g in agent_status()["gpus"] for o in g["occupants"] if o["job_id"]
    }
    assert occupants[a.job_id]["time_limit_added_min"] == 1
    assert occupants[b.job_id]["time_limit_added_min"] == 1


def test_a_job_arrays_tasks_go_to_the_shared_gpus_of_every_node_then_to_gpus_of_their_own(
    mclean: None,
) -> None:
    """Slurm 22.05 with whole GPUs to wait for: the array is held; its tasks are released
    onto the shared GPU 0 of whichever node takes them, each its own placement under that
    node's MPS daemon, and the tasks no shared GPU takes get a GPU of their own."""
    a = sbatch(
        "--array=0-11",
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        body=ENV_DUMP,
    )
    assert "job array held" in a.stderr and "else with its own GPU request" in a.stderr, a.stderr
    seen: dict[int, dict[str, Any]] = {}  # each task as last seen running

    def all_done() -> list[dict[str, Any]] | None:
        ts = [j for j in squeue().values() if j.get("array_job_id") == a.job_id]
        seen.update({j["job_id"]: j for j in ts if j["job_state"] == "RUNNING"})
        return ts if len(ts) == 12 and all(j["job_state"] == "COMPLETED" for j in ts) else None

    tasks = wait_for(all_done, 150, 0.5, "the array's twelve tasks released and completed")
    # an untyped request: the V100s' and colo-gpu3's K80 (v100_s0, k80_s0), each GPU judged
    # with its own model's score set
    shared = [j for j in tasks if str(j.get("tres_per_node")).startswith("gres:shard:")]
    own = [j for j in tasks if j.get("tres_per_node") == "gres:gpu:1"]
    assert shared and own and len(shared) + len(own) == 12, tasks
    assert len({seen[j["job_id"]]["nodes"] for j in shared}) >= 2  # more than one node's GPU
    for j in shared:
        assert gres_detail(seen[j["job_id"]]) == ["shard:1(IDX:0)"], seen[j["job_id"]]
        e = job_env(j["job_id"])  # the remote TaskProlog gave each its MPS limits
        assert e["SLURMD_NODENAME"] == seen[j["job_id"]]["nodes"]
        assert 1 <= int(e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) <= 100, e
    for j in own:
        assert "no shared GPU took it" in str(j.get("comment")), j
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in job_env(j["job_id"])


def test_a_heterogeneous_job_runs_unshared_with_its_components_on_two_nodes(
    mclean: None,
) -> None:
    """A ``--colocate`` hetjob is left as submitted (each component keeps its GPU request)
    and runs: Slurm's backfill gives each component a node of its own, so it needs two
    nodes (on the one-node lab its components never start together). The agent counts
    each component as a job holding its GPU whole, and neither gets MPS settings."""
    script = OUT / "hetjob-mn.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --colocate --gres=gpu:1\n#SBATCH hetjob\n#SBATCH --gres=gpu:1\n"
        "env | grep -E '^(CUDA_|SLURMD_NODENAME)' | sort\n"
        "srun --het-group=1 bash -c 'env | grep -E \"^(CUDA_|SLURMD_NODENAME)\" | sed s/^/C1_/'\n"
        "sleep 6\n"
    )
    p = in_node(HEAD, "sbatch", "--parsable", "-o", str(OUT / "%j.out"), str(script), user="alice")
    assert p.returncode == 0, p.stderr
    lead = int(p.stdout.strip().split(";")[0])
    assert p.stderr.count("slurm-colo: heterogeneous jobs are not shared") == 1, p.stderr
    q = wait_running(lead, lead + 1)
    parts = [q[lead], q[lead + 1]]
    assert [j["het_job_id"] for j in parts] == [lead, lead], parts
    assert parts[0]["nodes"] != parts[1]["nodes"], parts
    rows = {(g["node"], g["index"]): g for g in agent_status()["gpus"]}
    for j in parts:
        assert j["tres_per_node"] == "gres:gpu:1" and not j.get("admin_comment"), j
        assert j["comment"].startswith("colo: heterogeneous job not shared"), j
        # "gpu:v100_s0:1(IDX:0),gpu:v100:0(IDX:)": the one GPU of whichever type it got
        (index,) = re.findall(r":1\(IDX:(\d+)\)", ",".join(gres_detail(j)))
        row = rows.get((j["nodes"], int(index)))
        if row is not None:  # on the node's shared GPU: no partner may join it
            assert row["exclusive_job"] == j["job_id"] and not row["occupants"], row
    wait_done(lead, lead + 1)
    e = job_env(lead)
    assert e["SLURMD_NODENAME"] == parts[0]["nodes"] and e["CUDA_VISIBLE_DEVICES"], e
    assert e["C1_SLURMD_NODENAME"] == parts[1]["nodes"] and e["C1_CUDA_VISIBLE_DEVICES"], e
    assert not any("MPS" in k for k in e), e
