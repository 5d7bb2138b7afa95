#!/bin/bash
# slurm-colo demo on the single-node lab (contrib/lab/demo.sh --single): brings the lab up
# (installing what is missing), then runs the demo workload (../demo-workload.sh) on it.
# Run as root on Debian 12.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LAB_DIR=${LAB_DIR:-/var/lib/slurm-colo-lab}
bash "$HERE/up.sh"
# start from the lab's own scores: forget pairs an earlier run's probes measured
if [ -f "$LAB_DIR/state/learned.json" ]; then
  # wait for the agent's exit: up.sh starts none while the old one still runs
  . "$HERE/../proc-lib.sh"
  lab_stop "$LAB_DIR/agent.pid" >/dev/null
  rm -f "$LAB_DIR/state/learned.json"
  bash "$HERE/up.sh" >/dev/null
fi
export DEMO_OUT=$LAB_DIR/out VENV=${VENV:-/opt/slurm-colo-lab/venv}
export DEMO_LOGS="$LAB_DIR/agent.log, /var/log/slurm/" DEMO_DOWN="bash contrib/lab/down.sh --single"
exec bash "$HERE/../demo-workload.sh"
