"""The one gate through which slurm-colo reads Slurm state.

Two backends return the same typed records (:mod:`.model`): ``json`` runs Slurm's own
``squeue --json`` / ``sinfo --json`` (Slurm 22.05+) and ``pyslurm`` uses pyslurm's new API
where a build matching the installed Slurm exists. :func:`open_backend` picks one.
"""

from .gate import SlurmBackend, open_backend
from .model import GresAlloc, SlurmJob, SlurmNode, parse_gres_detail

__all__ = [
    "GresAlloc",
    "SlurmBackend",
    "SlurmJob",
    "SlurmNode",
    "open_backend",
    "parse_gres_detail",
]
