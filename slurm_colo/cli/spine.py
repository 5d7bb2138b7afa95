"""Spine commands: version (more arrive with the agent)."""

from __future__ import annotations

import typer

from .. import __version__


def register(app: typer.Typer) -> None:
    @app.command()
    def version() -> None:
        """Print the slurm-colo version."""
        typer.echo(__version__)
