#!/bin/bash
# slurm-colo demo on the lab cluster: brings the lab up (installing what is missing), submits
# --colocate jobs of compatible and incompatible classes from two users plus exclusive jobs,
# then prints who shares which GPU and why -- read back from Slurm itself -- and the
# agent's view; then shows a pair the scores got wrong being measured and undone. Run as
# root on Debian 12.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
LAB_DIR=${LAB_DIR:-/var/lib/slurm-colo-lab}
DEMO_SECONDS=${DEMO_SECONDS:-40}
bash "$REPO/contrib/lab/up.sh"
export SLURM_COLO_CONFIG=/etc/slurm-colo/config.toml
VENV=${VENV:-/opt/slurm-colo-lab/venv}
CLI=$VENV/bin/slurm-colo

# start from the lab's own scores: forget pairs an earlier run's probes measured
if [ -f "$LAB_DIR/state/learned.json" ]; then
  [ -f "$LAB_DIR/agent.pid" ] && kill "$(cat "$LAB_DIR/agent.pid")" 2>/dev/null && sleep 1
  rm -f "$LAB_DIR/state/learned.json"
  bash "$REPO/contrib/lab/up.sh" >/dev/null
fi
scancel --full --state=PENDING 2>/dev/null || true
scancel --full --state=RUNNING 2>/dev/null || true
sleep 2

echo
echo "== submitting the demo workload (jobs run ${DEMO_SECONDS}s) =="
cat > "$LAB_DIR/out/train.sh" <<EOT
#!/bin/bash
# stand-in training job: reports progress if the node side gave it a progress file
for i in \$(seq 1 $DEMO_SECONDS); do
  [ -n "\${SLURM_COLO_PROGRESS_FILE:-}" ] && echo "\$i" > "\$SLURM_COLO_PROGRESS_FILE" 2>/dev/null
  sleep 1
done
env | grep -E '^(CUDA_VISIBLE_DEVICES|CUDA_MPS_[A-Z_]+|SLURM_SHARDS_ON_NODE)=' | sort
EOT
chmod 755 "$LAB_DIR/out/train.sh"
submit() {  # user, then sbatch arguments
  local user=$1; shift
  local out
  out=$(cd /tmp && runuser -u "$user" -- sbatch --parsable -o "$LAB_DIR/out/%j.out" "$@" "$LAB_DIR/out/train.sh" 2>&1) || { echo "  $user: sbatch $*: $out"; return; }
  printf '  %-6s %-5s sbatch %s\n' "$user" "$(echo "$out" | tail -n1)" "$*"
  echo "$out" | grep -v '^[0-9]*$' | sed 's/^/           /' || true
}
submit alice --colocate --colocate-class=resnet18-bs32 -J r18-a --gres=gpu:1
submit alice --colocate --colocate-class=resnet18-bs64 -J r18-b --gres=gpu:1
submit alice --colocate --colocate-class=recommendation-bs512 -J rec --gres=gpu:1
submit alice --colocate --colocate-class=resnet50-bs16 -J r50 --gres=gpu:1
submit bob   --colocate --colocate-class=resnet18-bs32 -J bob-r18 --gpus=1
submit bob   -J bob-plain --gres=gpu:1
submit alice --colocate -J big --gres=gpu:2
sleep 6

echo
echo "== who runs where, read back from Slurm (squeue --json gres_detail) =="
"$VENV/bin/python" - <<'EOP'
from collections import defaultdict
from slurm_colo.slurm.json_backend import JsonBackend
from slurm_colo.contracts.placement import Placement
by_gpu = defaultdict(list)
waiting = []
for j in sorted(JsonBackend().jobs(), key=lambda j: j.job_id):
    if j.state not in ("RUNNING", "PENDING"):
        continue
    tag = Placement.from_tag(j.admin_comment)
    kind = "shard" if "shard" in (j.tres_per_node + j.tres_per_job) else "gpu"
    line = f"job {j.job_id:<4} {j.user:<6} {j.name:<10} {kind:<5} class={tag.cls if tag else '-':<22} {j.comment}"
    gpus = sorted({i for g in j.gres for i in g.indices if g.count > 0})
    if j.state == "RUNNING" and gpus:
        for i in gpus:
            by_gpu[(j.nodes, i)].append(line)
    else:
        waiting.append(f"{j.state.lower():<8} {line}")
for (node, i), lines in sorted(by_gpu.items()):
    print(f"GPU {i} of {node}:" + ("   <- shared" if len(lines) > 1 else ""))
    for l in lines:
        print("    " + l)
for l in waiting:
    print(l)
EOP

echo
echo "== the agent's view (slurm-colo status) =="
"$CLI" status
shared_job=$(squeue -h -u alice -n r18-b -o %i | head -n1)
for name in r18-b r50 bob-r18; do
  id=$(squeue -h -n "$name" -o %i | head -n1)
  [ -n "$id" ] || continue
  echo
  echo "== slurm-colo explain $id ($name) =="
  "$CLI" explain "$id"
done
echo
echo "== waiting for the jobs to finish =="
for _ in $(seq 1 $((DEMO_SECONDS + 60))); do
  [ -z "$(squeue -h -t PENDING,RUNNING,COMPLETING -o %i)" ] && break
  sleep 1
done
if [ -n "$shared_job" ] && [ -f "$LAB_DIR/out/$shared_job.out" ]; then
  echo "environment seen by the shared job $shared_job (r18-b):"
  sed 's/^/    /' "$LAB_DIR/out/$shared_job.out"
fi
echo
echo "== probe and undo: a pair the scores got wrong =="
# The lab's GPUs are emulated, so the stand-in jobs emulate the interference: the first runs
# at 30 % of its speed while the second runs. Both report progress (slurm_colo.progress).
cp "$REPO/contrib/lab/standin_job.py" "$LAB_DIR/out/standin_job.py"
marker="$LAB_DIR/out/demo-interference.$$"
rm -f "$marker"
undo_job() {  # name, class, seconds, stand-in options: prints the job id
  runuser -u alice -- sbatch --parsable -o "$LAB_DIR/out/%j.out" --open-mode=append -J "$1" \
    --colocate --colocate-class="$2" --gres=gpu:1 \
    --wrap "$VENV/bin/python $LAB_DIR/out/standin_job.py $3 ${4:-} ${5:-}" 2>/dev/null | tail -n1
}
show() {  # job ids: state, restarts and comment, read back from Slurm
  "$VENV/bin/python" - "$@" <<'EOP'
import json, subprocess, sys
out = subprocess.run(["squeue", "--json", "--all"], capture_output=True, text=True, check=True).stdout
jobs = {int(j["job_id"]): j for j in json.loads(out)["jobs"]}
for a in sys.argv[1:]:
    j = jobs.get(int(a)) if a.isdigit() else None
    if j:
        print(f"  job {a:<5} {j['name']:<10} {j['job_state']:<9} restarts={j.get('restart_cnt', 0)}  "
              f"{j.get('comment', '')}")
EOP
}
first=$(undo_job incumbent resnet18-bs32 45 --slowed-by "$marker")
sleep 6  # it runs alone first: the probe compares its speed before and after
second=$(undo_job newcomer resnet18-bs64 15 --slows "$marker")
sleep 3
echo "two jobs the scores predict compatible share a GPU:"
show "$first" "$second"
probe_s=$(awk -F' *= *' '/^probe_s/ {print $2}' /etc/slurm-colo/config.toml)
echo "after ${probe_s:-600} s together the newcomer's probe measures the pair from both jobs' progress ..."
for _ in $(seq 1 60); do
  [ "$(squeue -h -j "$second" -t all -o %T 2>/dev/null)" = "PENDING" ] && break
  sleep 1
done
echo "... and the agent requeues it, held for a GPU of its type (the pair is harmful):"
show "$first" "$second"
"$CLI" status | grep -E '^(probes|held|measured)' | sed 's/^/  /' || true
for _ in $(seq 1 120); do
  [ "$(squeue -h -j "$second" -t all -o %T 2>/dev/null)" = "RUNNING" ] && break
  sleep 1
done
echo "once the incumbent has ended, the newcomer runs again on a GPU of its type; no new"
echo "partner joins it while it runs (it has lost its probe window already):"
show "$first" "$second"
"$CLI" status | grep 'no new partner' | sed 's/^/  /' || true
for _ in $(seq 1 60); do
  [ "$(squeue -h -j "$second" -t all -o %T 2>/dev/null)" = "COMPLETED" ] && break
  sleep 1
done
show "$second"
rm -f "$marker"
echo "(the agent keeps the pair it measured, in $LAB_DIR/state/learned.json, until a newer score"
echo " set; the next demo starts without it)"

if "$CLI" history --help >/dev/null 2>&1; then
  echo
  echo "== recorded history (slurm-colo history) =="
  "$CLI" history || true
fi
echo
echo "demo done. Lab logs: $LAB_DIR/agent.log, /var/log/slurm/. Stop the lab: bash contrib/lab/down.sh"
