"""Site configuration: one root-owned TOML file, ``/etc/slurm-colo/config.toml``.

Every field has a default so an empty file is valid; unknown keys and bad values are
errors that name the key. ``SLURM_COLO_CONFIG`` overrides the path (tests, the lab).
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from .contracts.enums import (
    ClassNumbers,
    CrossUser,
    Fallback,
    LeftBehind,
    RecordsTo,
    Replan,
    TimeLimit,
    Undo,
    Unplaced,
)
from .errors import ConfigError
from .gres_layout import NodeGpus, parse_index_list

DEFAULT_PATH = Path("/etc/slurm-colo/config.toml")
ENV_VAR = "SLURM_COLO_CONFIG"


@dataclass(frozen=True)
class AgentConfig:
    #: the agent's unix socket: the Lua hook and the local CLI connect here
    socket: str = "/run/slurm-colo/agent.sock"
    #: addresses the agent listens on, "unix:/path" or "tcp:HOST:PORT"; must include the
    #: unix socket above (follows agent.socket when only that is set)
    listen: tuple[str, ...] = ("unix:/run/slurm-colo/agent.sock",)
    #: where the node hooks reach the agent (follows agent.socket when only that is set)
    address: str = "unix:/run/slurm-colo/agent.sock"
    #: munged's socket for the credentials of TCP messages; "" is libmunge's default
    munge_socket: str = ""
    #: the user the agent runs as; over TCP, node hooks accept only replies signed by root
    #: or this user
    user: str = "slurm-colo"
    #: the cluster's name (Slurm's ClusterName) carried in every TCP message; the agent
    #: refuses messages made for another name
    cluster: str = "default"
    #: hard timeout of one placement round trip from the Lua hook, milliseconds
    request_timeout_ms: int = 150
    #: after a failed round trip the Lua hook skips the agent for this long (circuit breaker)
    retry_after_s: int = 10
    #: how often the agent re-reads Slurm state
    refresh_interval_s: float = 5.0
    #: a placement not yet seen in Slurm is dropped after this long
    pending_ttl_s: float = 120.0
    #: Prometheus text endpoint, "host:port"; empty disables it
    metrics_listen: str = ""
    log_level: str = "info"
    #: Slurm state backend: "auto" (pyslurm if it matches the installed Slurm, else json), "json", "pyslurm"
    slurm_backend: str = "auto"


@dataclass(frozen=True)
class PlacementConfig:
    #: what the Lua hook does when the agent is down/slow/garbled: "exclusive" keeps the job's
    #: own GPU request; "shard" turns it into untargeted gres:shard sharing
    fallback: Fallback = Fallback.EXCLUSIVE
    #: jobs of different users on one GPU: "shard" (plain time-sliced sharing, no MPS) or "never"
    cross_user: CrossUser = CrossUser.NEVER
    #: a class taken from a job's name (no --colocate-class): "keep" the numbers at the
    #: name's end (run-00042 is a class of its own) or "strip" them (run-00042 is "run")
    class_name_numbers: ClassNumbers = ClassNumbers.KEEP
    #: the predicted speedup (delta) a shared GPU must keep, auto mode
    min_delta: float = 1.05
    #: the same for --colocate=aggressive
    aggressive_min_delta: float = 1.0
    #: a job may not be predicted to run slower than this factor of its solo speed (auto mode)
    max_slowdown: float = 1.5
    #: a shared set is also accepted when its predicted combined throughput (sum of the
    #: members' normalised throughputs, less risk_aversion x its std. dev.) reaches this and
    #: is not below the GPU's before the job joined, auto mode; 0 disables
    min_throughput: float = 1.0
    #: on that path a job may be predicted down to 1/this of its solo speed (auto mode)
    throughput_max_slowdown: float = 2.5
    #: the throughput path is open only while at least this many jobs per shared GPU wait
    #: for a GPU (pending or held); with a shorter queue a job soon gets a GPU of its own,
    #: so only sets where every member gains are started; 0: always open
    throughput_queue: float = 0.75
    #: and only while the queue, shrinking as it has over the last hours, would last at
    #: least this many hours: a job slowed down when the backlog is about to run out is the
    #: one the site's last work waits for; 0: no forecast
    throughput_drain_h: float = 24.0
    #: fraction of GPU memory kept free on a shared GPU
    memory_headroom: float = 0.05
    #: memory assumed for a class with no profile, as a share of each GPU's own memory (a
    #: GPU model's size, from [[gpus]]); 0 assumes default_memory_gib on every GPU
    default_memory_share: float = 0.25
    #: memory assumed for a class with no profile, GiB (when default_memory_share is 0)
    default_memory_gib: float = 8.0
    #: how much uncertainty (std. dev. of delta) is subtracted before comparing with min_delta
    risk_aversion: float = 1.0
    #: share of placements that may try a pair with no data (exploration), 0 disables
    explore_rate: float = 0.1
    #: once a job has waited this long for whole GPUs (untyped gres:gpu), or held for the
    #: agent (unplaced = "hold", undo), the shared GPU(s) expected to drain first take no new
    #: partners until it has started, hours; 0 disables
    reserve_after_h: float = 6.0
    #: while shared GPUs are drained for such a job, a job that came more than this many
    #: hours after it is not placed until it has started (bounded queue jumping); 0: no limit
    bypass_h: float = 1.5
    #: a new shared set is judged from its members' reported progress after this long, s
    probe_s: float = 600.0
    #: what the agent does with a set judged harmful: "requeue" the newest job and aim it
    #: again, or "off" (it runs on; the next retrain learns from it)
    undo: Undo = Undo.REQUEUE
    #: when a job leaves a set its newest member's probe kept, that member judges the set
    #: left behind once more: "undo" a harmful one too (requeued, the job loses the work it
    #: did on that GPU), or only "learn" from it
    left_behind: LeftBehind = LeftBehind.UNDO
    #: a --colocate job no shared GPU takes now: "own-gpu" keeps its own-GPU request (it
    #: waits in Slurm's queue for a whole GPU), "hold" holds it without a GPU request,
    #: released by the agent onto the first shared GPU that fits it (with its shard request);
    #: "auto": "hold" when every configured GPU is shared, else "own-gpu"
    unplaced: Unplaced = Unplaced.AUTO
    #: a --colocate job waiting in Slurm's queue for a whole GPU (its own-GPU request):
    #: "auto" moves it onto a shared GPU that takes it before a whole GPU frees, where Slurm
    #: can change a pending job's GRES (23.11+); "off" leaves it waiting
    replan: Replan = Replan.AUTO
    #: a job running on a shared GPU runs slower than alone: "extend" adds the time sharing
    #: cost it (predicted) to its Slurm time limit as it runs, "keep" leaves the limit alone
    time_limit: TimeLimit = TimeLimit.EXTEND


@dataclass(frozen=True)
class StoreConfig:
    url: str = "sqlite:////var/lib/slurm-colo/history.db"
    busy_timeout_s: float = 10.0


@dataclass(frozen=True)
class ScoresConfig:
    #: the live score set the agent reads (written atomically by `slurm-colo retrain`)
    path: str = "/var/lib/slurm-colo/scores/live.json"
    #: a score set older than this is reported stale by `doctor`, hours
    max_age_h: float = 48.0
    #: GPU model whose campaign `retrain` uses for one set ("" = the only one, or one per model)
    gpu_model: str = ""
    #: history older than this is not used for training, days
    window_days: float = 365.0
    #: weight of an observation halves every this many days (recency weighting)
    half_life_days: float = 30.0
    #: share of observed pairs hidden for the held-out check of a new score set
    holdout_share: float = 0.2
    #: a new set whose held-out error exceeds the live set's by more than this is not published
    max_regression: float = 0.03
    #: the most job classes a set scores: those with the most evidence (jobs named afresh for
    #: each run are classes of one job each; the others get the set's prior)
    max_classes: int = 500


@dataclass(frozen=True)
class NodeConfig:
    #: "real" (nvidia-cuda-mps-control) or "emulator" (explicit opt-in, tests and the lab only)
    mps_backend: str = "real"
    mps_control: str = "nvidia-cuda-mps-control"
    mps_timeout_s: float = 5.0
    #: "real" (NVML via nvidia-ml-py) or "scenario" (explicit opt-in, tests and the lab only)
    nvml_backend: str = "real"
    nvml_scenario: str = ""
    run_dir: str = "/run/slurm-colo"
    spool_dir: str = "/var/spool/slurm-colo"
    sampler_interval_s: float = 1.0
    sampler_max_samples: int = 3600
    #: ingested record files stay in ``<spool_dir>/done/`` this many days (0: kept forever)
    spool_keep_days: float = 14.0
    #: where spooled job records go: "store" (store.url), "agent" (over the agent's channel,
    #: into the head node's store.url), "auto" (the agent when agent.address is tcp: and
    #: store.url is SQLite, else store.url)
    records_to: RecordsTo = RecordsTo.AUTO
    #: while the agent cannot be reached, the node's ingest run keeps trying this long
    #: (later Epilogs try again too), seconds
    records_retry_s: float = 600.0
    #: which GPU jobs the node side profiles: "colocated" (jobs placed on a shared GPU),
    #: "all" (also exclusive jobs: their solo profiles feed the model) or "none"
    profile: str = "colocated"


@dataclass(frozen=True)
class Config:
    agent: AgentConfig = field(default_factory=AgentConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    scores: ScoresConfig = field(default_factory=ScoresConfig)
    node: NodeConfig = field(default_factory=NodeConfig)
    #: GPU layout per node set (the [[gpus]] tables)
    gpus: tuple[NodeGpus, ...] = ()
    source: str = "<defaults>"

    def layout_for(self, node: str) -> NodeGpus | None:
        for ng in self.gpus:
            if ng.matches(node):
                return ng
        return None


_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("agent", "slurm_backend"): ("auto", "json", "pyslurm"),
    ("agent", "log_level"): ("debug", "info", "warning", "error"),
    ("node", "mps_backend"): ("real", "emulator"),
    ("node", "nvml_backend"): ("real", "scenario"),
    ("node", "profile"): ("colocated", "all", "none"),
}


def records_to(cfg: Config) -> RecordsTo:
    """``node.records_to`` with "auto" resolved: the agent when this node reaches it over
    TCP and the history is SQLite (a file on the head node), else ``store.url``."""
    if cfg.node.records_to != RecordsTo.AUTO:
        return cfg.node.records_to
    remote = cfg.agent.address.startswith("tcp:")
    return RecordsTo.AGENT if remote and cfg.store.url.startswith("sqlite") else RecordsTo.STORE


def choices(section: str, key: str) -> tuple[str, ...]:
    """The accepted values of a setting that takes one of a few words (() for others)."""
    cls = _SECTIONS.get(section)
    default = next((f.default for f in fields(cls) if f.name == key), None) if cls else None
    if isinstance(default, StrEnum):
        return tuple(m.value for m in type(default))
    return _CHOICES.get((section, key), ())


_SECTIONS: dict[str, type] = {
    "agent": AgentConfig,
    "placement": PlacementConfig,
    "store": StoreConfig,
    "scores": ScoresConfig,
    "node": NodeConfig,
}


#: the largest whole number a key takes (2^53: a float holds it exactly, and so does Lua)
MAX_WHOLE = 2**53


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: keys with a floor above zero: a slowdown bound below 1 would ask a job to run faster
#: than alone (and 0 divides by zero)
_AT_LEAST: dict[tuple[str, str], float] = {
    # each look at Slurm runs squeue and scontrol against slurmctld
    ("agent", "refresh_interval_s"): 1.0,
    # a set scores pairs of classes
    ("scores", "max_classes"): 2.0,
    ("placement", "max_slowdown"): 1.0,
    ("placement", "throughput_max_slowdown"): 1.0,
}


#: keys that are shares of a whole: (bound, whether the bound itself is allowed). A headroom
#: of the whole GPU leaves no room for any job; an assumed memory share above 1 fits no job
#: on any GPU; a held-out share of 1 leaves nothing to train on
_AT_MOST: dict[tuple[str, str], tuple[float, bool]] = {
    ("placement", "memory_headroom"): (1.0, False),
    ("placement", "default_memory_share"): (1.0, True),
    ("placement", "explore_rate"): (1.0, True),
    ("scores", "holdout_share"): (1.0, False),
}

#: periods, timeouts and counts where 0 means nothing sensible (no "0 disables")
_POSITIVE = frozenset(
    {
        ("agent", "request_timeout_ms"),
        ("agent", "pending_ttl_s"),
        ("node", "mps_timeout_s"),
        ("node", "sampler_interval_s"),
        ("scores", "window_days"),
    }
)

#: paths the hooks and the agent open from whatever directory they run in (slurmd's, /)
_ABSOLUTE = frozenset(
    {("agent", "socket"), ("node", "run_dir"), ("node", "spool_dir"), ("scores", "path")}
)

#: strings that name something and may not be empty
_NAMED = frozenset({("store", "url"), ("node", "mps_control")})


def _relative_sqlite(url: str) -> bool:
    """``sqlite:///name.db``: three slashes, then a path that is not absolute."""
    scheme, sep, rest = url.partition(":///")
    return (
        bool(sep) and scheme.split("+")[0] == "sqlite" and not rest.startswith(("/", ":", "file:"))
    )


def _check_value(name: str, key: str, value: Any, src: str) -> None:
    """The bounds of one key beyond its type (see the tables above)."""
    where = f"{src}: {name}.{key}"
    if isinstance(value, str):
        if "\0" in value:
            raise ConfigError(f"{where} must not hold a NUL character")
        if (name, key) in _ABSOLUTE and not value.startswith("/"):
            raise ConfigError(f"{where} must be an absolute path, got {value!r}")
        if (name, key) in _NAMED and not value.strip():
            raise ConfigError(f"{where} must not be empty")
        if (name, key) == ("store", "url") and _relative_sqlite(value):
            raise ConfigError(
                f"{where} names a SQLite file by a relative path ({value!r}): the agent and "
                "the nightly retrain run in other directories; give sqlite:////ABSOLUTE/PATH"
            )
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    if value < 0:
        raise ConfigError(f"{where} must not be negative, got {value!r}")
    if (name, key) in _POSITIVE and value <= 0:
        raise ConfigError(f"{where} must be greater than 0, got {value!r}")
    least = _AT_LEAST.get((name, key))
    if least is not None and value < least:
        raise ConfigError(f"{where} must be at least {least:g}, got {value!r}")
    most = _AT_MOST.get((name, key))
    if most is not None:
        bound, inclusive = most
        if value > bound or (value == bound and not inclusive):
            word = "at most" if inclusive else "below"
            raise ConfigError(f"{where} must be {word} {bound:g}, got {value!r}")


def _build_section(name: str, cls: type, raw: Any, src: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{src}: [{name}] must be a table")
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(
                f"{src}: unknown key {name}.{key}; known keys: {', '.join(sorted(known))}"
            )
        default = known[key].default
        if isinstance(default, StrEnum):  # a closed set of words: the enum lists them
            kind = type(default)
            if not isinstance(value, str) or value not in kind._value2member_map_:
                accepted = ", ".join(m.value for m in kind)
                raise ConfigError(f"{src}: {name}.{key} = {value!r}; accepted: {accepted}")
            kwargs[key] = kind(value)
            continue
        if isinstance(default, tuple):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{src}: {name}.{key} must be an array of strings, got {value!r}")
            value = tuple(value)
        elif isinstance(value, bool) or not isinstance(value, type(default)):
            if not (isinstance(default, float) and _whole(value)):
                raise ConfigError(
                    f"{src}: {name}.{key} must be a {type(default).__name__}, got {value!r}"
                )
            if abs(value) <= MAX_WHOLE:
                value = float(value)
        if _whole(value) and abs(value) > MAX_WHOLE:  # TOML's integers have no bound
            raise ConfigError(f"{src}: {name}.{key} is out of range (at most {MAX_WHOLE})")
        choices = _CHOICES.get((name, key))
        if choices and value not in choices:
            raise ConfigError(f"{src}: {name}.{key} = {value!r}; accepted: {', '.join(choices)}")
        _check_value(name, key, value, src)
        kwargs[key] = value
    return cls(**kwargs)


def _finish_agent(a: AgentConfig, raw: dict[str, Any], src: str) -> AgentConfig:
    """agent.listen and agent.address follow agent.socket unless set; every address parses;
    the agent listens on its unix socket (the Lua hook knows no other way in)."""
    from .contracts.address import UNIX, parse_address

    if "socket" in raw:
        follow: dict[str, Any] = {}
        if "listen" not in raw:
            follow["listen"] = (f"unix:{a.socket}",)
        if "address" not in raw:
            follow["address"] = f"unix:{a.socket}"
        a = replace(a, **follow)
    if not a.user:
        raise ConfigError(f"{src}: agent.user must name the user the agent runs as")
    if not a.cluster or any(c in a.cluster for c in "\n\r\t\0"):
        raise ConfigError(
            f"{src}: agent.cluster {a.cluster!r} must be the cluster's name (ClusterName in "
            "slurm.conf): not empty, one line, no tab"
        )
    if not a.listen:
        raise ConfigError(f'{src}: agent.listen is empty; it must include "unix:{a.socket}"')
    listen = []
    for i, text in enumerate(a.listen):
        try:
            listen.append(parse_address(text))
        except ConfigError as e:
            raise ConfigError(f"{src}: agent.listen[{i}]: {e.message}") from None
    try:
        parse_address(a.address)
    except ConfigError as e:
        raise ConfigError(f"{src}: agent.address: {e.message}") from None
    here = os.path.normpath(a.socket)
    if not any(x.scheme == UNIX and os.path.normpath(x.path) == here for x in listen):
        raise ConfigError(
            f'{src}: agent.listen must include "unix:{a.socket}" (agent.socket): the Lua '
            f"hook and the local CLI connect there"
        )
    return a


def _build_gpus(raw: Any, src: str) -> tuple[NodeGpus, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{src}: [[gpus]] must be an array of tables")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ConfigError(f"{src}: gpus[{i}] must be a table")
        allowed = {
            "nodes",
            "count",
            "model",
            "memory_gib",
            "shared",
            "shards_per_gpu",
            "device_template",
        }
        extra = set(item) - allowed
        if extra:
            raise ConfigError(f"{src}: gpus[{i}]: unknown key(s) {', '.join(sorted(extra))}")
        try:
            count = int(item["count"])
            out.append(
                NodeGpus(
                    nodes=str(item["nodes"]),
                    count=count,
                    model=str(item.get("model", "")),
                    memory_gib=float(item.get("memory_gib", 16.0)),
                    shared=parse_index_list(str(item.get("shared", f"0-{count - 1}")), count),
                    shards_per_gpu=int(item.get("shards_per_gpu", 4)),
                    device_template=str(item.get("device_template", "/dev/nvidia{index}")),
                )
            )
        except KeyError as e:
            raise ConfigError(f"{src}: gpus[{i}] lacks required key {e.args[0]!r}") from None
        except (TypeError, ValueError, OverflowError) as e:
            raise ConfigError(f"{src}: gpus[{i}]: {e}") from None
    return tuple(out)


def parse_config(text: str, source: str = "<string>") -> Config:
    try:
        raw = tomllib.loads(text)
    except ValueError as e:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise ConfigError(f"{source}: not valid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{source}: not valid TOML: arrays or tables nested too deeply") from None
    kwargs: dict[str, Any] = {"source": source}
    for key, value in raw.items():
        if key in _SECTIONS:
            kwargs[key] = _build_section(key, _SECTIONS[key], value, source)
            if key == "agent":
                kwargs[key] = _finish_agent(kwargs[key], value, source)
        elif key == "gpus":
            kwargs["gpus"] = _build_gpus(value, source)
        else:
            raise ConfigError(
                f"{source}: unknown section [{key}]; known: {', '.join([*_SECTIONS, 'gpus'])}"
            )
    return Config(**kwargs)


def config_path() -> Path:
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH)


def load_config(path: str | Path | None = None, *, missing_ok: bool | None = None) -> Config:
    """Load the site config. A missing file gives the defaults where ``missing_ok`` (by
    default: when no ``path`` is named, so the default file or ``$SLURM_COLO_CONFIG``'s);
    a file named with ``--config`` that is not there is an error, not the defaults."""
    p = Path(path) if path else config_path()
    if missing_ok is None:
        missing_ok = not path
    try:
        if not stat.S_ISREG(p.stat().st_mode):  # a FIFO would block every hook for ever
            raise ConfigError(f"config file {p} is not a regular file")
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        if missing_ok:
            return Config(source=f"{p} (missing: defaults)")
        raise ConfigError(
            f"config file {p} not found",
            hint="check the path given with --config"
            if path
            else f"slurm-colo install --write {p.parent}",
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {p} is not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
    return parse_config(text, str(p))
