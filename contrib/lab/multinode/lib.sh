# Shared settings of the multi-node lab (sourced by up.sh, down.sh, exec.sh, check.sh).
# Everything the lab makes lives under $MN_DIR, in the network namespaces colo-*,
# and in the mount/UTS namespaces pinned under $MN_DIR/ns. Nothing on the host is changed.
MN_DIR=${MN_DIR:-/var/lib/slurm-colo-multinode}
MN_NS=$MN_DIR/ns                 # pinned mount + UTS namespaces: <node>.mnt, <node>.uts
MN_NET=10.77.0                   # private /24, lives only inside the lab's namespaces
MN_SWITCH=colo-sw                # network namespace that holds the bridge (the "switch")
MN_BRIDGE=br0
MN_CLUSTER=colomn
# node  address  role
MN_NODES="colo-head:$MN_NET.1:head colo-gpu1:$MN_NET.11:gpu colo-gpu2:$MN_NET.12:gpu colo-gpu3:$MN_NET.13:gpu"

mn_names() { local e; for e in $MN_NODES; do echo "${e%%:*}"; done; }
mn_addr() { local e; for e in $MN_NODES; do [ "${e%%:*}" = "$1" ] && { e=${e#*:}; echo "${e%%:*}"; return 0; }; done; return 1; }
mn_role() { local e; for e in $MN_NODES; do [ "${e%%:*}" = "$1" ] && { echo "${e##*:}"; return 0; }; done; return 1; }

. "$(dirname "${BASH_SOURCE[0]}")/../proc-lib.sh"  # lab_running, lab_pidfile_alive, lab_stop

# the node's namespaces exist (network + pinned mount and UTS)
mn_ns_ready() {
  [ -e "/run/netns/$1" ] && mountpoint -q "$MN_NS/$1.mnt" && mountpoint -q "$MN_NS/$1.uts"
}

# run a command inside a node: its network, mount and UTS namespaces
mn_in() {
  local n=$1; shift
  nsenter --net="/run/netns/$n" --mount="$MN_NS/$n.mnt" --uts="$MN_NS/$n.uts" -- "$@"
}
