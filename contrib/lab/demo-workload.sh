#!/bin/bash
# The slurm-colo demo workload, run where sbatch reaches the lab's slurmctld: on the host for
# the single-node lab (single/demo.sh), inside colo-head for the multi-node lab (demo.sh).
# Submits --colocate jobs of compatible and incompatible classes from two users plus exclusive
# jobs, prints who shares which GPU of which node and why -- read back from Slurm itself --
# and the agent's view; then shows a pair the scores got wrong being measured and undone.
#
#   DEMO_OUT      directory for job scripts and output, visible on every node (required)
#   VENV          the lab's Python environment with slurm-colo (required)
#   DEMO_SECONDS  how long the workload's jobs run (default 40)
#   DEMO_EXTRA    1: also submit to the K80 partition (the multi-node lab)
#   DEMO_LOGS     where the lab's logs are (printed at the end)
#   DEMO_DOWN     the command that stops the lab (printed at the end)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DEMO_OUT=${DEMO_OUT:?DEMO_OUT: the lab's shared output directory}
VENV=${VENV:?VENV: the lab's Python environment}
DEMO_SECONDS=${DEMO_SECONDS:-40}
export SLURM_COLO_CONFIG=/etc/slurm-colo/config.toml
CLI=$VENV/bin/slurm-colo
scancel --full --state=PENDING 2>/dev/null || true
scancel --full --state=RUNNING 2>/dev/null || true
sleep 2

echo
echo "== submitting the demo workload (jobs run ${DEMO_SECONDS}s) =="
cat > "$DEMO_OUT/train.sh" <<EOT
#!/bin/bash
# stand-in training job: reports progress if the node side gave it a progress file
for i in \$(seq 1 $DEMO_SECONDS); do
  [ -n "\${SLURM_COLO_PROGRESS_FILE:-}" ] && echo "\$i" > "\$SLURM_COLO_PROGRESS_FILE" 2>/dev/null
  sleep 1
done
env | grep -E '^(CUDA_VISIBLE_DEVICES|CUDA_MPS_[A-Z_]+|SLURM_SHARDS_ON_NODE)=' | sort
EOT
chmod 755 "$DEMO_OUT/train.sh"
submit() {  # user, then sbatch arguments
  local user=$1; shift
  local out
  out=$(cd /tmp && runuser -u "$user" -- sbatch --parsable -o "$DEMO_OUT/%j.out" "$@" "$DEMO_OUT/train.sh" 2>&1) || { echo "  $user: sbatch $*: $out"; return; }
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
if [ "${DEMO_EXTRA:-0}" = 1 ]; then
  # the K80 node, a GPU model of its own: jobs of its partition land only there
  submit bob   --colocate --colocate-class=resnet18-bs64 -J k80-bob -p k80 --gres=gpu:1
  submit alice --colocate --colocate-class=resnet18-bs32 -J k80-alice -p k80 --gres=gpu:1
fi
sleep 6

echo
echo "== who runs where, read back from Slurm (squeue --json gres_detail) =="
"$VENV/bin/python" - "$DEMO_OUT/shared-job" <<'EOP'
import sys
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
joined = ""  # a job that joined another on a shared GPU: explained, its environment shown
for (node, i), lines in sorted(by_gpu.items()):
    print(f"GPU {i} of {node}:" + ("   <- shared" if len(lines) > 1 else ""))
    for l in lines:
        print("    " + l)
    if len(lines) > 1 and not joined:
        joined = lines[1].split()[1]
for l in waiting:
    print(l)
with open(sys.argv[1], "w") as f:
    f.write(joined)
EOP

echo
echo "== the agent's view (slurm-colo status) =="
"$CLI" status
shared_job=$(cat "$DEMO_OUT/shared-job") shared_name=""
[ -z "$shared_job" ] || shared_name=$(squeue -h -j "$shared_job" -o %j 2>/dev/null || true)
for name in $(printf '%s\n' $shared_name r50 bob-r18 | awk '!seen[$0]++'); do
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
if [ -n "$shared_job" ] && [ -f "$DEMO_OUT/$shared_job.out" ]; then
  echo "environment seen by the shared job $shared_job ($shared_name):"
  sed 's/^/    /' "$DEMO_OUT/$shared_job.out"
fi
echo
echo "== probe and undo: a pair the scores got wrong =="
# The lab's GPUs are emulated, so the stand-in jobs emulate the interference: the first runs
# at 30 % of its speed while the second runs. Both report progress (slurm_colo.progress).
cp "$HERE/standin_job.py" "$DEMO_OUT/standin_job.py"
marker="$DEMO_OUT/demo-interference.$$"
rm -f "$marker"
undo_job() {  # name, class, seconds, stand-in options: prints the job id
  runuser -u alice -- sbatch --parsable -o "$DEMO_OUT/%j.out" --open-mode=append -J "$1" \
    --colocate --colocate-class="$2" --gres=gpu:1 \
    --wrap "$VENV/bin/python $DEMO_OUT/standin_job.py $3 ${4:-} ${5:-}" 2>/dev/null | tail -n1
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
second=$(undo_job newcomer resnet18-bs64 20 --slows "$marker")
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
learned=$(dirname "$("$VENV/bin/python" -c 'from slurm_colo.config import load_config; print(load_config().scores.path)')")/learned.json
echo "(the agent keeps the pair it measured, in $learned, until a newer score"
echo " set; the next demo starts without it)"

if "$CLI" history --help >/dev/null 2>&1; then
  echo
  echo "== recorded history (slurm-colo history) =="
  "$CLI" history || true
fi
echo
echo "demo done. Lab logs: ${DEMO_LOGS:-/var/log/slurm}. Stop the lab: ${DEMO_DOWN:-bash contrib/lab/down.sh}"
