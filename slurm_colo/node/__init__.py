"""Node side of slurm-colo: what runs on a GPU node around each job.

- :mod:`.gpu`: the two gates to the GPU, NVML (:mod:`.gpu.nvml`) and MPS control
  (:mod:`.gpu.mps`), and one MPS control daemon per GPU (:mod:`.gpu.mps_daemon`). Their
  stand-ins live apart, in :mod:`slurm_colo.emulators`, picked only when configured.
- :mod:`.lifecycle`: what the Prolog and Epilog do; :mod:`.detached`: the processes they
  start (the sampler, and :mod:`.handoff`, the Epilog's helper); :mod:`.recovery`: the
  records of jobs whose Epilog never finished.
- :mod:`.journal`: per-GPU occupancy journal (who shared the GPU, and when).
- :mod:`.sampler`, :mod:`.profile_acc`, :mod:`.probe`: detached per-job NVML sampler with
  bounded memory, and the probe of a shared GPU's pair.
- :mod:`.jobstate`, :mod:`.record_build`: per-job state and the record built from it (the
  record goes to :mod:`slurm_colo.spool`).

Modules used by the Prolog/TaskProlog import only the standard library and
:mod:`slurm_colo.config` so the hooks stay fast.
"""
