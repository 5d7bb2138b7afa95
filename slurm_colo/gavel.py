"""Reader for Gavel's measured co-location throughputs (``throughputs_v100_k80.json``).

Pure parsing: :func:`parse_gavel` takes the decoded JSON, :func:`load_gavel` reads a file.
Job types become slurm-colo class names (``ResNet-18 (batch size 64)`` -> ``resnet18-bs64``).
Only single-GPU entries (scale factor 1) carry co-location data.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ScoresError
from .fsutil import read_regular


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
    #: single-GPU job types of the file without a solo rate ("null" missing or 0: the type
    #: did not run alone), left out with their pairs
    no_solo: list[str] = field(default_factory=list)

    @property
    def classes(self) -> list[str]:
        return sorted(self.solo)

    def left_out(self) -> str:
        """``left out 2 job types without a solo rate: A, B``; empty when none was."""
        if not self.no_solo:
            return ""
        n = len(self.no_solo)
        names = ", ".join(self.no_solo[:5]) + (", ..." if n > 5 else "")
        return f'left out {n} job type{"s" * (n != 1)} without a solo rate ("null"): {names}'

    def unordered_pairs(self) -> list[tuple[str, str]]:
        """Measured (non-OOM) pairs, each once, a <= b."""
        return sorted({(a, b) for (a, b) in self.pairs if a <= b})


def _key(k: str, source: str) -> tuple[str, int]:
    try:
        name, scale = ast.literal_eval(k)
        return str(name), int(scale)
    except (ValueError, SyntaxError, TypeError, OverflowError, MemoryError, RecursionError):
        raise ScoresError(
            f"{source}: bad job key {k!r} (expected \"('<job type>', <scale factor>)\")"
        ) from None


def gpu_keys(raw: Any) -> list[str]:
    """The GPU types of a decoded Gavel file: its top-level keys whose value is an object."""
    return sorted(k for k, v in raw.items() if isinstance(v, dict)) if isinstance(raw, dict) else []


#: a measured pair rate over the solo rate above this is refused (score sets cap n at 10)
MAX_N = 10.0


def _rate(v: Any, what: str) -> float:
    rate = _as_float(v)
    if rate is None or not math.isfinite(rate):
        raise ScoresError(f"{what}: expected a number, got {repr(v)[:40]}")
    return rate


def _as_float(v: Any) -> float | None:
    """A JSON number as a float; None for anything else, or a whole number past 1e308."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return None


def parse_gavel(raw: Any, gpu: str, source: str = "gavel data") -> GavelData:
    """Any GPU type (top-level key) of the file works; a missing one, or a malformed
    entry, raises :class:`ScoresError` naming ``source``."""
    if not isinstance(raw, dict):
        raise ScoresError(
            f"{source}: not Gavel throughputs (top level is not an object of GPU types)"
        )
    if gpu in raw and not isinstance(raw[gpu], dict):
        raise ScoresError(f"{source}: GPU type {gpu!r} is not an object of job types")
    if gpu not in raw:
        avail = ", ".join(gpu_keys(raw)) or "(none)"
        raise ScoresError(f"{source} has no GPU type {gpu!r}; the file has: {avail}")
    table = raw[gpu]
    data = GavelData(gpu=gpu)
    for k, entry in table.items():
        name, scale = _key(k, source)
        if not isinstance(entry, dict):
            raise ScoresError(f"{source}: {gpu} {k}: expected an object of rates, got {entry!r}")
        if scale != 1:
            continue
        solo = entry.get("null")
        if solo is None or (_as_float(solo) == 0.0):  # did not run alone: no rates to scale
            data.no_solo.append(name)
            continue
        rate = _rate(solo, f"{source}: {gpu} {k} solo rate")
        if rate < 0:
            raise ScoresError(f"{source}: {gpu} {k} solo rate: below 0 ({solo!r})")
        data.solo[class_slug(name)] = rate
    for k, entry in table.items():
        name, scale = _key(k, source)
        a = class_slug(name)
        if scale != 1 or a not in data.solo:
            continue
        for ok, val in entry.items():
            if ok == "null":
                continue
            oname, oscale = _key(ok, source)
            b = class_slug(oname)
            if oscale != 1 or b not in data.solo:
                continue
            what = f"{source}: {gpu} {k} with {ok}"
            if not isinstance(val, (list, tuple)) or len(val) != 2:
                raise ScoresError(f"{what}: expected [rate, other rate], got {val!r}")
            ra, rb = _rate(val[0], what), _rate(val[1], what)
            if ra < 0 or rb < 0:
                raise ScoresError(f"{what}: a rate below 0 ({val!r})")
            if ra == 0 and rb == 0:
                data.never.add((a, b))
                continue
            na, nb = ra / data.solo[a], rb / data.solo[b]
            if not (na <= MAX_N and nb <= MAX_N):  # also catches inf from a tiny solo rate
                raise ScoresError(
                    f"{what}: {na:.3g}x and {nb:.3g}x the solo rates; more than {MAX_N:g}x "
                    'is not a measurement (check the solo rates, "null")'
                )
            data.pairs[(a, b)] = (na, nb)
            if abs(na - 1.0) < 1e-9 and abs(nb - 1.0) < 1e-9:
                data.censored.add((a, b))
    if not data.solo:
        raise ScoresError(
            f"{source}: GPU type {gpu!r} has no single-GPU job type with a solo "
            f"rate (entries ('<job type>', 1) with \"null\": steps/s)"
        )
    return data


def load_gavel(path: str | Path, gpu: str) -> GavelData:
    """Read a file in Gavel's format and take the GPU type ``gpu`` (any key of the file)."""
    p = Path(path)
    try:
        raw = json.loads(read_regular(p, pipe=True).decode("utf-8-sig"))  # commands only
    except FileNotFoundError:
        raise ScoresError(f"gavel data file {p} not found") from None
    except OSError as e:
        raise ScoresError(f"cannot read gavel data file {p}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ScoresError(f"gavel data file {p} is not JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise ScoresError(f"gavel data file {p} is not JSON: {e.msg} at line {e.lineno}") from None
    except RecursionError:
        raise ScoresError(f"gavel data file {p} is not usable: nested too deeply") from None
    except ValueError as e:  # a 4,300-digit integer
        raise ScoresError(f"gavel data file {p} is not usable: {e}") from None
    return parse_gavel(raw, gpu, f"gavel data file {p}")


def bundled_path(name: str = "throughputs_v100_k80.json") -> Path:
    """Path of a file of the bundled Gavel data (``slurm_colo/data/gavel``)."""
    return Path(__file__).parent / "data" / "gavel" / name
