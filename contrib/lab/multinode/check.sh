#!/bin/bash
# Check a running multi-node lab (up.sh first). Prints what it sees; exits 1 if a check fails.
#   check.sh                  nodes, GRES, placement, env vars, gres_detail, TCP and isolation
#   check.sh --node-failure   also: SIGKILL colo-gpu2's slurmd, watch Slurm react, restart it
# Jobs run as user alice (created by the single-node lab; falls back to root if missing).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "check.sh: run as root" >&2; exit 1; }
O=$MN_DIR/out
U=alice; id "$U" >/dev/null 2>&1 || U=root
PORT=${MN_CHECK_PORT:-8777}
fail=0
E() { timeout 30 "$HERE/exec.sh" "$@"; }
H() { E colo-head "$@"; }                       # Slurm client commands run on the head
ok() { echo "  ok: $*"; }
bad() { echo "  FAIL: $*"; fail=1; }
sec() { echo; echo "== $*"; }
# submit as $U from $O; prints the job id
sub() { E --user "$U" colo-head sh -c 'cd "$1" && shift && exec sbatch --parsable "$@"' sh "$O" -o "$O/%j.out" "$@"; }
wait_done() { local j=$1; for _ in $(seq 1 100); do [ -z "$(H squeue -h -j "$j" 2>/dev/null)" ] && return 0; sleep 0.3; done; return 1; }
wait_running() { local j=$1; for _ in $(seq 1 100); do [ "$(H squeue -h -j "$j" -o %T 2>/dev/null)" = RUNNING ] && return 0; sleep 0.3; done; return 1; }

for n in $(mn_names); do mn_ns_ready "$n" || { echo "check.sh: $n is not up (run up.sh)"; exit 1; }; done

sec "nodes (sinfo on colo-head)"
H sinfo -N -p gpu -o '%N %T %c %G %f'
[ "$(H sinfo -h -N -p gpu -t idle -o %N | wc -l)" -eq 3 ] && ok "3 GPU nodes idle" || bad "not all GPU nodes idle"

sec "namespaces: hostname, address, own /dev/nvidia*, own /run"
for n in $(mn_names); do
  E "$n" sh -c 'printf "  %-9s uts=%s ip=%s dev=[%s] /run=[%s]\n" "$1" "$(hostname)" \
      "$(ip -o -4 addr show eth0 | awk "{print \$4}")" "$(cd /dev && ls -d nvidia* 2>/dev/null | paste -sd" ")" \
      "$(ls /run | paste -sd" ")"' sh "$n"
  [ "$(E "$n" hostname)" = "$n" ] || bad "$n: hostname"
done
E colo-gpu1 sh -c 'for p in /etc/slurm /etc/hosts /run /run/munge /var/spool/slurmd /var/log/slurm /tmp /dev /dev/pts; do
  findmnt -n -o TARGET,SOURCE,FSTYPE --mountpoint "$p" | tail -1; done' | sed 's/^/  colo-gpu1 mount: /'

sec "srun -w colo-gpu2 hostname"
out=$(H timeout 30 srun -w colo-gpu2 hostname 2>&1); echo "  $out"
[ "$out" = colo-gpu2 ] && ok "ran on colo-gpu2" || bad "srun -w colo-gpu2 gave '$out'"

sec "GPU placement and environment (batch jobs as $U)"
printf_env='echo host=$(hostname) CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES SLURM_JOB_GPUS=$SLURM_JOB_GPUS SLURM_SHARDS_ON_NODE=$SLURM_SHARDS_ON_NODE'
j1=$(sub -w colo-gpu3 --gres=shard:k80_s0:1 -J k80-shard --wrap "$printf_env; sleep 8")
j2=$(sub -w colo-gpu2 --gres=shard:v100_s0:2 -J v100-shard2 --wrap "$printf_env; sleep 8")
j3=$(sub -p v100 --gres=gpu:v100:1 -J v100-whole --wrap "$printf_env; sleep 8")
j4=$(sub -p k80 --gres=gpu:k80:1 -J k80-whole --wrap "$printf_env; sleep 8")
for j in $j1 $j2 $j3 $j4; do wait_running "$j"; done
echo "  squeue --json gres_detail:"
H squeue --json | python3 -c '
import json, sys
for j in json.load(sys.stdin)["jobs"]:
    if j["job_state"] == "RUNNING":
        print("   ", j["job_id"], j["name"], j["nodes"], j.get("tres_per_node"), "gres_detail=%s" % j.get("gres_detail"))'
for j in $j1 $j2 $j3 $j4; do wait_done "$j"; done
expect() {  # expect JOB PATTERN
  local got; got=$(cat "$O/$1.out" 2>/dev/null)
  echo "  job $1: $got"
  case "$got" in $2) ok "job $1 as expected";; *) bad "job $1: expected '$2'";; esac
}
expect "$j1" "host=colo-gpu3 CUDA_VISIBLE_DEVICES=0 SLURM_JOB_GPUS=0 SLURM_SHARDS_ON_NODE=1"
expect "$j2" "host=colo-gpu2 CUDA_VISIBLE_DEVICES=0 SLURM_JOB_GPUS=0 SLURM_SHARDS_ON_NODE=2"
expect "$j3" "host=colo-gpu[12] CUDA_VISIBLE_DEVICES=1 SLURM_JOB_GPUS=1 SLURM_SHARDS_ON_NODE="
expect "$j4" "host=colo-gpu3 CUDA_VISIBLE_DEVICES=1 SLURM_JOB_GPUS=1 SLURM_SHARDS_ON_NODE="

sec "job steps inside a typed-shard job (Slurm 22.05.8)"
j=$(sub -w colo-gpu3 --gres=shard:k80_s0:1 -J steps --wrap '
srun sh -c "echo default step: CVD=\$CUDA_VISIBLE_DEVICES" 2>&1 || echo "default step rc=$?"
srun --gres=shard:1 sh -c "echo untyped shard step: CVD=\$CUDA_VISIBLE_DEVICES" 2>&1
srun --gres=none sh -c "echo gres=none step: CVD=\${CUDA_VISIBLE_DEVICES:-unset}" 2>&1')
wait_done "$j"; sed 's/^/  /' "$O/$j.out"
grep -q "untyped shard step: CVD=0" "$O/$j.out" && ok "untyped shard step works" || bad "untyped shard step"
grep -q "Invalid generic resource" "$O/$j.out" && echo "  note: a step that inherits the typed shard is refused (seen with 22.05.8, see docs/lab-multinode.md)"

sec "TCP from GPU nodes to colo-head:$PORT, isolation from the host"
if ss -ltn | grep -q ":$PORT "; then bad "port $PORT is in use on the host; set MN_CHECK_PORT"; else
  pid=$("$HERE/exec.sh" --bg colo-head /usr/bin/python3 -m http.server --bind "$(mn_addr colo-head)" "$PORT" --directory "$MN_DIR/etc")
  for _ in $(seq 1 50); do E colo-head ss -ltn | grep -q ":$PORT " && break; sleep 0.1; done
  for n in colo-gpu1 colo-gpu2 colo-gpu3; do
    r=$(E "$n" curl -sS -m 5 -o /dev/null -w '%{http_code} %{remote_ip}:%{remote_port} %{time_total}s' "http://colo-head:$PORT/hosts" 2>&1)
    echo "  $n -> colo-head:$PORT: $r"; case "$r" in 200*) ;; *) bad "$n cannot reach colo-head:$PORT";; esac
  done
  r=$(timeout 10 curl -sS -m 3 "http://127.0.0.1:$PORT/" 2>&1); rc=$?
  echo "  host -> 127.0.0.1:$PORT: rc=$rc $r"; [ $rc -ne 0 ] && ok "head not reachable over the host's loopback" || bad "head reachable from host loopback"
  r=$(E colo-gpu1 bash -c 'timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/6817" 2>/dev/null && echo open || echo refused')
  echo "  colo-gpu1 -> its 127.0.0.1:6817 (the host lab's slurmctld port on the host): $r"; [ "$r" = refused ] || bad "gpu1 loopback 6817 open"
  echo "  host addresses on $MN_NET.0/24: $(ip -o -4 addr | grep -c " $MN_NET\.") ; colo-gpu1 routes: $(E colo-gpu1 ip route | paste -sd';')"
  kill "$pid" 2>/dev/null; sed -i "/^$pid\$/d" "$MN_DIR/nodes/colo-head/run/extra.pids"
fi

if [ "${1:-}" = "--node-failure" ]; then
  sec "node failure: SIGKILL slurmd on colo-gpu2 (SlurmdTimeout=$(grep -oP '^SlurmdTimeout=\K.*' "$MN_DIR/etc/slurm/slurm.conf") s)"
  st() { echo "$(H sinfo -h -N -p gpu -n colo-gpu2 -o %T) | $(H squeue -h -o '%i:%j:%T:%N:%r' | paste -sd' ')"; }
  el() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%5.1f", b-a}'; }
  a=$(sub -w colo-gpu2 --gres=shard:v100_s0:1 -J pinned-requeue --wrap 'sleep 600')
  b=$(sub -w colo-gpu2 --no-requeue -J pinned-norequeue --wrap 'sleep 600')
  for j in $a $b; do wait_running "$j"; done
  pid=$(cat "$MN_DIR/nodes/colo-gpu2/run/slurmd.pid"); uts=$(readlink "/proc/$pid/ns/uts")
  t0=$(date +%s.%N); kill -9 "$pid"; echo "  $(date +%T) SIGKILL slurmd $pid"
  prev="" down=""
  for _ in $(seq 1 90); do
    s=$(st); [ "$s" != "$prev" ] && echo "  [+$(el "$t0")s] colo-gpu2=$s"; prev=$s
    case "$s" in down*) down=1; break;; esac
    sleep 0.5
  done
  [ -n "$down" ] && ok "colo-gpu2 DOWN after $(el "$t0") s" || bad "colo-gpu2 never went DOWN"
  sleep 2; s=$(st); echo "  [+$(el "$t0")s] colo-gpu2=$s"
  for j in $a $b; do echo "  job $j: $(H scontrol show job "$j" | grep -oE '(JobState|Reason|Restarts|EligibleTime)=[^ ]*' | paste -sd' ')"; done
  echo "  processes left in colo-gpu2 while its slurmd is dead:"
  for p in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$p/ns/uts" 2>/dev/null)" = "$uts" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] &&
      echo "    $p $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)"
  done
  t1=$(date +%s.%N); "$HERE/up.sh" >/dev/null; echo "  $(date +%T) slurmd restarted by up.sh ($(el "$t1") s)"
  for _ in $(seq 1 10); do s=$(st); echo "  [+$(el "$t1")s after restart] colo-gpu2=$s"; case "$s" in idle*|mixed*|allocated*) break;; esac; sleep 1; done
  sleep 2
  for j in $a $b; do echo "  job $j: $(H scontrol show job "$j" | grep -oE '(JobState|Reason|Restarts|ExitCode)=[^ ]*' | paste -sd' ')"; done
  # a requeued job is held back for 120 s (EligibleTime) and then starts again
  echo "  waiting for the requeued job $a to become eligible again (up to 150 s)"
  prev=""
  for _ in $(seq 1 150); do
    s=$(H squeue -h -j "$a" -o '%T:%N:%r' 2>/dev/null); [ "$s" != "$prev" ] && echo "  [+$(el "$t0")s] job $a: ${s:-gone}"; prev=$s
    case "$s" in RUNNING*|"") break;; esac
    sleep 1
  done
  echo "  job $a: $(H scontrol show job "$a" | grep -oE '(JobState|Reason|Restarts|ExitCode|NodeList)=[^ ]*' | paste -sd' ')"
  grep -E "colo-gpu2|JobId=($a|$b)[^0-9]" "$MN_DIR/nodes/colo-head/log/slurmctld.log" | awk -v t="$(date -d @"${t0%.*}" +%FT%T)" 'substr($1,2,19)>=t' | sed 's/^/  ctld: /'
  H scancel "$a" "$b" 2>/dev/null
fi
echo
[ $fail -eq 0 ] && echo "all checks passed" || echo "some checks FAILED"
exit $fail
