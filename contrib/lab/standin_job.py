"""Stand-in training job for the lab demo: counts steps and reports them through
slurm_colo.progress, as a real training loop would.

    standin_job.py SECONDS [--requeued-seconds S] [--slows MARKER]
                   [--slowed-by MARKER [--unless MARKER]]

The lab's GPUs are emulated, so jobs cannot slow each other down for real; two options
emulate a pair that interferes:

* ``--slows MARKER``: this job creates MARKER while it runs (it is the noisy partner);
* ``--slowed-by MARKER``: this job runs at 30 % of its speed while MARKER exists;
* ``--unless MARKER``: ... but at full speed while this other MARKER exists too (a third
  job beside the pair, with ``--slows`` that MARKER, keeps them apart: the pair harms only
  once that job has left).

Prints ``run N`` (N = Slurm's restart count) when it starts and ``done`` at the end;
``--requeued-seconds S`` makes a requeued run (N > 0) last S seconds instead.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from slurm_colo.progress import ProgressReporter

STEPS_PER_S = 10.0
SLOWED = 0.3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seconds", type=float)
    ap.add_argument("--slows", default="")
    ap.add_argument("--slowed-by", default="")
    ap.add_argument("--unless", default="")
    ap.add_argument("--requeued-seconds", type=float, default=None)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a requeue: clean up first
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
    print("run", restarts, flush=True)
    seconds = a.seconds
    if restarts != "0" and a.requeued_seconds is not None:
        seconds = a.requeued_seconds
    if a.slows:
        open(a.slows, "w").close()
    r = ProgressReporter(min_interval_s=0.5)
    steps, t0 = 0.0, time.time()
    last = t0
    try:
        while time.time() - t0 < seconds:
            time.sleep(0.1)
            now = time.time()
            slowed = bool(a.slowed_by) and os.path.exists(a.slowed_by)
            slowed = slowed and not (a.unless and os.path.exists(a.unless))
            steps += STEPS_PER_S * (SLOWED if slowed else 1.0) * (now - last)
            last = now
            r.report(steps)
        r.flush()
    finally:
        if a.slows and os.path.exists(a.slows):
            os.unlink(a.slows)
    print("done", flush=True)


if __name__ == "__main__":
    main()
