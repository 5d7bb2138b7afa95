"""Choose the Slurm backend: pyslurm where it matches the installed Slurm, else JSON."""

from __future__ import annotations

import importlib
import logging
from typing import Protocol

from ..errors import SlurmError
from .json_backend import JsonBackend
from .model import SlurmJob, SlurmNode
from .pyslurm_backend import PyslurmBackend, pyslurm_matches
from .version import installed_slurm_version

log = logging.getLogger(__name__)


class SlurmBackend(Protocol):
    name: str

    def jobs(self) -> list[SlurmJob]: ...

    def job(self, job_id: int) -> SlurmJob | None:
        """The job, or None when Slurm does not know it (ended and purged, or never was);
        a :class:`SlurmError` when Slurm could not be asked."""
        ...

    def nodes(self) -> list[SlurmNode]: ...


def open_backend(kind: str = "auto", slurm_version: str | None = None) -> SlurmBackend:
    if kind == "json":
        return JsonBackend(slurm_version=slurm_version)
    try:
        module = importlib.import_module("pyslurm")
    except ImportError:
        module = None
    version = slurm_version if slurm_version is not None else installed_slurm_version()
    if module is not None and pyslurm_matches(module, version):
        return PyslurmBackend(module)
    if kind == "pyslurm":
        if module is None:
            raise SlurmError(
                "slurm_backend = pyslurm but pyslurm is not installed",
                hint="pip install pyslurm==<your Slurm major.minor>, or set slurm_backend = json",
            )
        raise SlurmError(
            f"pyslurm {getattr(module, '__version__', '?')} does not match Slurm {version or '?'}",
            hint="install the pyslurm release for your Slurm, or set agent.slurm_backend = json",
        )
    log.info(
        "slurm backend: json (pyslurm %s)",
        "absent" if module is None else "does not match Slurm " + version,
    )
    return JsonBackend(slurm_version=version)
