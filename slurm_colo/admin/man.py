"""Man pages generated from the command-line app and the config reference.

* ``slurm-colo.1``: overview of every command.
* ``slurm-colo-<command>.1`` (user commands) or ``.8`` (admin commands, :data:`ADMIN_COMMANDS`),
  one page per top-level command, sub-commands included.
* ``slurm-colo-config.5``: the site config file, from :mod:`slurm_colo.admin.config_doc`.

Output is deterministic (no date) so the committed pages in docs/man/ can be compared
with a fresh rendering.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from typer.main import get_command

from .. import __version__
from ..fsutil import atomic_write_bytes
from . import config_doc

#: top-level commands documented in section 8; every other command is in section 1
ADMIN_COMMANDS = frozenset(
    {
        "agent",
        "install",
        "doctor",
        "man",
        "retrain",
        "train",
        "db",
        "store",
        "history",
        "node",
        "hooks",
        "lab",
        "simulate",
        "gres",
        "model",
        "spool",
    }
)
PROG = "slurm-colo"
MANUAL = "slurm-colo manual"
PROG_E = "slurm\\-colo"  # PROG escaped for roff


def esc(text: str) -> str:
    """Escape text for roff: backslashes, hyphens, and a leading dot or quote. Help texts
    are written for the terminal's rich markup, where ``\\[`` is a plain bracket."""
    out = text.replace("\\[", "[").replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + out if out[:1] in (".", "'") else out


def _paragraphs(text: str) -> list[str]:
    paras: list[str] = []
    for block in text.replace("\b", "").strip().split("\n\n"):
        lines = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
        if lines:
            paras.append(" ".join(lines))
    return paras


def _body(text: str) -> list[str]:
    out: list[str] = []
    for i, p in enumerate(_paragraphs(text)):
        if i:
            out.append(".PP")
        out.append(esc(p))
    return out


def _th(name: str, section: int) -> str:
    return f'.TH "{name.upper()}" "{section}" "" "{PROG} {__version__}" "{MANUAL}"'


def section_of(command: str) -> int:
    return 8 if command in ADMIN_COMMANDS else 1


def _commands(cmd: Any) -> dict[str, Any]:
    return {
        n: c
        for n, c in sorted(getattr(cmd, "commands", {}).items())
        if not getattr(c, "hidden", False)
    }


def _short(cmd: Any) -> str:
    text = cmd.short_help or (_paragraphs(cmd.help or "") or [""])[0]
    return text.split(". ")[0].rstrip(".")


def _options(cmd: Any, ctx: typer.Context) -> list[str]:
    out: list[str] = []
    for p in cmd.get_params(ctx):
        rec = p.get_help_record(ctx)
        if not rec:
            continue
        term, help_text = rec
        out += [".TP", f".B {esc(term)}", esc(help_text) if help_text else ""]
    return [ln for ln in out if ln != ""]


def _walk(
    cmd: Any, ctx: typer.Context, path: list[str]
) -> Iterator[tuple[list[str], Any, typer.Context]]:
    yield path, cmd, ctx
    for name, sub in _commands(cmd).items():
        yield from _walk(sub, typer.Context(sub, info_name=name, parent=ctx), [*path, name])


def command_page(root: Any, name: str) -> str:
    """The man page of top-level command ``name``, its sub-commands included."""
    rctx = typer.Context(root, info_name=PROG)
    cmd = root.commands[name]
    ctx = typer.Context(cmd, info_name=name, parent=rctx)
    sec = section_of(name)
    page = f"{PROG}-{name}"
    lines = [_th(page, sec), ".SH NAME", f"{esc(page)} \\- {esc(_short(cmd))}", ".SH SYNOPSIS"]
    for path, c, cctx in _walk(cmd, ctx, [PROG, name]):
        if _commands(c) and path != [PROG, name]:
            continue
        usage = " ".join(c.collect_usage_pieces(cctx))
        lines += [f".B {esc(' '.join(path))}", esc(usage), ".br"]
    lines[-1:] = []  # no trailing .br
    lines += [".SH DESCRIPTION", *(_body(cmd.help or "") or [esc(_short(cmd))])]
    opts = _options(cmd, ctx)
    if opts:
        lines += [".SH OPTIONS", *opts]
    subs = [(p, c, x) for p, c, x in _walk(cmd, ctx, [PROG, name]) if p != [PROG, name]]
    if subs:
        lines.append(".SH COMMANDS")
        for path, c, cctx in subs:
            lines += [
                f'.SS "{esc(" ".join(path[1:]))}"',
                *(_body(c.help or "") or [esc(_short(c))]),
            ]
            lines += _options(c, cctx)
    lines += [".SH SEE ALSO", f"\\fB{PROG_E}\\fR(1), \\fB{PROG_E}\\-config\\fR(5)"]
    return "\n".join(lines) + "\n"


def overview_page(root: Any) -> str:
    lines = [
        _th(PROG, 1),
        ".SH NAME",
        f"{PROG_E} \\- {esc(_short(root) or 'GPU co-location for Slurm')}",
        ".SH SYNOPSIS",
        f".B {PROG_E}",
        "COMMAND [OPTIONS] [ARGS]...",
        ".SH DESCRIPTION",
        *_body(root.help or ""),
        ".PP",
        "Each command is described in its own page, listed below. The site "
        "configuration is described in \\fBslurm\\-colo\\-config\\fR(5).",
        ".SH COMMANDS",
    ]
    for name, c in _commands(root).items():
        lines += [
            ".TP",
            f".B {esc(name)}",
            f"{esc(_short(c))} (\\fB{PROG_E}\\-{esc(name)}\\fR({section_of(name)}))",
        ]
    lines += [
        ".SH FILES",
        ".TP",
        ".B /etc/slurm\\-colo/config.toml",
        "The site configuration (override with SLURM_COLO_CONFIG).",
        ".SH SEE ALSO",
        f"\\fB{PROG_E}\\-config\\fR(5)",
    ]
    return "\n".join(lines) + "\n"


def config_page() -> str:
    lines = [
        _th(f"{PROG}-config", 5),
        ".SH NAME",
        f"{PROG_E}\\-config \\- site configuration file of slurm\\-colo",
        ".SH SYNOPSIS",
        ".B /etc/slurm\\-colo/config.toml",
        ".SH DESCRIPTION",
        "A TOML file, owned by root, read by the agent, the node hooks and the command "
        "line. Every section and key is optional and has the default shown below; an empty "
        "file is valid. Unknown keys and bad values are errors that name the key. The "
        "environment variable SLURM_COLO_CONFIG names another file. Where that file is "
        "missing, every command runs on the defaults; a file named with \\fB\\-\\-config\\fR "
        "that is missing is an error. "
        "\\fBslurm\\-colo doctor\\fR checks the file; a commented example covering every "
        "key is contrib/examples/config.toml.",
    ]
    current = None
    for k in config_doc.iter_keys():
        if k.section != current:
            current = k.section
            title = "[[gpus]]" if current == "gpus" else f"[{current}]"
            lines += [f'.SH "{esc(title)}"', esc(config_doc.SECTION_HELP[current])]
        if k.default is None:
            dflt = "required"
        elif current == "gpus" and k.key == "shared":
            dflt = f"default: {k.default}"
        else:
            dflt = f"default: {config_doc.toml_value(k.default)}"
        lines += [".TP", f"\\fB{esc(k.key)}\\fR ({esc(dflt)})", esc(k.help)]
        ch = config_doc.choices(k.section, k.key)
        if ch:
            lines[-1] += f" Accepted: {esc(', '.join(ch))}."
    lines += [
        ".SH EXAMPLE",
        ".nf",
        *(
            esc(ln)
            for ln in (
                "[placement]",
                'fallback = "exclusive"',
                "min_delta = 1.1",
                "",
                "[[gpus]]",
                'nodes = "gpu[01-04]"',
                "count = 4",
                'model = "v100"',
                'shared = "2-3"',
            )
        ),
        ".fi",
        ".SH SEE ALSO",
        f"\\fB{PROG_E}\\fR(1), \\fB{PROG_E}\\-install\\fR(8), "
        f"\\fB{PROG_E}\\-doctor\\fR(8), \\fBslurm.conf\\fR(5), \\fBgres.conf\\fR(5)",
    ]
    return "\n".join(lines) + "\n"


def render_all(app: typer.Typer) -> dict[str, str]:
    """File name -> page text for every page."""
    root = get_command(app)
    pages = {f"{PROG}.1": overview_page(root), f"{PROG}-config.5": config_page()}
    for name in _commands(root):
        pages[f"{PROG}-{name}.{section_of(name)}"] = command_page(root, name)
    return dict(sorted(pages.items()))


def write_all(app: typer.Typer, out_dir: Path, man_tree: bool = False) -> list[Path]:
    """Write every page into ``out_dir`` (or its ``manN`` subdirectories with ``man_tree``)
    and remove stale slurm-colo pages there."""
    pages = render_all(app)
    written = []
    for name, text in pages.items():
        d = out_dir / f"man{name.rsplit('.', 1)[1]}" if man_tree else out_dir
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob(f"{PROG}*.[158]"):
            if old.name not in pages:
                old.unlink()
        p = d / name
        atomic_write_bytes(p, text.encode(), 0o644, fsync=False)  # never through a link
        written.append(p)
    return written
