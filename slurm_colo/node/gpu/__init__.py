"""The GPU gates of a node: NVML (:mod:`.nvml`), ``nvidia-cuda-mps-control`` (:mod:`.mps`)
and one MPS control daemon per GPU (:mod:`.mps_daemon`). Each has a real implementation;
the emulators (:mod:`slurm_colo.emulators`) are used only where the configuration says so."""
