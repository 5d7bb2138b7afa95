#!/bin/bash
# Build a minimal Debian chroot holding one Slurm version, for the side-by-side version labs.
#
#   build-chroot.sh SUITE [DIR]
#
# SUITE is a Debian suite: trixie (Slurm 24.11), sid (Slurm 26.05), bookworm (22.05).
# DIR defaults to $VERSIONS_ROOT/SUITE (VERSIONS_ROOT=/var/lib/slurm-colo-versions).
# Idempotent: a finished chroot (marker file .slurm-colo-chroot) is left as it is.
# Downloaded .debs are kept in $APT_CACHE (default $VERSIONS_ROOT/apt-cache/SUITE) and reused
# by the next build of the same suite. Needs root and the mmdebstrap package.
set -euo pipefail
SUITE=${1:?usage: build-chroot.sh SUITE [DIR]}
VERSIONS_ROOT=${VERSIONS_ROOT:-/var/lib/slurm-colo-versions}
DIR=${2:-$VERSIONS_ROOT/$SUITE}
APT_CACHE=${APT_CACHE:-$VERSIONS_ROOT/apt-cache/$SUITE}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
PACKAGES=${PACKAGES:-slurmctld slurmd slurm-client munge libslurm-dev lua-socket gcc make libc6-dev \
python3 python3-venv python3-dev procps}
MARKER=.slurm-colo-chroot
[ "$(id -u)" -eq 0 ] || { echo "build-chroot: run as root" >&2; exit 1; }
command -v mmdebstrap >/dev/null || { echo "build-chroot: apt-get install mmdebstrap" >&2; exit 1; }

report() {
  echo "chroot $DIR: suite $SUITE, $(chroot "$DIR" slurmctld -V), size $(du -sh --one-file-system "$DIR" | cut -f1)"
}
if [ -f "$DIR/$MARKER" ]; then
  echo "build-chroot: $DIR already built ($(head -1 "$DIR/$MARKER"))"
  report
  exit 0
fi
# a half-built chroot from an interrupted run: only removed when nothing is mounted below it
if [ -e "$DIR" ]; then
  if findmnt -rn -o TARGET | grep -q "^$DIR\(/\|$\)"; then
    echo "build-chroot: $DIR has mounts below it (is the lab up? run down.sh $SUITE)" >&2; exit 1
  fi
  echo "build-chroot: removing unfinished $DIR"
  rm -rf --one-file-system "$DIR"
fi
mkdir -p "$(dirname "$DIR")" "$APT_CACHE"
t0=$(date +%s.%N)
# sid's Release file carries a Valid-Until date; a mirror snapshot older than that date (or a
# host clock ahead of it) fails with "Release file ... is expired": Check-Valid-Until is off.
# The apt cache is copied in before and out after the install (mmdebstrap sync-in/sync-out).
# No service is started during the install: mmdebstrap installs a policy-rc.d that denies it;
# the customize hook leaves one in place for later apt-get runs inside the chroot.
mmdebstrap --mode=root --variant=apt \
  --aptopt='APT::Install-Recommends "false"' \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  --include="$(echo $PACKAGES | tr ' ' ,)" \
  --skip=download/empty --skip=essential/unlink \
  --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
  --setup-hook="sync-in $APT_CACHE /var/cache/apt/archives/" \
  --customize-hook="sync-out /var/cache/apt/archives $APT_CACHE" \
  --customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb' \
  --customize-hook='printf "#!/bin/sh\nexit 101\n" > "$1"/usr/sbin/policy-rc.d; chmod 755 "$1"/usr/sbin/policy-rc.d' \
  "$SUITE" "$DIR" "$MIRROR"
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
{ echo "built $(date -u +%FT%TZ) in ${secs}s"; echo "suite=$SUITE"; echo "packages=$PACKAGES"
  chroot "$DIR" dpkg-query -W -f='${Package} ${Version}\n' slurmctld slurmd slurm-client libslurm-dev munge lua-socket python3 gcc 2>/dev/null
} > "$DIR/$MARKER"
echo "build-chroot: built in ${secs}s"
report
