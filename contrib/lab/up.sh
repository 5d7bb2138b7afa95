#!/bin/bash
# Bring up the slurm-colo lab cluster, as root on Debian 12 (installs what is missing).
#
#   up.sh            the multi-node lab (multinode/up.sh): a controller colo-head and three GPU
#                    nodes (two with V100s, one with K80s), each in its own network, UTS and
#                    mount namespace, talking over munge-authenticated TCP
#   up.sh --single   the single-node lab (single/up.sh): one Slurm node on loopback, four GPUs
#
# Both are idempotent and can run side by side. down.sh stops them.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
  "") exec bash "$HERE/multinode/up.sh" ;;
  --single) shift; exec bash "$HERE/single/up.sh" "$@" ;;
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
  *) echo "up.sh: unknown option '$1' (--single, or nothing for the multi-node lab)" >&2; exit 2 ;;
esac
