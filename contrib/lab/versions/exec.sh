#!/bin/bash
# Run a command inside a running version lab (its namespaces and chroot), with a clean
# environment:  exec.sh SUITE CMD [ARGS...]     e.g.  exec.sh trixie sinfo
# Extra variables for the command: LAB_ENV="A=1 B=2" exec.sh SUITE ...
set -euo pipefail
. "$(dirname "$0")/common.sh"
shift
[ $# -gt 0 ] || set -- /bin/bash
pid=$(holder_pid) || { echo "exec: lab $SUITE is not up (up.sh $SUITE)" >&2; exit 1; }
# -r/-w: root and working directory of the lab's PID 1 (the chroot); nsenter forks into the PID ns
# shellcheck disable=SC2086
exec nsenter -t "$pid" -m -u -n -p -r -w -- /usr/bin/env -i \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  TERM="${TERM:-dumb}" ${LAB_ENV:-} "$@"
