"""Render the shipped ``job_submit.lua`` with this site's settings baked in.

The hook reads no file at submit time: socket path, time limit, circuit-breaker delay and
fallback are constants in the generated script (slurmctld reloads it when it changes).
"""

from __future__ import annotations

from pathlib import Path

from .config import Config

TEMPLATE = Path(__file__).parent / "data" / "job_submit.lua"


def _lua_string(s: str) -> str:
    if any(c in s for c in '"\\\n\r'):
        raise ValueError(f"value {s!r} cannot be embedded in the Lua hook")
    return s


def render_job_submit_lua(cfg: Config, tres_sep: str = "") -> str:
    """``tres_sep``: how the installed Slurm writes GRES in TRES strings, ``":"`` (22.05,
    ``gres:gpu:1``) or ``"/"`` (23.11+, ``gres/gpu:1``); see
    :func:`slurm_colo.gres_layout.tres_gres`. The hook follows each job's own request and
    needs this only for a request written without ``gres``; with ``""`` (unknown) such a
    job is left as submitted."""
    if tres_sep not in ("", ":", "/"):
        raise ValueError(f"tres_sep {tres_sep!r}: use ':', '/' or ''")
    text = TEMPLATE.read_text(encoding="utf-8")
    values = {
        "@CONFIG_SOURCE@": cfg.source.replace("\n", " "),
        "@SOCKET@": _lua_string(cfg.agent.socket),
        "@TIMEOUT_S@": f"{cfg.agent.request_timeout_ms / 1000.0:.3f}",
        "@RETRY_AFTER_S@": str(int(cfg.agent.retry_after_s)),
        "@FALLBACK@": _lua_string(cfg.placement.fallback),
        "@TRES_SEP@": tres_sep,
    }
    for k, v in values.items():
        text = text.replace(k, v)
    return text
