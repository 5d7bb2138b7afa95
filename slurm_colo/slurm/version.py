"""Which Slurm is installed, and what that changes for slurm-colo.

The differences (verified on 22.05.8, 24.11.5 and 26.05.5; docs/slurm-versions.md):

* GRES in TRES strings: ``gres:gpu:1`` up to 23.02, ``gres/gpu:1`` from 23.11
  (:func:`slurm_colo.gres_layout.tres_gres` writes either).
* ``scontrol show nodes --json`` exists from 23.02 (22.05: ``unrecognized option``); 22.05
  has ``sinfo --json`` with one record per node, later releases group nodes in it.

The version is read once, from ``sinfo --version`` (``slurm-wlm 24.11.5``, ``slurm 22.05.8``).
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

#: (major, minor): (24, 11), (26, 5)
Version = tuple[int, int]

SCONTROL_JSON_SINCE: Version = (23, 2)
#: a pending job's GRES can be changed (SchedMD bug 17184, fixed in 23.02.6; the version
#: here has no patch level, so 23.11 is the first release known to have it). 22.05 accepts
#: ``scontrol update TresPerNode=`` on a pending job with a GPU request and ignores it.
PENDING_GRES_SINCE: Version = (23, 11)

_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.\d+)?")


def parse_version(text: str) -> Version | None:
    """``slurm-wlm 26.05.5`` -> ``(26, 5)``; None when there is no version in it."""
    m = _VERSION_RE.search(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def version_from_meta(doc: Any) -> Version | None:
    """The version in a ``--json`` document's ``meta``: ``Slurm`` with numbers (22.05),
    ``slurm`` with strings (24.11+)."""
    meta = doc.get("meta") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        return None
    s = meta.get("slurm") or meta.get("Slurm")
    v = s.get("version") if isinstance(s, dict) else None
    try:
        return (int(v["major"]), int(v["minor"])) if isinstance(v, dict) else None
    except (KeyError, TypeError, ValueError):
        return None


def has_scontrol_json(version: Version | None) -> bool:
    return version is not None and version >= SCONTROL_JSON_SINCE


def can_change_pending_gres(version: Version | None) -> bool:
    """Whether the agent may give a pending job that has a shard request another one (an
    undone job then goes to any shared GPU of its model, not only to its old shard type)."""
    return version is not None and version >= PENDING_GRES_SINCE


def version_argvs() -> list[list[str]]:
    """Commands that print the installed version, tried in order (``slurmctld -V`` works on
    a controller without slurm-client)."""
    return [["sinfo", "--version"], ["slurmctld", "-V"]]


def installed_slurm_version(timeout_s: float = 5.0) -> str:
    """``22.05.8``, or ``""`` when no Slurm command answers."""
    for argv in version_argvs():
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (FileNotFoundError, subprocess.TimeoutExpired):
            continue
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.split()[-1]
    return ""


class InstalledVersion:
    """The installed Slurm's (major, minor), read once, on first use. A version text given
    at construction (a test's, or one the caller read already) is taken as it is."""

    def __init__(self, text: str | None = None) -> None:
        self._text = text

    def get(self) -> Version | None:
        if self._text is None:
            self._text = installed_slurm_version()
        return parse_version(self._text)
