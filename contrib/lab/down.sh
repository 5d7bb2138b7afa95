#!/bin/bash
# Stop the slurm-colo lab cluster (daemons by pid file, namespaces, the lab's munged).
#
#   down.sh [--purge]  the multi-node lab (multinode/down.sh; --purge also deletes its state)
#   down.sh --single   the single-node lab (single/down.sh; --single --slurm-only keeps munge
#                      and the agent)
#   down.sh --all      both
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
  ""|--purge|--slurm-only) exec bash "$HERE/multinode/down.sh" "$@" ;;
  --single) shift; exec bash "$HERE/single/down.sh" "$@" ;;
  --all) bash "$HERE/multinode/down.sh"; exec bash "$HERE/single/down.sh" ;;
  -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
  *) echo "down.sh: unknown option '$1' (--single, --all, or nothing for the multi-node lab)" >&2; exit 2 ;;
esac
