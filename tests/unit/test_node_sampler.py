"""Sampler: streaming summary (solo vs shared phases), bounded memory, job-process
attribution, GPU lost mid-job, run loop and final flush."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from slurm_colo.emulators.nvml_scenario import ScenarioNvml
from slurm_colo.fsutil import atomic_write_json, read_json
from slurm_colo.node import journal
from slurm_colo.node.gpu.nvml import NvmlGate
from slurm_colo.node.layout import NodeLayout
from slurm_colo.node.profile_acc import GIB, ProfileAccumulator, Reading
from slurm_colo.node.sampler import Sampler, dcgm_status, run

sys.path.insert(0, str(Path(__file__).parent))
from test_node_lifecycle import node_config


def wait_for_first_sample(profile: Path, timeout_s: float = 30.0) -> None:
    """Until the sampler has written its first summary (after its first tick): a busy
    machine can take a while to start an interpreter."""
    deadline = time.monotonic() + timeout_s
    while not profile.exists():
        assert time.monotonic() < deadline, "the sampler never wrote a summary"
        time.sleep(0.01)


def test_solo_and_shared_phases_are_summarised_apart() -> None:
    acc = ProfileAccumulator(interval_s=1.0)
    for _ in range(10):
        acc.add(Reading(sm_util=90, mem_bw_util=40, mem_used=8 * GIB, power_w=250), shared=False)
    for _ in range(30):
        acc.add(Reading(sm_util=50, mem_bw_util=60, mem_used=14 * GIB, power_w=280), shared=True)
    s = acc.summary()
    assert (s["solo_s"], s["shared_s"], s["samples"]) == (10.0, 30.0, 40)
    assert s["solo"]["sm_util_mean"] == 90.0 and s["shared"]["sm_util_mean"] == 50.0
    assert s["sm_util_mean"] == 60.0 and s["sm_util_p95"] == 90.0
    assert s["mem_peak_gib"] == 14.0 and s["solo"]["mem_peak_gib"] == 8.0
    assert s["shared"]["power_w_mean"] == 280.0


def test_p95_and_missing_readings() -> None:
    acc = ProfileAccumulator()
    for v in range(100):  # 0..99
        acc.add(Reading(sm_util=v), shared=False)
    acc.add(Reading(), shared=False)  # nothing readable this tick
    s = acc.summary()
    assert s["samples"] == 101 and s["sm_util_p95"] == 94.0
    assert s["mem_used_mean_gib"] is None and s["power_w_mean"] is None


def test_memory_is_bounded() -> None:
    acc = ProfileAccumulator()
    acc.add(Reading(sm_util=1, mem_used=1.0), shared=False)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(20000):
        acc.add(
            Reading(sm_util=i % 100, mem_bw_util=5, mem_used=float(i), power_w=100.0),
            shared=bool(i % 2),
        )
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 16 * 1024  # 20k samples, a few KiB at most (no sample list)


def _state(lay: NodeLayout, job: int, gpus: list[int]) -> None:
    lay.job_dir(job).mkdir(parents=True)
    atomic_write_json(lay.job_dir(job) / "state.json", {"gpus": gpus, "start": time.time()})
    for g in gpus:
        lay.gpu_dir(g).mkdir(parents=True, exist_ok=True)


def test_sampler_follows_the_journal_and_attributes_job_processes(tmp_path: Path) -> None:
    lay = NodeLayout(tmp_path / "run", tmp_path / "spool")
    _state(lay, 7, [0])
    # a process of job 7 (found by its SLURM_JOB_ID; cgroups are used where Slurm has them)
    job_proc = subprocess.Popen(["sleep", "30"], env={**os.environ, "SLURM_JOB_ID": "7"})
    try:
        deadline = time.monotonic() + 5  # until exec: before it the child shows our environ
        while Path(f"/proc/{job_proc.pid}/comm").read_text().strip() != "sleep":
            assert time.monotonic() < deadline
            time.sleep(0.005)
        nv = ScenarioNvml(
            {
                "gpus": [
                    {
                        "uuid": "GPU-0",
                        "sm_util": 70,
                        "mem_util": 30,
                        "memory_used_mib": 4096,
                        "processes": [
                            {"pid": job_proc.pid, "used_mib": 3072, "sm_util": 55},
                            {"pid": os.getpid(), "used_mib": 512, "sm_util": 10},
                        ],
                    }
                ]
            }
        )
        s = Sampler(NvmlGate(nv, "scenario"), [0], 7, lay, 1.0)
        journal.append(lay.journal(0), {"ev": "start", "job": 7, "cls": "a", "user": "u", "uid": 1})
        s.tick()
        s.tick()
        journal.append(lay.journal(0), {"ev": "start", "job": 8, "cls": "b", "user": "u", "uid": 1})
        s.tick()
        out = s.summary()
    finally:
        job_proc.kill()
        job_proc.wait()
    assert (out["solo_s"], out["shared_s"]) == (2.0, 1.0)
    assert out["job_mem_peak_gib"] == 3.0  # only the job's own process
    assert out["job_sm_util_mean"] == 55.0
    assert out["sm_util_mean"] == 70.0 and out["mem_peak_gib"] == 4.0
    assert out["dcgm"] == dcgm_status() and out["gpu_lost"] == []


def test_gpu_lost_mid_job(tmp_path: Path) -> None:
    lay = NodeLayout(tmp_path / "run", tmp_path / "spool")
    _state(lay, 3, [0, 1])
    nv = ScenarioNvml(
        {
            "t0": time.time(),
            "gpus": [
                {"uuid": "a", "sm_util": 40},
                {"uuid": "b", "sm_util": 80, "lost_after_s": 600},
            ],
        }
    )
    s = Sampler(NvmlGate(nv, "scenario"), [0, 1], 3, lay, 1.0)
    s.tick()
    nv.t0 -= 601  # ten minutes later: GPU 1 has fallen off the bus
    s.tick()
    s.tick()
    out = s.summary()
    assert out["gpu_lost"] == [1]
    # first tick averages both GPUs (60), then only the surviving GPU 0 (40)
    assert out["sm_util_mean"] == round((60 + 40 + 40) / 3, 2)
    assert "GPU is lost" in " ".join(out["errors"])


def test_not_supported_readings_are_listed(tmp_path: Path) -> None:
    lay = NodeLayout(tmp_path / "run", tmp_path / "spool")
    _state(lay, 4, [0])
    nv = ScenarioNvml({"gpus": [{"uuid": "a", "not_supported": ["power", "utilization"]}]})
    s = Sampler(NvmlGate(nv, "scenario"), [0], 4, lay, 1.0)
    s.tick()
    out = s.summary()
    assert out["not_supported"] == ["power", "utilization"] and out["power_w_mean"] is None


def test_run_loop_flushes_a_final_summary(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, interval_s=0.01)
    lay = NodeLayout(Path(cfg.node.run_dir), Path(cfg.node.spool_dir))
    _state(lay, 5, [0])
    assert run(cfg, 5, max_ticks=20) == 0
    prof = read_json(lay.job_dir(5) / "profile.json")
    assert prof["final"] is True and prof["samples"] == 20 and prof["sm_util_mean"] == 50.0


def test_a_profile_that_cannot_be_written_is_written_at_the_next_flush(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Expected: a flush that fails (a full disk; here a directory where the profile
    goes) is logged once and the sampler samples on; the next flush that can write does.
    Before, the sampler ended at the first failed write, and the job's profile with it."""
    cfg = node_config(tmp_path, interval_s=0.01)
    lay = NodeLayout(Path(cfg.node.run_dir), Path(cfg.node.spool_dir))
    _state(lay, 5, [0])
    profile = lay.job_dir(5) / "profile.json"
    profile.mkdir()
    with caplog.at_level("WARNING"):
        assert run(cfg, 5, max_ticks=5) == 0
    assert caplog.text.count(f"job 5: cannot write {profile} (") == 1
    profile.rmdir()  # room again
    assert run(cfg, 5, max_ticks=5) == 0
    assert read_json(profile)["final"] is True


def test_each_flush_marks_the_job_seen_on_its_copy_on_disk(tmp_path: Path) -> None:
    """Expected: the copy's last change is the job's last sign of life, and the profile
    has a copy beside it (after a reboot, the job's record ends there, with that
    profile)."""
    cfg = node_config(tmp_path, interval_s=0.01)
    lay = NodeLayout(Path(cfg.node.run_dir), Path(cfg.node.spool_dir))
    _state(lay, 5, [0])
    lay.running_dir().mkdir(parents=True)
    lay.running_copy(5).write_text("{}")
    os.utime(lay.running_copy(5), (1000.0, 1000.0))
    before = time.time()
    assert run(cfg, 5, max_ticks=2) == 0
    assert lay.running_copy(5).stat().st_mtime >= before - 1
    assert read_json(lay.running_profile(5))["samples"] >= 1
    lay.running_copy(5).unlink()  # the job's record spooled: no copy of the profile either
    lay.running_profile(5).unlink()
    assert run(cfg, 5, max_ticks=2) == 0 and not lay.running_profile(5).exists()


def test_sampler_process_stops_on_sigterm(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, interval_s=0.05)
    lay = NodeLayout(Path(cfg.node.run_dir), Path(cfg.node.spool_dir))
    _state(lay, 6, [1])
    p = subprocess.Popen(
        [sys.executable, "-m", "slurm_colo.node.sampler", "6"],
        env={**os.environ, "SLURM_COLO_CONFIG": cfg.source},
    )
    wait_for_first_sample(lay.job_dir(6) / "profile.json")
    assert read_json(lay.job_dir(6) / "profile.json")["final"] is False
    time.sleep(0.2)
    p.terminate()
    assert p.wait(timeout=10) == 0
    prof = read_json(lay.job_dir(6) / "profile.json")
    assert prof["final"] is True and prof["samples"] >= 1


def test_under_mps_a_job_has_its_memory_but_no_sm_share_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML on a real GPU under MPS (tests/fixtures/nvml/h200_mps_node.json): the compute
    processes are the server (624) and its two clients with their memory, but the SM
    samples name only the server. A client's job gets its memory and no SM figure (not
    0 %); a job with no process on the GPU gets 0 %."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures" / "nvml"))
    from fake_pynvml import FakePynvml

    from slurm_colo.node import procs

    monkeypatch.setattr(procs, "job_of_pid", {643: 7, 642: 8}.get)
    lay = NodeLayout(tmp_path / "run", tmp_path / "spool")
    out = {}
    for job in (7, 9):
        _state(lay, job, [0])
        s = Sampler(NvmlGate(FakePynvml.load("h200_mps_node.json"), "recorded"), [0], job, lay, 1.0)
        s.tick()
        out[job] = s.summary()
    assert out[7]["job_mem_peak_gib"] == round(1530920960 / GIB, 3)
    assert out[7]["job_sm_util_mean"] is None
    assert out[9]["job_mem_peak_gib"] is None and out[9]["job_sm_util_mean"] == 0.0
    assert out[7]["sm_util_mean"] == 100.0 and out[7]["gpu_name"] == "NVIDIA H200"


@pytest.mark.parametrize("mps_state", ["ok", "refused", "ok,refused", None])
def test_an_mps_client_job_gets_no_sm_share_of_its_own(
    tmp_path: Path, mps_state: str | None
) -> None:
    """The run loop tells the sampler whether the job runs as an MPS client (placed with
    MPS and its daemon answered): then the per-process SM samples are the server's and the
    job gets no SM share, even in ticks where its own pid is sampled or absent."""
    from slurm_colo.contracts.enums import Mechanism
    from slurm_colo.contracts.jobstate import GpuMpsStart, JobState
    from slurm_colo.node import jobstate

    job_proc = subprocess.Popen(["sleep", "30"], env={**os.environ, "SLURM_JOB_ID": "5"})
    try:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{job_proc.pid}/comm").read_text().strip() != "sleep":
            assert time.monotonic() < deadline
            time.sleep(0.005)
        procs = [{"pid": job_proc.pid, "used_mib": 1024, "sm_util": 40}]
        gpu = {"uuid": "GPU-0", "sm_util": 80, "memory_used_mib": 2048, "processes": procs}
        cfg = node_config(tmp_path, interval_s=0.01, scenario=[gpu])
        lay = NodeLayout(Path(cfg.node.run_dir), Path(cfg.node.spool_dir))
        mps = {g: GpuMpsStart(x) for g, x in enumerate(mps_state.split(","))} if mps_state else {}
        mech = Mechanism.MPS if mps_state else Mechanism.SHARD
        jobstate.write_state(lay, JobState(5, gpus=[0], start=time.time(), mechanism=mech, mps=mps))
        assert run(cfg, 5, max_ticks=5) == 0
    finally:
        job_proc.kill()
        job_proc.wait()
    prof = read_json(lay.job_dir(5) / "profile.json")
    assert prof["job_mem_peak_gib"] == 1.0
    assert prof["job_sm_util_mean"] == (None if mps_state == "ok" else 40.0)


def test_the_run_loop_gives_a_probe_up_when_the_nodes_clock_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run loop reads the wall clock against the monotonic one while the probe waits;
    a step ends the probe without a verdict, in the job's profile at once."""
    from slurm_colo.contracts.enums import Mechanism
    from slurm_colo.contracts.jobstate import JobState
    from slurm_colo.contracts.placement import Placement
    from slurm_colo.node import jobstate

    class SteppingClock:
        """The wall time; stepped an hour ahead at the third reading."""

        def __init__(self) -> None:
            self.reads = 0

        def read(self) -> tuple[float, float]:
            self.reads += 1
            return time.time(), 3600.0 if self.reads == 3 else 0.0

    monkeypatch.setattr("slurm_colo.node.sampler.WallClock", SteppingClock)
    cfg = node_config(tmp_path, interval_s=0.01)
    lay = NodeLayout(Path(cfg.node.run_dir), Path(cfg.node.spool_dir))
    placement = Placement("p1", "a", mechanism=Mechanism.MPS, node="n1", gpu=0, probe_s=600.0)
    state = JobState(5, gpus=[0], start=time.time(), mechanism=Mechanism.MPS, placement=placement)
    jobstate.write_state(lay, state)
    lay.gpu_dir(0).mkdir(parents=True, exist_ok=True)
    assert run(cfg, 5, max_ticks=5) == 0
    prof = read_json(lay.job_dir(5) / "profile.json")
    assert prof["probe"] == {
        "verdict": "none",
        "reason": "the node's clock stepped +3600.0 s in the probe window",
    }
    assert prof["clock_steps_s"] == [3600.0]  # for the record: no progress rates
    assert prof["clock_steps_s"] == [3600.0]  # for the record: no progress rates


@pytest.mark.parametrize("stepped", [True, False])
def test_a_job_the_nodes_clock_stepped_under_has_no_progress_rates_in_its_record(
    tmp_path: Path, stepped: bool
) -> None:
    """Its progress points lie on either side of the step: the iterations are kept, the
    rates (which the retraining reads) are left out."""
    from test_node_lifecycle import mps_job, spooled

    from slurm_colo.node.lifecycle import job_end, job_start

    cfg = node_config(tmp_path)
    lay = NodeLayout.of_config(cfg)
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    t = time.time()
    points = [[t - 30.0, 0], [t - 20.0, 100], [t - 10.0, 200]]
    lay.user_dir(1).mkdir(parents=True, exist_ok=True)
    atomic_write_json(lay.user_dir(1) / "progress.json", {"points": points})
    profile = {"samples": 3, "clock_steps_s": [3600.0]} if stepped else {"samples": 3}
    atomic_write_json(lay.job_dir(1) / "profile.json", profile)
    assert job_end(cfg, 1, 0) is not None
    rec = spooled(cfg)[1]
    assert rec.progress is not None and rec.progress["iterations"] == 200
    assert rec.progress["rate"] == (None if stepped else pytest.approx(10.0))
    assert rec.profile.get("clock_steps_s") == ([3600.0] if stepped else None)
