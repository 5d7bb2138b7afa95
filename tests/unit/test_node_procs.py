"""Job liveness after a crash: only sure signs of death count."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

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


# -- Slurm's cgroup v2 tree, job directories named by job id or (26.05) by SLUID ------------
# The layout of cgroup_v2.html: slurmstepd.scope/<job dir>/step_<id>/{slurm,user/task_<n>},
# each slurmstepd titled "slurmstepd: [JOB.STEP]", and the stepds' waiting area "system".
SLUID_A = "sEKNKTV3WPV500"  # the example of cgroup.conf(5), CgroupJobIdPaths
SLUID_B = "s5K1KKYAYG5D00"  # the example of cgroup_v2.html


class FakeNode:
    """A fake /proc and cgroup v2 file system with Slurm's job hierarchy."""

    def __init__(self, tmp: Path) -> None:
        self.proc, self.cgfs = tmp / "proc", tmp / "cgroup"
        self.scope = self.cgfs / "system.slice" / "slurmstepd.scope"
        self.next_pid = 1000
        self.add_procs(self.scope / "system", self.process("slurmstepd", "slurmstepd infinity"))

    def process(
        self,
        comm: str,
        title: str,
        env: str = "",
        ppid: int = 1,
        ticks: int = 0,
        state: str = "S",
        pid: int | None = None,
    ) -> int:
        """A process: its comm, title, environment and stat (state, parent, start in clock
        ticks after boot)."""
        if pid is None:
            self.next_pid += 1
            pid = self.next_pid
        d = self.proc / str(pid)
        d.mkdir(parents=True)
        (d / "comm").write_text(comm + "\n")
        (d / "cmdline").write_bytes(title.encode() + b"\0")
        (d / "environ").write_bytes(env.encode())
        rest = [state, str(ppid)] + ["0"] * 17 + [str(ticks), "0"]
        (d / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")
        return pid

    def add_procs(self, cgroup: Path, *pids: int) -> None:
        cgroup.mkdir(parents=True, exist_ok=True)
        with (cgroup / "cgroup.procs").open("a") as f:
            f.writelines(f"{p}\n" for p in pids)
        for p in pids:
            rel = cgroup.relative_to(self.cgfs)
            (self.proc / str(p) / "cgroup").write_text(f"0::/{rel}\n")

    def job(self, job_dir: str, job_id: int, step: str = "batch") -> int:
        """A running job step; returns its user process."""
        stepd = self.process("slurmstepd", f"slurmstepd: [{job_id}.{step}]")
        user = self.process("python3", "python3 train.py", env=f"SLURM_JOB_ID={job_id}\0")
        self.add_procs(self.scope / job_dir / f"step_{step}" / "slurm", stepd)
        self.add_procs(self.scope / job_dir / f"step_{step}" / "user" / "task_0", user)
        return user

    def job_of(self, pid: int) -> int | None:
        return procs.job_of_pid(pid, proc=str(self.proc), cgroup_fs=str(self.cgfs))

    def alive(self, job_id: int) -> bool:
        old = time.time() - 3600
        return procs.job_alive(
            job_id, procs.boot_id(), old, roots=(str(self.scope),), proc=str(self.proc)
        )


@pytest.fixture()
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    monkeypatch.setattr(procs, "_SLUID_JOBS", {})
    return FakeNode(tmp_path)


def test_sluid_form() -> None:
    assert procs.is_sluid(SLUID_A) and procs.is_sluid(SLUID_B)
    assert procs.is_sluid("s5K5M87THE9G00")  # SLURM_JOB_SLUID of a job on the 26.05.5 lab
    for name in ("job_123", "system", "sEKNKTV3WPV50", "SEKNKTV3WPV500", "sEKNKTV3WPV5OO"):
        assert not procs.is_sluid(name), name  # too short, upper-case s, O is no digit


@pytest.mark.parametrize("layout", ["job_id", "sluid"])
def test_a_jobs_processes_are_found_in_either_layout(node: FakeNode, layout: str) -> None:
    dirs = {"job_id": ("job_41", "job_42"), "sluid": (SLUID_A, SLUID_B)}[layout]
    a = node.job(dirs[0], 41)
    b = node.job(dirs[1], 42, step="0")
    b2 = node.process("sleep", "sleep 100")  # a second task of the same step
    node.add_procs(node.scope / dirs[1] / "step_0" / "user" / "task_1", b2)
    assert (node.job_of(a), node.job_of(b), node.job_of(b2)) == (41, 42, 42)
    assert node.alive(41) and node.alive(42)
    assert not node.alive(43)  # the tree is in use and holds no directory of job 43


def test_sluid_directory_resolves_without_the_environment(node: FakeNode) -> None:
    a = node.job(SLUID_A, 77)
    (node.proc / str(a) / "environ").write_bytes(b"")  # e.g. unreadable for another user
    assert node.job_of(a) == 77
    # the answer is kept: the directory's slurmstepd may be gone by the next look
    for f in (node.scope / SLUID_A).glob("step_*/slurm/cgroup.procs"):
        f.write_text("")
    assert node.job_of(a) == 77


def test_a_sluid_directory_whose_job_cannot_be_told_keeps_jobs_alive(node: FakeNode) -> None:
    node.job("job_5", 5)
    assert not node.alive(9)
    # a job starting or ending: its SLUID directory has no slurmstepd (yet, any more)
    (node.scope / SLUID_B / "step_batch" / "slurm").mkdir(parents=True)
    assert node.alive(9)
    # a process of that directory falls back to its environment
    p = node.process("sleep", "sleep 1", env="SLURM_JOB_ID=9\0")
    node.add_procs(node.scope / SLUID_B / "step_batch" / "user" / "task_0", p)
    assert node.job_of(p) == 9


def test_only_a_slurmstepd_names_the_job(node: FakeNode) -> None:
    # a user process that made itself look like a step daemon is not believed
    fake = node.process("python3", "slurmstepd: [666.batch]")
    user = node.process("python3", "python3 x.py")
    node.add_procs(node.scope / SLUID_A / "step_batch" / "slurm", fake)
    node.add_procs(node.scope / SLUID_A / "step_batch" / "user" / "task_0", user)
    assert node.job_of(user) is None
    assert procs.stepd_job_id(fake, str(node.proc)) is None
    stepd = node.process("slurmstepd", "slurmstepd: [3385.0 stepmgr]")
    assert procs.stepd_job_id(stepd, str(node.proc)) == 3385


def test_cgroup_v1_paths_still_name_the_job(node: FakeNode) -> None:
    p = node.process("python3", "python3 x.py")
    (node.proc / str(p) / "cgroup").write_text(
        "12:memory:/slurm/uid_1001/job_314/step_batch/task_0\n0::/user.slice\n"
    )
    assert node.job_of(p) == 314


# -- a job that died with its node's slurmd (no reboot, no cgroup to tell) -------------------
HZ = os.sysconf("SC_CLK_TCK")


class RestartedNode(FakeNode):
    """A node whose slurmd started at ``slurmd_at`` (epoch seconds), with this test process
    in the fake /proc as a hook that slurmd runs."""

    def __init__(self, tmp: Path, slurmd_at: float) -> None:
        super().__init__(tmp)
        self.btime = int(time.time()) - 7200
        (self.proc / "stat").write_text(f"cpu 1 2 3\nbtime {self.btime}\nprocesses 9\n")
        slurmd = self.process("slurmd", "/usr/sbin/slurmd", ticks=self.ticks(slurmd_at))
        self.process("python3", "python3 -m slurm_colo.hooks prolog", ppid=slurmd, pid=os.getpid())

    def ticks(self, at: float) -> int:
        return round((at - self.btime) * HZ)

    def dead(self, job_id: int, since: float, sampler: int | None = None) -> bool:
        return procs.died_with_slurmd(job_id, since, sampler, str(self.proc))

    def alive_young(self, job_id: int, since: float, sampler: int | None = None) -> bool:
        """job_alive for a job 30 s old on a node without cgroups (both would say alive)."""
        return procs.job_alive(
            job_id, procs.boot_id(), since, (), str(self.proc), sampler_pid=sampler
        )


def test_slurmd_start_is_that_of_the_hooks_slurmd_ancestor(tmp_path: Path) -> None:
    at = time.time() - 20
    node = RestartedNode(tmp_path, at)
    started = procs.slurmd_started(proc=str(node.proc))
    assert started is not None and abs(started - at) < 1.0
    # a command run by hand has no slurmd above it
    lone = node.process("bash", "bash")
    assert procs.slurmd_started(lone, str(node.proc)) is None
    assert procs.slurmd_started() is None  # this test process, on the real /proc


def test_a_job_older_than_the_restarted_slurmd_with_nothing_left_died_with_it(
    tmp_path: Path,
) -> None:
    now = time.time()
    node = RestartedNode(tmp_path, slurmd_at=now - 5)
    prolog_at = now - 30
    sampler = node.process("python3", "python3 -m slurm_colo.node.sampler 41", state="Z")
    assert node.dead(41, prolog_at, sampler)
    assert not node.alive_young(41, prolog_at, sampler)  # no cgroups, 30 s old: still dead
    # a slurmd that started before the job's Prolog proves nothing
    assert not node.dead(41, now - 3)
    assert node.alive_young(41, now - 3)


@pytest.mark.parametrize("left", ["stepd", "task", "sampler"])
def test_anything_left_of_the_job_keeps_it_alive(tmp_path: Path, left: str) -> None:
    now = time.time()
    node = RestartedNode(tmp_path, slurmd_at=now - 5)
    sampler = None
    if left == "stepd":  # a step daemon that outlived slurmd
        node.process("slurmstepd", "slurmstepd: [41.extern]")
    elif left == "task":  # or a task, or the job's own hook, by its environment
        node.process("sleep", "sleep 300", env="SLURM_JOB_ID=41\0")
    else:  # an salloc job without steps: only its sampler shows it alive
        sampler = node.process("python3", "python3 -m slurm_colo.node.sampler 41")
    assert not node.dead(41, now - 30, sampler)
    assert node.alive_young(41, now - 30, sampler)
    # another job's leftovers, or a zombie of this one, do not count
    node.process("slurmstepd", "slurmstepd: [42.batch]")
    node.process("slurmstepd", "slurmstepd: [43.batch]", state="Z")
    assert node.dead(43, now - 30)


def test_a_job_id_in_a_process_environment_must_be_ascii_digits(tmp_path: Path) -> None:
    from slurm_colo.node.procs import job_of_pid

    for env, job in ((b"SLURM_JOB_ID=\xc2\xb2\0", None), (b"SLURM_JOB_ID=42\0", 42)):
        d = tmp_path / "proc" / "7"
        d.mkdir(parents=True, exist_ok=True)
        (d / "environ").write_bytes(env)
        assert job_of_pid(7, str(tmp_path / "proc"), str(tmp_path / "cg")) == job
