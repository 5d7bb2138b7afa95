"""`slurm-colo install spank`: build the SPANK plugin against the installed Slurm headers.

The plugin source ships in the package (slurm_colo/data/spank/, identical to spank/ in the
repository); it is copied to a build directory and built there with ``make``.
"""

from __future__ import annotations

import re
import shutil
from importlib import resources
from pathlib import Path

from ..errors import ColoError
from .run import NOT_FOUND, Result, Runner

#: supported Slurm releases: 22.05 up to the 26.x series (built and run on 22.05, 24.11, 26.05)
MIN_VERSION = (22, 5)
MAX_MAJOR = 26

_HEADER_RE = re.compile(
    r"^\s*#\s*define\s+SLURM_VERSION_NUMBER\s+(0x[0-9a-fA-F]+|\d+)", re.MULTILINE
)
_OUTPUT_RE = re.compile(r"\bslurm(?:-wlm)?\s+(\d+)\.(\d+)(?:\.(\d+))?", re.IGNORECASE)


class InstallError(ColoError):
    """Building or installing a slurm-colo component failed."""


def spank_source_dir() -> Path:
    return Path(str(resources.files("slurm_colo") / "data" / "spank"))


def parse_version_header(text: str) -> tuple[int, int, int] | None:
    """``SLURM_VERSION_NUMBER 0x160508`` in slurm_version.h -> (22, 5, 8)."""
    m = _HEADER_RE.search(text)
    if not m:
        return None
    n = int(m.group(1), 0)
    return (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF


def parse_version_output(text: str) -> tuple[int, int, int] | None:
    """``slurm 22.05.8`` / ``slurm-wlm 22.05.8`` (``-V`` output) -> (22, 5, 8)."""
    m = _OUTPUT_RE.search(text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def version_str(v: tuple[int, int, int]) -> str:
    return f"{v[0]}.{v[1]:02d}.{v[2]}"


def is_supported(v: tuple[int, int, int]) -> bool:
    return (v[0], v[1]) >= MIN_VERSION and v[0] <= MAX_MAJOR


def detect_slurm_version(include_dir: Path, runner: Runner) -> tuple[tuple[int, int, int], str]:
    """The Slurm version to build for, and where it was read: the headers first (they are
    what the plugin compiles against), else ``slurmctld -V`` / ``sinfo -V``."""
    header = include_dir / "slurm" / "slurm_version.h"
    try:
        v = parse_version_header(header.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        v = None
    if v:
        return v, str(header)
    for argv in (["slurmctld", "-V"], ["sinfo", "-V"]):
        r = runner(argv)
        v = parse_version_output(r.stdout + "\n" + r.stderr) if r.rc != NOT_FOUND else None
        if v:
            return v, " ".join(argv)
    raise InstallError(
        "cannot tell the Slurm version: no SLURM_VERSION_NUMBER in "
        f"{header} and neither `slurmctld -V` nor `sinfo -V` answered",
        hint="apt-get install libslurm-dev",
    )


def check_build_prerequisites(include_dir: Path, runner: Runner) -> tuple[int, int, int]:
    """Raise :class:`InstallError` unless spank.h exists and the Slurm version is supported."""
    spank_h = include_dir / "slurm" / "spank.h"
    if not spank_h.is_file():
        raise InstallError(
            f"{spank_h} not found: the Slurm development headers are needed to build the plugin",
            hint="apt-get install libslurm-dev",
        )
    v, where = detect_slurm_version(include_dir, runner)
    if not is_supported(v):
        raise InstallError(
            f"Slurm {version_str(v)} (from {where}) is not supported: "
            f"slurm-colo supports Slurm {MIN_VERSION[0]}.{MIN_VERSION[1]:02d} "
            f"to {MAX_MAJOR}.x"
        )
    return v


def _check(r: Result, what: str) -> None:
    if r.rc == NOT_FOUND:
        raise InstallError(f"{what}: `{r.argv[0]}` not found", hint="apt-get install make gcc")
    if r.rc != 0:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
        raise InstallError(f"{what} failed (exit {r.rc}): {tail}")


def build_spank(
    src_dir: Path, build_dir: Path, include_dir: Path, runner: Runner, prefix: Path | None = None
) -> Path:
    """Copy the plugin source to ``build_dir``, build it, and install it into ``prefix``
    when given. Returns the path of the built (or installed) ``colocate.so``."""
    check_build_prerequisites(include_dir, runner)
    if not (src_dir / "colocate.c").is_file() or not (src_dir / "Makefile").is_file():
        raise InstallError(
            f"plugin source missing in {src_dir} (colocate.c, Makefile): "
            "this slurm-colo package is incomplete",
            hint="pip install --force-reinstall slurm-colo",
        )
    build_dir.mkdir(parents=True, exist_ok=True)
    for f in src_dir.iterdir():
        if f.is_file() and not f.name.endswith(".so"):
            shutil.copy2(f, build_dir / f.name)
    _check(runner(["make", "-C", str(build_dir), f"SLURM_INCLUDE={include_dir}"]), "make")
    built = build_dir / "colocate.so"
    if prefix is None:
        return built
    _check(
        runner(
            [
                "make",
                "-C",
                str(build_dir),
                "install",
                f"SLURM_INCLUDE={include_dir}",
                f"PREFIX={prefix}",
            ]
        ),
        "make install",
    )
    return prefix / "colocate.so"
