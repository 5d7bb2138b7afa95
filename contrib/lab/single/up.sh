#!/bin/bash
# Bring up the single-node slurm-colo lab (contrib/lab/up.sh --single): a Slurm 22.05 cluster on loopback (no systemd)
# with emulated GPUs, the SPANK plugin, the Lua hook, the node hooks and the agent.
# Idempotent: re-running it keeps what is already up. Stop everything with down.sh.
#
#   LAB_DIR   state, logs, pid files       (default /var/lib/slurm-colo-lab)
#   LAB_GPUS  emulated GPUs on the node    (default 4; GPUs 0-1 shared, the rest exclusive)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
. "$REPO/contrib/lab/colo-lib.sh"
. "$REPO/contrib/lab/proc-lib.sh"
LAB_DIR=${LAB_DIR:-/var/lib/slurm-colo-lab}
LAB_GPUS=${LAB_GPUS:-4}
LAB_SHARED=${LAB_SHARED:-0-1}
NODE=$(hostname -s)
# The lab's own environment, outside the checkout: jobs' TaskProlog runs as the job user and
# must be able to read the interpreter, the package and the shims wherever the repo lives.
VENV=${VENV:-/opt/slurm-colo-lab/venv}
PY=$VENV/bin/python
t0=$(date +%s.%N)
reinstalled=0
log() { awk -v a="$t0" -v b="$(date +%s.%N)" -v m="$*" 'BEGIN{printf "[lab %5.1fs] %s\n", b-a, m}'; }
[ "$(id -u)" -eq 0 ] || { echo "lab: run as root (it starts slurmctld/slurmd and creates device nodes)" >&2; exit 1; }

# 1. packages
need=()
for p in slurmctld slurmd slurm-client munge libslurm-dev lua-socket gcc make libc6-dev python3-venv; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
log "packages: $(slurmctld -V)"

# 2. python environment with slurm-colo (Debian's python3, readable by every user);
#    reinstalled when the package sources changed since the last install
if [ ! -x "$PY" ]; then
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
fi
if [ ! -f "$VENV/.installed" ] || [ "$(cat "$VENV/.installed")" != "$REPO" ] ||
   [ -n "$(find "$REPO/slurm_colo" "$REPO/pyproject.toml" -newer "$VENV/.installed" -print -quit)" ]; then
  rm -rf "$REPO/build"
  "$VENV/bin/pip" install -q --no-cache-dir "$REPO" >/dev/null
  rm -rf "$REPO/build" "$REPO"/*.egg-info
  echo "$REPO" > "$VENV/.installed"  # installed from this checkout, at this time
  reinstalled=1
fi
chmod -R a+rX "$(dirname "$VENV")"
log "python: $("$PY" -c 'import slurm_colo,sys; print(sys.executable, slurm_colo.__version__)')"

# 3. munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 status=none
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 0755 /run/munge
if ! { [ -s /run/munge/munged.pid ] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; }; then
  runuser -u munge -- /usr/sbin/munged
fi
for _ in $(seq 1 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done

# 4. emulated GPUs: character devices (regular files give jobs no CUDA_VISIBLE_DEVICES)
for i in $(seq 0 $((LAB_GPUS - 1))); do
  [ -c /dev/nvidia$i ] || { rm -f /dev/nvidia$i; mknod -m 666 /dev/nvidia$i c 195 "$i"; }
done

# 5. lab users (jobs of two different users must never share one MPS GPU)
for u in alice bob; do id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"; done

# 6. slurm-colo config, hooks env, scores
install -d -m 0755 /etc/slurm-colo "$LAB_DIR" "$LAB_DIR/state" "$LAB_DIR/spool" "$LAB_DIR/libexec" /run/slurm-colo
for h in prolog epilog taskprolog taskepilog; do install -m 0755 "$REPO/prolog/slurm-colo-$h" "$LAB_DIR/libexec/"; done
install -m 0644 "$REPO/contrib/lab/nvml-scenario.json" "$LAB_DIR/libexec/"
emu=$("$PY" -c 'import slurm_colo.emulators.mps_control as m; print(m.__file__)')
colo_mps_wrapper "$PY" "$emu" > "$LAB_DIR/libexec/nvidia-cuda-mps-control"
chmod 0755 "$LAB_DIR/libexec/nvidia-cuda-mps-control"
install -d -m 1777 "$LAB_DIR/out"
colo_config "$LAB_DIR" "$NODE" "$LAB_GPUS" "$LAB_SHARED" > /etc/slurm-colo/config.toml
printf 'SLURM_COLO_PYTHON=%s\nSLURM_COLO_CONFIG=/etc/slurm-colo/config.toml\n' "$PY" > /etc/slurm-colo/hooks.env
export SLURM_COLO_CONFIG=/etc/slurm-colo/config.toml
colo_seed_scores "$LAB_DIR" "$VENV/bin/slurm-colo"
log "config /etc/slurm-colo/config.toml, history $LAB_DIR/state/history.db, scores $LAB_DIR/state/scores.json"

# 7. SPANK plugin and Lua hook
make -s -C "$REPO/spank" >/dev/null
install -m 0755 "$REPO/spank/colocate.so" "$LAB_DIR/colocate.so"
install -d /etc/slurm/plugstack.conf.d
[ -f /etc/slurm/plugstack.conf ] || echo 'include /etc/slurm/plugstack.conf.d/*.conf' > /etc/slurm/plugstack.conf
echo "optional $LAB_DIR/colocate.so" > /etc/slurm/plugstack.conf.d/slurm-colo.conf
"$PY" -c 'from slurm_colo.lua import render_job_submit_lua as r; from slurm_colo.config import load_config as l; print(r(l()), end="")' > "$LAB_DIR/job_submit.lua.new"
cmp -s "$LAB_DIR/job_submit.lua.new" /etc/slurm/job_submit.lua 2>/dev/null || cp "$LAB_DIR/job_submit.lua.new" /etc/slurm/job_submit.lua

# 8. slurm.conf / gres.conf (GRES lines generated by slurm-colo)
install -d /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
"$PY" - "$LAB_DIR/gres.conf.new" "$LAB_DIR/gres.txt" <<'EOP'
import sys
from slurm_colo.config import load_config
from slurm_colo.gres_layout import gres_conf
cfg = load_config()
open(sys.argv[1], "w").write(gres_conf(cfg.gpus))
open(sys.argv[2], "w").write(cfg.gpus[0].node_gres())
EOP
cat > "$LAB_DIR/slurm.conf.new" <<EOT
# slurm-colo lab cluster (contrib/lab/single/up.sh)
ClusterName=lab
SlurmctldHost=${NODE}(127.0.0.1)
$(cat "$REPO/contrib/lab/slurm-common.conf")
JobSubmitPlugins=lua
PrologFlags=Alloc
Prolog=$LAB_DIR/libexec/slurm-colo-prolog
Epilog=$LAB_DIR/libexec/slurm-colo-epilog
TaskProlog=$LAB_DIR/libexec/slurm-colo-taskprolog
TaskEpilog=$LAB_DIR/libexec/slurm-colo-taskepilog
PrologEpilogTimeout=60
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=16 RealMemory=4000 Gres=$(cat "$LAB_DIR/gres.txt") State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOT
changed=0
cmp -s "$LAB_DIR/slurm.conf.new" /etc/slurm/slurm.conf 2>/dev/null || { cp "$LAB_DIR/slurm.conf.new" /etc/slurm/slurm.conf; changed=1; }
cmp -s "$LAB_DIR/gres.conf.new" /etc/slurm/gres.conf 2>/dev/null || { cp "$LAB_DIR/gres.conf.new" /etc/slurm/gres.conf; changed=1; }

# 9. daemons (config changed -> restart them; never by name, always by pid file)
if [ $changed -eq 1 ] && { lab_pidfile_alive /run/slurmd.pid || lab_pidfile_alive /run/slurmctld.pid; }; then
  log "slurm config changed: restarting daemons"
  "$REPO/contrib/lab/single/down.sh" --slurm-only >/dev/null
fi
if ! lab_pidfile_alive /run/slurmctld.pid; then
  # without saved state job ids start at 1 again: an old job's output file would be appended
  # to (--open-mode=append) or, owned by another user, keep a new job from opening it
  [ -e /var/spool/slurmctld/job_state ] || rm -f "$LAB_DIR/out"/*.out
  slurmctld
fi
for _ in $(seq 1 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
lab_pidfile_alive /run/slurmd.pid || slurmd
for _ in $(seq 1 100); do
  st=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
  case "$st" in idle|mixed|allocated) break;; esac
  sleep 0.2
done
st=$(sinfo -h -n "$NODE" -o %T)
case "$st" in idle|mixed|allocated) ;; *) scontrol update nodename="$NODE" state=resume 2>/dev/null || true ;; esac
log "slurmctld $(cat /run/slurmctld.pid), slurmd $(cat /run/slurmd.pid), node $NODE $(sinfo -h -n "$NODE" -o '%T %G')"

# 10. the agent (restarted when the package was reinstalled)
if [ $reinstalled -eq 1 ] && lab_pidfile_alive "$LAB_DIR/agent.pid"; then
  lab_stop "$LAB_DIR/agent.pid" >/dev/null
fi
if ! lab_pidfile_alive "$LAB_DIR/agent.pid"; then
  nohup "$VENV/bin/slurm-colo" agent >>"$LAB_DIR/agent.log" 2>&1 &
  echo $! > "$LAB_DIR/agent.pid"
fi
ok=0
for _ in $(seq 1 100); do
  "$PY" -c 'from slurm_colo.contracts.client import ping; from slurm_colo.config import load_config; import sys; sys.exit(0 if ping(load_config()) else 1)' 2>/dev/null && { ok=1; break; }
  sleep 0.1
done
[ $ok -eq 1 ] || { echo "lab: the agent does not answer; last lines of $LAB_DIR/agent.log:" >&2; tail -20 "$LAB_DIR/agent.log" >&2; exit 1; }
log "agent pid $(cat "$LAB_DIR/agent.pid") on /run/slurm-colo/agent.sock (log $LAB_DIR/agent.log)"
log "lab ready"
