#!/bin/bash
# slurm-colo demo on the lab cluster: brings the lab up (installing what is missing), submits
# --colocate jobs of compatible and incompatible classes from two users plus exclusive jobs,
# then prints who shares which GPU and why -- read back from Slurm itself -- and the
# agent's view. Run as root on Debian 12.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
LAB_DIR=${LAB_DIR:-/var/lib/slurm-colo-lab}
DEMO_SECONDS=${DEMO_SECONDS:-40}
bash "$REPO/contrib/lab/up.sh"
export SLURM_COLO_CONFIG=/etc/slurm-colo/config.toml
VENV=${VENV:-/opt/slurm-colo-lab/venv}
CLI=$VENV/bin/slurm-colo

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
from slurm_colo.tags import parse_tag
by_gpu = defaultdict(list)
waiting = []
for j in sorted(JsonBackend().jobs(), key=lambda j: j.job_id):
    if j.state not in ("RUNNING", "PENDING"):
        continue
    tag = parse_tag(j.admin_comment) or {}
    kind = "shard" if "shard" in (j.tres_per_node + j.tres_per_job) else "gpu"
    line = f"job {j.job_id:<4} {j.user:<6} {j.name:<10} {kind:<5} class={tag.get('cls', '-'):<22} {j.comment}"
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
if "$CLI" history --help >/dev/null 2>&1; then
  echo
  echo "== recorded history (slurm-colo history) =="
  "$CLI" history || true
fi
echo
echo "demo done. Lab logs: $LAB_DIR/agent.log, /var/log/slurm/. Stop the lab: bash contrib/lab/down.sh"
