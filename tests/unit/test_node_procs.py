"""Job liveness after a crash: only sure signs of death count."""

from __future__ import annotations

import time
from pathlib import Path

from slurm_colo.node import procs


def test_other_boot_means_dead() -> None:
    assert not procs.job_alive(1, "some-other-boot-id", roots=())
    assert procs.job_alive(1, procs.boot_id(), roots=())


def test_cgroup_evidence(tmp_path: Path) -> None:
    root = tmp_path / "slurmstepd.scope"
    root.mkdir()
    old = time.time() - 3600
    roots = (str(root),)
    assert procs.job_alive(5, procs.boot_id(), old, roots)  # no job dirs: cannot tell
    (root / "job_7").mkdir()
    assert not procs.job_alive(5, procs.boot_id(), old, roots)  # tree in use, 5 absent
    assert procs.job_alive(5, procs.boot_id(), time.time(), roots)  # too young to judge
    (root / "job_5").mkdir()
    assert procs.job_alive(5, procs.boot_id(), old, roots)


def test_job_of_pid_from_environment() -> None:
    import os
    import subprocess

    p = subprocess.Popen(["sleep", "10"], env={**os.environ, "SLURM_JOB_ID": "4242"})
    try:
        # until exec has finished: before it the child shows our environ, and for a moment
        # during it the new program's name with an environment not set up yet
        deadline = time.monotonic() + 5
        while (
            Path(f"/proc/{p.pid}/comm").read_text().strip() != "sleep"
            or not Path(f"/proc/{p.pid}/environ").read_bytes()
        ):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert procs.job_of_pid(p.pid) == 4242
        assert procs.alive(p.pid)
    finally:
        p.kill()
        p.wait()
    assert not procs.alive(p.pid)
