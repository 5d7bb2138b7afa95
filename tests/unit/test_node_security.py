"""Root (the Prolog/Epilog) works in directories a job user can write: it must never
follow a planted symlink nor read an unbounded file there."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from slurm_colo.contracts.enums import Mechanism
from slurm_colo.contracts.placement import Placement
from slurm_colo.fsutil import atomic_write_json, chown_if_root, read_json, read_small, temp_name
from slurm_colo.node import jobstate
from slurm_colo.node.layout import NodeLayout

sys.path.insert(0, str(Path(__file__).parent))
from test_node_lifecycle import mps_job, node_config


def test_progress_symlink_to_a_device_is_ignored(tmp_path: Path) -> None:
    lay = NodeLayout(tmp_path / "run", tmp_path / "spool")
    lay.user_dir(1).mkdir(parents=True)
    (lay.user_dir(1) / "progress.json").symlink_to("/dev/zero")
    t = time.monotonic()
    assert jobstate.read_progress(lay, 1) is None
    assert time.monotonic() - t < 1.0


def test_secret_behind_symlink_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"password": "x"}')
    link = tmp_path / "progress.json"
    link.symlink_to(secret)
    assert read_json(link) is None and read_json(secret) == {"password": "x"}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown is root's (the suite runs as root in CI)")
def test_a_link_swapped_in_before_the_chown_is_given_not_its_target(tmp_path: Path) -> None:
    """Expected: the hooks give a job's user its files with a chown as root; where the user
    can write the directory already (a job's files written again), they could swap the
    file for a link to one of root's first. Before, the chown followed the link and gave
    the user root's file."""
    roots = tmp_path / "roots-file"
    roots.write_text("root's\n")
    link = tmp_path / "task.json"
    link.symlink_to(roots)
    chown_if_root(link, 4321)
    assert roots.stat().st_uid == 0 and link.lstat().st_uid == 4321


def test_oversized_and_fifo_files_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b"1," * 600_000 + b"1]")
    assert read_json(big) is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_small(fifo) is None  # no blocking open, not a regular file


def test_a_directory_where_a_file_belongs_reads_as_missing(tmp_path: Path) -> None:
    """Expected: None, as for a FIFO. Before, ``os.fdopen`` raised IsADirectoryError
    (and the descriptor leaked)."""
    d = tmp_path / "progress.json"
    d.mkdir()
    assert read_small(d) is None and read_small(d, limit=None) is None
    assert read_json(d) is None


def test_a_job_users_progress_file_as_a_directory_costs_nothing_else(tmp_path: Path) -> None:
    """Expected: the job's user makes its progress file a directory; its record is the
    full one without progress figures. Before, building the record raised, and the job
    got the thin record (no profile, no co-runners)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_node_lifecycle import mps_job, node_config, spooled

    from slurm_colo.node.layout import NodeLayout
    from slurm_colo.node.lifecycle import job_end, job_start

    cfg = node_config(tmp_path)
    job_start(cfg, mps_job(1, mech="shard"), launch_sampler=False)
    (NodeLayout.of_config(cfg).user_dir(1) / "progress.json").mkdir(parents=True)
    assert job_end(cfg, 1, 0) is not None
    rec = spooled(cfg)[1]
    assert "record_error" not in rec.profile and rec.progress is None


def test_planted_temp_symlink_is_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "task.json"
    (tmp_path / temp_name("task.json")).symlink_to(victim)
    atomic_write_json(target, {"ok": True})
    assert victim.read_text() == "precious" and read_json(target) == {"ok": True}


def test_two_threads_writing_one_file_never_leave_a_part_of_one(tmp_path: Path) -> None:
    """Before, both wrote under ``.tmp-NAME-PID``: each removed the other's temporary as a
    leftover, and one renamed the other's half-written file into place."""
    import threading

    from slurm_colo.fsutil import atomic_write_bytes

    target = tmp_path / "learned.json"
    bodies = [bytes([65 + k]) * 200_000 for k in range(2)]
    errors: list[BaseException] = []
    seen: set[bytes] = set()
    done = threading.Event()

    def writer(body: bytes) -> None:
        try:
            for _ in range(150):
                atomic_write_bytes(target, body, fsync=False)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def reader() -> None:
        while not done.is_set():
            try:
                data = target.read_bytes()
            except FileNotFoundError:
                continue
            seen.add(data if data in bodies else b"part:" + data[:1] + bytes([len(set(data))]))

    threads = [threading.Thread(target=writer, args=(b,)) for b in bodies]
    watch = threading.Thread(target=reader)
    watch.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watch.join()
    assert errors == []
    assert seen <= set(bodies) and target.read_bytes() in bodies
    assert [p.name for p in tmp_path.iterdir()] == ["learned.json"]  # no temporary left


def test_mps_directories_permissions(tmp_path: Path) -> None:
    from slurm_colo.node import procs
    from slurm_colo.node.gpu.mps_daemon import gpu_mps
    from slurm_colo.node.lifecycle import job_end, job_start

    cfg = node_config(tmp_path)
    try:
        job_start(cfg, mps_job(1), launch_sampler=False)
        st = gpu_mps(cfg, 0).state()
        pipe, log = Path(st["pipe_dir"]), Path(st["log_dir"])
        assert pipe.stat().st_mode & 0o777 == 0o700
        assert log.stat().st_mode & 0o777 == 0o755 and log.stat().st_uid == os.geteuid()
        assert (log / "server.log").stat().st_mode & 0o777 == 0o600
        if os.geteuid() == 0:  # as root (the real Prolog) the pipe dir goes to the job user
            assert pipe.stat().st_uid == 1000 and (log / "server.log").stat().st_uid == 1000
            assert (pipe / "nvidia-cuda-mps-control.pid").stat().st_uid == 0
        user_dir = Path(cfg.node.run_dir) / "jobs" / "1" / "user"
        assert user_dir.stat().st_mode & 0o777 == 0o700
        assert (user_dir / "task.json").stat().st_mode & 0o777 == 0o600
    finally:
        job_end(cfg, 1, 0, detach_stop=False)
        assert procs.mps_processes(st["pipe_dir"]) == []


def test_taskprolog_as_the_job_user_reads_its_file_and_others_cannot(tmp_path: Path) -> None:
    """As root (the real Prolog): the TaskProlog, run as the job's uid, prints the exports;
    another uid cannot read the job's task file. Without root the files simply stay the
    caller's (nothing to hand over)."""
    import tempfile

    from slurm_colo.node.lifecycle import JobInfo, job_end, job_start

    base = Path(tempfile.mkdtemp(prefix="colo-perm-", dir="/tmp"))
    base.chmod(0o755)  # reachable by other users, like /run/slurm-colo
    try:
        cfg = node_config(base)
        (base / "config.toml").chmod(0o644)
        (base / "scenario.json").chmod(0o644)
        uid = 65534 if os.geteuid() == 0 else os.geteuid()
        info = JobInfo(3, "nobody", uid, "n1", [0], Placement("t", "x", mechanism=Mechanism.SHARD))
        job_start(cfg, info, launch_sampler=False)
        task = base / "run" / "jobs" / "3" / "user" / "task.json"
        assert task.stat().st_uid == uid

        def as_user(u: int) -> str:
            """Run the TaskProlog's main in a forked child that drops to uid ``u`` (the
            interpreter of this venv lives under /root, out of other users' reach)."""
            from slurm_colo.hooks import taskprolog

            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # child
                try:
                    sys.stdout = os.fdopen(w, "w")  # pytest's capture is not fd 1
                    if os.geteuid() == 0:
                        os.setgroups([])
                        os.setgid(u)
                        os.setuid(u)
                    os.environ.update(SLURM_JOB_ID="3", SLURM_COLO_CONFIG=cfg.source)
                    rc = taskprolog.main()
                    sys.stdout.flush()
                finally:
                    os._exit(locals().get("rc", 99))
            os.close(w)
            with os.fdopen(r) as f:
                out = f.read()
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            return out

        out = as_user(uid)
        assert out.strip() == f"export SLURM_COLO_PROGRESS_FILE={task.parent}/progress.json"
        if os.geteuid() == 0:
            other = as_user(65533)
            assert other.startswith("print slurm-colo: warning: cannot read")
            assert "SLURM_COLO_PROGRESS_FILE" not in other
        job_end(cfg, 3, 0)
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
