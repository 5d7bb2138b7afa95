#!/bin/bash
# Stop the multi-node lab and remove what up.sh made: daemons (by pid file, never by name; the
# slurm-colo agent too),
# pinned mount/UTS namespaces, network namespaces (with their veths and the bridge), the
# lab's munged. Idempotent. Keeps $MN_DIR (config, state, logs) unless --purge is given.
#   --slurm-only   stop slurmd and slurmctld only (up.sh uses it after a config change)
#   --purge        also delete $MN_DIR
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "multinode lab: run as root" >&2; exit 1; }

# pids of live processes in the lab's node mount namespaces (jobs, slurmstepd, exec.sh --bg)
lab_pids() {
  local n ids=() p id
  for n in $(mn_names); do
    mountpoint -q "$MN_NS/$n.mnt" 2>/dev/null && ids+=("mnt:[$(stat -L -c %i "$MN_NS/$n.mnt")]")
  done
  [ ${#ids[@]} -gt 0 ] || return 0
  for p in /proc/[0-9]*; do
    id=$(readlink "$p/ns/mnt" 2>/dev/null) || continue
    for n in "${ids[@]}"; do [ "$id" = "$n" ] && lab_running "${p#/proc/}" && echo "${p#/proc/}"; done
  done
}

if [ "${1:-}" != "--slurm-only" ] && lab_pidfile_alive "$MN_DIR/nodes/colo-head/run/slurmctld.pid"; then
  # end the lab's jobs through Slurm first: a stopped slurmd leaves its slurmstepd running
  jobs=$(mn_in colo-head timeout 10 squeue -h -o %i 2>/dev/null | paste -sd' ')
  if [ -n "$jobs" ]; then
    mn_in colo-head timeout 10 scancel $jobs 2>/dev/null
    for _ in $(seq 1 50); do [ -z "$(mn_in colo-head timeout 10 squeue -h -t R,CG -o %i 2>/dev/null)" ] && break; sleep 0.2; done
    echo "cancelled jobs $jobs"
  fi
fi

# slurmd first: without slurmctld it hangs retrying registration
for n in $(mn_names); do lab_stop "$MN_DIR/nodes/$n/run/slurmd.pid"; done
lab_stop "$MN_DIR/nodes/colo-head/run/slurmctld.pid"
[ "${1:-}" = "--slurm-only" ] && exit 0

# the slurm-colo agent on colo-head (colo.sh), by its pid file
lab_stop "$MN_DIR/nodes/colo-head/run/slurm-colo-agent.pid"

# anything else the lab started inside a node (exec.sh ... &) writes its pid to <node>/run/extra.pids
for n in $(mn_names); do
  f=$MN_DIR/nodes/$n/run/extra.pids
  [ -s "$f" ] || continue
  while read -r pid; do lab_running "$pid" && kill "$pid" 2>/dev/null && echo "stopped $pid ($n)"; done < "$f"
  rm -f "$f"
done

# whatever still runs in a node (orphaned slurmstepd and job processes): TERM, then KILL
left=$(lab_pids | paste -sd' ')
if [ -n "$left" ]; then
  kill $left 2>/dev/null
  for _ in $(seq 1 25); do [ -z "$(lab_pids)" ] && break; sleep 0.2; done
  still=$(lab_pids | paste -sd' ')
  [ -n "$still" ] && kill -9 $still 2>/dev/null
  echo "stopped processes left in the nodes: $left${still:+ (killed: $still)}"
fi

# pinned namespaces: a namespace goes away with its last mount and its last process
for n in $(mn_names); do
  for k in mnt uts; do
    mountpoint -q "$MN_NS/$n.$k" 2>/dev/null && umount "$MN_NS/$n.$k"
    rm -f "$MN_NS/$n.$k"
  done
done
mountpoint -q "$MN_NS" 2>/dev/null && umount "$MN_NS"

# network namespaces (deleting one deletes its veth end; the peer and the bridge go with colo-sw)
for n in $(mn_names) "$MN_SWITCH"; do
  [ -e "/run/netns/$n" ] && ip netns del "$n"
done
if [ -e "$MN_DIR/.made-run-netns" ]; then
  if [ -d /run/netns ] && [ -z "$(ls -A /run/netns)" ]; then
    mountpoint -q /run/netns && umount /run/netns
    rmdir /run/netns
  fi
  rm -f "$MN_DIR/.made-run-netns"
fi

lab_stop "$MN_DIR/munge/run/munged.pid"
rm -f "$MN_DIR/munge/run/munge.socket.2" "$MN_DIR/munge/run/munge.socket.2.lock"
[ "${1:-}" = "--purge" ] && rm -rf --one-file-system "$MN_DIR"
exit 0
