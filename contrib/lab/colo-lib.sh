# Pieces of the slurm-colo lab set-up shared by the host lab (contrib/lab/single/up.sh) and the
# version labs (contrib/lab/versions/up.sh --colo). Sourced; defines functions only.

# colo_config LAB_DIR NODE GPUS SHARED: the lab's /etc/slurm-colo/config.toml on stdout
colo_config() {
  local lab_dir=$1 node=$2 gpus=$3 shared=$4
  cat <<EOT
# slurm-colo lab configuration (written by contrib/lab/single/up.sh)
[agent]
socket = "/run/slurm-colo/agent.sock"
# the labs share one small machine with each other and the tests, where a pause of the
# agent can pass the default 150 ms (meant for a head node of its own)
request_timeout_ms = 400
retry_after_s = 2
refresh_interval_s = 2.0
metrics_listen = "127.0.0.1:9464"
# LAB_SLURM_BACKEND=pyslurm runs the lab's agent on a pyslurm build in its venv
slurm_backend = "${LAB_SLURM_BACKEND:-json}"

[placement]
fallback = "exclusive"
cross_user = "never"
default_memory_gib = 4.0
# lab time is compressed: a new shared set is judged after 15 s (default 600 s)
probe_s = 15.0

[store]
url = "sqlite:///$lab_dir/state/history.db"

[scores]
path = "$lab_dir/state/scores.json"

[node]
mps_backend = "emulator"
mps_control = "$lab_dir/libexec/nvidia-cuda-mps-control"
nvml_backend = "scenario"
nvml_scenario = "$lab_dir/libexec/nvml-scenario.json"
run_dir = "/run/slurm-colo"
spool_dir = "$lab_dir/spool"

[[gpus]]
nodes = "$node"
count = $gpus
model = "v100"
memory_gib = 32.0
shared = "$shared"
shards_per_gpu = 4
EOT
}

# colo_mps_wrapper PYTHON EMULATOR_PY: the lab's nvidia-cuda-mps-control stand-in on stdout
colo_mps_wrapper() {
  printf '#!/bin/sh\n# lab stand-in for nvidia-cuda-mps-control (the slurm-colo MPS emulator)\nexec %s -I -S %s "$@"\n' \
    "$1" "$2"
}

# colo_seed_scores LAB_DIR CMD...: create the history database and, when the lab has no score
# set yet, bootstrap one the way a site does (import a profiling campaign, retrain), falling
# back to the measured V100 table. CMD... runs slurm-colo (the venv's, possibly in a chroot).
colo_seed_scores() {
  local lab_dir=$1; shift
  "$@" db upgrade >/dev/null
  [ -s "$lab_dir/state/scores.json" ] && return 0
  if ! { "$@" history import --gpu v100 >/dev/null &&
         "$@" retrain >"$lab_dir/retrain.log" 2>&1; }; then
    echo "lab: WARNING: retrain failed (see $lab_dir/retrain.log); loading the measured V100 table instead" >&2
    "$@" scores load --measured v100 >/dev/null
  fi
}
