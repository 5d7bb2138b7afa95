#!/bin/bash
# Bring up the multi-node slurm-colo lab: one controller and three GPU nodes on one machine,
# each node in its own network, UTS and mount namespace, joined by a bridge on a private subnet.
#
#   colo-head  10.77.0.1   slurmctld, the slurm-colo agent (unix socket + tcp:10.77.0.1:6830), history DB
#   colo-gpu1  10.77.0.11  slurmd, 2 emulated V100 (v100_s0 shared with 4 shards, 1 whole v100)
#   colo-gpu2  10.77.0.12  slurmd, 2 emulated V100 (same layout as colo-gpu1)
#   colo-gpu3  10.77.0.13  slurmd, 2 emulated K80  (k80_s0 shared with 4 shards, 1 whole k80)
#
# slurm-colo is installed as on a real site (colo.sh): SPANK plugin, job_submit.lua, node hooks,
# one config per node; MN_COLO=0 brings up the bare Slurm cluster instead.
# Root, no systemd. Idempotent: what is already up is kept. Stop everything with down.sh.
# Nothing on the host is reconfigured: the lab has its own munged (own key and socket dir),
# its own Slurm config dir, state under MN_DIR, and no address on the host's network stack.
#
#   MN_DIR   state, config, logs, pinned namespaces   (default /var/lib/slurm-colo-multinode)
#   MN_COLO  1: with slurm-colo (default), 0: Slurm only
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

# ---- inside a freshly unshared mount + UTS namespace (called by this script itself) -------------
if [ "${1:-}" = "--ns-setup" ]; then
  n=$2 role=$3
  hostname "$n"
  # /sys stays the host's: a fresh sysfs (what `ip netns exec` mounts) hides /sys/fs/cgroup and
  # slurmd 22.05 then stops with "No filesystem mounted on /sys/fs/cgroup" even with proctrack/linuxproc
  # no references to the other nodes' pinned namespaces or to the host's netns files
  umount -l "$MN_NS" 2>/dev/null || true
  umount -l /run/netns 2>/dev/null || true
  # own /run (host-visible under MN_DIR for pid files), with the lab's munge socket dir in it
  mount --bind "$MN_DIR/nodes/$n/run" /run
  mount --bind "$MN_DIR/munge/run" /run/munge
  # the lab's Slurm config and name resolution
  mount --bind "$MN_DIR/etc/slurm" /etc/slurm
  mount --bind "$MN_DIR/etc/hosts" /etc/hosts
  # this node's own slurm-colo config and hooks.env (colo.sh writes them)
  mount --bind "$MN_DIR/nodes/$n/slurm-colo" /etc/slurm-colo
  # own /tmp, /var/spool and /var/log (the host's are hidden); spool and logs come from MN_DIR
  mount -t tmpfs -o mode=1777,size=256m tmpfs /tmp
  mount -t tmpfs -o mode=0755,size=4m tmpfs /var/spool
  mount -t tmpfs -o mode=0755,size=4m tmpfs /var/log
  if [ "$role" = head ]; then spool=/var/spool/slurmctld; else spool=/var/spool/slurmd; fi
  mkdir -p "$spool" /var/log/slurm
  mount --bind "$MN_DIR/nodes/$n/spool" "$spool"
  mount --bind "$MN_DIR/nodes/$n/log" /var/log/slurm
  # own /dev: the basic devices, a private devpts, /dev/shm, and this node's emulated GPUs
  mount -t tmpfs -o mode=0755,size=64k,nosuid tmpfs /dev
  mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/full c 1 7
  mknod -m 666 /dev/random c 1 8; mknod -m 666 /dev/urandom c 1 9; mknod -m 666 /dev/tty c 5 0
  mkdir /dev/pts /dev/shm
  mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts /dev/pts
  ln -s pts/ptmx /dev/ptmx
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
  ln -s /proc/self/fd /dev/fd; ln -s /proc/self/fd/0 /dev/stdin
  ln -s /proc/self/fd/1 /dev/stdout; ln -s /proc/self/fd/2 /dev/stderr
  if [ "$role" = gpu ]; then
    for i in 0 1; do mknod -m 666 "/dev/nvidia$i" c 195 "$i"; done
    mknod -m 666 /dev/nvidiactl c 195 255
  fi
  exit 0
fi

[ "$(id -u)" -eq 0 ] || { echo "multinode lab: run as root" >&2; exit 1; }
t0=$(date +%s.%N)
log() { awk -v a="$t0" -v b="$(date +%s.%N)" -v m="$*" 'BEGIN{printf "[multinode %5.1fs] %s\n", b-a, m}'; }

# 1. packages (those of the single-node lab, and the network tools)
need=()
for p in slurmctld slurmd slurm-client munge libslurm-dev lua-socket gcc make libc6-dev python3-venv \
         iproute2 util-linux mount python3 curl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get update -qq
  timeout 600 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
log "packages: $(slurmctld -V)"
MN_COLO=${MN_COLO:-1}

# 2. directories and config files
install -d -m 0755 "$MN_DIR" "$MN_DIR/etc/slurm" "$MN_NS" "$MN_DIR/munge"
install -d -m 1777 "$MN_DIR/out"
for n in $(mn_names); do
  install -d -m 0755 "$MN_DIR/nodes/$n/run" "$MN_DIR/nodes/$n/run/munge" "$MN_DIR/nodes/$n/spool" "$MN_DIR/nodes/$n/log" \
    "$MN_DIR/nodes/$n/slurm-colo"
done
install -d -m 0755 /etc/slurm-colo  # mount point of each node's own slurm-colo config
colo_lua_old=$(cat "$MN_DIR/etc/slurm/job_submit.lua" 2>/dev/null || true)
if [ "$MN_COLO" = 1 ]; then
  "$HERE/colo.sh" files   # venv, per-node configs, gres.conf.new, job_submit.lua, SPANK plugin
  log "slurm-colo: $(/opt/slurm-colo-multinode/venv/bin/python -c 'import slurm_colo; print(slurm_colo.__version__)'), configs in $MN_DIR/nodes/*/slurm-colo"
fi
{
  echo "# name resolution inside the multi-node lab (bind-mounted over /etc/hosts in every node)"
  echo "127.0.0.1 localhost"
  for n in $(mn_names); do echo "$(mn_addr "$n") $n"; done
} > "$MN_DIR/etc/hosts.new"
# rewritten in place: the file is bind-mounted, a new inode would not be seen inside the nodes
cmp -s "$MN_DIR/etc/hosts.new" "$MN_DIR/etc/hosts" || cat "$MN_DIR/etc/hosts.new" > "$MN_DIR/etc/hosts"
rm -f "$MN_DIR/etc/hosts.new"

head_addr=$(mn_addr colo-head)
colo_conf=""
[ "$MN_COLO" = 1 ] && colo_conf="# slurm-colo (contrib/lab/multinode/colo.sh): Lua hook, SPANK plugin (plugstack.conf), node hooks
JobSubmitPlugins=lua
PrologFlags=Alloc
Prolog=/opt/slurm-colo-multinode/libexec/slurm-colo-prolog
Epilog=/opt/slurm-colo-multinode/libexec/slurm-colo-epilog
TaskProlog=/opt/slurm-colo-multinode/libexec/slurm-colo-taskprolog
TaskEpilog=/opt/slurm-colo-multinode/libexec/slurm-colo-taskepilog
PrologEpilogTimeout=60"
cat > "$MN_DIR/etc/slurm/slurm.conf.new" <<EOT
# slurm-colo multi-node lab (contrib/lab/multinode/up.sh); seen as /etc/slurm inside the lab only
ClusterName=$MN_CLUSTER
SlurmctldHost=colo-head($head_addr)
$(cat "$HERE/../slurm-common.conf")
${colo_conf}
# lab time is compressed: a silent slurmd makes its node DOWN after 15 s
SlurmdTimeout=15
MessageTimeout=5
NodeName=colo-gpu1 NodeAddr=$(mn_addr colo-gpu1) CPUs=4 RealMemory=2000 Feature=v100 Gres=gpu:v100_s0:1,gpu:v100:1,shard:4 State=UNKNOWN
NodeName=colo-gpu2 NodeAddr=$(mn_addr colo-gpu2) CPUs=4 RealMemory=2000 Feature=v100 Gres=gpu:v100_s0:1,gpu:v100:1,shard:4 State=UNKNOWN
NodeName=colo-gpu3 NodeAddr=$(mn_addr colo-gpu3) CPUs=4 RealMemory=2000 Feature=k80 Gres=gpu:k80_s0:1,gpu:k80:1,shard:4 State=UNKNOWN
PartitionName=gpu Nodes=colo-gpu[1-3] Default=YES MaxTime=INFINITE State=UP
PartitionName=v100 Nodes=colo-gpu[1-2] MaxTime=INFINITE State=UP
PartitionName=k80 Nodes=colo-gpu3 MaxTime=INFINITE State=UP
EOT
# the GRES lines have the shape `slurm-colo install` generates (slurm_colo/gres_layout.py);
# with slurm-colo, colo.sh wrote gres.conf.new from the agent's [[gpus]] tables
[ "$MN_COLO" = 1 ] || cat > "$MN_DIR/etc/slurm/gres.conf.new" <<'EOT'
# gres.conf of the multi-node lab: per-node emulated GPUs (/dev/nvidia0-1 in each node's own /dev)
AutoDetect=off
# slurm-colo: colo-gpu[1-2]: 2 x v100, shared pool 0, 4 shards per shared GPU
NodeName=colo-gpu[1-2] Name=gpu Type=v100_s0 File=/dev/nvidia0
NodeName=colo-gpu[1-2] Name=gpu Type=v100 File=/dev/nvidia1
NodeName=colo-gpu[1-2] Name=shard Count=4 File=/dev/nvidia0
# slurm-colo: colo-gpu3: 2 x k80, shared pool 0, 4 shards per shared GPU
NodeName=colo-gpu3 Name=gpu Type=k80_s0 File=/dev/nvidia0
NodeName=colo-gpu3 Name=gpu Type=k80 File=/dev/nvidia1
NodeName=colo-gpu3 Name=shard Count=4 File=/dev/nvidia0
EOT
changed=0
for f in slurm.conf gres.conf; do
  if cmp -s "$MN_DIR/etc/slurm/$f.new" "$MN_DIR/etc/slurm/$f"; then rm -f "$MN_DIR/etc/slurm/$f.new"
  else mv -f "$MN_DIR/etc/slurm/$f.new" "$MN_DIR/etc/slurm/$f"; changed=1; fi
done
[ "$colo_lua_old" = "$(cat "$MN_DIR/etc/slurm/job_submit.lua" 2>/dev/null || true)" ] || changed=1
log "config in $MN_DIR/etc (cluster $MN_CLUSTER)"

# 3. the lab's own munged: own key, own socket dir (bind-mounted as /run/munge in every node)
M=$MN_DIR/munge
install -d -m 0755 "$M/run"
if [ ! -s "$M/munge.key" ]; then
  (umask 077; dd if=/dev/urandom of="$M/munge.key" bs=128 count=1 status=none)
fi
chmod 0400 "$M/munge.key"
if ! lab_pidfile_alive "$M/run/munged.pid"; then
  rm -f "$M/run/munged.pid" "$M/run/munge.socket.2" "$M/run/munge.socket.2.lock"
  munged --socket="$M/run/munge.socket.2" --key-file="$M/munge.key" --pid-file="$M/run/munged.pid" \
         --seed-file="$M/munged.seed" --log-file="$M/munged.log"
fi
for _ in $(seq 1 50); do
  munge -S "$M/run/munge.socket.2" -n 2>/dev/null | unmunge -S "$M/run/munge.socket.2" >/dev/null 2>&1 && break
  sleep 0.1
done
munge -S "$M/run/munge.socket.2" -n | unmunge -S "$M/run/munge.socket.2" >/dev/null
log "munged pid $(cat "$M/run/munged.pid") on $M/run/munge.socket.2"

# 4. network: a switch namespace with the bridge, one veth pair per node, addresses on the /24.
#    The host's own network namespace gets no interface and no address.
[ -e /run/netns ] || touch "$MN_DIR/.made-run-netns"   # down.sh removes /run/netns only if we made it
[ -e "/run/netns/$MN_SWITCH" ] || ip netns add "$MN_SWITCH"
ip -n "$MN_SWITCH" link set lo up
ip -n "$MN_SWITCH" link show "$MN_BRIDGE" >/dev/null 2>&1 || ip -n "$MN_SWITCH" link add "$MN_BRIDGE" type bridge
ip -n "$MN_SWITCH" link set "$MN_BRIDGE" up
for n in $(mn_names); do
  port=v-${n#colo-}
  [ -e "/run/netns/$n" ] || ip netns add "$n"
  ip -n "$n" link set lo up
  if ! ip -n "$n" link show eth0 >/dev/null 2>&1; then
    ip -n "$MN_SWITCH" link del "$port" 2>/dev/null || true
    ip -n "$MN_SWITCH" link add "$port" type veth peer name eth0 netns "$n"
  fi
  ip -n "$MN_SWITCH" link set "$port" master "$MN_BRIDGE" up
  ip -n "$n" addr replace "$(mn_addr "$n")/24" dev eth0
  ip -n "$n" link set eth0 up
done
log "network: bridge $MN_BRIDGE in netns $MN_SWITCH, $MN_NET.0/24"

# 5. per-node mount + UTS namespaces, pinned by bind mounts under $MN_NS (a private mount)
mountpoint -q "$MN_NS" || mount --bind "$MN_NS" "$MN_NS"
mount --make-private "$MN_NS"
for n in $(mn_names); do
  if mn_ns_ready "$n"; then
    # a node set up before slurm-colo was in the lab: give it its config dir now
    mn_in "$n" mountpoint -q /etc/slurm-colo || mn_in "$n" mount --bind "$MN_DIR/nodes/$n/slurm-colo" /etc/slurm-colo
    continue
  fi
  for k in mnt uts; do
    mountpoint -q "$MN_NS/$n.$k" && umount "$MN_NS/$n.$k"
    : > "$MN_NS/$n.$k"
  done
  nsenter --net="/run/netns/$n" -- \
    unshare --mount="$MN_NS/$n.mnt" --uts="$MN_NS/$n.uts" --propagation private \
    "$HERE/up.sh" --ns-setup "$n" "$(mn_role "$n")"
done
log "namespaces: $(mn_names | tr '\n' ' ')"

# 6. Slurm daemons (pid files are in each node's own /run, i.e. $MN_DIR/nodes/<node>/run)
any_slurm_daemon() {
  local n
  for n in $(mn_names); do
    lab_pidfile_alive "$MN_DIR/nodes/$n/run/slurmd.pid" && return 0
  done
  lab_pidfile_alive "$MN_DIR/nodes/colo-head/run/slurmctld.pid"
}
if [ $changed -eq 1 ] && any_slurm_daemon; then
  log "slurm config changed: restarting the daemons"
  "$HERE/down.sh" --slurm-only >/dev/null
fi
if ! lab_pidfile_alive "$MN_DIR/nodes/colo-head/run/slurmctld.pid"; then
  mn_in colo-head slurmctld
fi
for _ in $(seq 1 100); do mn_in colo-head timeout 5 scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
log "slurmctld pid $(cat "$MN_DIR/nodes/colo-head/run/slurmctld.pid") on colo-head"
for n in $(mn_names); do
  [ "$(mn_role "$n")" = gpu ] || continue
  lab_pidfile_alive "$MN_DIR/nodes/$n/run/slurmd.pid" || mn_in "$n" slurmd
done
gpus=$(mn_names | grep -v colo-head | paste -sd,)
not_up() { mn_in colo-head timeout 5 sinfo -h -N -p gpu -o '%N %T' 2>/dev/null | awk '$2!~/^(idle|mixed|allocated)$/{print $1}' | paste -sd,; }
for try in 1 2; do
  for _ in $(seq 1 $((try == 1 ? 25 : 100))); do
    bad=$(not_up)
    [ -z "$bad" ] && break
    sleep 0.2
  done
  [ -z "$bad" ] && break
  # a node drained or down from an earlier run (e.g. an old GRES config) stays so across restarts
  # (ReturnToService=2 only revives nodes that were DOWN for not responding): resume it once
  [ $try -eq 1 ] && { log "resuming $bad"; mn_in colo-head scontrol update nodename="$bad" state=resume || true; }
done
mn_in colo-head sinfo -N -p gpu -o '%N %T %c %G %f'
[ -z "$bad" ] || { echo "multinode lab: nodes not up; see $MN_DIR/nodes/*/log" >&2; exit 1; }
log "lab ready: $(for n in $(mn_names); do [ "$(mn_role "$n")" = gpu ] && printf '%s=%s ' "$n" "$(cat "$MN_DIR/nodes/$n/run/slurmd.pid")"; done)"
if [ "$MN_COLO" = 1 ]; then
  "$HERE/colo.sh" agent
  log "slurm-colo agent pid $(cat "$MN_DIR/nodes/colo-head/run/slurm-colo-agent.pid") on colo-head: unix:/run/slurm-colo/agent.sock, tcp:$head_addr:6830"
fi
