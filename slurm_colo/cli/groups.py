"""Shared command groups, so several modules can add commands to one group."""

from __future__ import annotations

import typer

_GROUPS: dict[str, typer.Typer] = {}


def get(app: typer.Typer, name: str, help_text: str) -> typer.Typer:
    if name not in _GROUPS:
        _GROUPS[name] = typer.Typer(help=help_text, no_args_is_help=True)
        app.add_typer(_GROUPS[name], name=name)
    return _GROUPS[name]
