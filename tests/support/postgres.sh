#!/usr/bin/env bash
# Start a throwaway PostgreSQL cluster for the tests marked `postgres`.
#
#   eval "$(tests/support/postgres.sh | tail -1 | sed 's/^/export /')"
#   tests/support/postgres.sh stop DIR      # stop and remove one started earlier
#
# Installs Debian's postgresql if no server binaries are present (apt-get, noninteractive),
# creates a cluster under a temporary directory, listening on 127.0.0.1 at a random free
# port (as the postgres user when run as root), creates a database and prints
# SLURM_COLO_TEST_PG_URL=postgresql+psycopg://... on its last line. Progress goes to stderr.
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_bin() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
    if [ -z "$d" ] || [ ! -x "$d/initdb" ]; then
        return 1
    fi
    echo "$d"
}

if [ "${1:-}" = stop ]; then
    dir=${2:?usage: postgres.sh stop DIR}
    bin=$(pg_bin) || { log "no PostgreSQL binaries"; exit 1; }
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
    rm -rf "$dir"
    exit 0
fi

if ! bin=$(pg_bin); then
    if [ "$(id -u)" != 0 ]; then
        log "PostgreSQL server binaries missing and not root: install the 'postgresql' package"
        exit 1
    fi
    log "installing postgresql (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends postgresql >&2
    bin=$(pg_bin) || { log "postgresql installed but no initdb found"; exit 1; }
fi

dir=$(mktemp -d /tmp/slurm-colo-pg.XXXXXX)
chmod 755 "$dir"
if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir"
fi
port=$(python3 - <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
)
log "cluster in $dir, port $port (stop: $0 stop $dir)"
as_pg "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c full_page_writes=off" start >&2 \
    || { cat "$dir/server.log" >&2; exit 1; }
as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres slurm_colo_test
echo "SLURM_COLO_TEST_PG_DIR=$dir" >&2
echo "SLURM_COLO_TEST_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$port/slurm_colo_test"
