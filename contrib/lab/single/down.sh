#!/bin/bash
# Stop the single-node lab (contrib/lab/down.sh --single) by pid file (never by process name). --slurm-only keeps munge and the agent.
LAB_DIR=${LAB_DIR:-/var/lib/slurm-colo-lab}
. "$(dirname "${BASH_SOURCE[0]}")/../proc-lib.sh"
# slurmd first: without slurmctld it hangs retrying registration
lab_stop /run/slurmd.pid
lab_stop /run/slurmctld.pid
[ "${1:-}" = "--slurm-only" ] && exit 0
lab_stop "$LAB_DIR/agent.pid"
lab_stop /run/munge/munged.pid
exit 0
