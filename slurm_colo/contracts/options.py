"""User-facing option values: ``--colocate[=MODE]`` and ``--colocate-class=NAME``.

The same rules are enforced in three places (C SPANK plugin at submit time, the Lua hook,
and here for the agent and the CLI); :data:`MODES` and :data:`CLASS_PATTERN` are the
reference, and tests check the C and Lua copies against them.
"""

from __future__ import annotations

import re

from slurm_colo.contracts.enums import ClassNumbers, Mode
from slurm_colo.errors import OptionError

#: Accepted ``--colocate`` modes (see :class:`~slurm_colo.contracts.enums.Mode`).
MODES: tuple[str, ...] = tuple(m.value for m in Mode)
DEFAULT_MODE = Mode.AUTO

#: A class name: 1-64 chars, starts alphanumeric, then alphanumerics and ``. _ + -``.
CLASS_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}"
_CLASS_RE = re.compile(rf"^{CLASS_PATTERN}$")
_NOT_CLASS_CHAR = re.compile(r"[^a-z0-9._+-]+")
#: numbers after a separator at a name's end: a run number, a date, a time stamp; not a
#: decimal number's fraction (``lr0.001``)
_TRAILING_NUMBERS = re.compile(r"(?:[_+-]|(?<![0-9])\.)[0-9]+(?:[._+-][0-9]+)*$")

#: Job names that say nothing about the job (Slurm defaults): they map to DEFAULT_CLASS.
GENERIC_JOB_NAMES = frozenset(
    {
        "",
        "wrap",
        "sbatch",
        "srun",
        "salloc",
        "bash",
        "sh",
        "interactive",
        "python",
        "python3",
        "job",
        "script.sh",
        "run.sh",
        "job.sh",
    }
)
DEFAULT_CLASS = "default"
#: what the CLI tells a user about classes no score set knows (explain, retrain)
ONE_OFF_CLASS_HINT = (
    "a name with a run number is a new class each time; sbatch --colocate-class names a kind of job"
)


def unknown_class_hint(cls: str) -> str:
    """What ``slurm-colo explain`` adds about a class no score set in use knows: a name
    ending in a number is the likely cause (:data:`ONE_OFF_CLASS_HINT`); any other class is
    new and learnt from its jobs (with ``class_name_numbers = "strip"`` a run's class is
    its name without the number, which recurs)."""
    if _TRAILING_NUMBERS.search(cls):
        return ONE_OFF_CLASS_HINT
    return "a class is learnt from its jobs that ran, by the nightly retrain"


def parse_mode(value: str | None) -> Mode:
    """Normalise a ``--colocate`` value. ``None``, empty and the literal ``(null)`` mean auto."""
    if value is None:
        return DEFAULT_MODE
    v = value.strip().lower()
    if v in ("", "(null)"):
        return DEFAULT_MODE
    if v not in MODES:
        raise OptionError(
            f"invalid --colocate mode {value!r}: accepted values are {', '.join(MODES)}"
        )
    return Mode(v)


def validate_class(value: str) -> str:
    """Return a valid class name unchanged, or raise :class:`OptionError`."""
    if not _CLASS_RE.match(value):
        raise OptionError(
            f"invalid --colocate-class {value!r}: use 1-64 characters, letters, digits and "
            "'._+-', starting with a letter or digit (e.g. resnet50-bs64)"
        )
    return value


def without_run_number(name: str) -> str:
    """``name`` without the numbers after a separator at its end (``run-00042``: ``run``;
    ``resnet50`` and ``lr0.001`` unchanged), as ``class_name_numbers = "strip"`` cuts them."""
    return _TRAILING_NUMBERS.sub("", name)


def derive_class(
    job_name: str | None,
    explicit: str | None = None,
    numbers: ClassNumbers = ClassNumbers.KEEP,
) -> str:
    """The job's class: the explicit hint if given, else derived from the job name.

    Derivation: lower-case the job name, drop a trailing script suffix (``.sh``, ``.py``,
    ``.sbatch``), replace runs of other characters by ``-``; with ``numbers`` STRIP
    (``placement.class_name_numbers``) cut the numbers that follow a separator at its end
    (:func:`without_run_number`: ``run-00042``, ``train_2026-11-25`` give ``run``,
    ``train``; ``resnet50`` and ``lr0.001`` stay); cut to 64 characters. Slurm's default
    names (``wrap``, the bare script names in :data:`GENERIC_JOB_NAMES`) say nothing about
    the job and give :data:`DEFAULT_CLASS`, which placement treats conservatively; so does
    a name left with nothing else.
    """
    if explicit not in (None, "", "(null)"):
        return validate_class(explicit)  # type: ignore[arg-type]
    name = (job_name or "").strip().lower()
    if name in GENERIC_JOB_NAMES:
        return DEFAULT_CLASS
    name = re.sub(r"\.(sh|py|sbatch|slurm|bash)$", "", name)
    name = _NOT_CLASS_CHAR.sub("-", name)
    if numbers == ClassNumbers.STRIP:
        name = without_run_number(name.strip("-._+"))
        if name in GENERIC_JOB_NAMES:
            return DEFAULT_CLASS
    name = name.strip("-._+")[:64]
    return name if name and _CLASS_RE.match(name) else DEFAULT_CLASS
