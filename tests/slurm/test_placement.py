"""Who shares which GPU, read back from Slurm itself (squeue --json gres_detail)."""

from __future__ import annotations

import json
import subprocess
import time

from slurm_colo.gavel import bundled_path, load_gavel

from .labtools import (
    LEARNED,
    SHARED_GPUS,
    agent_cli,
    agent_refresh,
    gpu_of,
    kind_of,
    sbatch,
    squeue,
    start_agent,
    stop_agent,
    wait_for,
    wait_running,
)

V100 = load_gavel(bundled_path(), "v100")


def _delta(a: str, b: str) -> float:
    na, nb = V100.pairs[(a, b)]
    return 2 * min(na, nb)


def test_compatible_jobs_share_one_gpu(clean: None) -> None:
    assert _delta("resnet18-bs32", "resnet18-bs64") > 1.5
    a = sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="alice")
    b = sbatch("--colocate", "--colocate-class=resnet18-bs64", "--gres=gpu:1", user="alice")
    q = wait_running(a.job_id, b.job_id)
    ga, gb = gpu_of(q[a.job_id]), gpu_of(q[b.job_id])
    assert ga == gb and len(ga) == 1 and ga <= SHARED_GPUS
    assert kind_of(q[a.job_id]) == kind_of(q[b.job_id]) == "shard"
    assert "predicted delta" in q[b.job_id]["comment"]


def test_incompatible_jobs_never_share(clean: None) -> None:
    assert _delta("recommendation-bs512", "resnet50-bs16") < 1.0
    assert _delta("recommendation-bs8192", "resnet50-bs16") < 1.0
    assert _delta("recommendation-bs512", "recommendation-bs8192") < 1.0
    a = sbatch("--colocate", "--colocate-class=recommendation-bs512", "--gres=gpu:1", user="alice")
    b = sbatch("--colocate", "--colocate-class=resnet50-bs16", "--gres=gpu:1", user="alice")
    c = sbatch("--colocate", "--colocate-class=recommendation-bs8192", "--gres=gpu:1", user="alice")
    q = wait_running(a.job_id, b.job_id, c.job_id)
    gpus = [gpu_of(q[j]) for j in (a.job_id, b.job_id, c.job_id)]
    assert all(len(g) == 1 for g in gpus)
    assert len({min(g) for g in gpus}) == 3, f"incompatible jobs share a GPU: {gpus}"
    # two opened the shared GPUs; the third had no compatible GPU left and kept its own GPU
    assert kind_of(q[c.job_id]) == "gpu" and "own GPU" in q[c.job_id]["comment"]


def test_a_shared_gpu_held_whole_by_another_job_is_not_opened(clean: None) -> None:
    """A job holding shared GPU 0 whole (its GRES type asked by name): the agent sees it in
    Slurm's state and opens the other shared GPU for a --colocate job, which runs at once.
    (With ``LAB_SLURM_BACKEND=pyslurm`` this is the pyslurm backend's check too: one that
    did not read running jobs' nodes put the job on GPU 0, where it waited.)"""
    whole = sbatch("--gres=gpu:v100_s0:1", sleep=30)
    q = wait_running(whole.job_id)
    assert gpu_of(q[whole.job_id]) == {0}
    agent_refresh()  # the agent's next look at Slurm, now
    c = sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="alice")
    q = wait_running(c.job_id, timeout=20)
    assert gpu_of(q[c.job_id]) == {1} and kind_of(q[c.job_id]) == "shard"
    assert "GPU 1 of" in q[c.job_id]["comment"]


def test_jobs_of_different_users_never_share_an_mps_gpu(clean: None) -> None:
    a = sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="alice")
    b = sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="bob")
    c = sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="bob")
    q = wait_running(a.job_id, b.job_id, c.job_id)
    ga, gb, gc = (gpu_of(q[j]) for j in (a.job_id, b.job_id, c.job_id))
    assert ga.isdisjoint(gb) and ga.isdisjoint(gc)
    assert gb == gc  # bob's two compatible jobs do share


def test_exclusive_jobs_never_land_on_a_gpu_in_shared_use(clean: None) -> None:
    # put shard jobs on both shared GPUs
    s1 = sbatch(
        "--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="alice", sleep=20
    )
    s2 = sbatch(
        "--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="bob", sleep=20
    )
    wait_running(s1.job_id, s2.job_id)
    # untyped exclusive requests, one of them for all four GPUs
    ex = [sbatch("--gres=gpu:1", sleep=4) for _ in range(3)] + [sbatch("--gres=gpu:4", sleep=2)]
    assert all(e.rc == 0 for e in ex)
    seen_running: set[int] = set()
    deadline = time.monotonic() + 16
    while time.monotonic() < deadline:
        q = squeue()
        shared_in_use: set[int] = set()
        for j in q.values():
            if j["job_state"] == "RUNNING" and kind_of(j) == "shard":
                shared_in_use |= gpu_of(j)
        for e in ex:
            j = q[e.job_id]
            if j["job_state"] == "RUNNING":
                seen_running.add(e.job_id)
                assert gpu_of(j).isdisjoint(shared_in_use), (
                    f"exclusive job {e.job_id} on {gpu_of(j)} while shards use {shared_in_use}"
                )
        time.sleep(0.3)
    assert len(seen_running) >= 2  # the exclusive GPUs 2 and 3 were used meanwhile
    assert squeue()[ex[3].job_id]["job_state"] == "PENDING"  # gpu:4 waits for the shared GPUs


def test_explain_and_status_report_the_placement(clean: None) -> None:
    a = sbatch(
        "--colocate", "--colocate-class=resnet18-bs16", "--gres=gpu:1", user="alice", sleep=15
    )
    b = sbatch(
        "--colocate", "--colocate-class=resnet18-bs16", "--gres=gpu:1", user="alice", sleep=15
    )
    q = wait_running(a.job_id, b.job_id)
    idx = min(gpu_of(q[b.job_id]))
    wait_for(
        lambda: str(a.job_id) in agent_cli("explain", str(b.job_id)).stdout,
        10,
        what="explain names partner",
    )
    out = agent_cli("explain", str(b.job_id)).stdout
    assert f"placed on GPU {idx} of node" in out and "predicted speedup delta" in out
    st = json.loads(agent_cli("status", "--json").stdout)
    g = next(g for g in st["gpus"] if g["index"] == idx)
    assert {o["job_id"] for o in g["occupants"]} == {a.job_id, b.job_id}
    assert g["predicted_delta"] > 1.0
    plain = sbatch("--gres=gpu:1", sleep=1)
    assert "without --colocate" in agent_cli("explain", str(plain.job_id)).stdout


def test_agent_restart_rebuilds_its_view_from_slurm(clean: None) -> None:
    a = sbatch(
        "--colocate", "--colocate-class=resnet18-bs64", "--gres=gpu:1", user="alice", sleep=30
    )
    b = sbatch(
        "--colocate", "--colocate-class=resnet18-bs64", "--gres=gpu:1", user="alice", sleep=30
    )
    q = wait_running(a.job_id, b.job_id)
    idx = min(gpu_of(q[a.job_id]))
    agent_refresh()  # the agent has seen both jobs run
    stop_agent()
    # what each job is owed for its time limit was saved when the agent stopped
    owed = json.loads(LEARNED.with_name("time_owed.json").read_text())
    assert {a.job_id, b.job_id} <= {r["job"] for r in owed["jobs"]}, owed
    start_agent()
    st = json.loads(agent_cli("status", "--json").stdout)
    g = next(g for g in st["gpus"] if g["index"] == idx)
    assert {o["job_id"] for o in g["occupants"]} == {a.job_id, b.job_id}
    assert {o["cls"] for o in g["occupants"]} == {"resnet18-bs64"}
    c = sbatch("--colocate", "--colocate-class=resnet18-bs64", "--gres=gpu:1", user="alice")
    qc = wait_running(c.job_id)
    assert gpu_of(qc[c.job_id]) == {idx}
    assert str(a.job_id) in qc[c.job_id]["comment"] and str(b.job_id) in qc[c.job_id]["comment"]


def test_metrics_endpoint_is_scraped_for_real(clean: None) -> None:
    import urllib.request

    a = sbatch(
        "--colocate", "--colocate-class=resnet18-bs16", "--gres=gpu:1", user="alice", sleep=10
    )
    b = sbatch(
        "--colocate", "--colocate-class=resnet18-bs16", "--gres=gpu:1", user="alice", sleep=10
    )
    q = wait_running(a.job_id, b.job_id)
    idx = min(gpu_of(q[a.job_id]))
    agent_refresh()
    body = urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=5).read().decode()
    lines = [ln for ln in body.splitlines() if ln and not ln.startswith("#")]
    occ = [
        ln for ln in lines if ln.startswith("slurm_colo_gpu_occupants{") and f'gpu="{idx}"' in ln
    ]
    assert occ and occ[0].rsplit(" ", 1)[1] == "2"
    assert any(ln.startswith('slurm_colo_decisions_total{action="share"') for ln in lines)


def test_an_exclusive_job_on_an_idle_shared_gpu_keeps_shared_jobs_away(clean: None) -> None:
    ex = sbatch(
        "--gres=gpu:1", sleep=12
    )  # untyped: Slurm gives it the lowest free GPU, shared GPU 0
    q = wait_running(ex.job_id)
    held = gpu_of(q[ex.job_id])
    assert held <= SHARED_GPUS

    def agent_knows() -> bool:
        st = json.loads(agent_cli("status", "--json").stdout)
        return any(g["exclusive_job"] == ex.job_id for g in st["gpus"] if g["index"] in held)

    # the Prolog's report (or, at the latest, the next look at Slurm) tells the agent
    wait_for(agent_knows, 5, 0.2, "agent sees the exclusive job")
    c = sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="alice")
    qc = wait_running(c.job_id)
    assert gpu_of(qc[c.job_id]).isdisjoint(held)


def test_an_idle_shared_gpu_an_exclusive_job_took_is_open_again_when_it_ends(
    clean: None,
) -> None:
    """Its Epilog tells the agent: the GPU takes shared jobs again at once, not only once the
    agent's looks at Slurm have missed the job for three refresh intervals (6 s here) after
    its start was reported, which a job that ran a few seconds would wait out."""
    ex = sbatch("--gres=gpu:1", sleep=60)
    held = gpu_of(wait_running(ex.job_id)[ex.job_id])
    assert held <= SHARED_GPUS

    def agent_holds_it_closed() -> bool:
        st = json.loads(agent_cli("status", "--json").stdout)
        return any(g["exclusive_job"] == ex.job_id for g in st["gpus"] if g["index"] in held)

    wait_for(agent_holds_it_closed, 5, 0.1, "agent sees the exclusive job")
    subprocess.run(["scancel", str(ex.job_id)], check=True)
    wait_for(lambda: not agent_holds_it_closed(), 3, 0.1, "agent sees the exclusive job end")
    # two jobs that cannot share a GPU (two users, under MPS) take both shared GPUs
    a = sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="alice")
    qa = wait_running(a.job_id)
    b = sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", user="bob")
    qb = wait_running(b.job_id)
    assert gpu_of(qa[a.job_id]) | gpu_of(qb[b.job_id]) == SHARED_GPUS


def test_with_numbers_stripped_runs_named_afresh_are_placed_as_their_kind(clean: None) -> None:
    """``placement.class_name_numbers = "strip"``: jobs whose names carry a run number or
    a date are placed as the class the name gives without it, which the score set knows."""
    from slurm_colo.contracts.placement import Placement

    from .labtools import agent_with

    assert _delta("resnet18-bs32", "resnet18-bs64") > 1.5
    with agent_with('class_name_numbers = "strip"\n'):
        a = sbatch("--colocate", "--job-name=resnet18-bs32-00042", "--gres=gpu:1", user="alice")
        b = sbatch(
            "--colocate", "--job-name=resnet18-bs64_2026-11-29", "--gres=gpu:1", user="alice"
        )
        q = wait_running(a.job_id, b.job_id)
        assert gpu_of(q[a.job_id]) == gpu_of(q[b.job_id]) and kind_of(q[b.job_id]) == "shard"
        tags = [Placement.from_tag(q[j]["admin_comment"]) for j in (a.job_id, b.job_id)]
        assert [t.cls if t else None for t in tags] == ["resnet18-bs32", "resnet18-bs64"]
        out = agent_cli("explain", str(b.job_id)).stdout
        assert "class resnet18-bs64," in out and "no score set in use knows it" not in out, out
        assert "predicted speedup delta" in out, out
