"""How long the Prolog and Epilog hooks take, as slurmd runs them (a fresh interpreter).

Usage: python benchmarks/hooks_bench.py [--pairs N]

Runs the hooks on a throw-away run/spool directory with the lab backends (MPS emulator,
NVML scenario) and an unreachable agent (placement from the comment tag). Each round: job A
lands on GPU 0 (starts the MPS daemon: reported apart, excluded from the budget), job B
joins it, A ends, B ends (last job: the daemon stop runs detached). Also a job without
--colocate (the untouched path). Target: Prolog and Epilog each < 150 ms. Wall time depends
on the machine's load (other work competes for the CPUs); CPU time (user+sys of the hook
process) much less, so both are printed, with a bare interpreter start for reference.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


CPU: dict[str, list[float]] = {}


def run_hook(name: str, env: dict[str, str], key: str = "") -> float:
    """Wall ms of one hook run; its CPU ms (user+sys, from wait4) go to CPU[key]."""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "slurm_colo.hooks", name], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = (time.perf_counter() - t) * 1000
    if p.returncode != 0:
        raise SystemExit(f"{name} exited {p.returncode}")
    CPU.setdefault(key or name, []).append((ru.ru_utime + ru.ru_stime) * 1000)
    return wall


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hooks-bench-"))
    cfg = tmp / "config.toml"
    cfg.write_text(f"""[node]
mps_backend = "emulator"
nvml_backend = "scenario"
nvml_scenario = "{REPO}/contrib/lab/nvml-scenario.json"
run_dir = "{tmp}/run"
spool_dir = "{tmp}/spool"
[agent]
socket = "{tmp}/no-agent.sock"
[store]
url = "sqlite:///{tmp}/history.db"
""")
    base = {**os.environ, "SLURM_COLO_CONFIG": str(cfg), "SLURMD_NODENAME": "bench",
            "SLURM_JOB_USER": os.environ.get("USER", "root"), "SLURM_JOB_UID": str(os.getuid()),
            "SLURM_JOB_GPUS": "0"}
    tag = "slurm-colo[v=1 tok=t cls={c} mode=auto mech=mps gpu=bench:0 pct=50 mem=12]"
    t: dict[str, list[float]] = {k: [] for k in ("prolog_daemon_start", "prolog_join",
                                                 "epilog_first", "epilog_last",
                                                 "prolog_plain", "epilog_plain",
                                                 "taskprolog")}
    job = 1000
    for _ in range(args.pairs):
        a, b, c = job, job + 1, job + 2
        job += 3
        ea = {**base, "SLURM_JOB_ID": str(a), "SPANK_COLOCATE": "auto",
              "SLURM_JOB_COMMENT": tag.format(c="resnet50")}
        eb = {**base, "SLURM_JOB_ID": str(b), "SPANK_COLOCATE": "auto",
              "SLURM_JOB_COMMENT": tag.format(c="lm")}
        ec = {**base, "SLURM_JOB_ID": str(c)}
        t["prolog_daemon_start"].append(run_hook("prolog", ea, "prolog_daemon_start"))
        t["prolog_join"].append(run_hook("prolog", eb, "prolog_join"))
        t["taskprolog"].append(run_hook("taskprolog", eb, "taskprolog"))
        time.sleep(0.3)
        t["epilog_first"].append(run_hook("epilog", {**ea, "SLURM_JOB_EXIT_CODE": "0"},
                                          "epilog_first"))
        t["epilog_last"].append(run_hook("epilog", {**eb, "SLURM_JOB_EXIT_CODE": "0"},
                                         "epilog_last"))
        t["prolog_plain"].append(run_hook("prolog", ec, "prolog_plain"))
        t["epilog_plain"].append(run_hook("epilog", {**ec, "SLURM_JOB_EXIT_CODE": "0"},
                                          "epilog_plain"))
        time.sleep(0.5)  # let the detached daemon stop finish before the next round
    spooled = sum(len(list(d.glob("*.json"))) for d in (tmp / "spool", tmp / "spool" / "done"))
    print(f"hook wall time over {args.pairs} rounds (ms; fresh interpreter each; "
          f"{os.cpu_count()} CPUs)")
    print(f"{'hook':24s} {'median':>8s} {'p90':>8s} {'max':>8s} {'CPU med':>8s}")
    for k, v in t.items():
        v = sorted(v)
        p90 = v[min(len(v) - 1, round(0.9 * (len(v) - 1)))]
        print(f"{k:24s} {statistics.median(v):8.1f} {p90:8.1f} {v[-1]:8.1f} "
              f"{statistics.median(CPU[k]):8.1f}")
    base = sorted(run_hook_py() for _ in range(5))[2]
    print(f"{'(bare python -c pass)':24s} {base[0]:8.1f} {'':8s} {'':8s} {base[1]:8.1f}")
    load = os.getloadavg()[0]
    print(f"load average (1 min) at the end: {load:.2f} on {os.cpu_count()} CPUs")
    print(f"records spooled: {spooled} (expected {2 * args.pairs})")
    budget = max(statistics.median(t[k]) for k in ("prolog_join", "epilog_first", "epilog_last",
                                                    "prolog_plain", "epilog_plain"))
    print(f"budget check (median, daemon start excluded): {budget:.1f} ms "
          f"{'<' if budget < 150 else '>='} 150 ms")
    time.sleep(1.0)  # detached MPS stop / ingest helpers finish
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def run_hook_py() -> tuple[float, float]:
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    _, _, ru = os.wait4(p.pid, 0)
    return (time.perf_counter() - t) * 1000, (ru.ru_utime + ru.ru_stime) * 1000


if __name__ == "__main__":
    sys.exit(main())
