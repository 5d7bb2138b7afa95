#!/bin/bash
# Stop the single-node lab (contrib/lab/down.sh --single) by pid file (never by process name). --slurm-only keeps munge and the agent.
LAB_DIR=${LAB_DIR:-/var/lib/slurm-colo-lab}
# running PID: exists and is not a zombie
running() { local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null); [ -n "$st" ] && [ "$st" != Z ]; }
stop() {
  local p=$1
  [ -s "$p" ] || return 0
  local pid; pid=$(cat "$p")
  if running "$pid"; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 50); do running "$pid" || break; sleep 0.2; done
    if running "$pid"; then kill -9 "$pid"; echo "killed $pid ($p)"; else echo "stopped $pid ($p)"; fi
  fi
  rm -f "$p"
}
# slurmd first: without slurmctld it hangs retrying registration
stop /run/slurmd.pid
stop /run/slurmctld.pid
[ "${1:-}" = "--slurm-only" ] && exit 0
stop "$LAB_DIR/agent.pid"
stop /run/munge/munged.pid
exit 0
