"""The ``slurm-colo`` command. Each command group lives in its own module with a
``register(app)`` function; this file only assembles them and maps errors to exit codes."""

from __future__ import annotations

import importlib
import sys

import typer

from ..errors import ColoError

app = typer.Typer(
    name="slurm-colo",
    help="Compatibility-aware GPU co-location for Slurm.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Compatibility-aware GPU co-location for Slurm (see `slurm-colo COMMAND --help`)."""


#: command modules, in help order; each defines register(app)
_MODULES = ["spine", "scores_load", "admin", "sim", "history", "node"]

for _name in _MODULES:
    importlib.import_module(f"{__name__}.{_name}").register(app)


def main() -> None:
    try:
        app()
    except ColoError as e:
        print(f"slurm-colo: error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        if e.filename is None:  # not about a path the user gave or chose: keep the traceback
            raise
        # a path that cannot be made, written or read (a file where a directory goes, no
        # permission): the path and the reason, as for any other bad input
        print(f"slurm-colo: error: {e.filename}: {e.strerror or e}", file=sys.stderr)
        sys.exit(2)
