"""Fault tests of the node side. Each states the expected outcome and asserts it; the last
one runs them all against one node and one database: zero records lost or duplicated.

Faults: MPS daemon crash mid-job, daemon hang, restart loop, fatal client fault, Epilog
killed mid-write, database locked during ingest, spool full / unwritable, NVML raising for
one GPU.
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_colo.config import Config
from slurm_colo.contracts.enums import Mechanism
from slurm_colo.contracts.placement import Placement
from slurm_colo.emulators.nvml_scenario import ScenarioNvml
from slurm_colo.fsutil import temp_name
from slurm_colo.node import procs
from slurm_colo.node.gpu.mps_daemon import gpu_mps
from slurm_colo.node.gpu.nvml import NvmlGate
from slurm_colo.node.layout import NodeLayout
from slurm_colo.node.lifecycle import JobInfo, job_end, job_start
from slurm_colo.node.recovery import recover
from slurm_colo.node.sampler import Sampler
from slurm_colo.spool.directory import pending
from slurm_colo.spool.drain import ingest_pending
from slurm_colo.store import make_engine, upgrade

sys.path.insert(0, str(Path(__file__).parent))
from test_node_lifecycle import leftover_mps, mps_job, node_config, spooled


@pytest.fixture
def cfg(tmp_path: Path) -> Iterator[Config]:
    c = node_config(
        tmp_path, timeout_s=2.0
    )  # short, for the hang tests; roomy enough for a loaded CI machine
    yield c
    procs.kill_all(leftover_mps(c))


@pytest.fixture
def clients() -> Iterator[list[subprocess.Popen]]:
    ps: list[subprocess.Popen] = []
    yield ps
    for p in ps:
        p.kill()
        p.wait()


def db_job_ids(cfg: Config) -> list[int]:
    db = cfg.store.url.removeprefix("sqlite:///")
    with sqlite3.connect(db) as c:
        return sorted(r[0] for r in c.execute("SELECT job_id FROM jobs"))


def init_db(cfg: Config) -> None:
    e = make_engine(cfg.store.url, 0.2)
    upgrade(e)
    e.dispose()


# -- MPS faults ----------------------------------------------------------------------------


def crash_daemon_mid_job(cfg: Config, a: int, b: int, c: int) -> None:
    """Expected: both running jobs' records carry mps_fault (their daemon died under them),
    the orphaned server is killed, and the next job gets a fresh, working daemon and a
    clean record."""
    job_start(cfg, mps_job(a), launch_sampler=False)
    job_start(cfg, mps_job(b), launch_sampler=False)
    st = gpu_mps(cfg, 0).state()
    server = gpu_mps(cfg, 0).control(st).server_list()[0]
    os.kill(st["pid"], signal.SIGKILL)
    time.sleep(0.05)
    ra = job_end(cfg, a, 1, detach_stop=False)
    assert ra is not None and ra.mps_fault
    rb = job_end(cfg, b, 1, detach_stop=False)
    assert rb is not None and rb.mps_fault
    assert not procs.alive(server) and leftover_mps(cfg) == []
    time.sleep(0.01)
    rc = job_start(cfg, mps_job(c), launch_sampler=False)
    assert rc.mps[0].state == "ok" and procs.alive(gpu_mps(cfg, 0).state()["pid"])
    rec = job_end(cfg, c, 0, detach_stop=False)
    assert rec is not None and not rec.mps_fault


def test_daemon_crash_mid_job(cfg: Config) -> None:
    crash_daemon_mid_job(cfg, 1, 2, 3)
    assert set(spooled(cfg)) == {1, 2, 3}


def test_a_fault_reading_like_one_kept_from_an_earlier_daemon_is_still_recorded(
    cfg: Config,
) -> None:
    """An idle GPU's journal keeps the faults of the last day: one that reads the same
    (a daemon PID used again) must not hide this daemon's fault from its job's record."""
    from slurm_colo.node import journal

    job_start(cfg, mps_job(1), launch_sampler=False)
    st = gpu_mps(cfg, 0).state()
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    same = f"MPS daemon {st['pid']} on GPU 0 dead"
    earlier = {"ev": "fault", "kind": "daemon_dead", "t": st["started"] - 3600, "detail": same}
    journal.append(lay.journal(0), earlier)
    os.kill(st["pid"], signal.SIGKILL)
    time.sleep(0.05)
    rec = job_end(cfg, 1, 1, detach_stop=False)
    assert rec is not None and rec.mps_fault
    assert [e["detail"] for e in journal.read(lay.journal(0))] == [same, same]


def hang_daemon(cfg: Config, a: int, b: int) -> None:
    """Expected: the next Prolog's probe times out (node.mps_timeout_s), the hung daemon
    and its server are killed, a new daemon serves the new job; the job that was running
    on the hung daemon is flagged, the new one is not."""
    job_start(cfg, mps_job(a), launch_sampler=False)
    gm = gpu_mps(cfg, 0)
    old = gm.state()["pid"]
    gm.control(gm.state()).command("emu_fault hang")
    t = time.monotonic()
    r = job_start(cfg, mps_job(b), launch_sampler=False)
    assert time.monotonic() - t < 3 * cfg.node.mps_timeout_s + 2
    assert r.mps[0].state == "ok"
    assert not procs.alive(old) and gm.state()["pid"] != old
    ra = job_end(cfg, a, 0, detach_stop=False)
    rb = job_end(cfg, b, 0, detach_stop=False)
    assert ra is not None and ra.mps_fault
    assert rb is not None and not rb.mps_fault
    assert leftover_mps(cfg) == []


def test_daemon_hang(cfg: Config) -> None:
    hang_daemon(cfg, 1, 2)
    assert set(spooled(cfg)) == {1, 2}


def test_restart_loop_gives_up_and_says_so(cfg: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """Expected: a daemon that dies right after every start is retried until MAX_CRASHES
    crashes in the window, then the GPU's MPS is declared broken: the job still starts
    (exit 0, time-sliced, GPU back in DEFAULT compute mode) and is told why."""
    from slurm_colo.node.gpu.mps_daemon import MAX_CRASHES
    from slurm_colo.node.gpu.nvml import COMPUTE_DEFAULT, open_nvml

    monkeypatch.setenv("SLURM_COLO_MPS_EMU_FAULT", "crash-after=0")
    states = []
    for j in range(1, MAX_CRASHES + 2):
        r = job_start(cfg, mps_job(j), launch_sampler=False)
        states.append(r.mps[0])
        assert job_end(cfg, j, 0, detach_stop=False) is not None
    assert all(s.state == "broken" for s in states)
    assert "restart loop" in states[-1].message and "slurm-colo node cleanup" in states[-1].message
    gate = open_nvml("scenario", cfg.node.nvml_scenario, cfg.node.run_dir)
    assert gate.gpu(0).compute_mode() == COMPUTE_DEFAULT
    assert leftover_mps(cfg) == [] and len(spooled(cfg)) == MAX_CRASHES + 1


def fatal_client_fault(cfg: Config, clients: list, z: int, a: int, b: int, c: int) -> None:
    """Expected: a fatal fault in one client kills every client of the server at once;
    the pair's records both carry mps_fault (one outcome of the pair, not two unrelated
    failures); an earlier job on the GPU and a job on another GPU are not flagged."""
    job_start(cfg, mps_job(z), launch_sampler=False)
    job_end(cfg, z, 0, detach_stop=False)
    job_start(cfg, mps_job(c, gpu=1), launch_sampler=False)
    job_start(cfg, mps_job(a), launch_sampler=False)
    job_start(cfg, mps_job(b, cls="lm"), launch_sampler=False)
    gm = gpu_mps(cfg, 0)
    ctl = gm.control(gm.state())
    for _ in range(2):
        p = subprocess.Popen(["sleep", "60"])
        clients.append(p)
        ctl.command(f"emu_client_connect 1000 {p.pid}")
    ctl.command("emu_fault client_fatal")
    assert [p.wait(timeout=5) for p in clients[-2:]] == [-9, -9]
    ra = job_end(cfg, a, 1, detach_stop=False)
    rb = job_end(cfg, b, 1, detach_stop=False)
    rc = job_end(cfg, c, 0, detach_stop=False)
    assert ra is not None and rb is not None and rc is not None
    assert ra.mps_fault and rb.mps_fault and not rc.mps_fault
    assert [x.job_id for x in ra.co_runners] == [b]
    assert not spooled(cfg)[z].mps_fault
    assert leftover_mps(cfg) == []


def test_fatal_client_fault_is_the_pairs_outcome(cfg: Config, clients: list) -> None:
    fatal_client_fault(cfg, clients, 1, 2, 3, 4)
    assert set(spooled(cfg)) == {1, 2, 3, 4}


def test_a_killed_mps_server_is_the_pairs_outcome(cfg: Config, clients: list) -> None:
    """Expected: an MPS server killed under a pair (its daemon logs "exited with status 0",
    as NVIDIA's did on a real GPU, but with no "Try shutting down" before it) flags both
    jobs of the pair and not a job on another GPU; the next job on the GPU gets a new server
    from the same daemon."""
    job_start(cfg, mps_job(3, gpu=1), launch_sampler=False)
    job_start(cfg, mps_job(1), launch_sampler=False)
    job_start(cfg, mps_job(2, cls="lm"), launch_sampler=False)
    gm = gpu_mps(cfg, 0)
    ctl = gm.control(gm.state())
    (server,) = ctl.server_list()
    os.kill(server, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while ctl.server_list() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ctl.server_list() == [] and "exited with status 0" in ctl.log_text()
    r1 = job_end(cfg, 1, 1, detach_stop=False)
    job_start(cfg, mps_job(4), launch_sampler=False)  # joins the same daemon
    p = subprocess.Popen(["sleep", "60"])
    clients.append(p)
    assert ctl.command(f"emu_client_connect 1000 {p.pid}").startswith("OK ")
    assert len(ctl.server_list()) == 1 and ctl.server_list() != [server]
    r2 = job_end(cfg, 2, 1, detach_stop=False)
    r3 = job_end(cfg, 3, 0, detach_stop=False)
    r4 = job_end(cfg, 4, 0, detach_stop=False)
    assert r1 is not None and r2 is not None and r3 is not None and r4 is not None
    assert r1.mps_fault and r2.mps_fault and not r3.mps_fault and not r4.mps_fault


def test_stale_daemon_from_a_crashed_node_is_cleaned_at_next_prolog(cfg: Config) -> None:
    """Expected: a daemon and server left behind with no state file (e.g. slurmd and the
    run dir state lost) are found by their pipe directory and killed before a new start."""
    job_start(cfg, mps_job(1), launch_sampler=False)
    gm = gpu_mps(cfg, 0)
    stale = leftover_mps(cfg)
    assert len(stale) == 2
    lay = NodeLayout.of_config(cfg)
    lay.mps_state(0).unlink()  # the state is gone, the processes are not
    (lay.journal(0)).write_text("")
    (lay.job_dir(1) / "state.json").unlink()
    r = job_start(cfg, mps_job(2), launch_sampler=False)
    assert r.mps[0].state == "ok"
    assert not any(procs.alive(p) for p in stale)
    assert len(leftover_mps(cfg)) == 2 and gm.state()["pid"] not in stale
    job_end(cfg, 2, 0, detach_stop=False)


# -- record faults -------------------------------------------------------------------------

_KILL_MID_WRITE = """
import os, sys
from slurm_colo.config import load_config
from slurm_colo.node.lifecycle import job_end
real = os.replace
def dying_replace(src, dst):
    if "spool" in str(dst):
        os._exit(137)  # killed between writing the temp file and the rename
    real(src, dst)
os.replace = dying_replace
job_end(load_config(sys.argv[1]), int(sys.argv[2]), 0, detach_stop=False)
"""


def epilog_killed_mid_write(cfg: Config, job: int) -> None:
    """Expected: no record file and no partial one is visible (only a hidden temp file),
    the job's state survives, and the next hook run (recover) spools exactly one record;
    running recovery again adds nothing."""
    job_start(cfg, mps_job(job), launch_sampler=False)
    cp = subprocess.run([sys.executable, "-c", _KILL_MID_WRITE, cfg.source, str(job)])
    assert cp.returncode == 137
    lay = NodeLayout.of_config(cfg)
    assert job not in spooled(cfg)
    assert any(p.name.startswith(".tmp-") for p in lay.spool_dir.iterdir())
    assert (lay.job_dir(job) / "ended.json").exists()
    assert recover(cfg) == [job]
    assert recover(cfg) == []
    assert job in spooled(cfg)
    assert not lay.job_dir(job).exists()


def test_epilog_killed_mid_write(cfg: Config) -> None:
    epilog_killed_mid_write(cfg, 7)
    assert len(spooled(cfg)) == 1
    init_db(cfg)
    assert ingest_pending(cfg).ingested == 1
    assert ingest_pending(cfg).ingested == 0 and db_job_ids(cfg) == [7]


def ingest_while_locked(cfg: Config) -> None:
    """Expected: ingest reports the lock and leaves every file in the spool; the next
    ingest stores each record exactly once."""
    before = len(spooled(cfg))
    db = cfg.store.url.removeprefix("sqlite:///")
    holder = sqlite3.connect(db, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        rep = ingest_pending(cfg, busy_timeout_s=0.1)
        assert rep.ingested == 0 and any("locked" in e for e in rep.errors)
    finally:
        holder.rollback()
        holder.close()
    assert len(spooled(cfg)) == before
    rep = ingest_pending(cfg)
    assert rep.errors == [] and rep.ingested == before


def test_database_locked_during_ingest(cfg: Config) -> None:
    for j in (1, 2):
        job_start(cfg, mps_job(j), launch_sampler=False)
    for j in (1, 2):
        job_end(cfg, j, 0, detach_stop=False)
    init_db(cfg)
    ingest_while_locked(cfg)
    assert db_job_ids(cfg) == [1, 2]
    assert ingest_pending(cfg).ingested == 0 and db_job_ids(cfg) == [1, 2]


def spool_full(cfg: Config, job: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Expected: ENOSPC on the spool sends the record to the fallback spool under run_dir;
    the Epilog still succeeds and ingest picks the record up from there."""
    import slurm_colo.spool.directory as spool_mod

    real = spool_mod.atomic_write_bytes
    spool_dir = str(NodeLayout.of_config(cfg).spool_dir)

    def full(path: Path, *a: object, **kw: object) -> None:
        if str(path).startswith(spool_dir + "/"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(spool_mod, "atomic_write_bytes", full)
    job_start(cfg, mps_job(job), launch_sampler=False)
    rec = job_end(cfg, job, 0, detach_stop=False)
    monkeypatch.setattr(spool_mod, "atomic_write_bytes", real)
    assert rec is not None
    fb = NodeLayout.of_config(cfg).fallback_spool()
    assert [p.name for p in fb.glob("*.json")] == [f"default_{job}_n1_{int(rec.start)}.json"]


def test_spool_full_goes_to_fallback(cfg: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    spool_full(cfg, 5, monkeypatch)
    init_db(cfg)
    assert ingest_pending(cfg).ingested == 1 and db_job_ids(cfg) == [5]


def test_spool_and_fallback_unwritable_keep_state_until_fixed(tmp_path: Path) -> None:
    """Expected: with both spools unwritable the Epilog still exits normally, the job's
    state stays in run_dir, and once the spool is writable again recovery spools it."""
    cfg = node_config(tmp_path)
    lay = NodeLayout.of_config(cfg)
    lay.spool_dir.parent.mkdir(parents=True, exist_ok=True)
    lay.spool_dir.write_text("not a directory")  # unwritable spool
    lay.run_dir.mkdir(parents=True, exist_ok=True)
    lay.fallback_spool().write_text("not a directory either")
    job_start(cfg, mps_job(8, mech="shard"), launch_sampler=False)
    rec = job_end(cfg, 8, 0)
    assert rec is not None and lay.job_dir(8).exists()
    lay.spool_dir.unlink()
    lay.fallback_spool().unlink()
    assert recover(cfg) == [8]
    assert set(spooled(cfg)) == {8} and not lay.job_dir(8).exists()


def nvml_raising_for_one_gpu(cfg: Config, job: int) -> dict:
    """Expected: a GPU that NVML reports lost (or that raises) stops being sampled, is
    listed in profile.gpu_lost, the other GPU's samples are kept, the record is written."""
    nv = ScenarioNvml(
        {
            "gpus": [
                {"uuid": "GPU-test-0", "sm_util": 80},
                {"uuid": "GPU-test-1", "lost_after_s": 0.0, "errors": {"utilization": "UNKNOWN"}},
            ]
        }
    )
    info = JobInfo(job, "u", 1000, "n1", [0, 1], Placement("t", "x", mechanism=Mechanism.SHARD))
    job_start(cfg, info, launch_sampler=False)
    s = Sampler(NvmlGate(nv, "scenario"), [0, 1], job, NodeLayout.of_config(cfg), 1.0)
    for _ in range(3):
        s.tick()
    s.flush(final=True)
    rec = job_end(cfg, job, 0)
    assert rec is not None
    assert rec.profile["gpu_lost"] == [1] and rec.profile["samples"] == 3
    assert rec.profile["sm_util_mean"] == 80.0
    return rec.profile


def test_nvml_raising_for_one_gpu(cfg: Config) -> None:
    nvml_raising_for_one_gpu(cfg, 9)
    assert set(spooled(cfg)) == {9}


def test_all_faults_on_one_node_lose_and_duplicate_nothing(
    cfg: Config, clients: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every fault above in sequence on one node, ingest in between and at the end: the
    database holds each job exactly once."""
    init_db(cfg)
    crash_daemon_mid_job(cfg, 101, 102, 103)
    assert ingest_pending(cfg).ingested == 3
    hang_daemon(cfg, 104, 105)
    fatal_client_fault(cfg, clients, 106, 107, 108, 109)
    ingest_while_locked(cfg)
    epilog_killed_mid_write(cfg, 110)
    spool_full(cfg, 111, monkeypatch)
    nvml_raising_for_one_gpu(cfg, 112)
    assert recover(cfg) == []  # nothing left behind
    rep = ingest_pending(cfg)
    assert rep.errors == []
    assert ingest_pending(cfg).ingested == 0
    assert db_job_ids(cfg) == list(range(101, 113))
    assert leftover_mps(cfg) == []


def test_broken_mps_with_gpu_stuck_exclusive_refuses_the_job(
    cfg: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expected: when the daemon cannot start AND the GPU cannot be put back into DEFAULT
    compute mode, the Prolog refuses the job (the one case it passes a failure on) rather
    than let it start on a GPU it cannot open; while the reset works, it never refuses."""
    from slurm_colo.node.gpu.nvml import Gpu

    monkeypatch.setenv("SLURM_COLO_MPS_EMU_FAULT", "crash-after=0")
    r = job_start(cfg, mps_job(1), launch_sampler=False)
    assert r.mps[0].state == "broken" and not r.refuse
    job_end(cfg, 1, 0, detach_stop=False)
    stuck: list[int] = []
    real = Gpu.set_compute_mode

    def no_reset(self: Gpu, mode: int) -> bool:  # NVML refuses to leave EXCLUSIVE_PROCESS
        if mode == 0:
            return False
        stuck.append(mode)
        return real(self, mode)

    monkeypatch.setattr(Gpu, "set_compute_mode", no_reset)
    r = job_start(cfg, mps_job(2), launch_sampler=False)
    assert stuck == [3] and r.mps[0].state == "broken" and r.refuse
    monkeypatch.setattr(Gpu, "set_compute_mode", real)
    job_end(cfg, 2, 0, detach_stop=False)
    assert set(spooled(cfg)) == {1, 2}


def test_gpu_lock_held_by_a_stuck_hook(cfg: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """Expected: a Prolog that cannot get the GPU's lock (another hook stuck holding it)
    does not hang and does not fail: the job runs without MPS and is told; its Epilog
    still writes the record."""
    import slurm_colo.node.lifecycle as lc
    from slurm_colo.fsutil import try_lock, unlock

    monkeypatch.setattr(lc, "lock_wait", lambda cfg: 0.2)
    lay = NodeLayout.of_config(cfg)
    lay.gpu_dir(0).mkdir(parents=True)
    holder = try_lock(lay.gpu_lock(0), 1.0)
    assert holder is not None
    try:
        r = job_start(cfg, mps_job(1), launch_sampler=False)
        assert r.mps[0].state == "broken" and "held the GPU" in r.task["messages"][0]
        rec = job_end(cfg, 1, 0, detach_stop=False)
    finally:
        unlock(holder)
    assert rec is not None and set(spooled(cfg)) == {1}


def test_job_lost_with_a_node_reboot_is_recorded_once(cfg: Config) -> None:
    """Expected: state left by a job from before a reboot (its Epilog never ran) becomes
    one record with exit code -1 at the next hook run; a second run adds nothing."""
    from slurm_colo.node import jobstate

    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    lay = NodeLayout.of_config(cfg)
    st = jobstate.read_state(lay, 1)
    assert st is not None
    st.boot_id = "boot-before-the-crash"
    jobstate.write_state(lay, st)
    assert recover(cfg, skip=2) == [1]
    assert recover(cfg, skip=2) == []
    rec = spooled(cfg)[1]
    assert rec.exit_code == -1 and rec.state == "FAILED" and rec.end >= rec.start


def _reboot_copy_only(cfg: Config, job: int, seen_after_s: float) -> float:
    """:func:`_reboot`'s change to one job's copy, the run directory left for the next."""
    from slurm_colo.node import jobstate

    lay = NodeLayout.of_config(cfg)
    st = jobstate.read_state(lay, job)
    assert st is not None
    st.boot_id = "boot-before-the-crash"
    jobstate.write_state(lay, st)
    seen = st.start + seen_after_s
    os.utime(lay.running_copy(job), (seen, seen))
    return seen


def _reboot(cfg: Config, job: int, seen_after_s: float) -> float:
    """The node goes down under ``job`` and comes back: its last sign of life (the
    sampler's last flush) ``seen_after_s`` after its start, the tmpfs run directory gone.
    Returns when it was last seen."""
    import shutil

    seen = _reboot_copy_only(cfg, job, seen_after_s)
    shutil.rmtree(NodeLayout.of_config(cfg).run_dir)
    return seen


def test_a_job_the_nodes_reboot_ended_is_recorded_from_its_copy_on_disk(
    cfg: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """Expected: the run directory is a tmpfs, so a reboot takes every job's state with
    it; the copy on disk under the spool directory brings the job back at the next hook
    run: one record, failed (-1), ending when it was last seen alive. Before, such a job
    left no record at all."""
    from slurm_colo.node import jobstate

    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    lay = NodeLayout.of_config(cfg)
    assert lay.running_copy(1).is_file()
    jobstate.copy_profile(lay, 1, {"samples": 90, "sm_util_mean": 61.0, "final": False})
    seen = _reboot(cfg, 1, 100.0)
    with caplog.at_level("WARNING"):
        assert recover(cfg) == [1]
    assert (
        "job 1: ran when the node went down; recorded as failed (its state restored from "
        f"{lay.running_copy(1)})" in caplog.text
    )
    rec = spooled(cfg)[1]
    assert (rec.exit_code, rec.state, rec.end) == (-1, "FAILED", pytest.approx(seen))
    assert rec.profile["sm_util_mean"] == 61.0  # the sampler's last summary before the crash
    assert not lay.running_copy(1).exists() and not lay.running_profile(1).exists()
    assert recover(cfg) == []
    assert set(spooled(cfg)) == {1}


def test_the_copy_on_disk_and_the_record_are_flushed_with_their_directories(
    cfg: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reboot is often a crash or a power cut: a copy or record written but not flushed
    can be lost with it, or found empty, and the job with it. Before, the copy was not
    flushed at all and neither were the directories that name the copy and the record."""
    flushed: list[str] = []
    fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    lay = NodeLayout.of_config(cfg)
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    assert str(lay.running_copy(1).with_name(temp_name("1.state"))) in flushed
    assert str(lay.running_dir()) in flushed
    flushed.clear()
    assert job_end(cfg, 1, 0) is not None
    (rec,) = pending(lay.spool_dirs())
    assert str(rec.with_name(temp_name(rec.name))) in flushed
    assert str(rec.parent) in flushed


def test_jobs_the_reboot_ended_together_on_a_gpu_are_each_others_co_runners(
    cfg: Config,
) -> None:
    """Expected: the pair sharing GPU 0 when the node went down: each record names the
    other as its co-runner, over the time both were seen alive, and the GPU's journal
    holds no job afterwards (a new job there is not kept from MPS)."""
    from slurm_colo.node import journal

    job_start(cfg, mps_job(1), launch_sampler=False)
    job_start(cfg, mps_job(2, cls="lm"), launch_sampler=False)
    procs.kill_all(leftover_mps(cfg))  # the reboot's doing
    seen1 = _reboot_copy_only(cfg, 1, 50.0)
    _reboot(cfg, 2, 80.0)
    assert recover(cfg) == [1, 2]
    recs = spooled(cfg)
    assert [c.job_id for c in recs[1].co_runners] == [2]
    assert [c.job_id for c in recs[2].co_runners] == [1]
    assert recs[2].co_runners[0].end == pytest.approx(seen1)
    lay = NodeLayout.of_config(cfg)
    assert journal.active(journal.read(lay.journal(0))) == []


def test_the_epilog_slurm_runs_as_the_rebooted_node_returns_records_the_job(
    cfg: Config,
) -> None:
    """Expected: slurmd runs the dead job's Epilog (exit code 0) when the node registers
    again: it finds the copy, and the job is recorded as failed, not as completed."""
    from typer.testing import CliRunner

    from slurm_colo.cli import app

    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    seen = _reboot(cfg, 1, 30.0)
    os.environ["SLURM_COLO_CONFIG"] = cfg.source
    try:
        out = CliRunner().invoke(app, ["node", "status"])  # before any hook ran
    finally:
        del os.environ["SLURM_COLO_CONFIG"]
    assert "state copies on disk without a job directory: jobs [1]" in out.output
    rec = job_end(cfg, 1, 0, detach_stop=False)
    assert rec is not None and (rec.exit_code, rec.end) == (-1, pytest.approx(seen))
    assert set(spooled(cfg)) == {1}


def test_copies_on_disk_of_this_boot_or_damaged(cfg: Config) -> None:
    """Expected: a copy of this boot without its job directory (its record being spooled
    by another hook this moment, or its run directory emptied by hand) is left to the
    job's own Epilog, which records it; a damaged copy is deleted; an ended job leaves no
    copy; and the Prolog's cheap check sees another job's copy, not its own."""
    from slurm_colo.hooks.prolog import pending_jobs
    from slurm_colo.node import jobstate

    lay = NodeLayout.of_config(cfg)
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    assert job_end(cfg, 1, 0) is not None and not lay.running_copy(1).exists()
    job_start(cfg, mps_job(2, mech="shard"), launch_sampler=False)
    lay.job_dir(2).rename(lay.run_dir / "elsewhere")  # as remove() moves it to the trash
    lay.running_copy(3).write_text("{")
    run_dir, spool_dir = str(lay.run_dir), str(lay.spool_dir)
    assert pending_jobs(run_dir, spool_dir, 4) and pending_jobs(run_dir, spool_dir, 2)
    assert jobstate.restore_copies(lay, procs.boot_id()) == []
    assert lay.running_copy(2).exists() and not lay.running_copy(3).exists()
    # its own Epilog restores it, and records it with the exit code Slurm gives
    rec = job_end(cfg, 2, 3)
    assert rec is not None and rec.exit_code == 3 and not lay.running_copy(2).exists()
    lay.running_copy(3).write_text("{}")
    assert pending_jobs(run_dir, spool_dir, 3)  # its own copy: perhaps a run a reboot ended
    lay.running_copy(3).unlink()
    assert not pending_jobs(run_dir, spool_dir, 3)


def test_a_copy_of_this_boot_whose_job_is_gone_is_recorded_by_node_cleanup(
    cfg: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expected: the run directory emptied by hand under a running job, and no Epilog to
    come (slurmd killed with it): once the job is gone, ``node cleanup`` (any hook's
    recovery) records it as failed at its last sign of life, with the co-runner its GPU's
    journal still has; ``node status`` had said cleanup would. While the job may still run,
    its copy is left for its Epilog, as before. Before, the copy stayed for good."""
    from typer.testing import CliRunner

    from slurm_colo.cli import app

    lay = NodeLayout.of_config(cfg)
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    job_start(cfg, mps_job(2, mech="shard", cls="lm"), launch_sampler=False)
    time.sleep(0.05)
    seen = time.time()  # job 1's last sign of life: its sampler's last flush
    os.utime(lay.running_copy(1), (seen, seen))
    import shutil

    shutil.rmtree(lay.job_dir(1))  # by hand; job 2 and the GPU's journal stay
    assert recover(cfg) == []  # job 1 may still run: left to its Epilog
    assert lay.running_copy(1).exists()
    monkeypatch.setattr(procs, "job_alive", lambda job, *a, **k: job != 1)
    os.environ["SLURM_COLO_CONFIG"] = cfg.source
    try:
        out = CliRunner().invoke(app, ["node", "status"])
        assert "state copies on disk without a job directory: jobs [1]" in out.output
        assert "once their jobs are gone" in out.output
        out = CliRunner().invoke(app, ["node", "cleanup"])
    finally:
        del os.environ["SLURM_COLO_CONFIG"]
    assert "recovered records: [1]" in out.output, out.output
    assert set(spooled(cfg)) == {1} and not lay.running_copy(1).exists()
    import json

    from slurm_colo.contracts.records import JobRecord
    from slurm_colo.spool.directory import pending

    (rec,) = [JobRecord.from_dict(json.loads(f.read_text())) for f in pending(lay.spool_dirs())]
    assert (rec.exit_code, rec.end) == (-1, pytest.approx(seen))
    assert [c.job_id for c in rec.co_runners] == [2]
    assert job_end(cfg, 2, 0) is not None  # job 2's stay and record are as usual


def test_a_job_requeued_after_the_reboot_onto_the_same_node_keeps_both_runs(
    cfg: Config,
) -> None:
    """Expected: Slurm requeues a batch job whose node failed; when it lands on the same
    node again, its Prolog first records the run the reboot ended (failed, -1), then starts
    the new run, whose own Epilog records it with its own exit code. Two records."""
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    seen = _reboot(cfg, 1, 40.0)
    assert recover(cfg, skip=1) == [1]  # the new run's Prolog
    time.sleep(1.1)  # a record's id holds its start in whole seconds
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    assert job_end(cfg, 1, 0) is not None
    import json

    from slurm_colo.contracts.records import JobRecord
    from slurm_colo.spool.directory import pending

    files = pending(NodeLayout.of_config(cfg).spool_dirs())
    recs = sorted(
        (JobRecord.from_dict(json.loads(f.read_text())) for f in files), key=lambda r: r.start
    )
    assert [(r.job_id, r.exit_code) for r in recs] == [(1, -1), (1, 0)]
    assert recs[0].end == pytest.approx(seen)


def log_stamp_after_start() -> str:
    """A server.log time stamp (local time, milliseconds) just after the job started."""
    time.sleep(0.01)
    now = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"


def test_fault_seen_in_server_log_or_server_state(cfg: Config, clients: list) -> None:
    """Expected: a fatal fault reported only in server.log, or only by a server still in
    FAULT state when a failed job's Epilog asks, flags the job's record too."""
    job_start(cfg, mps_job(1), launch_sampler=False)
    gm = gpu_mps(cfg, 0)
    st = gm.state()
    stamp = log_stamp_after_start()
    with open(Path(st["log_dir"]) / "server.log", "a") as f:
        f.write(f"[{stamp} Server 1] fatal exception reported to clients\n")
    rec = job_end(cfg, 1, 1, detach_stop=False)
    assert rec is not None and rec.mps_fault

    job_start(cfg, mps_job(2), launch_sampler=False)
    ctl = gm.control(gm.state())
    p = subprocess.Popen(["sleep", "60"])
    clients.append(p)
    ctl.command(f"emu_client_connect 1000 {p.pid}")
    ctl.command("emu_fault client_fatal_slow")  # clients still exiting: server in FAULT
    found = gm.scan_faults(ctl.log_size(), ctl.log_size("server.log"), query_servers=True)
    assert [f["kind"] for f in found] == ["client_fatal"] and "FAULT state" in found[0]["detail"]
    p.kill()
    rec = job_end(cfg, 2, 1, detach_stop=False)
    assert rec is not None and rec.mps_fault


def test_a_line_the_user_wrote_into_server_log_never_wedges_the_epilog(cfg: Config) -> None:
    """Expected: server.log is the job user's file, so any line can be in it; the Epilog
    still notes the fault logged after a line without the usual words, spools the record,
    and stops the daemon (before, such a line ended the fault scan with a ValueError on
    every Epilog run: no record, and the GPU's daemon left running)."""
    job_start(cfg, mps_job(1), launch_sampler=False)
    gm = gpu_mps(cfg, 0)
    st = gm.state()
    stamp = log_stamp_after_start()
    with open(Path(st["log_dir"]) / "server.log", "a") as f:
        f.write(f"[{stamp} Server 1] Server 986exited with status 0\n")
        f.write(f"[{stamp} Server 1] fatal exception reported to clients\n")
    rec = job_end(cfg, 1, 1, detach_stop=False)
    assert rec is not None and rec.mps_fault
    assert set(spooled(cfg)) == {1} and leftover_mps(cfg) == []
    assert not procs.alive(st["pid"])


def test_damaged_files_or_a_builder_bug_never_wedge_a_record(
    cfg: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expected: a damaged sampler summary gives a record with the reason in its profile;
    a bug in building the record gives a minimal record; either way exactly one record and
    the job's state is gone (no retry loop on every hook run)."""
    import slurm_colo.node.record_build as rb

    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    lay = NodeLayout.of_config(cfg)
    (lay.job_dir(1) / "profile.json").write_text("[1, 2, 3]")
    rec = job_end(cfg, 1, 0)
    assert rec is not None and "not an object" in rec.profile["record_error"]

    def broken(*a: object) -> None:
        raise KeyError("start")

    monkeypatch.setattr(rb, "build_record", broken)
    job_start(cfg, mps_job(2, mech="shard"), launch_sampler=False)
    rec = job_end(cfg, 2, 0)
    assert rec is not None and "KeyError" in rec.profile["record_error"]
    assert set(spooled(cfg)) == {1, 2} and not lay.job_dir(2).exists()
    init_db(cfg)
    assert ingest_pending(cfg).ingested == 2


def test_a_directory_in_place_of_the_end_file_is_moved_aside_and_the_job_recorded(
    cfg: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """Expected: the Epilog's end file is only ever written by the hooks; a directory made
    there by hand is moved aside (named in the log) and the job recorded. Before, no file
    could replace it: every hook said the record waited for a later hook, for ever."""
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    lay = NodeLayout.of_config(cfg)
    (lay.job_dir(1) / "ended.json").mkdir()
    with caplog.at_level("WARNING"):
        rec = job_end(cfg, 1, 0)
    assert rec is not None and (rec.exit_code, rec.state) == (0, "COMPLETED")
    assert set(spooled(cfg)) == {1} and not lay.job_dir(1).exists()
    assert f"a directory stood in place of {lay.job_dir(1) / 'ended.json'}" in caplog.text


def test_a_clock_set_back_since_the_prolog_still_gives_a_record_the_history_takes(
    cfg: Config, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Expected: the node's clock is set back an hour while the job runs (an NTP step): the
    Epilog records the job ending when it was last seen alive, never before its start.
    Before, the record ended before it started and the ingest put it in ``bad/``: the job
    was missing from the history."""
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600.0)
    with caplog.at_level("WARNING"):
        rec = job_end(cfg, 1, 0)
    monkeypatch.undo()
    assert rec is not None and rec.end >= rec.start
    assert "job 1: the clock is 3600 s behind the job's start" in caplog.text
    init_db(cfg)
    report = ingest_pending(cfg)
    assert (report.ingested, report.bad) == (1, 0)


def test_a_saved_sampler_pid_now_of_another_process_is_not_signalled(cfg: Config) -> None:
    """Expected: the sampler died and its pid went to another process: the Epilog leaves
    that process alone (it used to SIGTERM whatever held the pid) and still records."""
    from slurm_colo.node import jobstate

    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    lay = NodeLayout.of_config(cfg)
    other = subprocess.Popen(["sleep", "60"])
    try:
        st = jobstate.read_state(lay, 1)
        assert st is not None
        st.sampler_pid = other.pid
        jobstate.write_state(lay, st)
        assert job_end(cfg, 1, 0) is not None and set(spooled(cfg)) == {1}
        assert other.poll() is None  # still running
    finally:
        other.kill()
        other.wait()


def test_one_damaged_job_does_not_stop_the_recovery_of_the_others(cfg: Config) -> None:
    """Expected: a job whose state file and its copy on disk are damaged is logged and
    left for its Epilog (one whose copy is whole is recovered from it); the next hook's
    recovery still ends the other jobs, a damaged end file is written
    anew (the job is recovered with the time it was last seen), and a directory named
    with a non-ASCII digit is not a job."""
    from slurm_colo.node import jobstate

    job_start(cfg, mps_job(1, gpu=1, mech="shard"), launch_sampler=False)
    job_start(cfg, mps_job(2, mech="shard"), launch_sampler=False)
    job_start(cfg, mps_job(3, mech="shard"), launch_sampler=False)
    lay = NodeLayout.of_config(cfg)
    for job in (1, 2, 3):
        st = jobstate.read_state(lay, job)
        assert st is not None
        st.boot_id = "another-boot"
        jobstate.write_state(lay, st)
    (lay.job_dir(1) / "state.json").write_text("{")
    lay.running_copy(1).write_text("{")  # its copy on disk too
    (lay.job_dir(3) / "ended.json").write_text('{"end": "abc", "epilog_pid": "x"}')
    (lay.jobs_dir() / "\u00b2").mkdir()
    assert recover(cfg) == [2, 3]
    assert set(spooled(cfg)) == {2, 3} and lay.job_dir(1).exists()
    job_start(cfg, mps_job(4, mech="shard"), launch_sampler=False)
    st = jobstate.read_state(lay, 4)
    assert st is not None
    st.boot_id = "another-boot"
    jobstate.write_state(lay, st)
    (lay.job_dir(4) / "state.json").write_text("{")  # its copy on disk whole
    assert recover(cfg) == [4]
    assert spooled(cfg)[3].end == spooled(cfg)[3].start  # no profile: last seen at its start


@pytest.mark.parametrize("state", ["not json", '{"gpus": "abc"}', '{"gpus": [0], "start": []}'])
def test_a_damaged_state_file_does_not_keep_the_gpu_taken(cfg: Config, state: str) -> None:
    """Expected: the Epilog of a job whose state file and its copy on disk are both
    damaged writes no record (what the job was is lost) but closes its stay on its GPU,
    moves its files to ``damaged/`` and, once its partner has ended too, the GPU's MPS
    daemon is stopped. It used to read a damaged file as "no job here": the stay stayed
    open, so the daemon of the job's user ran on and the next user's jobs got no MPS on
    that GPU."""
    from slurm_colo.node import journal

    job_start(cfg, mps_job(1), launch_sampler=False)
    job_start(cfg, mps_job(2, cls="lm"), launch_sampler=False)
    lay = NodeLayout.of_config(cfg)
    (lay.job_dir(1) / "state.json").write_text(state)
    lay.running_copy(1).write_text(state)
    assert job_end(cfg, 1, 0, detach_stop=False) is None
    assert not lay.job_dir(1).exists()
    kept = list(lay.damaged_dir().iterdir())
    assert [p.name.split(".")[0] for p in kept] == ["1"]
    assert (kept[0] / "state.json").read_text() == state
    assert [s.job for s in journal.active(journal.read(lay.journal(0)))] == [2]
    assert leftover_mps(cfg) != []  # job 2 still on the GPU's daemon
    assert job_end(cfg, 2, 0, detach_stop=False) is not None
    assert set(spooled(cfg)) == {2} and leftover_mps(cfg) == []
    assert recover(cfg) == []  # nothing left for later hooks to retry


def test_a_damaged_state_file_is_written_again_from_its_copy_on_disk(
    cfg: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """Expected: the state file damaged, its copy on disk whole: the Epilog writes the
    state again from the copy and the job gets its full record (co-runner included).
    Before, the job was set aside without a record."""
    job_start(cfg, mps_job(1), launch_sampler=False)
    job_start(cfg, mps_job(2, cls="lm"), launch_sampler=False)
    lay = NodeLayout.of_config(cfg)
    (lay.job_dir(1) / "state.json").write_text("not json")
    with caplog.at_level("WARNING"):
        rec = job_end(cfg, 1, 0, detach_stop=False)
    assert rec is not None and [c.job_id for c in rec.co_runners] == [2]
    assert rec.mechanism == "mps" and rec.thread_pct == 50
    assert f"written again from {lay.running_copy(1)}" in caplog.text
    assert not lay.damaged_dir().exists()
    assert job_end(cfg, 2, 0, detach_stop=False) is not None and leftover_mps(cfg) == []


@pytest.mark.parametrize("what", ["lock", "journal", "mps.json"])
@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_gpu_file_replaced_by_hand_costs_mps_there_not_the_record(
    cfg: Config, what: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Expected: with a GPU's lock or journal replaced by a directory or a FIFO (by hand:
    both are root's), the Prolog runs the job there without MPS and says why, the Epilog
    still spools its record, later hooks have nothing to retry, and ``node cleanup``
    names the file and fails. Before, each hook on that GPU ended in a traceback, and the
    record stayed behind for every later hook to retry."""
    from typer.testing import CliRunner

    from slurm_colo.cli import app

    lay = NodeLayout.of_config(cfg)
    lay.gpu_dir(0).mkdir(parents=True)
    path = {"lock": lay.gpu_lock(0), "journal": lay.journal(0)}.get(what, lay.mps_state(0))
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    res = job_start(cfg, mps_job(1), launch_sampler=False)
    assert res.mps[0].state == "broken" and "mps" not in res.task
    assert f"{path} is not a regular file" in res.mps[0].message
    assert res.task["messages"] == [res.mps[0].message]
    assert leftover_mps(cfg) == []  # no daemon started for it
    other = job_start(cfg, mps_job(2, gpu=1), launch_sampler=False)  # the next GPU: as ever
    assert other.mps[1].state == "ok"
    with caplog.at_level("WARNING"):
        assert job_end(cfg, 1, 0, detach_stop=False) is not None
    assert f"{path} is not a regular file; job 1's stay not closed" in caplog.text
    assert set(spooled(cfg)) == {1} and recover(cfg) == []
    assert job_end(cfg, 2, 0, detach_stop=False) is not None
    os.environ["SLURM_COLO_CONFIG"] = cfg.source
    try:
        status = CliRunner().invoke(app, ["node", "status"])
        out = CliRunner().invoke(app, ["node", "cleanup"])
    finally:
        del os.environ["SLURM_COLO_CONFIG"]
    assert f"   {path} is not a regular file: hooks run its jobs without MPS" in status.output
    assert out.exit_code == 1
    assert f"GPU 0: {path} is not a regular file; move it away" in out.output
    assert "GPU 1: clean" in out.output


def test_mps_is_not_started_for_a_gpu_nvml_does_not_list(cfg: Config) -> None:
    """Expected: a job given a GPU index NVML does not list (a gres.conf naming a GPU the
    node does not have) runs without MPS and is told so, and no daemon is started for
    it. Before, a daemon was started for each such index."""
    res = job_start(cfg, mps_job(1, gpu=7), launch_sampler=False)
    assert res.mps[7].state == "refused" and "mps" not in res.task
    assert res.mps[7].message == (
        "GPU 7: NVML lists 2 GPU(s) on this node, no GPU 7; no MPS daemon started"
    )
    assert leftover_mps(cfg) == [] and not gpu_mps(cfg, 7).state()
    assert job_end(cfg, 1, 0, detach_stop=False) is not None


def test_damaged_job_state_is_listed_and_deleted_after_30_days(
    cfg: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expected: ``node status`` lists the jobs set aside in ``damaged/``, and the Epilog's
    helper deletes those set aside over 30 days ago, leaving newer ones and anything put
    there by hand. Before, nothing listed or emptied the directory."""
    import json

    from typer.testing import CliRunner

    from slurm_colo.cli import app
    from slurm_colo.node import handoff, jobstate

    lay = NodeLayout.of_config(cfg)
    for job in (1, 2):
        job_start(cfg, mps_job(job, mech="shard"), launch_sampler=False)
        (lay.job_dir(job) / "state.json").write_text("{")
        lay.running_copy(job).unlink()  # no copy to write it again from
        assert job_end(cfg, job, 0) is None
    old = [d for d in jobstate.damaged_jobs(lay) if d.job == 1][0]
    month_ago = time.time_ns() - 31 * 86400 * 10**9
    old.path.rename(lay.damaged_dir() / f"1.{month_ago}")
    (lay.damaged_dir() / "notes.txt").write_text("mine")
    monkeypatch.setenv("SLURM_COLO_CONFIG", cfg.source)
    out = CliRunner().invoke(app, ["node", "status"])
    assert out.exit_code == 0, out.output
    assert f"damaged job state (no record): jobs [1, 2] in {lay.damaged_dir()}" in out.output
    listed = json.loads(CliRunner().invoke(app, ["node", "status", "--json"]).output)
    assert [d["job"] for d in listed["damaged_jobs"]] == [1, 2]
    assert handoff.main(["--stop", "0"]) == 0
    assert sorted(p.name.split(".")[0] for p in lay.damaged_dir().iterdir()) == ["2", "notes"]


def test_mps_directories_that_cannot_be_made_cost_mps_not_the_job(cfg: Config) -> None:
    """Expected: a file where the GPU's MPS directory belongs (or a full disk) gives the
    job a message and no daemon, and the GPU is left in its default compute mode. Before,
    the Prolog ended in a traceback and the job ran without MPS and without a word."""
    from slurm_colo.node.gpu.nvml import COMPUTE_DEFAULT, open_nvml

    lay = NodeLayout.of_config(cfg)
    lay.mps_root("GPU-test-0").parent.mkdir(parents=True)
    lay.mps_root("GPU-test-0").write_text("")
    res = job_start(cfg, mps_job(1), launch_sampler=False)
    assert res.mps[0].state == "broken" and "mps" not in res.task
    assert res.mps[0].message.startswith(
        f"GPU 0: cannot make the MPS directories in {lay.mps_root('GPU-test-0')} ("
    )
    assert leftover_mps(cfg) == [] and not gpu_mps(cfg, 0).state()
    gate = open_nvml("scenario", cfg.node.nvml_scenario, cfg.node.run_dir)
    assert gate.gpu(0).compute_mode() == COMPUTE_DEFAULT
    assert job_end(cfg, 1, 0, detach_stop=False) is not None


def test_a_full_disk_at_the_daemon_state_costs_mps_not_the_job(
    cfg: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expected: the GPU's MPS state cannot be written (no space left): no daemon is
    started (one without its state file could not be stopped), the compute mode is set
    back, the job is told. Before, the Prolog ended in a traceback with the GPU left in
    EXCLUSIVE_PROCESS mode."""
    from slurm_colo.node.gpu.mps_daemon import GpuMps
    from slurm_colo.node.gpu.nvml import COMPUTE_DEFAULT, open_nvml

    def full(self: GpuMps, st: dict) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(GpuMps, "_save", full)
    res = job_start(cfg, mps_job(1), launch_sampler=False)
    assert res.mps[0].state == "broken" and res.mps[0].gpu_usable
    assert "mps.json ([Errno 28] No space left on device); no MPS daemon" in res.mps[0].message
    assert leftover_mps(cfg) == []
    gate = open_nvml("scenario", cfg.node.nvml_scenario, cfg.node.run_dir)
    assert gate.gpu(0).compute_mode() == COMPUTE_DEFAULT


def test_a_job_whose_state_cannot_be_written_runs_untouched(
    cfg: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """Expected: the Prolog cannot write the job's state (a full disk; here a file where
    the jobs directory belongs): it says so and leaves the job alone, no daemon started,
    nothing for the Epilog to do. Before, the Prolog ended in a traceback."""
    lay = NodeLayout.of_config(cfg)
    lay.run_dir.mkdir(parents=True)
    lay.jobs_dir().write_text("")
    with caplog.at_level("ERROR"):
        res = job_start(cfg, mps_job(1), launch_sampler=False)
    assert not res.profiled and not res.mps and leftover_mps(cfg) == []
    assert f"job 1: cannot write its state in {lay.job_dir(1)} (" in caplog.text
    assert job_end(cfg, 1, 0, detach_stop=False) is None


def test_an_end_that_cannot_be_written_is_recorded_by_a_later_hook(
    cfg: Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expected: the Epilog cannot write the job's end (a full disk): it says so and keeps
    the job's state, and once the end can be written a later hook's recovery spools the
    record when it finds the job gone (here: the node rebooted; exit code -1, since the
    Epilog's was lost). Before, the Epilog ended in a traceback."""
    from slurm_colo.node import jobstate

    write = jobstate.atomic_write_json

    def full_disk(path: Path, *a: object, **k: object) -> None:
        if path.name == "ended.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        write(path, *a, **k)  # type: ignore[arg-type]

    lay = NodeLayout.of_config(cfg)
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    monkeypatch.setattr(jobstate, "atomic_write_json", full_disk)
    with caplog.at_level("ERROR"):
        assert job_end(cfg, 1, 0, detach_stop=False) is None
    assert f"job 1: cannot write its end in {lay.job_dir(1)} (" in caplog.text
    assert spooled(cfg) == {} and lay.job_dir(1).is_dir()
    monkeypatch.undo()  # the disk has room again
    assert recover(cfg) == []  # the job may still run, as far as this node can tell
    st = jobstate.read_state(lay, 1)
    assert st is not None
    st.boot_id = "another-boot"
    jobstate.write_state(lay, st)
    assert recover(cfg) == [1] and spooled(cfg)[1].exit_code == -1
