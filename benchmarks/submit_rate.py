"""Sustained sbatch submissions per second with the suite's job_submit.lua, with a minimal
Lua hook, and with no job_submit plugin, on a lab cluster.

    bash contrib/lab/up.sh --single && .venv/bin/python benchmarks/submit_rate.py [--seconds 20]
    .venv/bin/python benchmarks/submit_rate.py --suite trixie     # a version lab (24.11)

``--clients`` (8) threads each run ``sbatch --hold`` in a loop for ``--seconds`` per block;
the rate is the submissions accepted per second of wall time. The jobs are
``--colocate --colocate-class=resnet18-bs32 --gres=gpu:1`` (``--kind colocate``, the hook's
full path: a round trip to the agent) or plain ``--gres=gpu:1`` (``--kind plain``).
Three set-ups, run in blocks in the order hook, minimal, none, none, minimal, hook
(``--rounds 2``) so that drift falls on all three alike:

* ``hook``: the lab's own job_submit.lua (as installed);
* ``minimal``: a job_submit.lua whose functions return ``slurm.SUCCESS`` and nothing else;
* ``none``: no ``JobSubmitPlugins`` line in slurm.conf (``scontrol reconfigure``).

For all three, slurm.conf gets ``MinJobAge=2`` and each block waits, after cancelling its
jobs, until slurmctld has purged them: at a few hundred submissions per second the job
records of two blocks would otherwise reach MaxJobCount (10000), and sbatch then waits and
retries.

Prints each block's rate, the three mean rates and the ratio hook/minimal (target >= 0.95).
Slurm loads job_submit.lua again when the file's modification time (in whole seconds) is
later than the one it loaded, so each rewrite waits for the next second and the restored
original keeps its new time. Afterwards the lab's slurm.conf and job_submit.lua are put back
byte for byte, ``scontrol reconfigure`` is run, the JobSubmitPlugins setting is checked, and a
``--colocate`` job is submitted to check that the hook answers again; the benchmark's jobs are
cancelled after each block. Where the agent did not answer (a ``--colocate`` job's comment
says "agent unavailable", in the hook's blocks or in the check after), the run says so and
exits 1: the hook's rate would be that of its fail-open path. Not a timed test: figures go
to docs/slurm-versions.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = "colo-rate-bench"
MINIMAL_LUA = """\
function slurm_job_submit(job_desc, part_list, submit_uid) return slurm.SUCCESS end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
return slurm.SUCCESS
"""
KINDS = {
    "colocate": ["--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1"],
    "plain": ["--gres=gpu:1"],
}
SETUPS = ("hook", "minimal", "none")


@dataclass
class Lab:
    """Where the Slurm commands run and where the lab's files are: the host lab, or a
    version lab (commands through its exec.sh, files under its chroot)."""

    suite: str | None = None
    root: Path = Path("/")
    prefix: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, suite: str | None) -> Lab:
        if suite is None:
            return cls()
        root = Path(os.environ.get("VERSIONS_ROOT", "/var/lib/slurm-colo-versions")) / suite
        return cls(suite, root, ["bash", str(REPO / "contrib/lab/versions/exec.sh"), suite])

    def file(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    def run(
        self, *argv: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        p = subprocess.run(
            [*self.prefix, *argv],
            check=False,
            capture_output=True,
            text=True,
            cwd="/tmp",
            env=env,
            timeout=timeout,
        )
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
        return p

    def config_value(self, key: str) -> str:
        try:
            text = self.run("scontrol", "show", "config").stdout
        except RuntimeError:  # a busy slurmctld: once more, after a pause
            time.sleep(10)
            text = self.run("scontrol", "show", "config", timeout=300).stdout
        for line in text.splitlines():
            name, _, value = line.partition("=")
            if name.strip() == key:
                return value.strip()
        raise RuntimeError(f"{key} not in `scontrol show config`")


def write_newer(path: Path, text: str) -> None:
    """Write ``text`` with a modification time in a later second than the file has now (so
    that slurmctld's job_submit/lua loads it again), never in the future."""
    old = int(path.stat().st_mtime) if path.exists() else 0
    while int(time.time()) <= old:
        time.sleep(0.05)
    tmp = path.with_name(path.name + ".bench-new")
    tmp.write_text(text)
    tmp.chmod(0o644)
    tmp.replace(path)


def with_min_job_age(conf: str, seconds: int) -> str:
    """``conf`` with ``MinJobAge=seconds``: the benchmark's cancelled jobs are purged within
    about 10 s (Slurm's purge runs every max(10, MinJobAge) s when MinJobAge < 60) instead of
    5 minutes, so thousands of submissions per block stay under MaxJobCount (10000)."""
    lines = [ln for ln in conf.splitlines(keepends=True) if not _is_key(ln, "minjobage")]
    return "".join(lines) + f"MinJobAge={seconds}\n"


def _is_key(line: str, key: str) -> bool:
    return line.strip().lower().startswith(key)


def without_job_submit(conf: str) -> str:
    lines = conf.splitlines(keepends=True)
    return "".join(ln for ln in lines if not _is_key(ln, "jobsubmitplugins"))


def set_up(lab: Lab, setup: str, conf: Path, hook: Path, base_conf: str, orig_hook: str) -> None:
    """The lab's slurm.conf (``base_conf``: with the benchmark's MinJobAge) and
    job_submit.lua as ``setup`` needs them; checked with ``scontrol show config``."""
    want_conf = without_job_submit(base_conf) if setup == "none" else base_conf
    want_hook = MINIMAL_LUA if setup == "minimal" else orig_hook
    if hook.read_text() != want_hook:
        write_newer(hook, want_hook)
    if conf.read_text() != want_conf:
        conf.write_text(want_conf)
        reconfigure(lab)
    plugins = lab.config_value("JobSubmitPlugins")
    expected = "(null)" if setup == "none" else "lua"
    if plugins != expected:
        raise RuntimeError(f"set-up {setup}: JobSubmitPlugins is {plugins!r}, not {expected!r}")


def submit_loop(lab: Lab, args: list[str], until: float, counts: list[int], i: int) -> None:
    argv = ["sbatch", "--hold", "--parsable", "-J", NAME, "-o", "/dev/null", *args]
    while time.monotonic() < until:
        try:
            p = lab.run(*argv, "--wrap", "true", check=False, timeout=30)
        except subprocess.TimeoutExpired:  # sbatch retries while slurmctld is full
            counts[-1] += 1
            continue
        if p.returncode == 0:
            counts[i] += 1
        else:
            counts[-1] += 1


def block(lab: Lab, args: list[str], clients: int, seconds: float) -> tuple[float, int]:
    """Submissions per second over ``seconds`` with ``clients`` parallel clients (after a
    2 s warm-up); and the number of failed submissions."""
    warm = [0] * (clients + 1)
    threads = [
        threading.Thread(target=submit_loop, args=(lab, args, time.monotonic() + 2, warm, i))
        for i in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = [0] * (clients + 1)
    t0 = time.monotonic()
    threads = [
        threading.Thread(target=submit_loop, args=(lab, args, t0 + seconds, counts, i))
        for i in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    return sum(counts[:-1]) / elapsed, counts[-1] + warm[-1]


def fell_open(lab: Lab) -> tuple[int, int]:
    """Of the benchmark's jobs in the queue, how many the hook gave its fail-open answer
    ("agent unavailable" in the comment: the agent did not answer), and how many there are."""
    comments = lab.run("squeue", "-h", "-n", NAME, "-o", "%k", timeout=300).stdout.splitlines()
    return sum("agent unavailable" in c for c in comments), len(comments)


def cancel(lab: Lab, purged: bool = False) -> None:
    """Cancel the benchmark's jobs; with ``purged``, also wait until slurmctld has dropped
    their records (MinJobAge), so that the next block starts with room below MaxJobCount."""
    lab.run("scancel", "--name", NAME, check=False)
    states = "all" if purged else "PENDING,RUNNING"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:  # a slurmctld busy ending thousands of jobs may time out a query: ask again
            left = lab.run("squeue", "-h", "-n", NAME, "-t", states, "-o", "%i").stdout
        except (RuntimeError, subprocess.TimeoutExpired):
            left = "busy"
        if not left.strip():
            return
        time.sleep(2.0)
    raise RuntimeError(f"jobs named {NAME} still in slurmctld after 300 s")


def reconfigure(lab: Lab) -> None:
    """``scontrol reconfigure``, waiting out a busy slurmctld (on 22.05 a reconfigure with
    thousands of job records in memory took about a minute)."""
    for attempt in range(3):
        try:
            lab.run("scontrol", "reconfigure", timeout=300)
            return
        except (RuntimeError, subprocess.TimeoutExpired):
            if attempt == 2:
                raise
            time.sleep(10)


def check_hook_answers(lab: Lab) -> str:
    """Submit one held --colocate job and return the comment the hook gave it."""
    p = lab.run(
        "sbatch", "--hold", "--parsable", "-J", NAME, "-o", "/dev/null", *KINDS["colocate"],
        "--wrap", "true",
    )  # fmt: skip
    job = p.stdout.strip().split(";")[0]
    comment = lab.run("squeue", "-h", "-j", job, "-o", "%k").stdout.strip()
    cancel(lab)
    return comment


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", help="a version lab (trixie, sid) instead of the host lab")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0, help="per block")
    ap.add_argument("--rounds", type=int, default=2, help="1: hook, minimal, none; 2: and back")
    ap.add_argument("--kind", choices=sorted(KINDS), default="colocate")
    a = ap.parse_args()

    lab = Lab.of(a.suite)
    conf, hook = lab.file("/etc/slurm/slurm.conf"), lab.file("/etc/slurm/job_submit.lua")
    if lab.config_value("JobSubmitPlugins") != "lua" or not hook.exists():
        print("the lab has no job_submit.lua installed (JobSubmitPlugins=lua)", file=sys.stderr)
        return 2
    version = lab.run("sinfo", "--version").stdout.strip()
    orig_conf, orig_hook = conf.read_text(), hook.read_text()
    base_conf = with_min_job_age(orig_conf, 2)
    order = [*SETUPS, *reversed(SETUPS)] * (a.rounds // 2) + list(SETUPS) * (a.rounds % 2)
    rates: dict[str, list[float]] = {s: [] for s in SETUPS}
    failed = 0
    open_jobs = 0  # --colocate jobs of the hook's blocks that the agent did not answer
    print(
        f"{version} ({'version lab ' + a.suite if a.suite else 'host lab'}), "
        f"{a.clients} clients, {a.seconds:g} s blocks, jobs: sbatch --hold "
        f"{' '.join(KINDS[a.kind])}"
    )
    try:
        cancel(lab)
        for setup in order:
            set_up(lab, setup, conf, hook, base_conf, orig_hook)
            rate, bad = block(lab, KINDS[a.kind], a.clients, a.seconds)
            if setup == "hook" and a.kind == "colocate":
                n_open, n_jobs = fell_open(lab)
                open_jobs += n_open
                if n_open:
                    print(f"  ({n_open} of {n_jobs} jobs got the fail-open answer)")
            cancel(lab, purged=True)
            rates[setup].append(rate)
            failed += bad
            print(f"  {setup:8s} {rate:7.1f} submissions/s" + (f"  ({bad} failed)" if bad else ""))
    finally:
        if hook.read_text() != orig_hook:
            write_newer(hook, orig_hook)
        modified = conf.read_text() != orig_conf
        cancel(lab, purged=modified)  # while MinJobAge=2 still purges them
        if modified:
            conf.write_text(orig_conf)
            reconfigure(lab)
        restored = lab.config_value("JobSubmitPlugins")
        comment = check_hook_answers(lab)
        print(f"restored: JobSubmitPlugins={restored}, a --colocate job's comment: {comment!r}")
    mean = {s: statistics.fmean(r) for s, r in rates.items()}
    for s in SETUPS:
        blocks = ", ".join(f"{r:.1f}" for r in rates[s])
        print(f"{s:8s} mean {mean[s]:7.1f} submissions/s  (blocks: {blocks})")
    ratio = mean["hook"] / mean["minimal"]
    print(
        f"hook/minimal {ratio:.3f} (target >= 0.95); minimal/none {mean['minimal'] / mean['none']:.3f}"
    )
    if failed:
        print(f"{failed} submissions failed", file=sys.stderr)
    if open_jobs or "agent unavailable" in comment:
        print(
            f"the agent did not answer {open_jobs} of the hook's jobs"
            f"{' and the check after' if 'agent unavailable' in comment else ''}: the hook's "
            "rate is that of its fail-open path, not the suite's (slurm-colo status)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
