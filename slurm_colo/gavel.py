"""Reader for Gavel's measured co-location throughputs (``throughputs_v100_k80.json``).

Pure parsing: :func:`parse_gavel` takes the decoded JSON, :func:`load_gavel` reads a file.
Job types become slurm-colo class names (``ResNet-18 (batch size 64)`` -> ``resnet18-bs64``).
Only single-GPU entries (scale factor 1) carry co-location data.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ScoresError


def class_slug(job_type: str) -> str:
    """``'ResNet-18 (batch size 64)'`` -> ``'resnet18-bs64'``; ``'A3C'`` -> ``'a3c'``."""
    m = re.match(r"^(.*?)\s*\(batch size (\d+)\)\s*$", job_type)
    base, bs = (m.group(1), m.group(2)) if m else (job_type, None)
    slug = re.sub(r"[^a-z0-9]+", "", base.lower())
    return f"{slug}-bs{bs}" if bs else slug


@dataclass
class GavelData:
    gpu: str
    #: class -> solo rate (steps/s)
    solo: dict[str, float] = field(default_factory=dict)
    #: (a, b) -> (n_a, n_b); both orders present; a == b allowed (two copies of one type)
    pairs: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    #: pairs that did not run (out of memory / failed): must not co-locate
    never: set[tuple[str, str]] = field(default_factory=set)
    #: pairs whose values look clipped at 1.0 (read as "at least")
    censored: set[tuple[str, str]] = field(default_factory=set)

    @property
    def classes(self) -> list[str]:
        return sorted(self.solo)

    def unordered_pairs(self) -> list[tuple[str, str]]:
        """Measured (non-OOM) pairs, each once, a <= b."""
        return sorted({(a, b) for (a, b) in self.pairs if a <= b})


def _key(k: str) -> tuple[str, int]:
    try:
        name, scale = ast.literal_eval(k)
        return str(name), int(scale)
    except (ValueError, SyntaxError, TypeError) as e:
        raise ScoresError(f"gavel data: bad job key {k!r}") from e


def parse_gavel(raw: dict[str, Any], gpu: str) -> GavelData:
    if gpu not in raw:
        avail = ", ".join(k for k in raw if not k.endswith("_unconsolidated"))
        raise ScoresError(f"gavel data has no GPU type {gpu!r}; available: {avail}")
    table = raw[gpu]
    data = GavelData(gpu=gpu)
    for k, entry in table.items():
        name, scale = _key(k)
        if scale != 1:
            continue
        solo = entry.get("null")
        if isinstance(solo, (int, float)) and solo > 0:
            data.solo[class_slug(name)] = float(solo)
    for k, entry in table.items():
        name, scale = _key(k)
        a = class_slug(name)
        if scale != 1 or a not in data.solo:
            continue
        for ok, val in entry.items():
            if ok == "null":
                continue
            oname, oscale = _key(ok)
            b = class_slug(oname)
            if oscale != 1 or b not in data.solo:
                continue
            ra, rb = float(val[0]), float(val[1])
            if ra <= 0 and rb <= 0:
                data.never.add((a, b))
                continue
            na, nb = ra / data.solo[a], rb / data.solo[b]
            data.pairs[(a, b)] = (na, nb)
            if abs(na - 1.0) < 1e-9 and abs(nb - 1.0) < 1e-9:
                data.censored.add((a, b))
    return data


def load_gavel(path: str | Path, gpu: str) -> GavelData:
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise ScoresError(f"gavel data file {p} not found") from None
    except json.JSONDecodeError as e:
        raise ScoresError(f"gavel data file {p} is not JSON: {e.msg}") from None
    return parse_gavel(raw, gpu)


def bundled_path(name: str = "throughputs_v100_k80.json") -> Path:
    """Path of a file of the bundled Gavel data (``slurm_colo/data/gavel``)."""
    return Path(__file__).parent / "data" / "gavel" / name
