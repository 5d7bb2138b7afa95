# Shared settings of the version labs (sourced by up.sh, down.sh and exec.sh).
# One lab per Debian suite: the chroot $VERSIONS_ROOT/SUITE, run in its own mount, UTS, network
# and PID namespaces, so it does not clash with the host's Slurm (own loopback, ports, munged,
# /run and hostname).
VERSIONS_ROOT=${VERSIONS_ROOT:-/var/lib/slurm-colo-versions}
SUITE=${1:?usage: $(basename "$0") SUITE ...}
DIR=$VERSIONS_ROOT/$SUITE
STATE=$VERSIONS_ROOT/run/$SUITE
NODE=${NODE:-colo-$SUITE}
# PID (in the host's PID namespace) of the lab's PID 1, if it is running, else nothing
holder_pid() {
  local pid
  [ -s "$STATE/holder.pid" ] || return 1
  pid=$(cat "$STATE/holder.pid")
  [ -r "/proc/$pid/stat" ] && [ "$(awk '{print $3}' "/proc/$pid/stat")" != Z ] || return 1
  # guard against a reused PID: the lab's PID 1 has the chroot as its root directory
  [ "$(readlink "/proc/$pid/root")" = "$DIR" ] || return 1
  echo "$pid"
}
