"""Admin commands: install (snippets, SPANK plugin), doctor, man."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ..admin import doctor as doc
from ..admin import install as inst
from ..admin.check import FAIL, WARN, exit_code, format_check
from ..admin.run import run_command
from ..admin.spank_build import InstallError, build_spank, spank_source_dir
from ..config import Config, config_path, load_config
from ..errors import ColoError
from .options import ConfigOpt


def read_shims() -> dict[str, str]:
    """The hook shims shipped with the package (name -> text); absent ones are left out."""
    d = spank_source_dir().parent / "prolog"
    out: dict[str, str] = {}
    for name in inst.HOOKS:
        try:
            out[name] = (d / name).read_text(encoding="utf-8")
        except OSError:
            continue
    return out


def render_lua(cfg: Config) -> str:
    from ..lua import render_job_submit_lua

    try:
        return render_job_submit_lua(cfg)
    except (OSError, ValueError) as e:
        raise InstallError(f"cannot render job_submit.lua: {e}") from None


def _store_probe(cfg: Config) -> Callable[[], str] | None:
    """A probe of the history database, or None when this build has no store module."""
    try:
        from ..store import engine as _engine  # noqa: F401
    except ImportError:
        return None
    from ..admin.store_probe import probe_store

    return lambda: probe_store(cfg.store.url, cfg.store.busy_timeout_s)


def _lua_or_none(cfg: Config) -> str | None:
    try:
        return render_lua(cfg)
    except (ColoError, ImportError):
        return None


def _ping(cfg: Config) -> dict[str, Any] | None:
    """PING at agent.address; an AgentError (unreachable, munge refused) says why."""
    from slurm_colo.contracts.client import request

    return request(cfg.agent.address, "PING", {}, 2.0, cfg)


def _load_scores(path: str) -> Any:
    from ..scores import load_scores

    return load_scores(path)


def _model_scores_path(path: str, model: str) -> Path:
    from ..scores import model_scores_path

    return model_scores_path(path, model)


def register(app: typer.Typer) -> None:
    install_app = typer.Typer(invoke_without_command=True, no_args_is_help=False)

    @install_app.callback()
    def install(
        ctx: typer.Context,
        write: Path | None = typer.Option(
            None,
            "--write",
            metavar="DIR",
            help="Write each snippet (and the hook shims) to its own file in DIR for review.",
        ),
        config: Path | None = ConfigOpt,
    ) -> None:
        """Print the Slurm configuration slurm-colo needs and the steps to install it.

        Prints the slurm.conf and gres.conf lines, the plugstack.conf.d file, job_submit.lua and the hook environment file. Nothing on this host is changed: review the snippets and merge them yourself.

        Use `slurm-colo install spank` to build the SPANK plugin."""
        if ctx.invoked_subcommand:
            return
        cfg = load_config(config)
        lay = inst.Layout()
        shims = read_shims()
        items = inst.snippets(
            cfg, lay, python=sys.executable, lua_text=render_lua(cfg), shims=shims
        )
        if write is None:
            steps = inst.steps_text(lay, "DIR", shims_present=bool(shims))
            typer.echo(inst.render_print(items, steps), nl=False)
            typer.echo("\n(write these files with: slurm-colo install --write DIR)")
            return
        steps = inst.steps_text(lay, str(write.resolve()), shims_present=bool(shims))
        for p in inst.write_snippets(items, write, steps):
            typer.echo(f"wrote {p}")
        typer.echo("")
        typer.echo(steps, nl=False)

    @install_app.command("spank")
    def install_spank(
        prefix: Path = typer.Option(
            Path(inst.Layout().spank_dir),
            "--prefix",
            metavar="DIR",
            help="Install colocate.so into DIR.",
        ),
        slurm_include: Path = typer.Option(
            Path("/usr/include"),
            "--slurm-include",
            metavar="DIR",
            help="Directory holding slurm/spank.h.",
        ),
        build_dir: Path | None = typer.Option(
            None,
            "--build-dir",
            metavar="DIR",
            help="Build here and keep the directory (default: a temporary one).",
        ),
    ) -> None:
        """Build the SPANK plugin (colocate.so) against the Slurm headers and install it.

        Needs make, a C compiler and the Slurm headers (Debian: libslurm-dev); Slurm 22.05 to 26.x."""
        with tempfile.TemporaryDirectory(prefix="slurm-colo-spank.") as tmp:
            where = build_dir or Path(tmp)
            so = build_spank(spank_source_dir(), where, slurm_include, run_command, prefix)
        typer.echo(f"installed {so}")
        typer.echo("plugstack line (plugstack.conf.d/slurm-colo.conf):")
        typer.echo(f"optional {so}")

    app.add_typer(install_app, name="install")

    @app.command()
    def doctor(
        config: Path | None = ConfigOpt,
        etc_slurm: Path = typer.Option(
            Path("/etc/slurm"), "--slurm-dir", metavar="DIR", help="Slurm configuration directory."
        ),
        json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    ) -> None:
        """Check the installation and print OK/WARN/FAIL with the fixing command for each check.

        Checks the config, slurm.conf, the SPANK plugin, the node hooks, job_submit.lua, gres.conf, the agent, the database, the score set, MPS and the clock's synchronisation. Exits with status 1 when any check fails."""
        system = doc.System(
            etc_slurm=etc_slurm,
            runner=run_command,
            ping=_ping,
            store_probe=_store_probe,
            load_scores=_load_scores,
            render_lua=_lua_or_none,
            which=shutil.which,
            hostname=socket.gethostname().split(".")[0],
            hooks_env=Path(os.environ.get("SLURM_COLO_HOOKS_ENV", "/etc/slurm-colo/hooks.env")),
            model_scores_path=_model_scores_path,
        )
        checks = doc.run_checks(config or config_path(), system)
        if json_out:
            typer.echo(json.dumps([dataclasses.asdict(c) for c in checks], indent=1))
            raise typer.Exit(exit_code(checks))
        for c in checks:
            typer.echo(format_check(c))
        fails = sum(c.status == FAIL for c in checks)
        warns = sum(c.status == WARN for c in checks)
        typer.echo(f"{len(checks)} checks: {fails} failed, {warns} warnings")
        raise typer.Exit(exit_code(checks))

    @app.command()
    def man(
        out: Path = typer.Option(..., "--out", metavar="DIR", help="Write the man pages into DIR."),
        man_tree: bool = typer.Option(
            False,
            "--man-tree",
            help="Write into DIR/man1, DIR/man5 and DIR/man8 (e.g. DIR=/usr/local/share/man).",
        ),
    ) -> None:
        """Generate the man pages (sections 1, 5 and 8) from the commands and the config reference."""
        from ..admin.man import write_all
        from . import app as root_app

        for p in write_all(root_app, out, man_tree):
            typer.echo(f"wrote {p}")
