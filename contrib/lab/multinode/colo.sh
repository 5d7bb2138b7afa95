#!/bin/bash
# slurm-colo in the multi-node lab (called by up.sh; safe to run again, keeps what is there).
#
#   colo.sh files   the lab's own venv (/opt/slurm-colo-multinode/venv, from this checkout),
#                   hook shims and the MPS emulator wrapper, one slurm-colo config per node
#                   ($MN_DIR/nodes/NODE/slurm-colo, bound over /etc/slurm-colo in that node),
#                   the history DB and scores on the head, the SPANK plugin, job_submit.lua and
#                   gres.conf (written by slurm-colo from the [[gpus]] tables) in $MN_DIR/etc/slurm
#   colo.sh agent   start the agent in colo-head if it is not running (pid file
#                   $MN_DIR/nodes/colo-head/run/slurm-colo-agent.pid); restarted when the
#                   package was reinstalled by the last `files`
#   colo.sh stop    stop the agent (by its pid file)
#
#   MN_VENV  the lab's Python environment (default /opt/slurm-colo-multinode/venv)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
. "$HERE/lib.sh"
MN_VENV=${MN_VENV:-/opt/slurm-colo-multinode/venv}
PY=$MN_VENV/bin/python
LIBEXEC=$(dirname "$MN_VENV")/libexec
HEAD_STATE=$MN_DIR/nodes/colo-head/state
AGENT_PID=$MN_DIR/nodes/colo-head/run/slurm-colo-agent.pid
AGENT_LOG=$MN_DIR/nodes/colo-head/log/slurm-colo-agent.log
AGENT_PORT=6830
head_addr=$(mn_addr colo-head)
[ "$(id -u)" -eq 0 ] || { echo "multinode lab: run as root" >&2; exit 1; }

# the [[gpus]] tables of every node's config: GPU 0 shared (4 shards), GPU 1 whole
gpus_toml() {
  cat <<EOT
[[gpus]]
nodes = "colo-gpu[1-2]"
count = 2
model = "v100"
memory_gib = 32.0
shared = "0"
shards_per_gpu = 4

[[gpus]]
nodes = "colo-gpu3"
count = 2
model = "k80"
memory_gib = 12.0
shared = "0"
shards_per_gpu = 4
EOT
}

head_config() {
  cat <<EOT
# slurm-colo on colo-head (contrib/lab/multinode/colo.sh): the agent, the history, the scores
[agent]
socket = "/run/slurm-colo/agent.sock"
listen = ["unix:/run/slurm-colo/agent.sock", "tcp:$head_addr:$AGENT_PORT"]
address = "unix:/run/slurm-colo/agent.sock"
user = "root"
cluster = "$MN_CLUSTER"
# the labs share one small machine with each other and the tests, where a pause of the
# agent can pass the default 150 ms (meant for a head node of its own)
request_timeout_ms = 400
retry_after_s = 2
refresh_interval_s = 2.0
slurm_backend = "json"

[placement]
fallback = "exclusive"
cross_user = "never"
default_memory_gib = 4.0
# lab time is compressed: a new shared set is judged after 15 s (default 600 s)
probe_s = 15.0

[store]
url = "sqlite:///$HEAD_STATE/history.db"

[scores]
path = "$HEAD_STATE/scores.json"

EOT
  gpus_toml
}

node_config() {  # node_config NODE
  cat <<EOT
# slurm-colo on $1 (contrib/lab/multinode/colo.sh): node hooks reach the agent on colo-head over TCP
[agent]
address = "tcp:$head_addr:$AGENT_PORT"
user = "root"
cluster = "$MN_CLUSTER"
retry_after_s = 2

[node]
mps_backend = "emulator"
mps_control = "$LIBEXEC/nvidia-cuda-mps-control"
nvml_backend = "scenario"
nvml_scenario = "$LIBEXEC/nvml-scenario-$1.json"
run_dir = "/run/slurm-colo"
spool_dir = "$MN_DIR/nodes/$1/colo-spool"
records_to = "agent"
# lab time is compressed: an unreachable agent is retried for 3 minutes (default 600 s)
records_retry_s = 180.0

EOT
  gpus_toml
}

# write $1 from stdin only when it changed (config files are bind-mounted: keep the inode)
put() {
  local new; new=$(cat)
  [ -f "$1" ] && [ "$(cat "$1")" = "$new" ] && return 1
  printf '%s\n' "$new" > "$1"
  return 0
}

agent_alive() { lab_pidfile_alive "$AGENT_PID"; }

stop_agent() {
  agent_alive || { rm -f "$AGENT_PID"; return 0; }
  local pid; pid=$(cat "$AGENT_PID")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do lab_running "$pid" || break; sleep 0.1; done
  lab_running "$pid" && kill -9 "$pid" 2>/dev/null
  rm -f "$AGENT_PID"
  echo "stopped agent $pid"
}

case "${1:-}" in
files)
  # 1. the lab's own venv from this checkout (the host lab's /opt/slurm-colo-lab is not touched)
  if [ ! -x "$PY" ]; then
    /usr/bin/python3 -m venv "$MN_VENV"
    "$MN_VENV/bin/pip" install -q --upgrade pip >/dev/null
  fi
  if [ ! -f "$MN_VENV/.installed" ] || [ "$(cat "$MN_VENV/.installed")" != "$REPO" ] ||
     [ -n "$(find "$REPO/slurm_colo" "$REPO/pyproject.toml" -newer "$MN_VENV/.installed" \
             ! -name '*.so' ! -name '*.o' ! -path '*/__pycache__*' -print -quit)" ]; then
    tmp=$(mktemp -d)  # build from a copy: the checkout gets no build/ or egg-info
    cp -a "$REPO/pyproject.toml" "$REPO/slurm_colo" "$tmp/"
    for f in README.md LICENSE; do [ -e "$REPO/$f" ] && cp -a "$REPO/$f" "$tmp/"; done
    "$MN_VENV/bin/pip" install -q --no-cache-dir --no-deps --force-reinstall "$tmp" >/dev/null 2>&1 ||
      "$MN_VENV/bin/pip" install -q --no-cache-dir "$tmp" >/dev/null
    "$MN_VENV/bin/python" -c 'import sqlalchemy, typer, numpy' 2>/dev/null ||
      "$MN_VENV/bin/pip" install -q --no-cache-dir "$tmp" >/dev/null
    rm -rf "$tmp"
    echo "$REPO" > "$MN_VENV/.installed"
    touch "$MN_DIR/.colo-reinstalled"
  fi
  chmod -R a+rX "$(dirname "$MN_VENV")"
  # 2. hook shims, the MPS emulator wrapper, one NVML scenario per GPU model (2 GPUs a node)
  install -d -m 0755 "$LIBEXEC"
  for h in prolog epilog taskprolog taskepilog; do install -m 0755 "$REPO/prolog/slurm-colo-$h" "$LIBEXEC/"; done
  # -I: the installed copy, not the checkout the cwd would put first (a node's /tmp is its
  # own, so a checkout under /tmp is not there)
  emu=$("$PY" -I -c 'import slurm_colo.emulators.mps_control as m; print(m.__file__)')
  printf '#!/bin/sh\n# lab stand-in for nvidia-cuda-mps-control (the slurm-colo MPS emulator)\nexec %s -I -S %s "$@"\n' \
    "$PY" "$emu" > "$LIBEXEC/nvidia-cuda-mps-control"
  chmod 0755 "$LIBEXEC/nvidia-cuda-mps-control"
  "$PY" - "$REPO/contrib/lab/nvml-scenario.json" "$LIBEXEC" <<'EOP'
import json, sys
src = json.load(open(sys.argv[1]))
for node in ("colo-gpu1", "colo-gpu2", "colo-gpu3"):
    model, name, mib = ("k80", "Tesla K80", 12288) if node == "colo-gpu3" else ("v100", "Tesla V100-SXM2-32GB", 32768)
    gpus = []
    for g in src["gpus"][:2]:  # GPU UUIDs differ per node, as on real hardware
        g = dict(g, name=name, memory_total_mib=mib, uuid=g["uuid"].replace("GPU-1ab", f"GPU-{node[-1]}ab"))
        gpus.append(g)
    doc = {"_comment": f"multi-node lab: the two emulated {model} GPUs of {node}", "gpus": gpus}
    text = json.dumps(doc, indent=1) + "\n"
    path = f"{sys.argv[2]}/nvml-scenario-{node}.json"
    try:
        same = open(path).read() == text
    except OSError:
        same = False
    if not same:
        open(path, "w").write(text)
EOP
  chmod a+r "$LIBEXEC"/*.json
  # 3. lab users (as the single-node lab: jobs of two users never share one MPS GPU)
  for u in alice bob; do id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"; done
  # 4. one config dir per node, bound over /etc/slurm-colo inside it (up.sh --ns-setup)
  install -d -m 0755 /etc/slurm-colo  # the mount point (the host lab uses it too; not written)
  install -d -m 0755 "$HEAD_STATE"
  for n in $(mn_names); do
    d=$MN_DIR/nodes/$n/slurm-colo
    install -d -m 0755 "$d" "$MN_DIR/nodes/$n/run/slurm-colo"
    if [ "$(mn_role "$n")" = head ]; then head_config | put "$d/config.toml" || true
    else
      install -d -m 0755 "$MN_DIR/nodes/$n/colo-spool"
      node_config "$n" | put "$d/config.toml" || true
    fi
    printf 'SLURM_COLO_PYTHON=%s\nSLURM_COLO_CONFIG=/etc/slurm-colo/config.toml\n' "$PY" | put "$d/hooks.env" || true
    chmod 0644 "$d/config.toml" "$d/hooks.env"
  done
  # 5. history DB and scores on the head (plain files under $MN_DIR, written from the host)
  export SLURM_COLO_CONFIG=$MN_DIR/nodes/colo-head/slurm-colo/config.toml
  if [ ! -s "$HEAD_STATE/history.db" ] || [ -e "$MN_DIR/.colo-reinstalled" ]; then
    "$MN_VENV/bin/slurm-colo" db upgrade >/dev/null
  fi
  [ -s "$HEAD_STATE/scores.json" ] || "$MN_VENV/bin/slurm-colo" scores load --measured v100 >/dev/null
  # 6. SPANK plugin, job_submit.lua, gres.conf (read by slurmctld/slurmd from $MN_DIR/etc/slurm)
  E=$MN_DIR/etc/slurm
  make -s -C "$REPO/spank" >/dev/null
  cmp -s "$REPO/spank/colocate.so" "$LIBEXEC/colocate.so" || install -m 0755 "$REPO/spank/colocate.so" "$LIBEXEC/colocate.so"
  install -d "$E/plugstack.conf.d"
  echo "include /etc/slurm/plugstack.conf.d/*.conf" | put "$E/plugstack.conf" || true
  echo "optional $LIBEXEC/colocate.so" | put "$E/plugstack.conf.d/slurm-colo.conf" || true
  "$PY" - "$E" <<'EOP'
import sys
from slurm_colo.config import load_config
from slurm_colo.gres_layout import gres_conf
from slurm_colo.lua import render_job_submit_lua
cfg = load_config()
open(f"{sys.argv[1]}/job_submit.lua.new", "w").write(render_job_submit_lua(cfg))
open(f"{sys.argv[1]}/gres.conf.new", "w").write(gres_conf(cfg.gpus))
EOP
  # job_submit.lua is read at each slurmctld start: changed in place, it waits for the next one
  cmp -s "$E/job_submit.lua.new" "$E/job_submit.lua" || cp "$E/job_submit.lua.new" "$E/job_submit.lua"
  rm -f "$E/job_submit.lua.new"  # gres.conf.new is compared (and moved) by up.sh
  ;;
agent)
  if [ -e "$MN_DIR/.colo-reinstalled" ]; then stop_agent >/dev/null; rm -f "$MN_DIR/.colo-reinstalled"; fi
  if ! agent_alive; then
    # no exec.sh --bg: the agent gets its own pid file and log, and no PYTHONPATH from the caller
    env -u PYTHONPATH -u SLURM_CONF SLURM_COLO_CONFIG=/etc/slurm-colo/config.toml \
      setsid nsenter --net=/run/netns/colo-head --mount="$MN_NS/colo-head.mnt" --uts="$MN_NS/colo-head.uts" -- \
      "$MN_VENV/bin/slurm-colo" agent </dev/null >>"$AGENT_LOG" 2>&1 &
    echo $! > "$AGENT_PID"
  fi
  ok=0
  for _ in $(seq 1 100); do
    mn_in colo-head env -u PYTHONPATH "$PY" -c 'from slurm_colo.contracts.client import ping; from slurm_colo.config import load_config; import sys; sys.exit(0 if ping(load_config()) else 1)' 2>/dev/null && { ok=1; break; }
    sleep 0.1
  done
  [ $ok -eq 1 ] || { echo "multinode lab: the agent does not answer; last lines of $AGENT_LOG:" >&2; tail -20 "$AGENT_LOG" >&2; exit 1; }
  ;;
stop) stop_agent ;;
*) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
