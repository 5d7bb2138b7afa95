"""The hooks as slurmd runs them: ``python -m slurm_colo.hooks NAME`` with Slurm's
environment, the lab backends (MPS emulator, NVML scenario) and no agent running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_colo.config import Config
from slurm_colo.node import procs
from slurm_colo.node.layout import NodeLayout

sys.path.insert(0, str(Path(__file__).parent))
from test_node_lifecycle import leftover_mps, node_config

TAG = "slurm-colo[v=1 tok=t1 cls={cls} mode=auto mech={mech} gpu=n1:0 pct=50 mem=12]"


@pytest.fixture
def cfg(tmp_path: Path) -> Iterator[Config]:
    c = node_config(tmp_path)
    yield c
    procs.kill_all(leftover_mps(c))


#: Slurm's squeue as the Prolog asks it for the job's AdminComment (FAKE_ADMIN_TAG)
FAKE_SQUEUE = """#!/bin/sh
[ "$1 $2 $4 $5" = "--noheader --jobs --Format admin_comment:0" ] || { echo "bad argv: $*" >&2; exit 2; }
[ -n "$FAKE_ADMIN_TAG" ] || { echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }
printf '%s\\n' "$FAKE_ADMIN_TAG"
"""


def hook_env(cfg: Config) -> dict[str, str]:
    """This process's environment without Slurm's variables, the fake squeue first."""
    fake_bin = Path(cfg.node.run_dir).parent / "fake-bin"
    if not fake_bin.exists():
        fake_bin.mkdir()
        (fake_bin / "squeue").write_text(FAKE_SQUEUE)
        (fake_bin / "squeue").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SPANK"))}
    env["PATH"] = f"{fake_bin}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def hook(cfg: Config, name: str, job: int, **env: str) -> subprocess.CompletedProcess[str]:
    full = hook_env(cfg)
    full.update(
        {
            "SLURM_COLO_CONFIG": cfg.source,
            "SLURM_JOB_ID": str(job),
            "SLURMD_NODENAME": "n1",
            "SLURM_JOB_USER": "alice",
            "SLURM_JOB_UID": "1000",
            "SLURM_JOB_GPUS": "0",
            **env,
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "slurm_colo.hooks", name],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


def colocated(cls: str = "resnet50", mech: str = "mps") -> dict[str, str]:
    """A placed --colocate job, the agent down: its tag is in its AdminComment (fake squeue)."""
    return {
        "SPANK_COLOCATE": "auto",
        "SLURM_JOB_COMMENT": "colo: GPU 0 of n1",
        "FAKE_ADMIN_TAG": TAG.format(cls=cls, mech=mech),
    }


def spool_records(cfg: Config) -> list[dict]:
    return [json.loads(p.read_text()) for p in Path(cfg.node.spool_dir).glob("*.json")]


def test_job_without_colocate_is_untouched(cfg: Config) -> None:
    assert hook(cfg, "prolog", 5, SLURM_JOB_COMMENT="my comment").returncode == 0
    assert not (Path(cfg.node.run_dir) / "jobs").exists()
    out = hook(cfg, "taskprolog", 5)
    assert out.returncode == 0 and out.stdout == ""
    assert hook(cfg, "epilog", 5, SLURM_JOB_EXIT_CODE="0").returncode == 0
    assert spool_records(cfg) == [] and leftover_mps(cfg) == []


def test_colocated_pair_from_the_admin_comment_tag_when_agent_is_down(cfg: Config) -> None:
    """Slurm gives the Prolog the job's Comment only; the tag is in its AdminComment."""
    for job, cls in ((11, "resnet50"), (12, "lm")):
        p = hook(cfg, "prolog", job, **colocated(cls))
        assert p.returncode == 0, p.stderr
        assert "agent unreachable, using the job's placement tag" in p.stderr
    out = hook(cfg, "taskprolog", 12, SLURM_STEP_ID="0")
    pipe = Path(cfg.node.run_dir) / "mps" / "GPU-test-0" / "pipe"
    assert out.stdout.splitlines() == [
        f"export CUDA_MPS_PIPE_DIRECTORY={pipe}",
        f"export CUDA_MPS_LOG_DIRECTORY={pipe.parent / 'log'}",
        "export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
        "export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=12G",
        f"export SLURM_COLO_PROGRESS_FILE={cfg.node.run_dir}/jobs/12/user/progress.json",
    ]
    assert len(leftover_mps(cfg)) == 2
    assert hook(cfg, "epilog", 11, SLURM_JOB_EXIT_CODE="256").returncode == 0
    assert hook(cfg, "epilog", 12, SLURM_JOB_EXIT_CODE2="0:9").returncode == 0
    recs = {r["job_id"]: r for r in spool_records(cfg)}
    assert set(recs) == {11, 12}
    assert (recs[11]["cls"], recs[11]["exit_code"], recs[11]["state"]) == ("resnet50", 1, "FAILED")
    assert recs[12]["state"] == "SIGNALED"
    assert [c["job_id"] for c in recs[12]["co_runners"]] == [11]
    run = Path(cfg.node.run_dir)
    deadline = time.monotonic() + 10  # the daemon stop runs detached after the Epilog

    def settled() -> bool:
        return not leftover_mps(cfg) and not any((run / "trash").iterdir())

    while not settled() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftover_mps(cfg) == []
    assert list((run / "jobs").iterdir()) == [] and list((run / "trash").iterdir()) == []


def test_a_tag_with_limits_no_agent_writes_gives_mps_without_them(cfg: Config) -> None:
    """A thread share of 1e400 or a memory limit of nan used to end the Prolog after it had
    started the GPU's MPS daemon: no task file, so the job ran without MPS next to a daemon
    nobody used. Such numbers are left out: the job gets MPS without those limits."""
    bad = "slurm-colo[v=1 tok=t1 cls=a mode=auto mech=mps gpu=n1:0 pct=1e400 mem=nan]"
    p = hook(cfg, "prolog", 13, **{**colocated(), "FAKE_ADMIN_TAG": bad})
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    out = hook(cfg, "taskprolog", 13, SLURM_STEP_ID="0").stdout.splitlines()
    assert out[0].startswith("export CUDA_MPS_PIPE_DIRECTORY=") and len(out) == 3, out
    assert not any("PERCENTAGE" in line or "MEM_LIMIT" in line for line in out), out
    assert hook(cfg, "epilog", 13, SLURM_JOB_EXIT_CODE="0").returncode == 0
    assert [r["job_id"] for r in spool_records(cfg)] == [13]


def test_a_placement_tag_in_the_jobs_own_comment_is_never_taken(cfg: Config) -> None:
    """A user writes the Comment (``--comment``): a tag there must not buy an MPS set-up.
    Only the agent's answer or the AdminComment (slurmctld's) counts."""
    forged = TAG.format(cls="resnet50", mech="mps")
    for job, env in ((31, {"SPANK_COLOCATE": "auto"}), (32, {})):
        p = hook(cfg, "prolog", job, SLURM_JOB_COMMENT=forged, **env)
        assert p.returncode == 0, p.stderr
        assert "using the job's placement tag" not in p.stderr
        out = hook(cfg, "taskprolog", job, SLURM_STEP_ID="0")
        assert out.returncode == 0 and "CUDA_MPS" not in out.stdout
    assert leftover_mps(cfg) == []


def test_after_a_reboot_the_next_prolog_records_the_job_the_reboot_ended(cfg: Config) -> None:
    """Expected: the node rebooted under job 21 (the tmpfs run directory gone, its copy on
    disk left): job 22's Prolog, through the hook entry as slurmd runs it, spools job
    21's record as failed; job 21's own Epilog, should slurmd still run it, adds none."""
    import shutil

    from slurm_colo.node import jobstate

    assert hook(cfg, "prolog", 21, **colocated()).returncode == 0
    lay = NodeLayout.of_config(cfg)
    st = jobstate.read_state(lay, 21)
    assert st is not None
    st.boot_id = "boot-before-the-crash"
    jobstate.write_state(lay, st)
    # the reboot's doing; the sampler killed first, or it may write into the run
    # directory while it is being deleted
    sampler = [st.sampler_pid] if st.sampler_pid else []
    procs.kill_all(sampler, grace_s=0.0)
    procs.kill_all(leftover_mps(cfg))
    shutil.rmtree(lay.run_dir)
    p = hook(cfg, "prolog", 22, **colocated("lm"))
    assert p.returncode == 0, p.stderr
    recs = spool_records(cfg)
    assert [(r["job_id"], r["exit_code"], r["state"]) for r in recs] == [(21, -1, "FAILED")]
    assert hook(cfg, "epilog", 21, SLURM_JOB_EXIT_CODE="0").returncode == 0
    assert len(spool_records(cfg)) == 1


def test_shard_job_exports_only_the_progress_file(cfg: Config) -> None:
    assert hook(cfg, "prolog", 21, **colocated(mech="shard")).returncode == 0
    out = hook(cfg, "taskprolog", 21)
    assert out.stdout == (
        f"export SLURM_COLO_PROGRESS_FILE={cfg.node.run_dir}/jobs/21/user/progress.json\n"
    )
    assert hook(cfg, "epilog", 21).returncode == 0 and len(spool_records(cfg)) == 1


def test_refused_mps_is_said_on_the_jobs_output(cfg: Config) -> None:
    assert hook(cfg, "prolog", 31, **colocated()).returncode == 0
    assert (
        hook(
            cfg, "prolog", 32, SLURM_JOB_UID="1001", SLURM_JOB_USER="bob", **colocated()
        ).returncode
        == 0
    )
    out = hook(cfg, "taskprolog", 32).stdout.splitlines()
    assert not any("CUDA_MPS" in line for line in out)
    assert any(
        line.startswith("print slurm-colo: warning:") and "one user at a time" in line
        for line in out
    )
    for j in (31, 32):
        hook(cfg, "epilog", j)


def test_a_message_of_several_lines_is_one_print_line() -> None:
    from slurm_colo.hooks.taskprolog import export_lines

    lines = export_lines({"messages": ["MPS did not start: line one\nexport X=1\n  line three"]})
    assert lines == ["print slurm-colo: warning: MPS did not start: line one export X=1 line three"]


@pytest.mark.parametrize(
    "env",
    [
        {"SLURM_JOB_UID": "4294967296"},  # past 32 bits: chown() raised OverflowError
        {"SLURM_JOB_UID": "-5"},
        {"SLURM_JOB_GPUS": "9" * 5001},  # past int()'s 4,300 digits
        {"SLURM_JOB_GPUS": "0,\u00b2"},  # isdigit() takes a superscript two; int() does not
        {"SLURM_JOB_EXIT_CODE2": "0:\u00b2"},
    ],
)
def test_slurm_values_out_of_range_end_no_hook_in_a_traceback(
    cfg: Config, env: dict[str, str]
) -> None:
    for name in ("prolog", "taskprolog", "epilog"):
        r = hook(cfg, name, 41, **colocated(), **env)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (name, r.stderr[-500:])
        if name == "taskprolog" and "SLURM_JOB_UID" in env:  # no MPS server for uid -1
            assert "CUDA_MPS" not in r.stdout and "the job's uid is unknown" in r.stdout
            assert leftover_mps(cfg) == []


def test_broken_config_never_fails_the_prolog(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[node]\nno_such_key = 1\n")
    cp = subprocess.run(
        [sys.executable, "-m", "slurm_colo.hooks", "prolog"],
        env={**os.environ, "SLURM_COLO_CONFIG": str(bad), "SLURM_JOB_ID": "1"},
        capture_output=True,
        text=True,
    )
    assert cp.returncode == 0 and "unknown key node.no_such_key" in cp.stderr


def test_usage_error_for_unknown_hook() -> None:
    cp = subprocess.run(
        [sys.executable, "-m", "slurm_colo.hooks", "nope"], capture_output=True, text=True
    )
    assert cp.returncode == 2 and "usage" in cp.stderr


_IMPORTS = """
import os, sys
from slurm_colo.hooks import epilog, prolog, taskprolog
assert prolog.run() == 0
assert taskprolog.run() == 0
if os.environ.get("RUN_EPILOG"):
    os.environ["SLURM_JOB_EXIT_CODE"] = "0"
    assert epilog.run() == 0
heavy = sorted(m for m in ("typer", "sqlalchemy", "numpy", "matplotlib", "pynvml", "alembic")
               if m in sys.modules)
print("HEAVY:" + ",".join(heavy))
"""


def test_prolog_taskprolog_and_epilog_stay_light(cfg: Config) -> None:
    """The database ingest and the MPS stop (NVML) run in the Epilog's detached helper."""
    env = hook_env(cfg)
    env.update(
        SLURM_COLO_CONFIG=cfg.source,
        SLURM_JOB_ID="41",
        SLURM_JOB_USER="alice",
        SLURM_JOB_UID="1000",
        SLURM_JOB_GPUS="0",
        **colocated(),
    )
    # a second job joins a running daemon: the common Prolog path
    assert hook(cfg, "prolog", 40, **colocated()).returncode == 0
    cp = subprocess.run([sys.executable, "-c", _IMPORTS], env=env, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert lines[0].startswith("export CUDA_MPS_PIPE_DIRECTORY=")  # the real path ran
    assert lines[-1] == "HEAVY:"
    assert hook(cfg, "epilog", 40).returncode == 0
    # the last job's Epilog (record, MPS stop and ingest handed off), in process
    cp = subprocess.run(
        [sys.executable, "-c", _IMPORTS],
        env={**env, "RUN_EPILOG": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines()[-1] == "HEAVY:"
    assert {r["job_id"] for r in spool_records(cfg)} | {
        json.loads(p.read_text())["job_id"]
        for p in (Path(cfg.node.spool_dir) / "done").glob("*.json")
    } == {40, 41}


def test_profile_all_records_an_exclusive_job_with_its_class(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, profile="all")
    assert (
        hook(
            cfg, "prolog", 51, SLURM_JOB_NAME="ResNet50 train.sh", SPANK_COLOCATE_CLASS="bad class!"
        ).returncode
        == 0
    )
    assert hook(cfg, "taskprolog", 51).stdout.startswith("export SLURM_COLO_PROGRESS_FILE=")
    assert hook(cfg, "epilog", 51).returncode == 0
    (rec,) = spool_records(cfg)
    assert rec["cls"] == "resnet50-train" and rec["shared"] is False and rec["mechanism"] is None


def test_profile_all_records_a_run_under_its_names_class_when_numbers_are_stripped(
    tmp_path: Path,
) -> None:
    cfg = node_config(tmp_path, profile="all")
    text = Path(cfg.source).read_text() + '\n[placement]\nclass_name_numbers = "strip"\n'
    Path(cfg.source).write_text(text)
    assert hook(cfg, "prolog", 52, SLURM_JOB_NAME="train_2026-11-25").returncode == 0
    assert hook(cfg, "epilog", 52).returncode == 0
    (rec,) = spool_records(cfg)
    assert rec["cls"] == "train"


def test_missing_mps_binary_never_drains_and_the_job_is_told(tmp_path: Path) -> None:
    cfg = node_config(tmp_path)
    text = (
        Path(cfg.source)
        .read_text()
        .replace(
            'mps_backend = "emulator"',
            f'mps_backend = "real"\nmps_control = "{tmp_path}/no-such-binary"',
        )
    )
    Path(cfg.source).write_text(text)
    p = hook(cfg, "prolog", 61, **colocated())
    assert p.returncode == 0 and "did not start" in p.stderr
    out = hook(cfg, "taskprolog", 61).stdout.splitlines()
    assert not any("CUDA_MPS" in line for line in out)
    assert any("cannot run MPS control program" in line for line in out if line.startswith("print"))
    assert hook(cfg, "epilog", 61).returncode == 0 and len(spool_records(cfg)) == 1


def test_epilog_record_reaches_the_database_through_the_detached_ingest(cfg: Config) -> None:
    import sqlite3

    from slurm_colo.store import make_engine, upgrade

    upgrade(make_engine(cfg.store.url))
    assert hook(cfg, "prolog", 71, **colocated(mech="shard")).returncode == 0
    assert hook(cfg, "epilog", 71, SLURM_JOB_EXIT_CODE="0").returncode == 0
    db = cfg.store.url.removeprefix("sqlite:///")
    deadline = time.monotonic() + 20
    rows: list = []
    while time.monotonic() < deadline:
        with sqlite3.connect(db) as c:
            rows = c.execute("SELECT job_id, cls FROM jobs").fetchall()
        if rows:
            break
        time.sleep(0.1)
    assert rows == [(71, "resnet50")]
    # the ingest commits the row first and then moves the file to done/: wait for both
    spooled = list(Path(cfg.node.spool_dir).glob("*.json"))
    while spooled and time.monotonic() < deadline:
        time.sleep(0.05)
        spooled = list(Path(cfg.node.spool_dir).glob("*.json"))
    assert spooled == []  # moved to done/


def test_a_job_we_did_not_place_on_a_shared_gpu_is_announced_at_start_and_end(
    tmp_path: Path,
) -> None:
    """An untyped exclusive request can take an idle shared GPU: the Prolog tells the agent
    it is taken and the Epilog that it is free again, so the agent need not wait for its
    next look at Slurm either way. A job on a GPU outside the shared pool is not told."""
    from fake_agent import FakeAgent

    from slurm_colo.config import load_config

    node_config(tmp_path)
    text = (tmp_path / "config.toml").read_text()
    text = text.replace(f"{tmp_path}/no-agent.sock", f"{tmp_path}/a.sock")
    text += '[[gpus]]\nnodes = "n1"\ncount = 2\nmodel = "v100"\nshared = "0"\n'
    (tmp_path / "config.toml").write_text(text)
    cfg = load_config(tmp_path / "config.toml")
    agent = FakeAgent(tmp_path / "a.sock", b'OK\t{"placement":null}\n')
    try:
        for hook_name in ("prolog", "epilog"):
            for job, gpu in ((7, "0"), (8, "1")):
                done = hook(cfg, hook_name, job, SLURM_JOB_GPUS=gpu, SLURM_JOB_EXIT_CODE="0")
                assert done.returncode == 0, done.stderr
    finally:
        agent.close()
    sent = [r.rstrip("\n").split("\t", 1) for r in agent.requests]
    assert [(verb, json.loads(body)["job"]) for verb, body in sent] == [
        ("JOBSTART", 7),
        ("JOBEND", 7),
    ]
    assert json.loads(sent[1][1]) == {"job": 7, "node": "n1", "exit_code": 0}
    assert not (Path(cfg.node.run_dir) / "jobs").exists()  # otherwise left alone


def test_an_agent_that_cannot_read_slurm_leaves_the_tag_to_the_prolog(cfg: Config) -> None:
    """An agent that had to read the job from Slurm and could not answers without a
    placement: the Prolog used to take that as "not placed" and run the job without MPS.
    It reads the job's tag itself then."""
    from fake_agent import FakeAgent

    reply = b'OK\t{"placement": null, "slurm_unreachable": true}\n'
    agent = FakeAgent(Path(cfg.agent.socket), reply)
    try:
        p = hook(cfg, "prolog", 14, **colocated())
    finally:
        agent.close()
    assert p.returncode == 0 and [r.split("\t")[0] for r in agent.requests] == ["JOBSTART"]
    assert "the agent could not read the job from Slurm, using the job's placement tag" in p.stderr
    out = hook(cfg, "taskprolog", 14, SLURM_STEP_ID="0").stdout
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in out, out
    assert hook(cfg, "epilog", 14, SLURM_JOB_EXIT_CODE="0").returncode == 0


def test_the_prolog_waits_for_a_busy_agents_placement(tmp_path: Path) -> None:
    """An agent whose look at Slurm holds it up for a second still places the job: the
    Prolog that gave up after 0.5 s ran the job without MPS and unprofiled (CI saw it)."""
    from fake_agent import FakeAgent

    from slurm_colo.config import AgentConfig
    from slurm_colo.contracts.client import job_start_answer, placement_in
    from slurm_colo.contracts.enums import Mechanism, Mode
    from slurm_colo.contracts.placement import Placement

    placed = Placement("tok", "bert", Mode.AUTO, Mechanism.MPS, "n1", 1, 50, 8.0, 6.0, 1.2)
    reply = b"OK\t" + json.dumps({"placement": placed.to_wire()}).encode() + b"\n"
    agent = FakeAgent(tmp_path / "a.sock", reply, delay=1.0)
    try:
        sock = tmp_path / "a.sock"
        cfg = Config(agent=AgentConfig(socket=str(sock), address=f"unix:{sock}"))
        got = placement_in(job_start_answer(cfg, 7, "n1", [1], "alice", 1000) or {})
    finally:
        agent.close()
    assert got is not None and got.token == "tok" and got.mechanism == Mechanism.MPS


@pytest.mark.parametrize(
    "content,why",
    [
        ("fifo", "not a regular file"),
        ("[1, 2]", "not a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
        ('{"mechanism": "mps", "mps": "x"}', "pipe and log"),
        ('{"mechanism": "mps", "mps": {"pipe_dir": "p"}}', "pipe and log"),
        (
            '{"mechanism": "mps", "mps": {"pipe_dir": "p", "log_dir": "l", "thread_pct": 1e400}}',
            "thread_pct",
        ),
        (
            '{"mechanism": "mps", "mps": {"pipe_dir": "p", "log_dir": "l", "mem_limit": "0=1G\\nx"}}',
            "mem_limit",
        ),
        ('{"messages": 5}', "messages"),
    ],
)
def test_a_task_file_of_the_wrong_shape_gives_one_warning(
    cfg: Config, content: str, why: str
) -> None:
    """The job's user owns its task file. A FIFO there used to hang the TaskProlog (and so
    the step's start), a file of another shape ended it with a traceback; now the step is
    told in one line and gets no exports."""
    user = Path(cfg.node.run_dir) / "jobs" / "41" / "user"
    user.mkdir(parents=True)
    if content == "fifo":
        os.mkfifo(user / "task.json")
    else:
        (user / "task.json").write_text(content)
    out = hook(cfg, "taskprolog", 41, SLURM_STEP_ID="0")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("print slurm-colo: warning: cannot read")
    assert why in lines[0], lines
