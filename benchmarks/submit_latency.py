"""sbatch submit latency with the suite vs without it, in the same run, on the lab cluster.

    bash contrib/lab/up.sh --single && .venv/bin/python benchmarks/submit_latency.py [--n 300]

Three kinds of submission, interleaved one by one in a shuffled order (seeded), so that
machine noise and drift fall evenly on all of them:

* ``without``: ``sbatch --gres=gpu:1`` through a copy of the client configuration whose
  PlugStackConfig is empty (``SLURM_CONF`` pointing at it): no SPANK plugin is loaded. In
  slurmctld the installed job_submit.lua only looks for the --colocate option and returns,
  the same cost as a script that does nothing (the lab measured none).
* ``plugin``: ``sbatch --gres=gpu:1`` with the suite's client configuration: the SPANK
  plugin is loaded but the job does not ask for --colocate (what every plain job pays).
* ``with``: ``sbatch --colocate --colocate-class=... --gres=gpu:1``: the plugin carries the
  option and the hook asks the agent, which places the job (one round trip).

Jobs are submitted held (named ``colo-latency-bench``) and cancelled at the end. Targets: median ratio with/without
<= 1.05, p99 difference <= +5 ms. Before cancelling, the ``with`` jobs' comments are read:
a job the hook gave its fail-open answer ("agent unavailable") measured the path without
the agent, so the run then says how many and exits 1 instead of passing those figures off
as the suite's.

``--floor`` measures what Slurm itself charges for such a job: for the run, the installed
job_submit.lua is replaced by a minimal script that gives every --colocate job a fixed
placement (typed shard, ReqNodeList, comment, tag) without asking the agent and without
any of the hook's checks; the original script is put back afterwards.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

SLURM_CONF = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
HOOK = Path("/etc/slurm/job_submit.lua")
FLOOR_LUA = """\
function slurm_job_submit(j, p, u)
  if j.spank_job_env and (j.spank_job_env_size or 0) > 0 then
    j.tres_per_node = "gres:shard:{gres_type}:1"
    j.req_nodes = "{node}"
    j.comment = "colo: fixed placement (benchmark floor)"
    j.admin_comment = "colo-floor"
  end
  return slurm.SUCCESS
end
function slurm_job_modify(j, r, p, u) return slurm.SUCCESS end
return slurm.SUCCESS
"""
WARMUP = 3
NAME = "colo-latency-bench"  # the benchmark cancels its own jobs by this name, and no others
KINDS = ("without", "plugin", "with")


def client_conf_without_plugins(src: Path, workdir: Path) -> Path:
    """A copy of slurm.conf whose SPANK plugin stack is an empty file."""
    empty = workdir / "plugstack.conf"
    empty.write_text("")
    lines = [
        ln
        for ln in src.read_text().splitlines()
        if not re.match(r"\s*PlugStackConfig\s*=", ln, re.IGNORECASE)
    ]
    lines.append(f"PlugStackConfig={empty}")
    conf = workdir / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _submit(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Milliseconds one held ``sbatch`` took, and the job id it printed."""
    t0 = time.perf_counter()
    p = subprocess.run(
        ["sbatch", "--hold", "--parsable", "-J", NAME, "-o", "/dev/null", *args, "--wrap", "true"],
        check=False,
        capture_output=True,
        text=True,
        cwd="/tmp",
        env=env,
    )
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"sbatch failed: {p.stderr.strip()}")
    return dt * 1000.0, p.stdout.strip().split(";")[0]


def fell_open(job_ids: list[str]) -> list[str]:
    """The jobs among ``job_ids`` that the hook gave its fail-open answer (the agent did not
    answer): their comment says "agent unavailable"."""
    out: list[str] = []
    for i in range(0, len(job_ids), 200):
        chunk = ",".join(job_ids[i : i + 200])
        p = subprocess.run(
            ["squeue", "-h", "-j", chunk, "-o", "%i|%k"],
            check=True,
            capture_output=True,
            text=True,
            cwd="/tmp",
        )
        for line in p.stdout.splitlines():
            job, _, comment = line.partition("|")
            if "agent unavailable" in comment:
                out.append(job.strip())
    return out


def _p(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="submissions of each kind")
    ap.add_argument("--cls", default="resnet18-bs32", help="--colocate-class of the 'with' jobs")
    ap.add_argument("--seed", type=int, default=1, help="seed of the interleaving order")
    ap.add_argument(
        "--floor",
        metavar="NODE:GRES_TYPE",
        help="measure Slurm's own cost: a minimal hook places every --colocate job "
        "on this shared GPU (e.g. vm:v100_s0) without asking the agent",
    )
    a = ap.parse_args()
    saved = HOOK.read_text() if a.floor else None
    if a.floor:
        node, _, gres_type = a.floor.partition(":")
        if not node or not gres_type:
            raise SystemExit("--floor wants NODE:GRES_TYPE, e.g. vm:v100_s0")
        HOOK.write_text(FLOOR_LUA.format(node=node, gres_type=gres_type))
        time.sleep(1.1)  # a new mtime: slurmctld reloads the script on the next submission
    try:
        res, unplaced = _run(a)
    finally:
        if saved is not None:
            HOOK.write_text(saved)
    _report(res, a.n, floor=bool(a.floor))
    if unplaced:
        raise SystemExit(
            f"{len(unplaced)} of {a.n + WARMUP} 'with' jobs got the hook's fail-open answer "
            f"(agent unavailable; first: job {unplaced[0]}): the figures above are not the "
            "suite's. Is the agent running? (slurm-colo status)"
        )


def _run(a: argparse.Namespace) -> tuple[dict[str, list[float]], list[str]]:
    """Each kind's latencies (ms), and the ``with`` jobs that fell open."""
    plain = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="colo-bench-") as tmp:
        bare = dict(os.environ, SLURM_CONF=str(client_conf_without_plugins(SLURM_CONF, Path(tmp))))
        how = {
            "without": (["--gres=gpu:1"], bare),
            "plugin": (["--gres=gpu:1"], plain),
            "with": (["--colocate", f"--colocate-class={a.cls}", "--gres=gpu:1"], plain),
        }
        res: dict[str, list[float]] = {k: [] for k in KINDS}
        with_jobs: list[str] = []
        rnd = random.Random(a.seed)
        try:
            for i in range(a.n + WARMUP):
                order = list(KINDS)
                rnd.shuffle(order)
                for k in order:
                    dt, job = _submit(*how[k])
                    if k == "with":
                        with_jobs.append(job)
                    if i >= WARMUP:
                        res[k].append(dt)
            unplaced = fell_open(with_jobs)
        finally:
            subprocess.run(["scancel", "--name", NAME, "--full"], check=False, capture_output=True)
    return res, unplaced


def _report(res: dict[str, list[float]], n: int, floor: bool) -> None:
    base = statistics.median(res["without"])
    what = " (floor: minimal hook, no agent)" if floor else ""
    print(f"sbatch submit latency, {n} submissions of each kind, interleaved one by one{what}")
    print(f"{'':10} {'min':>7} {'median':>7} {'p90':>7} {'p99':>7}  (ms)   median ratio")
    for k in KINDS:
        xs = res[k]
        print(
            f"{k:10} {min(xs):7.2f} {statistics.median(xs):7.2f} {_p(xs, 0.9):7.2f} {_p(xs, 0.99):7.2f}"
            f"   {statistics.median(xs) / base:.3f}"
        )
    w, o = res["with"], res["without"]
    ratio = statistics.median(w) / base
    dp99 = _p(w, 0.99) - _p(o, 0.99)
    print(
        f"median ratio with/without {ratio:.3f} (target <= 1.05)   "
        f"p99 difference {dp99:+.2f} ms (target <= +5 ms)"
    )


if __name__ == "__main__":
    main()
