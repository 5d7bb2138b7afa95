"""Node side of slurm-colo: what runs on a GPU node around each job.

- :mod:`.nvml` / :mod:`.nvml_scenario`: one typed, guarded gate to NVML (real or scenario).
- :mod:`.mps` / :mod:`.mps_emulator`: the ``nvidia-cuda-mps-control`` gate and its emulator.
- :mod:`.mps_daemon`: one MPS control daemon per GPU, started and stopped on demand.
- :mod:`.journal`: per-GPU occupancy journal (who shared the GPU, and when).
- :mod:`.sampler`: detached per-job NVML sampler with bounded memory.
- :mod:`.jobstate`, :mod:`.record_build`, :mod:`.spool`: per-job state, record, spool.

Modules used by the Prolog/TaskProlog import only the standard library and
:mod:`slurm_colo.config` so the hooks stay fast.
"""
