"""Stand-ins for the GPU, for tests and the lab: a ``nvidia-cuda-mps-control`` that follows
NVIDIA's command protocol and one-server-per-UID rule (:mod:`.mps_control`, its daemon in
:mod:`.mps_server`), and an NVML scenario backend (:mod:`.nvml_scenario`). Never picked
silently: only ``node.mps_backend = "emulator"`` / ``node.nvml_backend = "scenario"``."""
