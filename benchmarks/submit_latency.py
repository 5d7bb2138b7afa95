"""sbatch submit latency with the suite vs without it, in the same run, on the lab cluster.

    bash contrib/lab/up.sh && .venv/bin/python benchmarks/submit_latency.py [--n 200]

"without": the SPANK plugin unloaded (plugstack drop-in moved away) and job_submit.lua
replaced by one that returns at once (JobSubmitPlugins=lua stays configured, as the lab
measured a trivial Lua script to cost nothing measurable); plain `sbatch --gres=gpu:1`.
"with": the SPANK plugin and our hook, `sbatch --colocate --gres=gpu:1`, one agent round
trip per submission. Blocks alternate between the two to spread machine noise evenly; the
first submissions after each switch (script reload) are dropped. Jobs are submitted held
and cancelled at the end. Targets: median ratio <= 1.05, p99 difference <= +5 ms.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import time
from pathlib import Path

LUA = Path("/etc/slurm/job_submit.lua")
PLUGSTACK = Path("/etc/slurm/plugstack.conf.d/slurm-colo.conf")
TRIVIAL = "function slurm_job_submit(j, p, u) return slurm.SUCCESS end\n" \
          "function slurm_job_modify(j, r, p, u) return slurm.SUCCESS end\nreturn slurm.SUCCESS\n"
WARMUP = 3


def _submit(args: list[str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(["sbatch", "--hold", "--parsable", "-o", "/dev/null", *args, "--wrap", "true"],
                       capture_output=True, text=True, cwd="/tmp")
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"sbatch failed: {p.stderr.strip()}")
    return dt * 1000.0


def _p(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="submissions per configuration")
    ap.add_argument("--blocks", type=int, default=5)
    a = ap.parse_args()
    ours = LUA.read_text()
    stash = PLUGSTACK.with_suffix(".bench-off")
    per = max(1, a.n // a.blocks)
    res: dict[str, list[float]] = {"without": [], "with": []}
    try:
        for _ in range(a.blocks):
            for mode in ("without", "with"):
                if mode == "without":
                    LUA.write_text(TRIVIAL)
                    if PLUGSTACK.exists():
                        shutil.move(PLUGSTACK, stash)
                    args = ["--gres=gpu:1"]
                else:
                    LUA.write_text(ours)
                    if stash.exists():
                        shutil.move(stash, PLUGSTACK)
                    args = ["--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1"]
                time.sleep(1.1)  # new mtime -> slurmctld reloads the script on the next submission
                xs = [_submit(args) for _ in range(per + WARMUP)]
                res[mode].extend(xs[WARMUP:])
    finally:
        LUA.write_text(ours)
        if stash.exists():
            shutil.move(stash, PLUGSTACK)
        subprocess.run(["scancel", "--state=PENDING", "--full"], capture_output=True)
    w, o = res["with"], res["without"]
    print(f"sbatch submit latency, {len(o)} + {len(w)} submissions in {a.blocks} alternating blocks")
    print(f"{'':10} {'min':>7} {'median':>7} {'p90':>7} {'p99':>7}  (ms)")
    for name, xs in (("without", o), ("with", w)):
        print(f"{name:10} {min(xs):7.2f} {statistics.median(xs):7.2f} {_p(xs, .9):7.2f} {_p(xs, .99):7.2f}")
    ratio = statistics.median(w) / statistics.median(o)
    dp99 = _p(w, .99) - _p(o, .99)
    print(f"median ratio {ratio:.3f} (target <= 1.05)   p99 difference {dp99:+.2f} ms (target <= +5 ms)")


if __name__ == "__main__":
    main()
