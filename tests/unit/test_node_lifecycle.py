"""A job's life on the node (Prolog/Epilog work) with the MPS emulator and NVML scenario:
one daemon per GPU, limits, co-runners, MPS semantics, records."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_colo.config import Config, load_config
from slurm_colo.contracts.enums import Mechanism, Mode
from slurm_colo.contracts.placement import Placement
from slurm_colo.contracts.records import JobRecord
from slurm_colo.node import journal, procs
from slurm_colo.node.gpu.mps_daemon import gpu_mps
from slurm_colo.node.gpu.nvml import COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS, open_nvml
from slurm_colo.node.layout import NodeLayout
from slurm_colo.node.lifecycle import JobInfo, job_end, job_start
from slurm_colo.spool.directory import pending


def node_config(
    tmp_path: Path,
    gpus: int = 2,
    timeout_s: float = 2.0,
    profile: str = "colocated",
    scenario: list[dict] | None = None,
    interval_s: float = 1.0,
) -> Config:
    scen = tmp_path / "scenario.json"
    scen.write_text(
        json.dumps(
            {
                "gpus": scenario
                or [
                    {"uuid": f"GPU-test-{i}", "sm_util": 50, "memory_used_mib": 1000}
                    for i in range(gpus)
                ]
            }
        )
    )
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"""[node]
mps_backend = "emulator"
mps_timeout_s = {timeout_s}
nvml_backend = "scenario"
nvml_scenario = "{scen}"
run_dir = "{tmp_path}/run"
spool_dir = "{tmp_path}/spool"
profile = "{profile}"
sampler_interval_s = {interval_s}
[store]
url = "sqlite:///{tmp_path}/history.db"
busy_timeout_s = 0.2
[agent]
socket = "{tmp_path}/no-agent.sock"
""")
    return load_config(cfg)


def mps_job(
    job: int,
    uid: int = 1000,
    gpu: int = 0,
    cls: str = "resnet50",
    pct: int | None = 50,
    mem: float | None = 8.0,
    mech: str = "mps",
) -> JobInfo:
    return JobInfo(
        job,
        f"user{uid}",
        uid,
        "n1",
        [gpu],
        Placement(f"t{job}", cls, Mode.AUTO, Mechanism(mech), "n1", gpu, pct, mem),
    )


def leftover_mps(cfg: Config) -> list[int]:
    root = Path(cfg.node.run_dir) / "mps"
    return [
        p
        for d in (root.iterdir() if root.is_dir() else [])
        for p in procs.mps_processes(str(d / "pipe"))
    ]


@pytest.fixture
def cfg(tmp_path: Path) -> Iterator[Config]:
    c = node_config(tmp_path)
    yield c
    procs.kill_all(leftover_mps(c))


def spooled(cfg: Config) -> dict[int, JobRecord]:
    out = {}
    for p in pending(NodeLayout.of_config(cfg).spool_dirs()):
        r = JobRecord.from_dict(json.loads(p.read_text()))
        assert r.job_id not in out, "duplicate record"
        out[r.job_id] = r
    return out


def test_pair_shares_one_daemon_and_each_gets_its_limits(cfg: Config) -> None:
    a = job_start(cfg, mps_job(1, pct=60, mem=12.0), launch_sampler=False)
    b = job_start(cfg, mps_job(2, cls="lm", pct=40, mem=12.5), launch_sampler=False)
    assert a.mps[0].state == b.mps[0].state == "ok"
    assert a.task["mps"]["pipe_dir"] == b.task["mps"]["pipe_dir"]
    assert "GPU-test-0" in a.task["mps"]["pipe_dir"]
    assert (a.task["mps"]["thread_pct"], a.task["mps"]["mem_limit"]) == (60, "0=12G")
    assert (b.task["mps"]["thread_pct"], b.task["mps"]["mem_limit"]) == (40, "0=12800M")
    gm = gpu_mps(cfg, 0)
    st = gm.state()
    daemon = st["pid"]
    assert procs.alive(daemon) and len(leftover_mps(cfg)) == 2  # daemon + one server (uid)
    gate = open_nvml("scenario", cfg.node.nvml_scenario, cfg.node.run_dir)
    assert gate.gpu(0).compute_mode() == COMPUTE_EXCLUSIVE_PROCESS
    ra = job_end(cfg, 1, 0, detach_stop=False)
    assert ra is not None and procs.alive(daemon)  # job 2 still uses it
    rb = job_end(cfg, 2, 0, detach_stop=False)
    assert rb is not None
    assert leftover_mps(cfg) == []  # last job left: quit, verified
    assert gate.gpu(0).compute_mode() == COMPUTE_DEFAULT
    assert not gm.state()
    recs = spooled(cfg)
    assert set(recs) == {1, 2}
    assert [c.job_id for c in recs[1].co_runners] == [2]
    assert recs[1].co_runners[0].start == pytest.approx(recs[2].start)
    assert recs[2].co_runners[0].end == pytest.approx(recs[1].end)
    assert (recs[1].thread_pct, recs[1].mem_limit_gib, recs[1].mechanism) == (60, 12.0, "mps")
    assert recs[1].gpu_uuids == ["GPU-test-0"] and not recs[1].mps_fault
    assert not (Path(cfg.node.run_dir) / "jobs" / "1").exists()


def test_second_user_never_shares_an_mps_daemon(cfg: Config) -> None:
    job_start(cfg, mps_job(1, uid=1000), launch_sampler=False)
    b = job_start(cfg, mps_job(2, uid=1001), launch_sampler=False)
    assert b.mps[0].state == "refused"
    assert "mps" not in b.task and "one user at a time" in b.task["messages"][0]
    assert gpu_mps(cfg, 0).state()["uid"] == 1000
    job_end(cfg, 1, 0, detach_stop=False)
    job_end(cfg, 2, 0, detach_stop=False)
    assert leftover_mps(cfg) == [] and set(spooled(cfg)) == {1, 2}


def test_daemon_of_a_gone_user_is_replaced(cfg: Config) -> None:
    job_start(cfg, mps_job(1, uid=1000), launch_sampler=False)
    first = gpu_mps(cfg, 0).state()["pid"]
    job_end(cfg, 1, 0, detach_stop=False)
    b = job_start(cfg, mps_job(2, uid=1001), launch_sampler=False)
    assert b.mps[0].state == "ok" and gpu_mps(cfg, 0).state()["uid"] == 1001
    assert gpu_mps(cfg, 0).state()["pid"] != first
    job_end(cfg, 2, 0, detach_stop=False)


def test_shard_job_gets_only_the_progress_file(cfg: Config) -> None:
    r = job_start(cfg, mps_job(5, mech="shard"), launch_sampler=False)
    assert r.task["mechanism"] == "shard" and "mps" not in r.task and r.mps == {}
    assert gpu_mps(cfg, 0).state() == {} and leftover_mps(cfg) == []
    rec = job_end(cfg, 5, 0)
    assert rec is not None and rec.mechanism == "shard"


def test_a_requeued_jobs_second_run_leaves_the_gpu_too(cfg: Config) -> None:
    """A job requeued by an undo runs again under its job id: the Epilog of its second run
    closes that run's stay (the end of the first run does not count for it)."""
    lay = NodeLayout.of_config(cfg)
    job_start(cfg, mps_job(9, mech="shard"), launch_sampler=False)  # its partner stays
    for _ in range(2):
        job_start(cfg, mps_job(8, mech="shard"), launch_sampler=False)
        assert sorted(s.job for s in journal.active(journal.read(lay.journal(0)))) == [8, 9]
        assert job_end(cfg, 8, 0) is not None
        assert [s.job for s in journal.active(journal.read(lay.journal(0)))] == [9]
    assert job_end(cfg, 8, 0) is None  # an Epilog re-run: nothing left to do


def test_jobs_without_placement_are_untouched(tmp_path: Path) -> None:
    cfg = node_config(tmp_path)
    r = job_start(cfg, JobInfo(9, "u", 1000, "n1", [0], None), launch_sampler=False)
    assert not r.profiled and not (Path(cfg.node.run_dir) / "jobs").exists()
    assert job_end(cfg, 9, 0) is None and pending(NodeLayout.of_config(cfg).spool_dirs()) == []
    excl = Placement("t10", "x", Mode.AUTO)
    r = job_start(cfg, JobInfo(10, "u", 1000, "n1", [0], excl), launch_sampler=False)
    assert not r.profiled


def test_profile_all_records_exclusive_jobs_without_mps(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, profile="all")
    r = job_start(cfg, JobInfo(11, "u", 1000, "n1", [1], None), launch_sampler=False)
    assert r.profiled and r.task["mechanism"] is None and r.mps == {}
    rec = job_end(cfg, 11, 3)
    assert rec is not None and not rec.shared and rec.state == "FAILED" and rec.exit_code == 3


def test_sampler_runs_detached_and_its_summary_lands_in_the_record(tmp_path: Path) -> None:
    import time

    cfg = node_config(tmp_path, profile="all", interval_s=0.05)
    r = job_start(cfg, JobInfo(12, "u", 1000, "n1", [0], None))
    from test_node_sampler import wait_for_first_sample

    wait_for_first_sample(Path(cfg.node.run_dir) / "jobs" / "12" / "profile.json")
    time.sleep(0.3)
    rec = job_end(cfg, 12, 0)
    assert rec is not None and r.profiled
    assert rec.profile.get("final") is True and rec.profile["samples"] >= 2
    assert rec.profile["sm_util_mean"] == 50.0 and rec.profile["solo_s"] > 0


def test_spooled_job_directory_goes_to_the_trash_then_away(cfg: Config) -> None:
    from slurm_colo.node import jobstate

    lay = NodeLayout.of_config(cfg)
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    (lay.user_dir(1) / "many").mkdir()
    for i in range(50):  # whatever the job left behind: not deleted while the Epilog waits
        (lay.user_dir(1) / "many" / str(i)).write_text("x")
    assert job_end(cfg, 1, 0, detach_stop=False) is not None
    assert not lay.job_dir(1).exists() and set(spooled(cfg)) == {1}
    (moved,) = list(lay.trash_dir().iterdir())
    assert moved.name.startswith("1.") and (moved / "user" / "many" / "49").exists()
    assert lay.trash_dir().stat().st_mode & 0o777 == 0o700
    assert jobstate.empty_trash(lay) == 1 and list(lay.trash_dir().iterdir()) == []


def test_job_directory_is_deleted_at_once_when_the_trash_is_unusable(cfg: Config) -> None:
    lay = NodeLayout.of_config(cfg)
    job_start(cfg, mps_job(2, mech="shard"), launch_sampler=False)
    lay.trash_dir().write_text("not a directory")
    assert job_end(cfg, 2, 0, detach_stop=False) is not None
    assert not lay.job_dir(2).exists() and set(spooled(cfg)) == {2}


def test_handoff_arguments() -> None:
    from slurm_colo.node.detached import Handoff
    from slurm_colo.node.handoff import parse_args

    h = Handoff([0, 3], ingest=True)
    assert parse_args(h.args()) == ([0, 3], True)
    assert parse_args([]) == ([], False)
    assert parse_args(["--stop"]) is None and parse_args(["--stop", "x"]) is None
    assert parse_args(["--nope"]) is None


def test_the_sampler_starts_after_the_state_holds_the_mps_outcome(
    cfg: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sampler reads the job's state once at its start to know whether the job is an
    MPS client (its SM samples are then the server's): the state must already say so."""
    from slurm_colo.node import jobstate, lifecycle

    seen = []

    def fake_start(c: Config, job_id: int) -> int:
        st = jobstate.read_state(NodeLayout.of_config(c), job_id)
        assert st is not None
        seen.append({g: o.state for g, o in st.mps.items()})
        return 12345

    monkeypatch.setattr(lifecycle, "start_sampler", fake_start)
    job_start(cfg, mps_job(1))
    assert seen == [{0: "ok"}]
    st = jobstate.read_state(NodeLayout.of_config(cfg), 1)
    assert st is not None and st.sampler_pid == 12345
