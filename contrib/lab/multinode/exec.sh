#!/bin/bash
# Run a command inside one node of the multi-node lab (its network, mount and UTS namespaces).
#   exec.sh [--user NAME] [--bg] NODE CMD [ARG...]
#     NODE     colo-head, colo-gpu1, colo-gpu2, colo-gpu3
#     --user   run CMD as NAME (runuser) instead of root
#     --bg     start CMD in the background, print its pid; output goes to the node's log/bg.log,
#              the pid to its run/extra.pids (down.sh stops it)
# The command starts in the current directory when that path exists inside the node, else in /.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
user="" bg=0
while [ $# -gt 0 ]; do
  case "$1" in
    --user) user=$2; shift 2;;
    --user=*) user=${1#--user=}; shift;;
    --bg) bg=1; shift;;
    -h|--help) sed -n '2,8p' "$0"; exit 0;;
    *) break;;
  esac
done
[ $# -ge 2 ] || { sed -n '2,8p' "$0" >&2; exit 2; }
n=$1; shift
mn_addr "$n" >/dev/null || { echo "exec.sh: unknown node $n (one of: $(mn_names | paste -sd' '))" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "exec.sh: run as root" >&2; exit 1; }
mn_ns_ready "$n" || { echo "exec.sh: node $n is not up (run up.sh)" >&2; exit 1; }
unset SLURM_CONF
run=()
[ -n "$user" ] && run=(runuser -u "$user" --)
inner='cd "$1" 2>/dev/null || cd /; shift; exec "$@"'
nsargs=(--net="/run/netns/$n" --mount="$MN_NS/$n.mnt" --uts="$MN_NS/$n.uts")
if [ $bg -eq 1 ]; then
  # nsenter and sh exec into the command, so $! is the command's own pid (runuser's with --user)
  nsenter "${nsargs[@]}" -- sh -c "$inner" sh "$PWD" "${run[@]}" "$@" </dev/null >>"$MN_DIR/nodes/$n/log/bg.log" 2>&1 &
  echo $! >> "$MN_DIR/nodes/$n/run/extra.pids"
  echo "$!"
else
  exec nsenter "${nsargs[@]}" -- sh -c "$inner" sh "$PWD" "${run[@]}" "$@"
fi
