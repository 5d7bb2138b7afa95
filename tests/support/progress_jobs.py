"""Job scripts for the probe-and-undo scenarios, shared by the labs' tests (tests/slurm,
tests/versions). They report progress through slurm_colo.progress, as a training job does;
run them with the lab's venv python: ``PY SCRIPT MARKER SECONDS``."""

from __future__ import annotations

#: a training job: 10 steps/s alone, 3 once the marker file exists (the newcomer creates it:
#: the pair turns out to interfere)
INCUMBENT = """
import os, sys, time
from slurm_colo.progress import ProgressReporter
marker, seconds = sys.argv[1], float(sys.argv[2])
r = ProgressReporter(min_interval_s=0.5)
it, t0, last = 0.0, time.time(), time.time()
while time.time() - t0 < seconds:
    time.sleep(0.1)
    now = time.time()
    it += (3.0 if os.path.exists(marker) else 10.0) * (now - last)
    last = now
    r.report(it)
r.flush()
"""

#: the newcomer that slows the incumbent down while it runs; prints "run N" (N: Slurm's
#: restart count) at each start and "done" at the end. An optional third argument is how
#: long it runs once requeued (default: SECONDS again).
NEWCOMER = """
import os, sys, time
from slurm_colo.progress import ProgressReporter
marker, seconds = sys.argv[1], float(sys.argv[2])
restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
if restarts != "0" and len(sys.argv) > 3:
    seconds = float(sys.argv[3])
print("run", restarts, flush=True)
open(marker, "w").close()
r = ProgressReporter(min_interval_s=0.5)
it, t0 = 0.0, time.time()
while time.time() - t0 < seconds:
    time.sleep(0.1)
    it += 0.5
    r.report(it)
r.flush()
os.unlink(marker)
print("done", flush=True)
"""

#: an incumbent that runs well next to both others together, badly next to the newcomer
#: alone: 10 steps/s, 3 while the newcomer's marker exists and the third job's does not
#: (``PY SCRIPT NEWCOMER_MARKER THIRD_MARKER SECONDS``)
PAIR_INCUMBENT = """
import os, sys, time
from slurm_colo.progress import ProgressReporter
newcomer, third, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
r = ProgressReporter(min_interval_s=0.5)
it, t0, last = 0.0, time.time(), time.time()
while time.time() - t0 < seconds:
    time.sleep(0.1)
    now = time.time()
    bad = os.path.exists(newcomer) and not os.path.exists(third)
    it += (3.0 if bad else 10.0) * (now - last)
    last = now
    r.report(it)
r.flush()
"""
