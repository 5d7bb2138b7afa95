"""Options several commands share, written once (their help is rich markup: ``\\[`` is a
plain bracket)."""

from __future__ import annotations

import typer

ConfigOpt = typer.Option(
    None,
    "--config",
    "-c",
    help="Config file (default: $SLURM_COLO_CONFIG or /etc/slurm-colo/config.toml).",
)
UrlOpt = typer.Option(None, "--url", help="Database URL (default: \\[store] url of the config).")
