"""CPU cost of the per-job NVML sampler. Target: < 0.5 % of one core at 1 Hz.

Usage: python benchmarks/sampler_bench.py [--seconds 20] [--gpus 4]

1. In process: CPU time per tick of ``Sampler.tick`` (scenario backend, N GPUs with two
   processes each), over 2000 ticks → the steady cost at 1 Hz.
2. As deployed: the detached ``python -m slurm_colo.node.sampler`` at 1 Hz for S seconds,
   CPU read from /proc/<pid>/stat after start-up and at the end (start-up reported apart).

Only the NVML calls differ on a real node (the C library instead of the scenario); they
are microseconds each with a loaded driver (persistence mode on).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_colo.emulators.nvml_scenario import ScenarioNvml
from slurm_colo.fsutil import atomic_write_json
from slurm_colo.node.gpu.nvml import NvmlGate
from slurm_colo.node.layout import NodeLayout
from slurm_colo.node.sampler import Sampler

TICK = os.sysconf("SC_CLK_TCK")


def scenario(n: int) -> dict:
    return {
        "gpus": [
            {
                "uuid": f"GPU-b{i}",
                "sm_util": [[0, 20], [5, 80]],
                "mem_util": 30,
                "memory_used_mib": 9000,
                "power_w": 200,
                "processes": [
                    {"pid": 1, "used_mib": 4000, "sm_util": 40},
                    {"pid": os.getpid(), "used_mib": 4000, "sm_util": 35},
                ],
            }
            for i in range(n)
        ]
    }


def cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--gpus", type=int, default=4)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sampler-bench-"))
    lay = NodeLayout(tmp / "run", tmp / "spool")
    lay.job_dir(1).mkdir(parents=True)
    gpus = list(range(a.gpus))
    atomic_write_json(lay.job_dir(1) / "state.json", {"gpus": gpus, "start": time.time()})
    for g in gpus:
        lay.gpu_dir(g).mkdir(parents=True)
    s = Sampler(NvmlGate(ScenarioNvml(scenario(a.gpus)), "scenario"), gpus, 1, lay, 1.0)
    s.tick()
    n = 2000
    t0 = time.process_time()
    for _ in range(n):
        s.tick()
    per_tick = (time.process_time() - t0) / n
    print(
        f"in-process: {per_tick * 1e6:.0f} us CPU per tick ({a.gpus} GPUs) "
        f"= {per_tick * 100:.3f} % of one core at 1 Hz"
    )

    scen = tmp / "scenario.json"
    scen.write_text(json.dumps(scenario(a.gpus)))
    cfg = tmp / "config.toml"
    cfg.write_text(
        f'[node]\nnvml_backend = "scenario"\nnvml_scenario = "{scen}"\n'
        f'run_dir = "{lay.run_dir}"\nspool_dir = "{lay.spool_dir}"\n'
        "sampler_interval_s = 1.0\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "slurm_colo.node.sampler", "1"],
        env={**os.environ, "SLURM_COLO_CONFIG": str(cfg)},
        stderr=subprocess.DEVNULL,
    )
    time.sleep(3.0)
    c0, w0 = cpu_s(p.pid), time.monotonic()
    time.sleep(a.seconds)
    c1, w1 = cpu_s(p.pid), time.monotonic()
    p.terminate()
    p.wait()
    steady = (c1 - c0) / (w1 - w0) * 100
    print(
        f"detached sampler at 1 Hz: start-up {c0 * 1000:.0f} ms CPU once; steady "
        f"{steady:.3f} % of one core over {w1 - w0:.0f} s "
        f"(/proc resolution {1000 / TICK:.0f} ms)"
    )
    print(f"target < 0.5 %: {'met' if max(steady, per_tick * 100) < 0.5 else 'NOT met'}")
    subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
