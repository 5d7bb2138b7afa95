"""What `slurm-colo install` prints or writes: the Slurm configuration snippets.

Nothing here edits a system file. :func:`snippets` returns each piece of configuration
with the place it belongs; the CLI prints them or writes each to its own file for review.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import DEFAULT_PATH, Config
from ..fsutil import atomic_write_bytes
from ..gres_layout import gres_conf, slurm_conf_snippet

#: the node hook shims shipped in slurm_colo/data/prolog/, in the order they run
HOOKS: tuple[str, ...] = (
    "slurm-colo-prolog",
    "slurm-colo-epilog",
    "slurm-colo-taskprolog",
    "slurm-colo-taskepilog",
)


@dataclass(frozen=True)
class Layout:
    """Where the pieces go on the cluster hosts (the defaults are the documented ones)."""

    etc_slurm: str = "/etc/slurm"
    etc_colo: str = "/etc/slurm-colo"
    #: colocate.so (the Makefile's default PREFIX)
    spank_dir: str = "/usr/local/lib/slurm-colo"
    #: the TaskProlog/TaskEpilog shims
    libexec: str = "/usr/local/libexec/slurm-colo"
    prolog_epilog_timeout_s: int = 120

    @property
    def prolog_dir(self) -> str:
        return f"{self.etc_slurm}/prolog.d"

    @property
    def epilog_dir(self) -> str:
        return f"{self.etc_slurm}/epilog.d"

    @property
    def plugstack_dir(self) -> str:
        return f"{self.etc_slurm}/plugstack.conf.d"

    @property
    def spank_so(self) -> str:
        return f"{self.spank_dir}/colocate.so"


@dataclass(frozen=True)
class Snippet:
    #: file name under `install --write DIR`
    name: str
    #: where it goes on the cluster
    target: str
    #: "copy" (a whole file of ours) or "merge" (lines to add to a file the site owns)
    how: str
    text: str
    executable: bool = False


def slurm_conf_text(cfg: Config, lay: Layout) -> str:
    lines = [
        f"# slurm.conf lines for slurm-colo (from {cfg.source})",
        f"# Merge into {lay.etc_slurm}/slurm.conf on every host. GresTypes, SelectType and",
        "# NodeName Gres= changes need slurmctld and slurmd restarted; the rest takes",
        "# `scontrol reconfigure`.",
        "",
        "# The placement hook: job_submit.lua next to slurm.conf. If JobSubmitPlugins already",
        "# lists plugins, add lua to that list.",
        "JobSubmitPlugins=lua",
        "",
        "# Shared GPUs are gres/shard, which needs the cons_tres select plugin.",
        "SelectType=select/cons_tres",
        "",
        *slurm_conf_snippet(cfg.gpus).rstrip("\n").split("\n"),
        "",
        "# Node hooks (MPS daemon, per-job records). Prolog and Epilog accept a glob, so",
        "# scripts already in these directories keep running next to ours.",
        f"Prolog={lay.prolog_dir}/*",
        f"Epilog={lay.epilog_dir}/*",
        "# TaskProlog and TaskEpilog take one program each: if you already have one, run",
        "# ours from it instead (its stdout must reach Slurm: `export NAME=value` lines).",
        f"TaskProlog={lay.libexec}/slurm-colo-taskprolog",
        f"TaskEpilog={lay.libexec}/slurm-colo-taskepilog",
        "# Run the prolog when the job is allocated, so MPS is up before the first step.",
        "PrologFlags=Alloc",
        "# Starting or stopping an MPS daemon can take seconds; do not let Slurm kill it early.",
        f"PrologEpilogTimeout={lay.prolog_epilog_timeout_s}",
    ]
    return "\n".join(lines) + "\n"


def gres_conf_text(cfg: Config, lay: Layout) -> str:
    if not cfg.gpus:
        return (
            f"# gres.conf: no [[gpus]] table in {cfg.source}; add one (see "
            "contrib/examples/config.toml) and run `slurm-colo install` again\n"
        )
    return gres_conf(cfg.gpus)


def plugstack_text(lay: Layout) -> str:
    return (
        "\n".join(
            [
                "# slurm-colo SPANK plugin: adds --colocate[=auto|aggressive|off] and",
                "# --colocate-class=NAME to sbatch, srun and salloc.",
                '# "optional": if the plugin cannot be loaded, jobs still launch (without the options).',
                f"# {lay.etc_slurm}/plugstack.conf must contain: include {lay.plugstack_dir}/*.conf",
                f"optional {lay.spank_so}",
            ]
        )
        + "\n"
    )


def hooks_env_text(cfg: Config, python: str, config_file: str) -> str:
    return (
        "\n".join(
            [
                "# Read by the slurm-colo prolog/epilog shims (sh syntax: NAME=value, no spaces).",
                "# The Python interpreter that has slurm-colo installed, and the site config.",
                f"SLURM_COLO_PYTHON={python}",
                f"SLURM_COLO_CONFIG={config_file}",
            ]
        )
        + "\n"
    )


def config_file_of(cfg: Config) -> str:
    """The config path to write into hooks.env: the file the config came from (also when it
    was missing and defaults were used); the default path for a config not read from a file."""
    src = cfg.source
    if src.startswith("<"):
        return str(DEFAULT_PATH)
    return src.split(" (missing", 1)[0]


def steps_text(lay: Layout, src_dir: str, shims_present: bool = True) -> str:
    """The install steps, in order, as commands an admin runs (src_dir: where the files are)."""
    d = src_dir.rstrip("/")
    hooks = [
        f"     install -D -m 0755 {d}/slurm-colo-prolog {lay.prolog_dir}/50-slurm-colo",
        f"     install -D -m 0755 {d}/slurm-colo-epilog {lay.epilog_dir}/50-slurm-colo",
        f"     install -D -m 0755 {d}/slurm-colo-taskprolog {lay.libexec}/slurm-colo-taskprolog",
        f"     install -D -m 0755 {d}/slurm-colo-taskepilog {lay.libexec}/slurm-colo-taskepilog",
        f"     install -D -m 0644 {d}/hooks.env {lay.etc_colo}/hooks.env",
    ]
    if not shims_present:
        hooks.insert(
            0, "     (the hook shims are not in this package build: take them from prolog/)"
        )
    lines = [
        "Install steps (nothing has been changed on this host):",
        "  1. Build and install the SPANK plugin on every host (needs libslurm-dev):",
        f"     slurm-colo install spank --prefix {lay.spank_dir}",
        f"     install -D -m 0644 {d}/plugstack-slurm-colo.conf {lay.plugstack_dir}/slurm-colo.conf",
        f"     and make sure {lay.etc_slurm}/plugstack.conf has: include {lay.plugstack_dir}/*.conf",
        "  2. On every GPU node, install the hook shims and their environment file:",
        *hooks,
        f"  3. Merge {d}/gres.conf.snippet into {lay.etc_slurm}/gres.conf and",
        f"     {d}/slurm.conf.snippet into {lay.etc_slurm}/slurm.conf (every host).",
        "  4. On the controller, install the placement hook (it needs lua-socket):",
        "     apt-get install lua-socket",
        f"     install -m 0644 {d}/job_submit.lua {lay.etc_slurm}/job_submit.lua",
        "     If you already have a job_submit.lua, install ours as job_submit_colo.lua instead,",
        "     load it at the top of yours with",
        f'         dofile("{lay.etc_slurm}/job_submit_colo.lua")',
        "     and call it from your slurm_job_submit, where it never raises nor rejects a job:",
        "         pcall(colo_job_submit, job_desc, part_list, submit_uid)",
        "  5. Create the history database and give the agent a first score set (the nightly",
        "     `slurm-colo retrain` replaces it later); run both as the agent's user:",
        "     slurm-colo db upgrade",
        "     slurm-colo scores load --measured v100",
        "  6. Start the agent (contrib/systemd/slurm-colo-agent.service), restart slurmctld and",
        "     slurmd, then check everything with:",
        "     slurm-colo doctor",
    ]
    return "\n".join(lines) + "\n"


def snippets(
    cfg: Config, lay: Layout, *, python: str, lua_text: str, shims: dict[str, str] | None = None
) -> list[Snippet]:
    """Every piece of configuration, in install order. ``shims``: hook name -> script text."""
    out = [
        Snippet(
            "slurm.conf.snippet", f"{lay.etc_slurm}/slurm.conf", "merge", slurm_conf_text(cfg, lay)
        ),
        Snippet(
            "gres.conf.snippet", f"{lay.etc_slurm}/gres.conf", "merge", gres_conf_text(cfg, lay)
        ),
        Snippet(
            "plugstack-slurm-colo.conf",
            f"{lay.plugstack_dir}/slurm-colo.conf",
            "copy",
            plugstack_text(lay),
        ),
        Snippet("job_submit.lua", f"{lay.etc_slurm}/job_submit.lua", "copy", lua_text),
        Snippet(
            "hooks.env",
            f"{lay.etc_colo}/hooks.env",
            "copy",
            hooks_env_text(cfg, python, config_file_of(cfg)),
        ),
    ]
    targets = {
        "slurm-colo-prolog": f"{lay.prolog_dir}/50-slurm-colo",
        "slurm-colo-epilog": f"{lay.epilog_dir}/50-slurm-colo",
        "slurm-colo-taskprolog": f"{lay.libexec}/slurm-colo-taskprolog",
        "slurm-colo-taskepilog": f"{lay.libexec}/slurm-colo-taskepilog",
    }
    for name in HOOKS:
        if shims and name in shims:
            out.append(Snippet(name, targets[name], "copy", shims[name], executable=True))
    return out


def render_print(items: list[Snippet], steps: str) -> str:
    """The text `slurm-colo install` prints: each snippet under a header, then the steps."""
    parts: list[str] = []
    for s in items:
        if s.executable:
            continue  # scripts are only written with --write; the steps name their path
        verb = "merge into" if s.how == "merge" else "install as"
        parts.append(f"==> {s.name}: {verb} {s.target} <==\n{s.text}")
    parts.append(steps)
    return "\n".join(parts)


def write_snippets(items: list[Snippet], out_dir: Path, steps: str) -> list[Path]:
    """Write each snippet to its own file under ``out_dir`` (created), plus INSTALL.txt."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for s in items:
        p = out_dir / s.name  # replaced, not written through: DIR may be world-writable
        atomic_write_bytes(p, s.text.encode(), 0o755 if s.executable else 0o644, fsync=False)
        written.append(p)
    p = out_dir / "INSTALL.txt"
    atomic_write_bytes(p, steps.encode(), 0o644, fsync=False)
    written.append(p)
    return written
