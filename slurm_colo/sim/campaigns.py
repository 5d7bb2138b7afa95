"""The measured data a simulation runs on (its *campaign*): a GPU model of the bundled Gavel
file, or a synthetic campaign of the same shape with few gaining pairs. Pure.

A Gavel file gives throughputs, not memory: a simulated GPU's memory is its model's
(:data:`GPU_MEMORY_GIB`) unless given, and a job's memory is its score set's class profile
when it has one, else the policy's per-GPU assumption (``placement.default_memory_share``).
"""

from __future__ import annotations

import numpy as np

from ..errors import ColoError
from ..gavel import GavelData

#: memory of one GPU of each model, GiB (the K80's is one of its two dies; V100: SXM2-32GB)
GPU_MEMORY_GIB: dict[str, float] = {
    "k80": 12.0,
    "p100": 16.0,
    "t4": 16.0,
    "v100": 32.0,
    "a10": 24.0,
    "a100": 80.0,
    "h100": 80.0,
}
#: used for a GPU model not in the table
UNKNOWN_GPU_MEMORY_GIB = 16.0


def gpu_memory_gib(gpu: str) -> float:
    """The memory of one GPU of model ``gpu`` (the first table key it starts with, so
    ``v100-contention-3`` is a V100), else :data:`UNKNOWN_GPU_MEMORY_GIB`."""
    name = gpu.lower()
    for model in sorted(GPU_MEMORY_GIB, key=len, reverse=True):
        if name.startswith(model):
            return GPU_MEMORY_GIB[model]
    return UNKNOWN_GPU_MEMORY_GIB


def low_gain(data: GavelData, gain_share: float) -> GavelData:
    """``data`` scaled so that only ``gain_share`` of its measured pairs gain (combined
    throughput ``n_a + n_b`` above 1): every rate is divided by the combined throughput at
    the ``1 - gain_share`` quantile (and kept at most 1). Meant for a synthetic campaign
    (:func:`slurm_colo.model.evaluate.synthetic_like`): the same classes and out-of-memory
    pairs, most pairs harmful or neutral."""
    if not 0.0 < gain_share < 1.0:
        raise ColoError(f"gain share must be between 0 and 1 (exclusive), got {gain_share}")
    pairs = data.unordered_pairs()
    if not pairs:
        raise ColoError(f"{data.gpu}: no measured pairs to scale")
    total = np.array([sum(data.pairs[p]) for p in pairs])
    scale = float(np.quantile(total, 1.0 - gain_share))
    out = GavelData(
        gpu=f"{data.gpu}-gain{round(100 * gain_share)}",
        solo=dict(data.solo),
        never=set(data.never),
    )
    for a, b in pairs:
        na, nb = (min(1.0, n / scale) for n in data.pairs[(a, b)])
        out.pairs[(a, b)], out.pairs[(b, a)] = (na, nb), (nb, na)
        if na >= 1.0 and nb >= 1.0:
            out.censored.update({(a, b), (b, a)})
    return out
