"""The job_submit.lua hook run by a real Lua 5.1 (with lua-socket) against a fake agent:
the rewrite it applies, and that no failure on our side ever rejects a job."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fake_agent import FakeAgent

from slurm_colo.config import AgentConfig, Config, PlacementConfig
from slurm_colo.lua import render_job_submit_lua

HARNESS = Path(__file__).parent / "lua" / "harness.lua"
LUA = shutil.which("lua5.1")
pytestmark = pytest.mark.skipif(
    LUA is None and os.environ.get("CI") != "true",
    reason="lua5.1 not installed (apt-get install lua5.1 lua-socket)",
)


def _run(
    tmp: Path,
    job: dict[str, str],
    spank: list[str],
    cfg: Config,
    calls: int = 1,
    tres_sep: str = "",
) -> tuple[dict[str, str], str, float]:
    script = tmp / "job_submit.lua"
    script.write_text(render_job_submit_lua(cfg, tres_sep))
    lines = [f"{k}={v}" for k, v in job.items()] + [f"spank={s}" for s in spank]
    t0 = time.perf_counter()
    p = subprocess.run(
        [LUA or "lua5.1", str(HARNESS), str(script)],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
        env=dict(os.environ, HARNESS_CALLS=str(calls)),
    )
    dt = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr
    out = dict(line.split("=", 1) for line in p.stdout.splitlines())
    return out, p.stderr, dt


@pytest.fixture()
def cfg(tmp_path: Path) -> Config:
    return Config(
        agent=AgentConfig(socket=str(tmp_path / "a.sock"), request_timeout_ms=150, retry_after_s=30)
    )


BATCH = {
    "name": "train",
    "user_name": "alice",
    "user_id": "1000",
    "script": "#!/bin/sh\nsleep 1",
    "tres_per_node": "gres:gpu:1",
}
COLO = ["_SLURM_SPANK_OPTION_colocate_colocate=(null)", "COLOCATE=auto"]
SHARE = b"OK\taction=share\tgres=gres:shard:v100_s1:1\tnode=gpu07\tcomment=colo: GPU 1 of gpu07\ttag=slurm-colo[v=1 tok=ab]\tuser_msg=hi\n"


@pytest.fixture()
def agent(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FakeAgent]:
    reply, delay = getattr(request, "param", (SHARE, 0.0))
    a = FakeAgent(tmp_path / "a.sock", reply, delay)
    yield a
    a.close()


def test_share_answer_is_applied(tmp_path: Path, cfg: Config, agent: FakeAgent) -> None:
    out, _, _ = _run(tmp_path, BATCH, COLO, cfg)
    assert out["tres_per_node"] == "gres:shard:v100_s1:1"
    assert out["req_nodes"] == "gpu07"
    assert out["admin_comment"] == "slurm-colo[v=1 tok=ab]"
    assert out["comment"] == "colo: GPU 1 of gpu07"
    assert out["rc"] == "0"
    req = agent.requests[0]
    assert req.startswith("PLACE\tv=1\t") and "\tuser=alice\t" in req and "\tmode=auto\t" in req


def test_node_lists_go_to_the_agent(tmp_path: Path, cfg: Config, agent: FakeAgent) -> None:
    """-w / -x reach the agent, which places only on nodes they allow (a multi-node cluster)."""
    job = dict(BATCH, req_nodes="gpu[07-08]", exc_nodes="gpu08")
    out, _, _ = _run(tmp_path, job, COLO, cfg)
    req = agent.requests[0].rstrip("\n").split("\t")
    assert "req_nodes=gpu[07-08]" in req and "exc_nodes=gpu08" in req
    assert out["req_nodes"] == "gpu07" and out["rc"] == "0"
    out, _, _ = _run(tmp_path, BATCH, COLO, cfg)
    assert "req_nodes=" in agent.requests[1].rstrip("\n").split("\t")


HOLD = b"OK\taction=hold\tgres=gres:shard:v100_s0:1\tcomment=colo: held until a v100_s0 GPU fits\ttag=slurm-colo[v=1 tok=cd held=v100_s0]\n"


@pytest.mark.parametrize("agent", [(HOLD, 0.0)], indirect=True)
def test_hold_answer_holds_the_job_as_a_shard_request(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    out, _, _ = _run(tmp_path, BATCH, COLO, cfg)
    assert out["tres_per_node"] == "gres:shard:v100_s0:1" and out["priority"] == "0"
    assert out["req_nodes"] == "nil" and out["rc"] == "0"
    assert out["admin_comment"] == "slurm-colo[v=1 tok=cd held=v100_s0]"
    assert out["comment"] == "colo: held until a v100_s0 GPU fits"


HOLD_ANY = (
    b"OK\taction=hold\tgres=none\tcomment=colo: held until a shared GPU fits"
    b"\ttag=slurm-colo[v=1 tok=ef held=*]\n"
)


@pytest.mark.parametrize("agent", [(HOLD_ANY, 0.0)], indirect=True)
@pytest.mark.parametrize("field", ["tres_per_node", "tres_per_job"])
def test_hold_without_a_gpu_request_drops_the_request(
    tmp_path: Path, cfg: Config, agent: FakeAgent, field: str
) -> None:
    job = dict(BATCH)
    del job["tres_per_node"]
    job[field] = "gres:gpu:1"
    out, _, _ = _run(tmp_path, job, COLO, cfg)
    assert out["tres_per_node"] == "" and out["tres_per_job"] in ("", "nil")
    assert out["priority"] == "0" and out["req_nodes"] == "nil" and out["rc"] == "0"
    assert out["admin_comment"] == "slurm-colo[v=1 tok=ef held=*]"
    assert out["comment"] == "colo: held until a shared GPU fits"


@pytest.mark.parametrize("agent", [(b"OK\taction=hold\tgres=gres:gpu:4\n", 0.0)], indirect=True)
def test_a_malformed_hold_falls_back(tmp_path: Path, cfg: Config, agent: FakeAgent) -> None:
    out, _, _ = _run(tmp_path, BATCH, COLO, cfg)
    assert out["tres_per_node"] == "gres:gpu:1" and out["priority"] == "nil"
    assert out["comment"] == "colo: agent unavailable, own GPU" and out["rc"] == "0"


@pytest.mark.parametrize("agent", [(SHARE, 0.0), (HOLD_ANY, 0.0)], indirect=True)
def test_per_gpu_cpus_and_memory_follow_the_rewritten_request(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    # Slurm rejects --cpus-per-gpu / --mem-per-gpu once the job asks for no gpu GRES: CPUs
    # go per shard, memory per node (checked on the lab: the job runs with both)
    out, _, _ = _run(
        tmp_path, dict(BATCH, cpus_per_tres="gres:gpu:4", mem_per_tres="gres:gpu:16384"), COLO, cfg
    )
    assert out["tres_per_node"] in ("gres:shard:v100_s1:1", "")
    assert out["cpus_per_tres"] == "gres:shard:4"
    assert out["mem_per_tres"] == "" and out["pn_min_memory"] == "16384"
    typed, _, _ = _run(
        tmp_path,
        dict(
            BATCH,
            tres_per_node="gres:gpu:v100:1",
            cpus_per_tres="gres:gpu:v100:2",
            mem_per_tres="gres:gpu:v100:100",
        ),
        COLO,
        cfg,
    )
    assert typed["cpus_per_tres"] == "gres:shard:2" and typed["pn_min_memory"] == "100"
    # untouched when the job keeps its own GPU
    plain, _, _ = _run(
        tmp_path, dict(BATCH, name="x", cpus_per_tres="gres:gpu:4"), ["COLOCATE=off"], cfg
    )
    assert plain["cpus_per_tres"] == "gres:gpu:4" and plain["tres_per_node"] == "gres:gpu:1"


def test_a_job_setting_gpu_clocks_or_tasks_per_gpu_is_not_shared(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    out, _, _ = _run(tmp_path, dict(BATCH, tres_freq="gpu:high"), COLO, cfg)
    assert out["tres_per_node"] == "gres:gpu:1" and out["rc"] == "0"
    assert out["comment"] == "colo: not shared (--gpu-freq sets the clocks of the whole GPU)"
    assert agent.requests == []
    out, _, _ = _run(tmp_path, dict(BATCH, ntasks_per_tres="2"), COLO, cfg)
    assert (
        out["tres_per_node"] == "gres:gpu:1"
        and out["comment"] == "colo: not shared (--ntasks-per-gpu)"
    )
    assert agent.requests == []


def test_gpus_style_request_moves_to_tres_per_node(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    job = dict(BATCH, tres_per_job="gres:gpu:1")
    del job["tres_per_node"]
    out, _, _ = _run(tmp_path, job, COLO, cfg)
    assert out["tres_per_node"] == "gres:shard:v100_s1:1"
    assert out["tres_per_job"] in ("", "nil")


def test_user_comment_is_kept(tmp_path: Path, cfg: Config, agent: FakeAgent) -> None:
    out, _, _ = _run(tmp_path, dict(BATCH, comment="my run"), COLO, cfg)
    assert out["comment"] == "my run | colo: GPU 1 of gpu07"


@pytest.mark.parametrize(
    "job,why",
    [
        ({}, None),  # no --colocate: nothing at all
        ({"tres_per_node": "gres:gpu:2"}, "multi-GPU"),
        ({"min_nodes": "2"}, "multi-GPU/multi-node"),
        ({"tres_per_node": "gres:gpu:1,gres:nic:1"}, "several GRES"),
        ({"tres_per_node": None}, "no GPU requested"),
        ({"script": None}, "interactive"),
        ({"het_job_offset": "0"}, "heterogeneous job"),
        ({"het_job_offset": "1", "script": None}, "heterogeneous job"),
    ],
)
def test_jobs_that_are_never_shared_are_left_as_submitted(
    tmp_path: Path, cfg: Config, agent: FakeAgent, job: dict[str, str | None], why: str | None
) -> None:
    j = {k: v for k, v in {**BATCH, **job}.items() if v is not None}
    out, _, _ = _run(tmp_path, j, COLO if why else [], cfg)
    assert out["tres_per_node"] == j.get("tres_per_node", "nil")
    assert out["req_nodes"] == "nil" and out["admin_comment"] == "nil"
    assert agent.requests == []
    if why:
        assert why in out["comment"]
    else:
        assert out["comment"] == "nil"


def test_colocate_off_is_left_alone(tmp_path: Path, cfg: Config, agent: FakeAgent) -> None:
    out, _, _ = _run(tmp_path, BATCH, ["COLOCATE=off"], cfg)
    assert out["tres_per_node"] == "gres:gpu:1" and out["comment"] == "nil" and agent.requests == []


@pytest.mark.parametrize(
    "agent,reason",
    [
        ((b"garbage\n", 0.0), "agent said"),
        ((b"OK\taction=share\tgres=gres:gpu:1;x\tnode=n1\n", 0.0), "malformed placement"),
        ((b"OK\taction=share\tgres=gres:shard:s0:1\tnode=bad node\n", 0.0), "malformed placement"),
        ((b"OK\taction=launch\n", 0.0), "unknown action"),
        ((None, 0.0), "receive"),
        ((SHARE, 1.0), "timeout"),
    ],
    indirect=["agent"],
)
def test_agent_failures_fall_back_and_never_reject(
    tmp_path: Path, cfg: Config, agent: FakeAgent, reason: str
) -> None:
    out, err, dt = _run(tmp_path, BATCH, COLO, cfg)
    assert out["rc"] == "0"
    assert out["tres_per_node"] == "gres:gpu:1" and out["req_nodes"] == "nil"
    assert "agent unavailable, own GPU" in out["comment"]
    assert "fallback=exclusive" in err and reason in err
    assert dt < 1.0


def test_missing_socket_falls_back_fast_and_breaker_skips_agent(
    tmp_path: Path, cfg: Config
) -> None:
    out, err, dt = _run(tmp_path, BATCH, COLO, cfg, calls=3)
    assert out["rc"] == "0" and out["tres_per_node"] == "gres:gpu:1"
    assert (
        err.count("reason=connect:") == 1 and err.count("reason=agent skipped after failure") == 2
    )
    assert dt < 1.0


def test_a_lone_timeout_costs_one_job_and_keeps_the_breaker_closed(
    tmp_path: Path, cfg: Config
) -> None:
    """A pause of a working agent (a slow answer now and then) must not turn the jobs after
    it exclusive: the breaker opens only on the second timeout in a row."""
    slow, fast = 0.4, 0.0  # the hook waits 0.15 s
    a = FakeAgent(tmp_path / "a.sock", SHARE, delays=[slow, fast, slow, fast])
    try:
        out, err, _ = _run(tmp_path, BATCH, COLO, cfg, calls=4)
    finally:
        a.close()
    assert err.count("fallback=exclusive reason=receive: timeout") == 2, err
    assert "agent skipped" not in err and len(a.requests) == 4
    assert out["tres_per_node"] == "gres:shard:v100_s1:1" and out["rc"] == "0"


def test_a_hung_agent_opens_the_breaker_after_two_timeouts(tmp_path: Path, cfg: Config) -> None:
    a = FakeAgent(tmp_path / "a.sock", SHARE, delay=1.0)
    try:
        out, err, dt = _run(tmp_path, BATCH, COLO, cfg, calls=4)
    finally:
        a.close()
    assert err.count("reason=receive: timeout") == 2, err
    assert err.count("reason=agent skipped after failure: receive: timeout") == 2, err
    assert len(a.requests) == 2  # the last two jobs did not wait for it
    assert out["tres_per_node"] == "gres:gpu:1" and out["rc"] == "0"
    assert dt < 1.0


def test_shard_fallback_is_untargeted_sharing(tmp_path: Path, cfg: Config) -> None:
    c = replace(cfg, placement=PlacementConfig(fallback="shard"))
    out, err, _ = _run(tmp_path, BATCH, COLO, c)
    assert out["tres_per_node"] == "gres:shard:1" and "fallback=shard" in err
    typed = dict(BATCH, tres_per_node="gres:gpu:a100:1")  # typed requests keep their GPU type
    out, _, _ = _run(tmp_path, typed, COLO, c)
    assert out["tres_per_node"] == "gres:gpu:a100:1"
    # untargeted shards would stack every task of an array on one GPU
    out, err, _ = _run(tmp_path, dict(BATCH, array_inx="0-9"), COLO, c)
    assert out["tres_per_node"] == "gres:gpu:1" and "fallback=exclusive" in err


def test_hook_bug_never_rejects(tmp_path: Path, cfg: Config, agent: FakeAgent) -> None:
    # a job_desc whose spank env is not a table makes the hook's own code fail inside pcall
    out, err, _ = _run(
        tmp_path, dict(BATCH, spank_job_env="oops", spank_job_env_size="abc"), [], cfg
    )
    assert out["rc"] == "0" and "internal error" in err and out["tres_per_node"] == "gres:gpu:1"


def test_connection_is_kept_between_submissions(tmp_path: Path, cfg: Config) -> None:
    a = FakeAgent(tmp_path / "a.sock", SHARE, keep_open=True)
    try:
        out, err, _ = _run(tmp_path, BATCH, COLO, cfg, calls=3)
        assert out["tres_per_node"] == "gres:shard:v100_s1:1" and "fallback" not in err
        assert len(a.requests) == 3 and a.connections == 1
    finally:
        a.close()


def test_a_connection_closed_by_the_agent_is_reopened(tmp_path: Path, cfg: Config) -> None:
    a = FakeAgent(tmp_path / "a.sock", SHARE, keep_open=False)  # closes after each answer
    try:
        out, err, _ = _run(tmp_path, BATCH, COLO, cfg, calls=3)
        assert out["tres_per_node"] == "gres:shard:v100_s1:1" and "fallback" not in err
        assert len(a.requests) == 3 and a.connections == 3
    finally:
        a.close()


# ---- Slurm 23.11+ (24.11, 26.05): job_desc holds gres/gpu:1, and Slurm rejects a job whose
# tres_per_node the hook sets in the colon form (docs/slurm-versions.md, item 5)
BATCH24 = dict(BATCH, tres_per_node="gres/gpu:1")


def test_share_answer_takes_the_form_of_the_jobs_slurm(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    out, _, _ = _run(tmp_path, BATCH24, COLO, cfg)
    assert out["tres_per_node"] == "gres/shard:v100_s1:1" and out["req_nodes"] == "gpu07"
    assert out["admin_comment"] == "slurm-colo[v=1 tok=ab]" and out["rc"] == "0"
    # the rendered version is only a fallback: the job's own form wins
    out, _, _ = _run(tmp_path, BATCH24, COLO, cfg, tres_sep=":")
    assert out["tres_per_node"] == "gres/shard:v100_s1:1"
    out, _, _ = _run(tmp_path, BATCH, COLO, cfg, tres_sep="/")
    assert out["tres_per_node"] == "gres:shard:v100_s1:1"


SHARE_SLASH = SHARE.replace(b"gres=gres:shard:", b"gres=gres/shard:")


@pytest.mark.parametrize("agent", [(SHARE_SLASH, 0.0)], indirect=True)
def test_an_agent_answer_in_either_form_is_accepted(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    out, _, _ = _run(tmp_path, BATCH, COLO, cfg)
    assert out["tres_per_node"] == "gres:shard:v100_s1:1"
    out, _, _ = _run(tmp_path, BATCH24, COLO, cfg)
    assert out["tres_per_node"] == "gres/shard:v100_s1:1"


@pytest.mark.parametrize("agent", [(HOLD, 0.0)], indirect=True)
def test_hold_answer_in_the_slash_form(tmp_path: Path, cfg: Config, agent: FakeAgent) -> None:
    out, _, _ = _run(tmp_path, BATCH24, COLO, cfg)
    assert out["tres_per_node"] == "gres/shard:v100_s0:1" and out["priority"] == "0"


@pytest.mark.parametrize("agent", [(HOLD_ANY, 0.0)], indirect=True)
@pytest.mark.parametrize("field", ["tres_per_node", "tres_per_job"])
def test_hold_without_a_gpu_request_in_the_slash_form(
    tmp_path: Path, cfg: Config, agent: FakeAgent, field: str
) -> None:
    job = dict(BATCH24)
    del job["tres_per_node"]
    job[field] = "gres/gpu:1"
    out, _, _ = _run(tmp_path, job, COLO, cfg)
    assert (
        out["tres_per_node"] == "" and out["tres_per_job"] in ("", "nil") and out["priority"] == "0"
    )


def test_gpus_request_in_the_slash_form_moves_to_tres_per_node(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    job = dict(BATCH24, tres_per_job="gres/gpu:1")  # --gpus=1
    del job["tres_per_node"]
    out, _, _ = _run(tmp_path, job, COLO, cfg)
    assert out["tres_per_node"] == "gres/shard:v100_s1:1" and out["tres_per_job"] in ("", "nil")


@pytest.mark.parametrize("agent", [(SHARE, 0.0), (HOLD_ANY, 0.0)], indirect=True)
def test_per_gpu_cpus_become_the_nodes_minimum_on_newer_slurm(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    # 24.11 rejects cpus_per_tres=gres/shard:N ("Requested cpus_per_tres=gres/shard:2 but did not
    # request any GPU"); with MinCPUsNode the job ran with NumCPUs=3 on the 24.11 lab
    out, _, _ = _run(
        tmp_path, dict(BATCH24, cpus_per_tres="gres/gpu:3", mem_per_tres="gres/gpu:100"), COLO, cfg
    )
    assert out["tres_per_node"] in ("gres/shard:v100_s1:1", "")
    assert out["cpus_per_tres"] == "" and out["pn_min_cpus"] == "3"
    assert out["mem_per_tres"] == "" and out["pn_min_memory"] == "100"
    typed, _, _ = _run(
        tmp_path,
        dict(
            BATCH24,
            tres_per_node="gres/gpu:v100:1",
            cpus_per_tres="gres/gpu:v100:2",
            pn_min_cpus="4",
        ),
        COLO,
        cfg,
    )
    assert typed["cpus_per_tres"] == "" and typed["pn_min_cpus"] == "4"  # a larger minimum is kept
    plain, _, _ = _run(
        tmp_path, dict(BATCH24, name="x", cpus_per_tres="gres/gpu:4"), ["COLOCATE=off"], cfg
    )
    assert plain["cpus_per_tres"] == "gres/gpu:4" and plain["pn_min_cpus"] == "nil"


def test_cpus_per_task_in_tres_per_task_does_not_stop_sharing(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    # 24.11: sbatch -c 2 sets tres_per_task = "cpu=2"; --gpus-per-task=1 sets "gres/gpu=1"
    out, _, _ = _run(tmp_path, dict(BATCH24, tres_per_task="cpu=2"), COLO, cfg)
    assert out["tres_per_node"] == "gres/shard:v100_s1:1"
    for per_task in ("gres/gpu=1", "cpu=2,gres/gpu=1", "gres:gpu:1"):
        out, _, _ = _run(tmp_path, dict(BATCH24, tres_per_task=per_task), COLO, cfg)
        assert out["tres_per_node"] == "gres/gpu:1" and "GPUs per task/socket" in out["comment"]


def test_shard_fallback_in_the_slash_form(tmp_path: Path, cfg: Config) -> None:
    c = replace(cfg, placement=PlacementConfig(fallback="shard"))
    out, err, _ = _run(tmp_path, BATCH24, COLO, c)
    assert out["tres_per_node"] == "gres/shard:1" and "fallback=shard" in err
    out, _, _ = _run(tmp_path, dict(BATCH24, tres_per_node="gres/gpu:v100:1"), COLO, c)
    assert out["tres_per_node"] == "gres/gpu:v100:1"  # typed: keeps its own GPU


def test_a_request_without_gres_prefix_uses_the_rendered_form(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    bare = dict(BATCH, tres_per_node="gpu:1")
    out, _, _ = _run(tmp_path, bare, COLO, cfg, tres_sep="/")
    assert out["tres_per_node"] == "gres/shard:v100_s1:1"
    out, _, _ = _run(tmp_path, bare, COLO, cfg)  # form unknown: left as submitted, never guessed
    assert (
        out["tres_per_node"] == "gpu:1" and "not shared (unknown TRES form gpu:1)" in out["comment"]
    )


@pytest.mark.parametrize(
    "job,why",
    [
        ({"tres_per_node": "gres/gpu:2"}, "multi-GPU"),
        ({"tres_per_node": "gres/gpu:1,gres/nic:1"}, "several GRES"),
        ({"tres_per_node": "gres/shard:1"}, "already asks for shard"),
        ({"tres_per_node": "gres/gpu:1", "tres_per_job": "gres/gpu:1"}, "several GPU requests"),
    ],
)
def test_slash_form_jobs_that_are_never_shared(
    tmp_path: Path, cfg: Config, agent: FakeAgent, job: dict[str, str], why: str
) -> None:
    j = {**BATCH24, **job}
    out, _, _ = _run(tmp_path, j, COLO, cfg)
    assert out["tres_per_node"] == j["tres_per_node"] and why in out["comment"]
    assert agent.requests == []


def test_render_refuses_an_unknown_tres_form(cfg: Config) -> None:
    with pytest.raises(ValueError, match="tres_sep"):
        render_job_submit_lua(cfg, "gres")


ARRAY_SHARED = (
    b"OK\taction=exclusive\tarray=1\tcomment=colo: job array: each task waiting for a GPU "
    b"is moved onto a shared GPU that takes it\ttag=slurm-colo[v=1 tok=ar cls=x mode=auto]\n"
)
ARRAY_NOT_SHARED = (
    b"OK\taction=exclusive\tarray=1\tcomment=colo: job array not shared (each task keeps its "
    b"own GPU request)\tuser_msg=slurm-colo: this job array is not shared (no shared GPU it "
    b"may use); each task keeps its GPU request\n"
)


@pytest.mark.parametrize("agent", [(ARRAY_SHARED, 0.0)], indirect=True)
@pytest.mark.parametrize("array_inx", ["0-99", "1,4,7%2"])
def test_a_job_array_keeps_its_request_and_carries_the_agents_tag(
    tmp_path: Path, cfg: Config, agent: FakeAgent, array_inx: str
) -> None:
    out, err, _ = _run(tmp_path, dict(BATCH, array_inx=array_inx), COLO, cfg)
    (req,) = agent.requests
    assert req.endswith("\tarray=1\n") and "\tname=train\t" in req, req
    assert out["tres_per_node"] == "gres:gpu:1" and out["req_nodes"] == "nil"
    assert out["admin_comment"] == "slurm-colo[v=1 tok=ar cls=x mode=auto]"
    assert out["comment"].startswith("colo: job array: each task waiting for a GPU")
    assert out["rc"] == "0"


ARRAY_HELD = (
    b"OK\taction=hold\tarray=1\tgres=none\tcomment=colo: job array held: each task is released "
    b"onto a shared GPU that takes it\ttag=slurm-colo[v=1 tok=ah cls=x mode=auto held=*]\n"
)


@pytest.mark.parametrize("agent", [(ARRAY_HELD, 0.0)], indirect=True)
def test_a_job_array_held_for_the_agent_drops_its_gpu_request(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    out, _, _ = _run(tmp_path, dict(BATCH, array_inx="0-9"), COLO, cfg)
    assert out["tres_per_node"] in ("", "nil") and out["priority"] == "0"
    assert out["admin_comment"] == "slurm-colo[v=1 tok=ah cls=x mode=auto held=*]"
    assert out["comment"].startswith("colo: job array held: each task is released")


@pytest.mark.parametrize("agent", [(ARRAY_NOT_SHARED, 0.0)], indirect=True)
def test_a_job_array_the_agent_cannot_share_is_told_why(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    out, err, _ = _run(tmp_path, dict(BATCH, array_inx="0-99"), COLO, cfg)
    assert out["tres_per_node"] == "gres:gpu:1" and out["admin_comment"] == "nil"
    assert out["comment"] == "colo: job array not shared (each task keeps its own GPU request)"
    user = [ln for ln in err.splitlines() if ln.startswith("USER ")]
    assert user == [
        "USER slurm-colo: this job array is not shared (no shared GPU it may use); each task "
        "keeps its GPU request"
    ], err


def test_a_job_array_placed_by_an_agent_that_does_not_know_arrays_is_left_as_submitted(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    out, err, _ = _run(tmp_path, dict(BATCH, array_inx="0-99"), COLO, cfg)
    assert len(agent.requests) == 1  # answered as one job (SHARE): not applied
    assert out["tres_per_node"] == "gres:gpu:1" and out["req_nodes"] == "nil"
    assert out["admin_comment"] == "nil"
    assert out["comment"] == "colo: job array not shared (each task keeps its own GPU request)"
    assert "not shared: job array, agent answered share" in err, err


def test_a_heterogeneous_job_is_told_once_why_it_is_not_shared(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    note = "colo: heterogeneous job not shared (each component keeps its own GPU request)"
    lead, err, _ = _run(tmp_path, dict(BATCH, het_job_offset="0"), COLO, cfg)
    rest = {k: v for k, v in {**BATCH, "het_job_offset": "1"}.items() if k != "script"}
    other, err1, _ = _run(tmp_path, rest, COLO, cfg)
    assert lead["comment"] == other["comment"] == note and agent.requests == []
    assert lead["tres_per_node"] == other["tres_per_node"] == "gres:gpu:1"
    user = [ln for ln in (err + err1).splitlines() if ln.startswith("USER ")]
    assert user == ["USER slurm-colo: heterogeneous jobs are not shared"], err + err1
    # a job that is no component (NO_VAL) is placed as before
    out, _, _ = _run(tmp_path, dict(BATCH, het_job_offset="4294967294"), COLO, cfg)
    assert out["tres_per_node"].startswith("gres:shard:") and len(agent.requests) == 1


def test_interactive_jobs_are_told_why_on_every_version(
    tmp_path: Path, cfg: Config, agent: FakeAgent
) -> None:
    # srun/salloc cannot be shared on 22.05, 24.11 or 26.05 alike: the message names none
    for tres in ("gres:gpu:1", "gres/gpu:1"):
        job = {k: v for k, v in {**BATCH, "script": None, "tres_per_node": tres}.items() if v}
        out, err, _ = _run(tmp_path, job, COLO, cfg)
        assert out["tres_per_node"] == tres and agent.requests == []
        user = [ln for ln in err.splitlines() if ln.startswith("USER ")]
        assert user == [
            "USER slurm-colo: interactive jobs (srun/salloc) are not shared; use sbatch --colocate"
        ], err


@pytest.mark.parametrize(
    "extra, deferred",
    [
        ({"dependency": "afterok:12"}, True),
        ({"begin_time": str(int(time.time()) + 3600)}, True),
        ({"begin_time": str(int(time.time()) - 60)}, False),  # --begin in the past
        ({"begin_time": "0", "dependency": ""}, False),
        ({}, False),
    ],
)
def test_a_job_that_may_not_start_yet_is_named_to_the_agent(
    tmp_path: Path, cfg: Config, agent: FakeAgent, extra: dict[str, str], deferred: bool
) -> None:
    """A dependency or a begin time ahead: the agent holds the job until it may start."""
    out, _, _ = _run(tmp_path, dict(BATCH, **extra), COLO, cfg)
    (req,) = agent.requests
    assert ("\tdeferred=1" in req) is deferred, req
    assert out["rc"] == "0"
