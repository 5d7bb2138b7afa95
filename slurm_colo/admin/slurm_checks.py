"""`slurm-colo doctor`'s checks of Slurm's own files: slurm.conf, the node hooks, the SPANK
plugin in plugstack.conf, job_submit.lua and the socket library it loads, gres.conf and
each node's GRES. Each takes file text, paths and a command runner and returns
:class:`~.check.Check` values; :func:`.doctor.run_checks` wires them to the host."""

from __future__ import annotations

import re
from collections.abc import Iterable
from glob import glob
from pathlib import Path

from ..config import Config
from ..gres_layout import compress_indices, expand_hostlist, gres_conf
from .check import FAIL, OK, WARN, Check, read_text
from .run import NOT_FOUND, Runner


# ---- slurm.conf ------------------------------------------------------------------------
def parse_slurm_conf(text: str) -> dict[str, str]:
    """``Key=Value`` lines of slurm.conf (keys lower-cased, last one wins). NodeName and
    PartitionName lines are skipped: they are not global settings."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip().lower()
        if key in ("nodename", "partitionname", "nodeset", "frontendname", "downnodes"):
            continue
        out[key] = value.strip().split()[0] if value.strip() else ""
    return out


def _list(value: str) -> list[str]:
    return [v.strip().lower() for v in value.split(",") if v.strip()]


def check_slurm_conf(text: str | None, path: Path) -> list[Check]:
    fix = f"merge slurm.conf.snippet from `slurm-colo install --write DIR` into {path}"
    if text is None:
        return [Check("slurm.conf", FAIL, f"cannot read {path}", fix)]
    conf = parse_slurm_conf(text)
    out: list[Check] = []
    plugins = _list(conf.get("jobsubmitplugins", ""))
    if "lua" in plugins or "job_submit/lua" in plugins:
        out.append(Check("JobSubmitPlugins", OK, "lua is enabled"))
    else:
        out.append(
            Check(
                "JobSubmitPlugins",
                FAIL,
                f"lua not in JobSubmitPlugins ({conf.get('jobsubmitplugins') or 'unset'}) in {path}",
                f"add JobSubmitPlugins=lua to {path}, then scontrol reconfigure",
            )
        )
    types = _list(conf.get("grestypes", ""))
    missing = [t for t in ("gpu", "shard") if t not in types]
    if missing:
        out.append(
            Check(
                "GresTypes",
                FAIL,
                f"GresTypes lacks {', '.join(missing)} in {path}",
                f"set GresTypes=gpu,shard in {path} and restart slurmctld and slurmd",
            )
        )
    else:
        out.append(Check("GresTypes", OK, "gpu and shard are GRES types"))
    return out


def node_gres_lines(text: str) -> dict[str, str]:
    """The ``Gres=`` of each node named on slurm.conf's NodeName lines (hostlists
    expanded; a node on no line, or on a line without Gres=, is absent)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        fields = dict(
            (k.lower(), v) for k, _, v in (f.partition("=") for f in raw.split("#", 1)[0].split())
        )
        if "nodename" in fields and "gres" in fields:
            for node in expand_hostlist(fields["nodename"]):
                out[node] = fields["gres"]
    return out


def check_node_gres(text: str | None, path: Path, cfg: Config) -> Check:
    """Each configured node's ``Gres=`` lists its GPU types in device index order, as
    slurm-colo generates it: slurmctld numbers a node's GPUs in that order."""
    name = "Gres="
    fix = (
        f"replace the Gres= of those NodeName lines in {path} with the ones in "
        "slurm.conf.snippet from `slurm-colo install --write DIR`, then restart slurmctld and slurmd"
    )
    if text is None or not cfg.gpus:
        return Check(name, WARN, "no slurm.conf or no [[gpus]]: Gres= not checked", fix)
    lines = node_gres_lines(text)
    wrong, unseen, seen = [], [], 0
    for ng in cfg.gpus:
        for node in ng.node_names:
            if node not in lines:
                unseen.append(node)
                continue
            seen += 1
            # the agent's check of Slurm's report; a line naming no GPU is wrong here too
            no_gpu = not any(g.strip().lower().startswith("gpu:") for g in lines[node].split(","))
            if no_gpu or ng.gres_mismatch(lines[node]) is not None:
                wrong.append(f"{node}: Gres={lines[node]}, expected {ng.node_gres()}")
    if wrong:
        return Check(
            name,
            FAIL,
            f"{len(wrong)} node(s) list their GPUs otherwise than the [[gpus]] layout in "
            "device index order (slurmctld numbers a node's GPUs in the order of Gres=, so "
            "jobs would get other GPUs than slurm-colo placed them on), e.g. "
            + "; ".join(wrong[:3]),
            fix,
        )
    if unseen:
        return Check(
            name,
            WARN,
            f"no NodeName line with Gres= for {', '.join(unseen[:5])} in {path} (an Include?): "
            "not checked",
            fix,
        )
    low = [
        f"{ng.nodes} ({compress_indices(ng.shared)} of {ng.count})"
        for ng in cfg.gpus
        if ng.shared and ng.exclusive() and max(ng.shared) < max(ng.exclusive())
    ]
    note = (
        f"; the shared pool of {', '.join(low)} is below whole GPUs: Slurm gives a plain "
        "--gres=gpu job the lowest free GPU, so such jobs take shared GPUs whole while they "
        "are idle (a pool at the highest indices avoids that: docs/gres-layout.md)"
        if low
        else ""
    )
    return Check(
        name, OK, f"Gres= of {seen} node(s) lists the GPUs as the layout, in device order" + note
    )


# ---- node hooks -----------------------------------------------------------------------
HOOK_KEYS = (
    ("prolog", "Prolog"),
    ("epilog", "Epilog"),
    ("taskprolog", "TaskProlog"),
    ("taskepilog", "TaskEpilog"),
)
HOOK_MARK = "slurm_colo.hooks"


def check_node_hooks(slurm_conf: str | None, hooks_env: Path, gpu_node: bool) -> Check:
    """Prolog, Epilog, TaskProlog and TaskEpilog each run a slurm-colo shim (a file that
    runs ``python -m slurm_colo.hooks``), and hooks.env names a Python that exists."""
    name = "node hooks"
    fix = "install the shims as in `slurm-colo install` step 2 and set the slurm.conf lines"
    if slurm_conf is None:
        return Check(name, FAIL, "cannot read slurm.conf", fix)
    conf = parse_slurm_conf(slurm_conf)
    unset, not_ours, unseen = [], [], []
    for key, label in HOOK_KEYS:
        value = conf.get(key, "")
        if not value:
            unset.append(label)
            continue
        files = [Path(f) for f in sorted(glob(value))]
        if not files:
            unseen.append(f"{label}={value}")
        elif not any(HOOK_MARK in (read_text(f) or "") for f in files):
            not_ours.append(f"{label}={value}")
    if unset or not_ours:
        parts = ([f"{', '.join(unset)} not set"] if unset else []) + (
            [f"no slurm-colo shim in {', '.join(not_ours)}"] if not_ours else []
        )
        return Check(name, FAIL, "; ".join(parts), fix)
    if unseen:
        msg = f"{'; '.join(unseen)}: no such file on this host"
        return Check(
            name, FAIL if gpu_node else WARN, msg, fix if gpu_node else "run doctor on a GPU node"
        )
    env = read_text(hooks_env)
    if env is None:
        return Check(
            name,
            FAIL if gpu_node else WARN,
            f"{hooks_env} missing: the shims fall back to python3 and the default config",
            "install hooks.env from `slurm-colo install --write DIR`",
        )
    values = dict(
        ln.split("=", 1) for ln in env.splitlines() if "=" in ln and not ln.startswith("#")
    )
    python = values.get("SLURM_COLO_PYTHON", "")
    if not python or not Path(python).is_file():
        return Check(
            name,
            FAIL,
            f"{hooks_env}: SLURM_COLO_PYTHON={python or '(unset)'} does not exist",
            "slurm-colo install --write DIR, then reinstall hooks.env",
        )
    return Check(name, OK, f"prolog, epilog and task hooks run slurm-colo ({python})")


# ---- SPANK plugin ----------------------------------------------------------------------
def plugstack_entries(path: Path, depth: int = 0) -> list[tuple[str, str]]:
    """(required|optional, plugin path) entries of a plugstack.conf, following includes."""
    text = read_text(path)
    if text is None or depth > 4:
        return []
    out: list[tuple[str, str]] = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if len(words) < 2:
            continue
        kind = words[0].lower()
        if kind == "include":
            for inc in sorted(
                glob(words[1] if words[1].startswith("/") else str(path.parent / words[1]))
            ):
                out.extend(plugstack_entries(Path(inc), depth + 1))
        elif kind in ("required", "optional"):
            out.append((kind, words[1]))
    return out


def check_spank(plugstack: Path, runner: Runner) -> list[Check]:
    fix = (
        "slurm-colo install spank, then install plugstack-slurm-colo.conf from "
        "`slurm-colo install --write DIR` into plugstack.conf.d/"
    )
    entries = [(k, p) for k, p in plugstack_entries(plugstack) if Path(p).name == "colocate.so"]
    out: list[Check] = []
    if not entries:
        out.append(
            Check(
                "SPANK plugin",
                FAIL,
                f"colocate.so not listed in {plugstack} (or the files it includes)",
                fix,
            )
        )
    else:
        kind, so = entries[0]
        if Path(so).is_absolute() and not Path(so).is_file():
            out.append(
                Check(
                    "SPANK plugin",
                    FAIL,
                    f"{so} is listed in plugstack but missing",
                    f"slurm-colo install spank --prefix {Path(so).parent}",
                )
            )
        else:
            note = (
                ""
                if kind == "optional"
                else " (listed as required: a broken plugin would block job launch; prefer optional)"
            )
            out.append(
                Check(
                    "SPANK plugin",
                    WARN if note else OK,
                    f"{kind} {so}{note}",
                    "use `optional` in the plugstack line" if note else "",
                )
            )
    r = runner(["sbatch", "--help"])
    if r.rc == NOT_FOUND:
        out.append(
            Check(
                "sbatch --colocate",
                WARN,
                "sbatch not found on this host",
                "run doctor on a submit host",
            )
        )
    elif "--colocate" in r.stdout + r.stderr:
        out.append(Check("sbatch --colocate", OK, "sbatch --help lists --colocate"))
    else:
        out.append(
            Check(
                "sbatch --colocate",
                FAIL,
                "sbatch --help does not list --colocate: "
                "the SPANK plugin is not loaded on this host",
                fix,
            )
        )
    return out


# ---- job_submit.lua --------------------------------------------------------------------
def check_job_submit_lua(etc_slurm: Path, expected: str | None) -> Check:
    name = "job_submit.lua"
    main, colo = etc_slurm / "job_submit.lua", etc_slurm / "job_submit_colo.lua"
    fix = (
        f"slurm-colo install --write /tmp/slurm-colo && "
        f"install -m 0644 /tmp/slurm-colo/job_submit.lua {main}"
    )
    main_text, colo_text = read_text(main), read_text(colo)
    if main_text is None:
        return Check(name, FAIL, f"{main} not found: no placement hook", fix)
    if expected is None:
        return Check(
            name,
            WARN,
            f"{main} exists but the expected hook could not be rendered",
            "reinstall slurm-colo",
        )
    if main_text == expected:
        return Check(name, OK, f"{main} is current")
    if colo_text is not None:
        merged = "job_submit_colo.lua" in main_text and "colo_job_submit" in main_text
        if colo_text != expected:
            return Check(
                name,
                WARN,
                f"{colo} is out of date with the config",
                fix.replace(str(main), str(colo)),
            )
        if not merged:
            return Check(
                name,
                FAIL,
                f"{colo} is current but {main} neither loads it nor calls colo_job_submit",
                "see `slurm-colo install` step 4",
            )
        return Check(name, OK, f"{colo} is current and called from {main}")
    if "colo_job_submit" in main_text:
        return Check(
            name,
            WARN,
            f"{main} contains the slurm-colo hook but differs from what "
            "this config renders (out of date or edited)",
            fix,
        )
    return Check(name, FAIL, f"{main} is not the slurm-colo hook and does not call it", fix)


LUA_SOCKET_GLOBS: tuple[str, ...] = (
    "/usr/lib/*/lua/5.*/socket/unix.so",
    "/usr/lib/lua/5.*/socket/unix.so",
    "/usr/local/lib/lua/5.*/socket/unix.so",
)


def check_lua_socket(patterns: Iterable[str]) -> Check:
    """The Lua hook needs LuaSocket's socket.unix module to reach the agent."""
    found = sorted(f for pat in patterns for f in glob(pat))
    if found:
        return Check("lua-socket", OK, f"socket.unix found ({found[0]})")
    return Check(
        "lua-socket",
        WARN,
        "LuaSocket's socket.unix not found: on the controller every "
        "--colocate job would get the fallback",
        "apt-get install lua-socket",
    )


# ---- gres.conf -------------------------------------------------------------------------
GresRecord = tuple[str, str, str, str, int]  # node, name, type, file, count


def parse_gres_conf(text: str, all_nodes: list[str]) -> set[GresRecord]:
    """Per-node, per-device records of the gpu and shard lines of a gres.conf. A line without
    NodeName applies to every node in ``all_nodes``; File and NodeName ranges are expanded."""
    out: set[GresRecord] = set()
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kv: dict[str, str] = {}
        for m in re.finditer(r"(\w+)=(\S+)", line):
            kv[m.group(1).lower()] = m.group(2)
        name = kv.get("name", "").lower()
        if name not in ("gpu", "shard"):
            continue
        nodes = expand_hostlist(kv["nodename"]) if "nodename" in kv else list(all_nodes)
        files = expand_hostlist(kv["file"]) if "file" in kv else [""]
        count = int(kv.get("count", "1" if name == "gpu" else "0") or 0)
        per_file = count // len(files) if name == "shard" else 1
        for node in nodes:
            for f in files:
                out.add((node, name, kv.get("type", ""), f, per_file))
    return out


def _fmt(r: GresRecord) -> str:
    node, name, typ, f, count = r
    return (
        f"{node} {name}"
        + (f":{typ}" if typ else "")
        + f" {f}"
        + (f" x{count}" if name == "shard" else "")
    )


def check_gres_conf(text: str | None, path: Path, cfg: Config) -> Check:
    name = "gres.conf"
    fix = f"merge gres.conf.snippet from `slurm-colo install --write DIR` into {path}"
    if not cfg.gpus:
        return Check(
            name,
            WARN,
            "no [[gpus]] in the config: nothing to compare",
            "add a [[gpus]] table to the config",
        )
    if text is None:
        return Check(name, FAIL, f"cannot read {path}", fix)
    nodes = sorted({n for ng in cfg.gpus for n in ng.node_names})
    expected = parse_gres_conf(gres_conf(cfg.gpus), nodes)
    actual = {r for r in parse_gres_conf(text, nodes) if r[0] in nodes}
    missing, extra = sorted(expected - actual), sorted(actual - expected)
    if not missing and not extra:
        return Check(name, OK, f"{path} matches the [[gpus]] layout ({len(nodes)} node(s))")
    parts = []
    if missing:
        parts.append(
            f"{len(missing)} expected device(s) missing, e.g. "
            + "; ".join(_fmt(r) for r in missing[:3])
        )
    if extra:
        parts.append(
            f"{len(extra)} not in the config, e.g. " + "; ".join(_fmt(r) for r in extra[:3])
        )
    return Check(name, FAIL, f"{path} differs from the [[gpus]] layout: " + ", ".join(parts), fix)
