#!/bin/bash
# Start a single-node Slurm lab inside the chroot built by build-chroot.sh, in new mount, UTS,
# network and PID namespaces:  up.sh SUITE      (stop it with down.sh SUITE)
#
# Inside: hostname colo-SUITE, own loopback (ports 6817/6818 do not clash with the host's Slurm),
# own munged (own key, socket in the lab's /run), tmpfs /run and /dev with 4 emulated GPUs
# (/dev/nvidia0-3, char 195:N), GresTypes=gpu,shard with typed GPUs. Hook scripts dump their
# environment to /opt/lab/dumps inside the chroot. Idempotent: an up lab with an unchanged
# config is left running; a changed config restarts it.
#
#   JOB_SUBMIT_LUA=FILE   install FILE as /etc/slurm/job_submit.lua and set JobSubmitPlugins=lua
#   EXTRA_SLURM_CONF=...  lines appended to slurm.conf (before the node lines)
#   NODE_GRES=...         the node's Gres= (default below; with --colo the layout's),
#                         GRES_CONF=FILE a gres.conf to use
#
#   up.sh SUITE --colo    also install slurm-colo from this checkout into the chroot and start
#                         its agent in the lab (colo.sh): SPANK plugin, job_submit.lua,
#                         gres.conf and node hooks as `slurm-colo install` renders them
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

if [ "${1:-}" = --ns-init ]; then
  # Runs as PID 1 of the new PID namespace, in the new mount/UTS/network namespaces, with the
  # host's binaries; sets up the mounts and enters the chroot.
  DIR=$2 NODE=$3   # $4: bind-cgroup or nothing
  hostname "$NODE"
  ip link set lo up
  # glibc's getaddrinfo(AI_ADDRCONFIG) ignores 127.0.0.1: with nothing else configured, Slurm
  # >= 23.x cannot resolve its own listen address (getaddrinfo((null):6817) failed). A second
  # loopback address is enough.
  ip addr add 127.0.1.1/32 dev lo
  mount --make-rprivate /
  mount -t proc proc "$DIR/proc"
  mount -t sysfs -o ro sysfs "$DIR/sys"
  # Slurm 22.05 cannot be told to use no cgroup plugin: give it the host's cgroup mounts
  if [ "$4" = bind-cgroup ]; then mount --rbind /sys/fs/cgroup "$DIR/sys/fs/cgroup"; fi
  mount -t tmpfs -o mode=0755,size=64m tmpfs "$DIR/run"
  mount -t tmpfs -o mode=0755,size=16m tmpfs "$DIR/dev"
  d=$DIR/dev
  mknod -m 666 $d/null c 1 3; mknod -m 666 $d/zero c 1 5; mknod -m 666 $d/full c 1 7
  mknod -m 666 $d/random c 1 8; mknod -m 666 $d/urandom c 1 9; mknod -m 666 $d/tty c 5 0
  mkdir $d/pts $d/shm
  mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts $d/pts
  ln -s pts/ptmx $d/ptmx
  mount -t tmpfs -o mode=1777,size=64m tmpfs $d/shm
  ln -s /proc/self/fd $d/fd; ln -s /proc/self/fd/0 $d/stdin
  ln -s /proc/self/fd/1 $d/stdout; ln -s /proc/self/fd/2 $d/stderr
  # emulated GPUs: character devices are required (regular files give no CUDA_VISIBLE_DEVICES)
  for i in 0 1 2 3; do mknod -m 666 $d/nvidia$i c 195 $i; done
  mknod -m 666 $d/nvidiactl c 195 255
  exec chroot "$DIR" /bin/bash /opt/lab/init.sh
fi

. "$HERE/common.sh"
COLO=0; [ "${2:-}" = --colo ] && COLO=1
[ "$(id -u)" -eq 0 ] || { echo "up: run as root" >&2; exit 1; }
[ -f "$DIR/.slurm-colo-chroot" ] || { echo "up: no chroot at $DIR: run build-chroot.sh $SUITE first" >&2; exit 1; }
t0=$(date +%s.%N)
log() { awk -v a="$t0" -v b="$(date +%s.%N)" -v m="$*" 'BEGIN{printf "[%s %5.1fs] %s\n", "'"$SUITE"'", b-a, m}'; }
LAB=/opt/lab   # inside the chroot
COLO_HOOKS=
if [ $COLO = 1 ]; then . "$HERE/colo.sh"; colo_install; fi
# The GRES layout the project generates (slurm_colo.gres_layout, as in contrib/lab/up.sh): GPUs 0-1
# shared (types v100_s0, v100_s1, 4 shards each), GPUs 2-3 exclusive (type v100). The shard lines
# carry no Type: each shard takes the type of the GPU with the same File, so shard:v100_s1:1
# lands on GPU 1.
NODE_GRES=${NODE_GRES:-gpu:v100_s0:1,gpu:v100_s1:1,gpu:v100:2,shard:8}

# 1. config, hooks and the in-chroot init, written into the chroot (compared with what is there)
new=$(mktemp -d)
trap 'rm -rf "$new"' EXIT
mkdir -p "$new/hooks"
for k in prolog epilog taskprolog taskepilog prologctld epilogctld; do
  cat > "$new/hooks/$k.sh" <<EOT
#!/bin/bash
f=$LAB/dumps/$k.\${SLURM_JOB_ID:-nojob}.\${SLURM_STEP_ID:-\${SLURM_STEPID:-x}}.\$\$.env
{ echo "# uid=\$(id -u) cwd=\$(pwd) date=\$(date +%s.%N)"; env | sort; } > "\$f"
exit 0
EOT
done
# the node hooks: slurm-colo's shims in a lab with slurm-colo, else the environment dumps
hook() { if [ -n "$COLO_HOOKS" ]; then echo "$COLO_HOOKS/slurm-colo-$1"; else echo "$LAB/hooks/$1.sh"; fi; }
cat > "$new/slurm.conf" <<EOT
# slurm-colo version lab ($SUITE), contrib/lab/versions/up.sh
ClusterName=lab
SlurmctldHost=${NODE}(127.0.0.1)
$(cat "$HERE/../slurm-common.conf")
PrologFlags=Alloc
Prolog=$(hook prolog)
Epilog=$(hook epilog)
TaskProlog=$(hook taskprolog)
TaskEpilog=$(hook taskepilog)
PrologSlurmctld=$LAB/hooks/prologctld.sh
EpilogSlurmctld=$LAB/hooks/epilogctld.sh
PrologEpilogTimeout=60
${JOB_SUBMIT_LUA:+JobSubmitPlugins=lua}
${EXTRA_SLURM_CONF:-}
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=16 RealMemory=4000 Feature=colo,fakegpu Gres=${NODE_GRES} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOT
if [ -n "${GRES_CONF:-}" ]; then cp "$GRES_CONF" "$new/gres.conf"; else
cat > "$new/gres.conf" <<EOT
AutoDetect=off
NodeName=${NODE} Name=gpu Type=v100_s0 File=/dev/nvidia0
NodeName=${NODE} Name=gpu Type=v100_s1 File=/dev/nvidia1
NodeName=${NODE} Name=gpu Type=v100 File=/dev/nvidia2
NodeName=${NODE} Name=gpu Type=v100 File=/dev/nvidia3
NodeName=${NODE} Name=shard Count=4 File=/dev/nvidia0
NodeName=${NODE} Name=shard Count=4 File=/dev/nvidia1
EOT
fi
# No cgroup plugin is used (no systemd, no delegated cgroup tree). Slurm >= 23.02 slurmd fails
# without one ("No filesystem mounted on /sys/fs/cgroup ... slurmd initialization failed") unless
# told CgroupPlugin=disabled; 22.05 does not know "disabled" ("cannot find cgroup plugin for
# disabled") and, with no cgroup file system visible, fails the same way: it gets the host's
# /sys/fs/cgroup bound in (autodetect then picks cgroup/v1 or v2 as on the host; nothing is
# written there with proctrack/linuxproc and task/none).
major=$(chroot "$DIR" slurmctld -V | awk '{split($2, v, "."); print v[1]}')
cgroup_mode=bind-cgroup
if [ "$major" -ge 23 ]; then printf 'CgroupPlugin=disabled\n' > "$new/cgroup.conf"; cgroup_mode=none; fi
cat > "$new/init.sh" <<'EOT'
#!/bin/bash
# PID 1 of the lab (inside the chroot): starts munged, slurmctld, slurmd; reaps orphans;
# on SIGTERM stops slurmd, slurmctld, munged (in that order) and exits.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
stop() {
  for p in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
    [ -s "$p" ] || continue
    pid=$(cat "$p"); kill "$pid" 2>/dev/null || continue
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; echo "init: SIGKILL $p"; }
  done
  exit 0
}
trap stop TERM INT
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 status=none
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
fi
runuser -u munge -- /usr/sbin/munged
for _ in $(seq 1 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
install -d /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
slurmctld
for _ in $(seq 1 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
slurmd
for _ in $(seq 1 50); do [ -s /run/slurmd.pid ] && break; sleep 0.1; done
echo "init: munged $(cat /run/munge/munged.pid) slurmctld $(cat /run/slurmctld.pid) slurmd $(cat /run/slurmd.pid)"
while :; do sleep 3600 & wait $!; done
EOT
[ -n "${JOB_SUBMIT_LUA:-}" ] && cp "$JOB_SUBMIT_LUA" "$new/job_submit.lua"

changed=0
inst() { # inst SRC DEST MODE
  if ! cmp -s "$1" "$DIR$2"; then install -D -m "$3" "$1" "$DIR$2"; changed=1; fi
}
for f in slurm.conf gres.conf; do inst "$new/$f" /etc/slurm/$f 0644; done
if [ -f "$new/cgroup.conf" ]; then inst "$new/cgroup.conf" /etc/slurm/cgroup.conf 0644
elif [ -e "$DIR/etc/slurm/cgroup.conf" ]; then rm -f "$DIR/etc/slurm/cgroup.conf"; changed=1; fi
if [ -f "$new/job_submit.lua" ]; then inst "$new/job_submit.lua" /etc/slurm/job_submit.lua 0644
elif [ -e "$DIR/etc/slurm/job_submit.lua" ]; then rm -f "$DIR/etc/slurm/job_submit.lua"; changed=1; fi
inst "$new/init.sh" $LAB/init.sh 0755
for f in "$new"/hooks/*.sh; do inst "$f" "$LAB/hooks/$(basename "$f")" 0755; done
install -d -m 1777 "$DIR$LAB/dumps"
# the SPANK plugin only in a lab with slurm-colo (colo.sh writes it)
if [ $COLO = 0 ] && [ -e "$DIR/etc/slurm/plugstack.conf.d/slurm-colo.conf" ]; then
  rm -f "$DIR/etc/slurm/plugstack.conf.d/slurm-colo.conf"; changed=1
fi
printf '127.0.0.1\tlocalhost %s\n' "$NODE" > "$DIR/etc/hosts"
echo "$NODE" > "$DIR/etc/hostname"

# 2. (re)start
if pid=$(holder_pid); then
  if [ $changed -eq 0 ]; then log "already up (PID 1 = $pid)"; else
    log "config changed: restarting"; "$HERE/down.sh" "$SUITE"; fi
fi
if ! pid=$(holder_pid); then
  mkdir -p "$STATE" "$DIR/var/log/slurm"
  # every start is a fresh cluster: no saved jobs or node states (a drain from an earlier
  # config would survive ReturnToService=2); the previous logs are kept as *.log.old
  rm -rf "$DIR/var/spool/slurmctld" "$DIR/var/spool/slurmd" "$DIR$LAB"/dumps/*
  rm -f "$DIR/opt/slurm-colo-lab/agent.pid"   # an agent never outlives its lab
  # job ids start at 1 again: an old job's output file (owned by its user) would keep a new
  # job of another user from opening its own
  rm -f "$DIR/opt/slurm-colo-lab/out"/*
  for f in slurmctld slurmd lab-init; do
    [ -f "$DIR/var/log/slurm/$f.log" ] && mv "$DIR/var/log/slurm/$f.log" "$DIR/var/log/slurm/$f.log.old"
  done
  setsid unshare --mount --uts --net --pid --fork --propagation private \
    "$HERE/up.sh" --ns-init "$DIR" "$NODE" "$cgroup_mode" </dev/null >>"$DIR/var/log/slurm/lab-init.log" 2>&1 &
  ushare=$!
  for _ in $(seq 1 50); do
    pid=$(cat "/proc/$ushare/task/$ushare/children" 2>/dev/null | awk '{print $1}')
    [ -n "$pid" ] && [ "$(readlink "/proc/$pid/root")" = "$DIR" ] && break
    sleep 0.1
  done
  [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$DIR" ] ||
    { echo "up: lab did not start; $DIR/var/log/slurm/lab-init.log:" >&2; tail -20 "$DIR/var/log/slurm/lab-init.log" >&2; exit 1; }
  echo "$pid" > "$STATE/holder.pid"
  log "namespaces up: PID 1 = $pid (unshare $ushare), hostname $NODE"
fi
X() { "$HERE/exec.sh" "$SUITE" "$@"; }
for _ in $(seq 1 150); do
  st=$(X sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
  case "$st" in idle|mixed|allocated) break;; esac
  sleep 0.2
done
case "$st" in
  idle|mixed|allocated) ;;
  *) echo "up: node $NODE is '$st'" >&2; X tail -20 /var/log/slurm/slurmctld.log >&2; X tail -20 /var/log/slurm/slurmd.log >&2; exit 1;;
esac
log "$(X slurmctld -V): node $(X sinfo -h -n "$NODE" -o '%N %T %G')"
[ $COLO = 1 ] && colo_start_agent
log "lab ready"
