"""slurm-colo on Slurm 24.11 and 26.05 (contrib/lab/versions/, `up.sh SUITE --colo`): the
SPANK plugin built against each version's headers, job_submit.lua and the node hooks as
`slurm-colo install` renders them, the agent placing, recording and re-aiming jobs."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from rights_probe import REFUSALS_SCRIPT, check_refusals

from .vlab import CLAB, PY, SHARED_GPUS, VersionLab, wait_for

ENV = "env | grep -E '^(CUDA_|SLURM_SHARDS_ON_NODE|SLURM_JOB_GPUS|SLURM_GRES)'"
#: gres_detail of a shard job on 24.11+: allocated/total shards per GPU index
PER_GPU = re.compile(r"^shard:1\((\d+/\d+)(,\d+/\d+)*\)$")


def _expected_version(vlab: VersionLab) -> list[int]:
    return [int(x) for x in vlab.version.split(".")]


def test_two_compatible_jobs_share_one_gpu(vclean: VersionLab) -> None:
    lab = vclean
    args = ("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1")
    a = lab.sbatch(*args, script=f"{ENV}; sleep 12")
    b = lab.sbatch(*args, script=f"{ENV}; sleep 12")
    assert a.rc == 0 and b.rc == 0, (a.stderr, b.stderr)
    assert "slurm-colo: GPU" in a.stderr and "slurm-colo: GPU" in b.stderr
    lab.wait_running(a.job_id, b.job_id)
    seen = lab.backend()
    assert seen["version"] == _expected_version(lab)
    ja, jb = seen["jobs"][a.job_id], seen["jobs"][b.job_id]
    # the hook rewrote the request in this version's TRES form, to one typed shard
    assert ja["tres_per_node"] == jb["tres_per_node"]
    assert re.fullmatch(r"gres/shard:v100_s[01]:1", ja["tres_per_node"]), ja
    # slurm-colo reads the per-GPU gres_detail form: one shard on the same shared GPU
    for j in (ja, jb):
        assert [g[:3] for g in j["gres"]] == [["shard", "", 1]], j
        assert j["nodes"] == lab.node
    (idx,) = ja["gres"][0][3]
    assert jb["gres"][0][3] == [idx] and idx in SHARED_GPUS
    assert ja["tres_per_node"].endswith(f"_s{idx}:1")
    assert f"GPU {idx} of {lab.node}" in ja["comment"] + jb["comment"]
    raw = lab.squeue()
    for jid in (a.job_id, b.job_id):
        (detail,) = raw[jid]["gres_detail"]
        assert PER_GPU.match(detail), detail
        assert detail.split("(")[1].rstrip(")").split(",")[idx] == "1/4", detail
    lab.wait_done(a.job_id, b.job_id)
    for jid in (a.job_id, b.job_id):
        env = lab.job_env(jid)
        assert env["CUDA_VISIBLE_DEVICES"] == str(idx), env
        assert env["SLURM_SHARDS_ON_NODE"] == "1", env
        # the TaskProlog (slurm-colo's hook) gave the job its MPS share on that GPU
        assert 1 <= int(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) <= 100, env
    pipes = {lab.job_env(j)["CUDA_MPS_PIPE_DIRECTORY"] for j in (a.job_id, b.job_id)}
    assert len(pipes) == 1  # one MPS daemon: the GPU's


def _limit_min(job: dict[str, Any]) -> int:
    """A job's time limit in minutes, from squeue --json (24.11+: {"set", "number"})."""
    v = job["time_limit"]
    return int(v["number"] if isinstance(v, dict) else v)


def test_a_node_whose_gres_slurm_numbers_otherwise_gets_no_placement(vclean: VersionLab) -> None:
    """slurm.conf's Gres= lists the whole GPUs first while the pool is GPUs 0-1: this
    version numbers the node's GPUs in that order (scontrol show nodes --json reports it),
    not by device, so the agent places nothing there."""
    lab = vclean
    try:
        lab.up(NODE_GRES="gpu:v100:2,gpu:v100_s0:1,gpu:v100_s1:1,shard:8")
        why = wait_for(
            lambda: lab.status()["nodes_refused"].get(lab.node), 20, 0.5, "the node closed"
        )
        assert "Slurm lists its GPUs as gpu:v100:2,gpu:v100_s0:1,gpu:v100_s1:1 " in why, why
        r = lab.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1")
        assert r.rc == 0 and r.job_id is not None, r.stderr
        job = lab.jobs(r.job_id)[r.job_id]
        assert "shard" not in job["tres_per_node"], job
        assert "closed to placement" in job["comment"], job
    finally:
        lab.cancel_all()
        lab.up()  # the generated Gres= again: the lab restarts

    def looked() -> dict[str, Any] | None:
        st = lab.status()
        return st if st["snapshot_age_s"] is not None else None

    assert wait_for(looked, 20, 0.5, "the agent's first look")["nodes_refused"] == {}


def test_a_job_pending_on_a_node_that_closes_is_held_until_a_gpu_takes_it(
    vclean: VersionLab,
) -> None:
    """A job the agent placed that has not started (a start time given after submission)
    when Slurm comes back with the whole GPUs listed first: held, so it cannot start on
    another GPU, and released onto a shared GPU (its shard request set anew: this version
    can) once the node is fixed and it may start, its start time kept until then."""
    lab = vclean
    generated = open(lab.host_path("/etc/slurm/slurm.conf")).read()
    gres = re.search(r"Gres=(\S+)", generated)
    assert gres and gres.group(1).startswith("gpu:v100_s0:1,gpu:v100_s1:1,gpu:v100:2"), generated
    # placed at submission (one submitted with a --begin ahead would be held until it may
    # start, keeping no place), then given a start time ahead
    r = lab.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", "-H")
    assert r.rc == 0 and r.job_id is not None and "slurm-colo: GPU" in r.stderr, r.stderr
    lab.x("scontrol", "update", f"JobId={r.job_id}", "StartTime=now+3600", check=True)
    lab.x("scontrol", "release", str(r.job_id), check=True)
    begin = lab.jobs(r.job_id)[r.job_id]["start_time"]
    try:
        lab.restart_slurm("gpu:v100:2,gpu:v100_s0:1,gpu:v100_s1:1,shard:8")

        def held() -> dict[str, Any] | None:
            j = lab.jobs(r.job_id)[r.job_id]
            return j if j["state_reason"] == "JobHeldAdmin" else None

        j = wait_for(held, 30, 0.5, "the job held by the agent")
        assert "held=*" in j["admin_comment"] and "model=v100" in j["admin_comment"], j
        assert j["comment"].startswith(f"colo: held: node {lab.node} is closed"), j
        assert lab.node in lab.status()["nodes_refused"]
        lab.restart_slurm(gres.group(1))
        # fixed, but it may not start before its begin time: held until then
        wait_for(lambda: lab.node not in lab.status()["nodes_refused"], 30, 0.5, "node open")
        [waits] = [h["waits_to_start"] for h in lab.status()["held"] if h["job_id"] == r.job_id]
        assert waits == "its begin time"
        assert lab.jobs(r.job_id)[r.job_id]["start_time"] >= begin - 60  # not made to start now
        lab.x("scontrol", "update", f"JobId={r.job_id}", "StartTime=now+3", check=True)

        def released() -> dict[str, Any] | None:
            j = lab.jobs(r.job_id)[r.job_id]
            return j if j["state_reason"] != "JobHeldAdmin" else None

        j = wait_for(released, 30, 0.5, "the job released by the agent")
        # its start time passed: it may be running already by the time it is read
        assert j["state"] in ("PENDING", "RUNNING") and "held=" not in j["admin_comment"], j
        idx = int(re.search(rf"gpu={lab.node}:(\d)", j["admin_comment"]).group(1))  # type: ignore[union-attr]
        assert idx in SHARED_GPUS and j["tres_per_node"] == f"gres/shard:v100_s{idx}:1", j
    finally:
        lab.cancel_all()
        lab.up()  # slurm.conf as generated again: the lab is up as it was


def test_a_shared_jobs_time_limit_grows_by_the_time_sharing_costs_it(vclean: VersionLab) -> None:
    lab = vclean
    # two transformer-bs16 jobs run at 0.89 of their solo speed together (the lab's
    # scores): the first two open the two shared GPUs, the third joins one of them. With 3
    # minutes a job is near its end from the start, so each minute owed is given at once.
    args = ("--colocate", "--colocate-class=transformer-bs16", "--gres=gpu:1", "--time=3")
    subs = [lab.sbatch(*args, script="sleep 60") for _ in range(3)]
    assert all(s.rc == 0 for s in subs), [s.stderr for s in subs]
    ids = [s.job_id for s in subs if s.job_id is not None]
    jobs = lab.wait_running(*ids)
    on = {j: jobs[j]["gres"][0][3] for j in ids}
    pair = [j for j in ids if sum(on[k] == on[j] for k in ids) == 2]
    (alone,) = set(ids) - set(pair)

    def grown() -> dict[int, dict[str, Any]] | None:
        q = lab.squeue()
        return q if all(_limit_min(q[j]) >= 4 for j in pair) else None

    q = wait_for(grown, 30, 0.5, f"the time limits of jobs {pair} raised by the agent")
    assert [_limit_min(q[j]) for j in pair] == [4, 4]
    assert _limit_min(q[alone]) == 3  # alone on its shared GPU: it owes nothing
    lab.cancel_all()


def test_a_change_to_another_users_job_is_refused_for_the_right(vclean: VersionLab) -> None:
    """Each version's wording of a refusal reads as a missing right (agent/rights.py)."""
    lab = vclean
    job = lab.sbatch("--time=5", user="bob", script="sleep 60")
    assert job.job_id is not None, job.stderr
    lab.wait_running(job.job_id)
    p = lab.x("runuser", "-u", "alice", "--", PY, "-c", REFUSALS_SCRIPT, str(job.job_id))
    assert p.returncode == 0, p.stderr
    check_refusals(p.stdout)
    assert _limit_min(lab.squeue()[job.job_id]) == 5
    lab.cancel_all()


def test_bad_colocate_value_is_refused_at_submit(vclean: VersionLab) -> None:
    lab = vclean
    before = set(lab.squeue())
    r = lab.sbatch("--colocate=bogus", "--gres=gpu:1", script="true")
    assert r.rc != 0 and r.job_id is None
    assert "invalid --colocate mode 'bogus': accepted values are auto, aggressive, off" in r.stderr
    assert set(lab.squeue()) == before


def test_the_waiting_tasks_of_a_job_array_are_moved_onto_shared_gpus(vclean: VersionLab) -> None:
    """24.11+: an array keeps its own-GPU request; each task waiting for a GPU is split from
    it onto a shared GPU that takes it (``scontrol update JobId=ARRAY_TASK``)."""
    lab = vclean
    # the two whole GPUs (type v100) are busy; the array asks for that type, so its tasks
    # wait in the queue (an untyped gpu:1 could take an idle shared GPU whole)
    whole = [lab.sbatch("--gres=gpu:v100:1", user="bob", script="sleep 60") for _ in range(2)]
    lab.wait_running(*[w.job_id for w in whole if w.job_id is not None])
    r = lab.sbatch(
        "--array=0-3",
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:v100:1",
        user="alice",
        script=f"{ENV}; sleep 5",
    )
    assert r.rc == 0 and r.job_id is not None, r.stderr
    assert "not shared" not in r.stderr, r.stderr

    def tasks() -> list[dict]:
        return [j for j in lab.squeue_all().values() if _num(j.get("array_job_id")) == r.job_id]

    def moved() -> list[dict] | None:
        done = [j for j in tasks() if "shard" in (j.get("tres_per_node") or "")]
        return done if len(done) >= 2 else None

    shared = wait_for(moved, 40, 0.5, "two tasks of the array moved onto shared GPUs")
    # each its own placement, named after the array's and the task's (on 26.05 the
    # array's last task, moved, had no array_task_id)
    toks = [re.search(r"tok=(\S+)", j["admin_comment"]) for j in shared]
    assert all(t and re.fullmatch(r"p[0-9a-f]+-[0-3]", t.group(1)) for t in toks), shared
    assert len({t.group(1) for t in toks if t}) == len(shared), shared
    for j in shared:
        assert "re-planned onto GPU" in j["comment"], j
        assert j["tres_per_node"].startswith("gres/shard:v100_s"), j

    def all_done() -> list[dict] | None:
        ts = tasks()
        states = [j["job_state"][0] for j in ts]
        return ts if len(ts) == 4 and all(s == "COMPLETED" for s in states) else None

    ts = wait_for(all_done, 90, 1.0, "the array's four tasks completed")
    for j in ts:
        if "shard" in (j.get("tres_per_node") or ""):
            env = lab.job_env(int(j["job_id"]))
            assert env["SLURM_SHARDS_ON_NODE"] == "1", env
            ex = json.loads(lab.cli("explain", "--json", str(j["job_id"])).stdout)
            assert ex["reason"].startswith("waited for a whole GPU; then"), ex
    for w in whole:
        lab.x("scancel", str(w.job_id))


def test_with_replan_off_an_array_is_held_and_its_tasks_go_to_shared_gpus_else_their_own(
    vclean: VersionLab,
) -> None:
    """``placement.replan = "off"`` at a site with whole GPUs: the array is held, and at
    each look its tasks are released onto the shared GPUs that take them, the others with
    their own GPU request (``gres/gpu:1`` in this Slurm's form), a few at a time."""
    lab = vclean
    with lab.agent_config(replan="off"):
        r = lab.sbatch(
            "--array=0-9",
            "--colocate",
            "--colocate-class=resnet18-bs32",
            "--gres=gpu:1",
            user="alice",
            script=f"{ENV}; sleep 4",
        )
        assert r.rc == 0 and r.job_id is not None, r.stderr
        assert "else with its own GPU request" in r.stderr, r.stderr

        def all_done() -> list[dict] | None:
            ts = [j for j in lab.squeue_all().values() if _num(j.get("array_job_id")) == r.job_id]
            done = all(j["job_state"][0] == "COMPLETED" for j in ts)
            return ts if len(ts) == 10 and done else None

        ts = wait_for(all_done, 150, 1.0, "the array's ten tasks released and completed")
        shared = [j for j in ts if "shard" in (j.get("tres_per_node") or "")]
        own = [j for j in ts if j.get("tres_per_node") == "gres/gpu:1"]
        assert shared and own and len(shared) + len(own) == 10, ts
        for j in shared:
            assert j["tres_per_node"].startswith("gres/shard:v100_s"), j
            env = lab.job_env(int(j["job_id"]))
            assert env["SLURM_SHARDS_ON_NODE"] == "1", env
        for j in own:
            assert "no shared GPU took it" in j["comment"], j
            assert "held=" not in j["admin_comment"], j
            gpus = lab.job_env(int(j["job_id"]))["CUDA_VISIBLE_DEVICES"]
            assert len(gpus.split(",")) == 1, gpus


def _num(v: object) -> int | None:
    """A number of Slurm's JSON (24.11+: ``{"set": true, "number": N}``)."""
    if isinstance(v, dict):
        return int(v["number"]) if v.get("set") else None
    return int(v) if isinstance(v, int) else None


def test_a_heterogeneous_job_is_left_as_submitted(vclean: VersionLab) -> None:
    lab = vclean
    script = "#!/bin/bash\n#SBATCH --colocate --gres=gpu:1\n#SBATCH hetjob\n#SBATCH --gres=gpu:1\nsleep 1\n"
    path = f"{CLAB}/out/hetjob.sh"
    lab.x("/bin/sh", "-c", f"printf '%s' '{script}' > {path}", check=True)
    p = lab.x("sbatch", "--parsable", "-o", "/dev/null", path)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("slurm-colo: heterogeneous jobs are not shared") == 1, p.stderr
    lead = int(p.stdout.strip().split(";")[0].split("+")[0])
    note = "colo: heterogeneous job not shared (each component keeps its own GPU request)"
    parts = lab.jobs(lead, lead + 1)
    assert parts[lead]["comment"] == parts[lead + 1]["comment"] == note, parts
    assert not parts[lead]["admin_comment"] and not parts[lead + 1]["admin_comment"]
    lab.x("scancel", str(lead))


def test_job_record_reaches_the_history(vclean: VersionLab) -> None:
    lab = vclean
    since = time.time()
    a = lab.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", script="sleep 2")
    assert a.rc == 0, a.stderr
    done = lab.wait_done(a.job_id)
    assert done[a.job_id]["state"] == "COMPLETED"
    rec = wait_for(
        lambda: lab.records(since).get(a.job_id), 30, 1, "the job's record in the history"
    )
    assert rec["cls"] == "resnet18-bs32" and rec["state"] == "COMPLETED", rec
    assert rec["node"] == lab.node and rec["shared"], rec


def test_with_the_agent_down_the_prolog_reads_the_placement_from_the_admin_comment(
    vclean: VersionLab,
) -> None:
    """The Prolog's fallback reads the job's AdminComment with this version's squeue, not
    a tag in the job's name: the job still runs as an MPS client of the GPU it was placed
    on."""
    lab = vclean
    forged = "v-tag AdminComment=slurm-colo[v=1 tok=x cls=a mode=auto mech=mps gpu=x:0 pct=7]"
    args = ("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", "-H", "-J", forged)
    r = lab.sbatch(*args, script=f"{ENV}; sleep 1")
    assert r.rc == 0 and r.job_id is not None, r.stderr
    tag = lab.jobs(r.job_id)[r.job_id]["admin_comment"]
    assert tag.startswith("slurm-colo[") and " gpu=" in tag, tag
    read = (
        "import sys; from slurm_colo.hooks.common import admin_comment_tag as t; "
        "print(t(int(sys.argv[1])))"
    )
    assert lab.x(PY, "-c", read, str(r.job_id), check=True).stdout.strip() == tag
    lab.stop_agent()
    try:
        lab.x("scontrol", "release", str(r.job_id), check=True)
        lab.wait_done(r.job_id)
        env = lab.job_env(r.job_id)
    finally:
        lab.restart_agent()
    assert "/mps/GPU-" in env.get("CUDA_MPS_PIPE_DIRECTORY", ""), env
    assert 1 <= int(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) <= 100, env


def test_doctor_is_green_but_for_the_mps_emulator(vclean: VersionLab) -> None:
    p = vclean.cli("doctor", "--json")
    checks = json.loads(p.stdout)
    bad = [c for c in checks if c["status"] != "OK"]
    assert [c["name"] for c in bad] == ["MPS"], bad
    assert bad[0]["status"] == "WARN" and "emulator" in bad[0]["message"]
    assert p.returncode == 0
