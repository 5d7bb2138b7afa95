#!/bin/bash
# Run the whole slurm-colo test suite on a Debian 12 machine, as root:
# installs what it needs (Debian packages, a Python venv), brings up the single-node lab
# (contrib/lab/up.sh --single), the multi-node lab beside it (contrib/lab/up.sh: a controller
# and three GPU nodes in their own namespaces) and a throwaway PostgreSQL on loopback, builds
# the chroots of the version labs (contrib/lab/versions/), then runs unit and real-Slurm tests
# in one pytest run: the real-Slurm tests on every Slurm version, 22.05 (the host lab,
# tests/slurm, and the multi-node lab, tests/multinode) and 24.11 and 26.05 (the version labs,
# tests/versions). Extra arguments go to pytest.
#
#   SLURM_VERSIONS="22.05 24.11 26.05"   the versions to test (default: all three), or
#   tests/run.sh --versions "24.11" ...  the same as the first argument
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
[ "$(id -u)" -eq 0 ] || { echo "tests/run.sh: run as root (the lab starts Slurm daemons)" >&2; exit 1; }
t0=$(date +%s)
if [ "${1:-}" = --versions ]; then SLURM_VERSIONS=${2:?--versions LIST}; shift 2; fi
SLURM_VERSIONS=$(echo "${SLURM_VERSIONS:-22.05 24.11 26.05}" | tr , ' ')
export SLURM_VERSIONS
suites=()
for v in $SLURM_VERSIONS; do
  case "$v" in
    22.05) ;;
    24.11) suites+=(trixie) ;;
    26.05) suites+=(sid) ;;
    *) echo "tests/run.sh: unknown Slurm version '$v' (22.05, 24.11, 26.05)" >&2; exit 2 ;;
  esac
done
skip=()
case " $SLURM_VERSIONS " in
  *" 22.05 "*) host_lab=1 ;;
  *) host_lab=0; skip+=(--ignore=tests/slurm --ignore=tests/multinode) ;;
esac
[ ${#suites[@]} -gt 0 ] || skip+=(--ignore=tests/versions)

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  slurmctld slurmd slurm-client munge libslurm-dev lua-socket lua5.1 gcc make libc6-dev \
  python3-venv postgresql curl ${suites[0]:+mmdebstrap} >/dev/null
echo "[tests] packages installed ($(( $(date +%s) - t0 ))s)"

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import slurm_colo, pytest, psycopg, mkdocs, ruff' 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[test,postgres,docs]"
fi
echo "[tests] python env ready ($(( $(date +%s) - t0 ))s)"

if [ $host_lab -eq 1 ]; then
  bash contrib/lab/up.sh --single
  t_mn=$(date +%s)
  bash contrib/lab/up.sh
  echo "[tests] multi-node lab up ($(( $(date +%s) - t_mn ))s)"
fi
# the version labs' chroots (kept between runs); the tests bring each lab up and down
for s in "${suites[@]}"; do
  ts=$(date +%s)
  bash contrib/lab/versions/build-chroot.sh "$s" | tail -n 1
  echo "[tests] chroot $s ready ($(( $(date +%s) - ts ))s)"
done
# a throwaway PostgreSQL on loopback for the store tests; stopped again on exit
pg_err=$(mktemp)
pg_line=$(bash tests/support/postgres.sh 2>"$pg_err" | tail -n 1) || { cat "$pg_err" >&2; exit 1; }
export "${pg_line?}"
pg_dir=$(sed -n 's/^SLURM_COLO_TEST_PG_DIR=//p' "$pg_err")
rm -f "$pg_err"
trap '[ -n "${pg_dir:-}" ] && bash tests/support/postgres.sh stop "$pg_dir" >/dev/null 2>&1' EXIT
echo "[tests] postgres on ${SLURM_COLO_TEST_PG_URL##*@}"

set +e
echo "[tests] Slurm versions: $SLURM_VERSIONS"
.venv/bin/pytest -q -p no:cacheprovider "${skip[@]}" "$@" tests
rc=$?
set -e
echo "[tests] finished in $(( $(date +%s) - t0 ))s with exit code $rc"
exit $rc
