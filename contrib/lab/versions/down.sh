#!/bin/bash
# Stop a version lab:  down.sh SUITE
# SIGTERM to the lab's PID 1, which stops slurmd, slurmctld and munged in that order; when the
# PID 1 is gone the kernel ends whatever was left in the PID namespace and the mount namespace
# (with its /proc, /dev, /run mounts) goes away. Nothing is mounted in the host's namespace.
set -euo pipefail
. "$(dirname "$0")/common.sh"
if ! pid=$(holder_pid); then
  echo "down: lab $SUITE is not running"; rm -f "$STATE/holder.pid"; exit 0
fi
kill -TERM "$pid"
for _ in $(seq 1 100); do [ -r "/proc/$pid/stat" ] || break; sleep 0.2; done
if [ -r "/proc/$pid/stat" ]; then
  echo "down: lab $SUITE PID 1 ($pid) still there after 20 s: SIGKILL"
  kill -KILL "$pid"
  for _ in $(seq 1 50); do [ -r "/proc/$pid/stat" ] || break; sleep 0.1; done
fi
rm -f "$STATE/holder.pid"
echo "down: lab $SUITE stopped (PID 1 was $pid)"
