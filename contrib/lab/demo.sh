#!/bin/bash
# slurm-colo demo, as root on Debian 12: brings the lab up (installing what is missing), submits
# --colocate jobs of compatible and incompatible classes from two users plus exclusive jobs,
# prints who shares which GPU of which node and why -- read back from Slurm itself -- and the
# agent's view; then shows a pair the scores got wrong measured by its probe and undone.
#
#   demo.sh            on the multi-node lab (a controller and three GPU nodes, V100 and K80)
#   demo.sh --single   on the single-node lab (single/demo.sh)
#
#   DEMO_SECONDS  how long the workload's jobs run (default 40)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
  "") ;;
  --single) exec bash "$HERE/single/demo.sh" ;;
  -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
  *) echo "demo.sh: unknown option '$1' (--single, or nothing for the multi-node lab)" >&2; exit 2 ;;
esac
. "$HERE/multinode/lib.sh"
bash "$HERE/multinode/up.sh"
# start from the lab's own scores: forget pairs an earlier run's probes measured
learned=$MN_DIR/nodes/colo-head/state/learned.json
if [ -f "$learned" ]; then
  bash "$HERE/multinode/colo.sh" stop >/dev/null
  rm -f "$learned"
  bash "$HERE/multinode/colo.sh" agent
fi
# the workload runs inside colo-head, where sbatch, squeue and slurm-colo reach the controller;
# the checkout may not be visible there (each node has its own /tmp): the scripts go to the lab
install -d -m 0755 "$MN_DIR/demo"
install -m 0755 "$HERE/demo-workload.sh" "$MN_DIR/demo/"
install -m 0644 "$HERE/standin_job.py" "$MN_DIR/demo/"
exec env -u PYTHONPATH bash "$HERE/multinode/exec.sh" colo-head env \
  DEMO_OUT="$MN_DIR/out" VENV=/opt/slurm-colo-multinode/venv DEMO_EXTRA=1 \
  DEMO_SECONDS="${DEMO_SECONDS:-40}" \
  DEMO_LOGS="$MN_DIR/nodes/*/log (slurmctld, slurmd, agent, hooks)" \
  DEMO_DOWN="bash contrib/lab/down.sh" \
  bash "$MN_DIR/demo/demo-workload.sh"
