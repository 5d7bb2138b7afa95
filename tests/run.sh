#!/bin/bash
# Run the whole slurm-colo test suite on a Debian 12 machine, as root:
# installs what it needs (Debian packages, a Python venv), brings up the lab Slurm cluster
# (contrib/lab/up.sh), the multi-node lab beside it (contrib/lab/multinode/up.sh: a controller
# and three GPU nodes in their own namespaces) and a throwaway PostgreSQL on loopback, then
# runs unit, real-Slurm and multi-node tests in one pytest run. Extra arguments go to pytest.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
[ "$(id -u)" -eq 0 ] || { echo "tests/run.sh: run as root (the lab starts Slurm daemons)" >&2; exit 1; }
t0=$(date +%s)

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  slurmctld slurmd slurm-client munge libslurm-dev lua-socket lua5.1 gcc make libc6-dev \
  python3-venv postgresql curl >/dev/null
echo "[tests] packages installed ($(( $(date +%s) - t0 ))s)"

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import slurm_colo, pytest, psycopg, mkdocs' 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[test,postgres,docs]"
fi
echo "[tests] python env ready ($(( $(date +%s) - t0 ))s)"

bash contrib/lab/up.sh
t_mn=$(date +%s)
bash contrib/lab/multinode/up.sh
echo "[tests] multi-node lab up ($(( $(date +%s) - t_mn ))s)"
# a throwaway PostgreSQL on loopback for the store tests; stopped again on exit
pg_err=$(mktemp)
pg_line=$(bash tests/support/postgres.sh 2>"$pg_err" | tail -n 1) || { cat "$pg_err" >&2; exit 1; }
export "${pg_line?}"
pg_dir=$(sed -n 's/^SLURM_COLO_TEST_PG_DIR=//p' "$pg_err")
rm -f "$pg_err"
trap '[ -n "${pg_dir:-}" ] && bash tests/support/postgres.sh stop "$pg_dir" >/dev/null 2>&1' EXIT
echo "[tests] postgres on ${SLURM_COLO_TEST_PG_URL##*@}"

set +e
.venv/bin/pytest -q -p no:cacheprovider "$@" tests
rc=$?
set -e
echo "[tests] finished in $(( $(date +%s) - t0 ))s with exit code $rc"
exit $rc
