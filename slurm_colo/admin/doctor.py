"""`slurm-colo doctor`: each check is a small function taking explicit inputs (file text,
paths, a command runner, callables) and returning :class:`Check` values. The CLI wires
them to the real system; tests hand them fixtures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..config import Config, NodeConfig, load_config
from ..contracts.enums import Replan, TimeLimit, Undo, Unplaced
from ..errors import ColoError
from .check import FAIL, OK, WARN, Check, read_text
from .clock_check import check_clock
from .run import Runner
from .slurm_checks import (
    LUA_SOCKET_GLOBS,
    check_gres_conf,
    check_job_submit_lua,
    check_lua_socket,
    check_node_gres,
    check_node_hooks,
    check_slurm_conf,
    check_spank,
    parse_slurm_conf,
)


# ---- config ----------------------------------------------------------------------------
def check_config(path: Path) -> tuple[Check, Config | None]:
    name = "config"
    if not path.exists():
        cfg = load_config(path, missing_ok=True)
        return Check(
            name,
            WARN,
            f"{path} not found: running on built-in defaults",
            f"cp contrib/examples/config.toml {path} and edit it",
        ), cfg
    try:
        cfg = load_config(path, missing_ok=False)
    except ColoError as e:
        return Check(name, FAIL, e.message, e.hint or f"edit {path}"), None
    extra = "" if cfg.gpus else " (no [[gpus]] table: no GPU is shared)"
    return Check(
        name,
        OK if cfg.gpus else WARN,
        f"{path} is valid{extra}",
        "" if cfg.gpus else f"add a [[gpus]] table to {path}",
    ), cfg


# ---- agent, store, scores, MPS -----------------------------------------------------------
def check_agent(ping: Callable[[], dict[str, Any] | None], socket: str) -> Check:
    """The agent answers at ``socket`` (agent.address: on a GPU node, the munge-authenticated
    TCP channel to the head node, so a refusal there names the cause)."""
    name = "agent"
    fix = "systemctl start slurm-colo-agent (logs: journalctl -u slurm-colo-agent)"
    try:
        reply = ping()
    except ColoError as e:
        return Check(name, FAIL, f"agent at {socket}: {e.message}", e.hint or fix)
    if reply is None:
        return Check(
            name, FAIL, f"no answer from the agent at {socket} (placement falls back)", fix
        )
    details = ", ".join(
        f"{k} {reply[k]}" for k in ("version", "scores") if reply.get(k) is not None
    )
    return Check(name, OK, f"agent answers at {socket}" + (f" ({details})" if details else ""))


#: the agent's own changes to jobs that Slurm allows only to root, SlurmUser and operators
def _changes_jobs(cfg: Config) -> list[str]:
    p = cfg.placement
    out = []
    if p.undo != Undo.OFF:
        out.append("requeue harmful sets (placement.undo)")
    if p.unplaced != Unplaced.OWN_GPU:
        out.append("hold and release jobs (placement.unplaced)")
    if p.replan == Replan.AUTO:
        out.append("re-plan waiting jobs (placement.replan)")
    if p.time_limit == TimeLimit.EXTEND:
        out.append("raise shared jobs' time limits (placement.time_limit)")
    return out


def slurm_user(slurm_conf: str | None) -> str:
    """slurm.conf's SlurmUser (Slurm's default: root)."""
    return parse_slurm_conf(slurm_conf or "").get("slurmuser") or "root"


def check_agent_rights(
    reply: dict[str, Any] | None, slurm_conf: str | None, runner: Runner, cfg: Config
) -> Check | None:
    """The agent's user may change jobs in Slurm (root, SlurmUser or the Operator level),
    where its settings have it do so. None: nothing to check (no agent answered, an agent
    too old to say its user, or settings that change no job)."""
    name = "agent rights"
    user = reply.get("user") if reply else None
    needs = _changes_jobs(cfg)
    if not user or not needs:
        return None
    what = ", ".join(needs)
    if user in ("root", slurm_user(slurm_conf)):
        return Check(name, OK, f"the agent runs as {user}: Slurm lets it {what}")
    r = runner(["sacctmgr", "-nP", "show", "user", str(user), "format=adminlevel"])
    level = r.stdout.strip().splitlines()[0].strip() if r.ok and r.stdout.strip() else ""
    if level in ("Operator", "Administrator"):
        return Check(name, OK, f"the agent's user {user} has the {level} level: it may {what}")
    fix = (
        f"sacctmgr -i add user {user} account=root adminlevel=Operator (with accounting), "
        "or run the agent as SlurmUser, or turn those settings off (admin guide, "
        '"Undo: the agent changes jobs in Slurm")'
    )
    why = (
        f"sacctmgr says its level is {level}"
        if level
        else f"sacctmgr could not tell its level ({(r.stderr or r.stdout).strip()[:120] or 'no answer'})"
    )
    return Check(
        name,
        WARN,
        f"the agent runs as {user}, neither root nor SlurmUser, and {why}: Slurm will "
        f"refuse it when it tries to {what} (after the first refusal the agent holds no "
        "job and changes none, trying again every 10 min)",
        fix,
    )


def check_records(cfg: Config) -> Check:
    """Where this node's job records go (node.records_to, resolved)."""
    from slurm_colo.config import records_to

    to = records_to(cfg)
    if to == "agent":
        return Check(
            "records",
            OK,
            f"job records go to the agent at {cfg.agent.address}, "
            "which stores them in the head node's store.url",
        )
    if cfg.agent.address.startswith("tcp:") and cfg.store.url.startswith("sqlite"):
        return Check(
            "records",
            WARN,
            f"job records go to {cfg.store.url}, a file on this node "
            "that the head node's retrain never reads",
            'set node.records_to = "auto" (or "agent") on GPU nodes',
        )
    return Check("records", OK, f"job records go to {cfg.store.url}")


def check_store(probe: Callable[[], str] | None, url: str) -> Check:
    """``probe`` opens the database, checks it is migrated and writable, and returns a short
    description, raising a ColoError otherwise; None when no store module is installed."""
    name = "database"
    if probe is None:
        return Check(name, WARN, f"cannot check {url}: no history store in this slurm-colo build")
    try:
        detail = probe()
    except ColoError as e:
        return Check(name, FAIL, e.message, e.hint or "check [store] url in the config")
    return Check(name, OK, detail or f"{url} is writable and migrated")


def check_scores(
    load: Callable[[str], Any],
    path: str,
    max_age_h: float,
    now: datetime | None = None,
    name: str = "scores",
) -> Check:
    try:
        table = load(path)
    except ColoError as e:
        return Check(name, FAIL, e.message, e.hint or "slurm-colo retrain")
    created = getattr(table, "created", "")
    try:
        when = datetime.fromisoformat(created)
    except (TypeError, ValueError):
        return Check(
            name,
            WARN,
            f"score set {table.id} in {path} has no valid creation time ({created!r})",
            "slurm-colo retrain",
        )
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    age_h = ((now or datetime.now(UTC)) - when).total_seconds() / 3600.0
    if age_h > max_age_h:
        return Check(
            name,
            WARN,
            f"score set {table.id} is {age_h:.1f} h old (scores.max_age_h = {max_age_h:g})",
            "slurm-colo retrain (and check the slurm-colo-retrain.timer)",
        )
    return Check(name, OK, f"score set {table.id}, {age_h:.1f} h old")


def check_model_scores(
    load: Callable[[str], Any],
    path_of: Callable[[str, str], Path],
    cfg: Config,
    now: datetime | None = None,
) -> list[Check]:
    """The score set of each GPU model of ``[[gpus]]`` that has its own (``path_of(
    scores.path, model)``: ``live-<model>.json`` next to it, written by ``slurm-colo
    retrain`` on a mixed site); a model without one uses the site default, not checked."""
    out = []
    for model in sorted({ng.model for ng in cfg.gpus if ng.model}):
        path = path_of(cfg.scores.path, model)
        if path.exists():
            out.append(
                check_scores(load, str(path), cfg.scores.max_age_h, now, name=f"scores ({model})")
            )
    return out


def check_mps(node: NodeConfig, which: Callable[[str], str | None], gpu_node: bool) -> Check:
    name = "MPS"
    if node.mps_backend == "emulator":
        return Check(
            name,
            WARN,
            'emulator in use (node.mps_backend = "emulator"): tests and the lab only',
            'set node.mps_backend = "real" on real GPU nodes',
        )
    found = which(node.mps_control)
    if found:
        return Check(
            name,
            OK,
            f"{node.mps_control} found at {found}; to test the GPUs with it, drain the node "
            "and run `slurm-colo node selftest --gpu N` as root",
        )
    msg = f"{node.mps_control} not found on PATH"
    if not gpu_node:
        return Check(
            name,
            WARN,
            msg + " (this host is not a GPU node in the config: expected on the controller)",
            "run doctor on a GPU node too",
        )
    return Check(
        name,
        FAIL,
        msg,
        "install the NVIDIA CUDA toolkit's MPS binaries, or set node.mps_control to the full path",
    )


def check_node_files(cfg: Config, gpu_node: bool) -> Check | None:
    """On a GPU node: the hooks' own files under ``node.run_dir``. A GPU whose lock,
    journal or MPS state was replaced by hand runs its jobs without MPS; job state set
    aside as damaged means jobs without a record. None off GPU nodes."""
    if not gpu_node:
        return None
    from ..node.jobstate import DAMAGED_KEEP_S, damaged_jobs
    from ..node.layout import NodeLayout

    lay = NodeLayout.of_config(cfg)
    problems = [p for p in (lay.gpu_files_problem(g) for g in lay.gpu_indexes()) if p]
    if problems:
        return Check(
            "node files",
            WARN,
            "; ".join(problems) + ": the hooks run that GPU's jobs without MPS",
            "move it away, then run `slurm-colo node cleanup`",
        )
    damaged = damaged_jobs(lay)
    if damaged:
        return Check(
            "node files",
            WARN,
            f"job(s) {', '.join(str(d.job) for d in damaged)} set aside in "
            f"{lay.damaged_dir()} (state file damaged: no record)",
            f"look, then delete them (deleted by the hooks after {DAMAGED_KEEP_S // 86400} days)",
        )
    return Check("node files", OK, f"the hooks' files in {lay.run_dir} are as they write them")


# ---- all of them -----------------------------------------------------------------------
@dataclass(frozen=True)
class System:
    """What the checks look at. The CLI fills it with the real host; tests with fixtures."""

    etc_slurm: Path
    runner: Runner
    #: cfg -> ping reply or None
    ping: Callable[[Config], dict[str, Any] | None]
    #: cfg -> a probe of the history database (None: no store module)
    store_probe: Callable[[Config], Callable[[], str] | None]
    #: path -> score table (raises ScoresError)
    load_scores: Callable[[str], Any]
    #: cfg -> the job_submit.lua this config renders (None if it cannot be rendered)
    render_lua: Callable[[Config], str | None]
    which: Callable[[str], str | None]
    hostname: str
    now: datetime | None = None
    hooks_env: Path = Path("/etc/slurm-colo/hooks.env")
    lua_socket_globs: tuple[str, ...] = LUA_SOCKET_GLOBS
    #: (scores.path, GPU model) -> that model's own score file (None: not checked)
    model_scores_path: Callable[[str, str], Path] | None = None


def run_checks(config_path: Path, sys: System) -> list[Check]:
    first, cfg = check_config(config_path)
    checks = [first]
    if cfg is None:
        return checks  # nothing else is meaningful without a valid config
    slurm_conf = sys.etc_slurm / "slurm.conf"
    slurm_conf_text = read_text(slurm_conf)  # read once: four checks look at it
    checks += check_slurm_conf(slurm_conf_text, slurm_conf)
    checks += check_spank(sys.etc_slurm / "plugstack.conf", sys.runner)
    gpu_node = cfg.layout_for(sys.hostname) is not None
    checks.append(check_node_hooks(slurm_conf_text, sys.hooks_env, gpu_node))
    checks.append(check_job_submit_lua(sys.etc_slurm, sys.render_lua(cfg)))
    checks.append(check_lua_socket(sys.lua_socket_globs))
    gres = sys.etc_slurm / "gres.conf"
    checks.append(check_gres_conf(read_text(gres), gres, cfg))
    checks.append(check_node_gres(slurm_conf_text, slurm_conf, cfg))
    answered: list[dict[str, Any] | None] = []

    def ping() -> dict[str, Any] | None:
        answered.append(sys.ping(cfg))
        return answered[-1]

    checks.append(check_agent(ping, cfg.agent.address))
    rights = check_agent_rights(
        answered[-1] if answered else None, slurm_conf_text, sys.runner, cfg
    )
    if rights is not None:
        checks.append(rights)
    checks.append(check_records(cfg))
    checks.append(check_store(sys.store_probe(cfg), cfg.store.url))
    checks.append(check_scores(sys.load_scores, cfg.scores.path, cfg.scores.max_age_h, sys.now))
    if sys.model_scores_path is not None:
        checks += check_model_scores(sys.load_scores, sys.model_scores_path, cfg, sys.now)
    checks.append(check_mps(cfg.node, sys.which, gpu_node))
    files = check_node_files(cfg, gpu_node)
    if files is not None:
        checks.append(files)
    clock = check_clock(sys.runner)
    if clock is not None:
        checks.append(clock)
    return checks
