"""The reference text of every site-config key, and the example config built from it.

:data:`HELP` is the single source for the config man page (section 5), the commented
example ``contrib/examples/config.toml`` and docs; a unit test fails when a field of
:mod:`slurm_colo.config` has no entry here, or an entry names no field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import MISSING, fields
from typing import Any, NamedTuple

from .. import config as _config

#: ``section.key`` -> one paragraph of help. Keep sentences short; they become man-page text.
HELP: dict[str, str] = {
    # [agent]
    "node.records_to": 'Where a node\'s spooled job records go: "store" writes them to '
    'store.url; "agent" sends them to the agent (over agent.address), which writes them '
    'to the head node\'s store.url; "auto" sends them to the agent when agent.address is '
    "a tcp: address and store.url is SQLite (a file on the head node), else writes them to "
    "store.url. Either way they are stored once, by record id.",
    "node.records_retry_s": "While the agent cannot be reached, a node's ingest run keeps "
    "its records and tries again for this long, seconds (each later Epilog tries too).",
    "agent.cluster": "The cluster's name (use Slurm's ClusterName). Every TCP message between "
    "the node hooks and the agent carries it, and the agent refuses a message made for "
    "another name. Set the same value on the head node and every GPU node.",
    "agent.socket": "Unix socket the placement agent listens on; the Lua hook and the CLI "
    "connect to it.",
    "agent.listen": 'Addresses the agent listens on: "unix:/path" or "tcp:HOST:PORT" '
    '("tcp:[::]:6830" for IPv6). It must include the unix socket of agent.socket. On TCP '
    "every message is wrapped in a munge credential (same munge key on every node) and "
    "unauthenticated, replayed, expired, foreign-key or wrong-cluster messages are refused "
    "and logged. Unset, it follows agent.socket.",
    "agent.address": "Where the node hooks (Prolog, Epilog, sampler probe) reach the agent: "
    '"unix:/path" on the head node, "tcp:HEAD:PORT" on GPU nodes (one of the head '
    "node's agent.listen addresses). Unset, it follows agent.socket.",
    "agent.munge_socket": "Socket of the munged that signs and checks the TCP messages. Empty: "
    "libmunge's default (/run/munge/munge.socket.2 on most systems).",
    "agent.user": "The user the agent runs as (User= of its systemd unit). Over TCP the node "
    "hooks accept only replies signed by root or this user.",
    "agent.request_timeout_ms": "Hard time limit, in milliseconds, of one placement round trip "
    "from the Lua hook. A slower answer is ignored and the job gets the fallback. A request "
    "waits while the agent takes in a look at Slurm (60-80 ms with 10,000 running jobs on "
    "2,000 shared GPUs): on a larger site, raise this above that time.",
    "agent.retry_after_s": "After a failed round trip the Lua hook does not ask the agent again "
    "for this many seconds (circuit breaker), so a dead agent never slows submission. An "
    "agent that is not there or answers garbage trips it at once; a timeout only when it is "
    "the second in a row, so one slow answer costs one job its placement.",
    "agent.refresh_interval_s": "How often, in seconds, the agent re-reads job and node state "
    "from Slurm. At least 1 (each look asks slurmctld).",
    "agent.pending_ttl_s": "A placement the agent handed out but has not yet seen in Slurm "
    "(the job was rejected or cancelled at submit) is forgotten after this many seconds.",
    "agent.metrics_listen": 'Address ("host:port") of the Prometheus text endpoint served by '
    "the agent. Empty disables it.",
    "agent.log_level": "Agent log level: debug, info, warning or error.",
    "agent.slurm_backend": 'How the agent reads Slurm state: "auto" (PySlurm when it matches '
    'the installed Slurm, else the JSON output of the Slurm commands), "json" or "pyslurm".',
    # [placement]
    "placement.fallback": "What the Lua hook does when the agent is down, slow or answers "
    'garbage: "exclusive" keeps the job\'s own GPU request unchanged; "shard" turns it into '
    "untargeted gres:shard sharing.",
    "placement.cross_user": 'Jobs of different users on one GPU: "never", or "shard" '
    "(plain time-sliced sharing without MPS, which gives no memory isolation).",
    "placement.class_name_numbers": "A job's class is its --colocate-class, else taken "
    'from its name. "keep": the numbers at the name\'s end stay, so a job named with a run '
    "number or a date (run-00042, train_2026-11-25) is a class of its own, never learnt "
    'from and placed on what the score set assumes of any job; "strip": numbers after a '
    "separator at the name's end are cut off (run-00042 and run-00043 are both class "
    '"run"; resnet50 and lr0.001 stay as they are, but resnet-50 and resnet-101 are both '
    '"resnet"). Jobs recorded before a change keep the class they had; the next retrain '
    "learns the new classes from the jobs recorded since.",
    "placement.min_delta": "The predicted combined speedup (delta) a shared GPU must keep for "
    "--colocate=auto. 1.0 means no gain over running the jobs one after the other.",
    "placement.aggressive_min_delta": "The same threshold for --colocate=aggressive.",
    "placement.max_slowdown": "In auto mode a job may not be predicted to run slower than this "
    "factor of its solo speed. At least 1.",
    "placement.min_throughput": "The throughput path, auto mode: a shared set is also "
    "accepted when its predicted combined throughput (the sum of its members' speeds over "
    "their solo speeds, less risk_aversion standard deviations) reaches this and is not "
    "below what the GPU did before the job joined; a member may then run down to "
    "1/throughput_max_slowdown of its solo speed. A job takes such a set only when no idle "
    "GPU is there. 0 disables the path.",
    "placement.throughput_max_slowdown": "On the throughput path, the slowdown a member may "
    "be predicted to suffer (2.5: down to 0.4 of its solo speed). At least 1.",
    "placement.throughput_queue": "The throughput path is open only while at least this many "
    "jobs per shared GPU wait for a GPU (pending with a GPU or shard request, or held by the "
    "agent; counted at each Slurm snapshot). With a shorter queue a job soon gets a GPU of "
    "its own, so only sets where every member gains are started. 0: always open.",
    "placement.throughput_drain_h": "The throughput path is also closed while the queue is "
    "about to run out: when, shrinking as it has over the last six hours (least-squares "
    "slope of the counts), it would be gone in fewer than this many hours. A long job slowed "
    "down then is the one the site's last work waits for, while GPUs fall idle around it. "
    "Longer favours the end of a busy period (its makespan), shorter the wait of the "
    "short jobs then. 0: no forecast.",
    "placement.memory_headroom": "Fraction of GPU memory kept free on a shared GPU (below 1).",
    "placement.default_memory_share": "GPU memory assumed for a job class with no measured "
    "profile, as a share of each GPU's own memory ([[gpus]] memory_gib: each GPU model its "
    "own), at most 1. 0 assumes default_memory_gib on every GPU.",
    "placement.default_memory_gib": "GPU memory, in GiB, assumed for a job class with no "
    "measured profile when default_memory_share is 0.",
    "placement.risk_aversion": "How many standard deviations of the predicted delta are "
    "subtracted before it is compared with min_delta. 0 trusts the mean.",
    "placement.explore_rate": "Share of placements that may try a pair of classes with no "
    "data yet (exploration), 0 to 1. 0 disables exploration.",
    "placement.reserve_after_h": "Starvation guard: once a job has waited this many hours "
    "for whole GPUs (untyped gres:gpu), or held for the agent (placement.unplaced = "
    '"hold", or requeued by an undo), the shared GPU(s) expected to drain first take no '
    "new partners until it has started. 0 disables the guard.",
    "placement.bypass_h": "Bounded queue jumping: once the job held longest (that some "
    "shared GPU could take) has waited reserve_after_h, a job that came more than this many "
    "hours after it is not placed, at submission or from the held jobs, until it has "
    "started; newer jobs then wait their turn instead of taking every slot that frees up. "
    "A job waits only behind held jobs that may want the GPU it would take: those held for "
    "that GPU's shard type or for any shared GPU. 0 lets jobs pass it freely.",
    "placement.probe_s": "A new shared set is judged after this many seconds: each member's "
    "job-reported progress (slurm_colo.progress) is compared with its speed before, or with its "
    'class\'s solo speed. 0 disables the probe; so does node.profile = "none" (the probe runs '
    "in the job's sampler). The agent's value counts: it travels to the GPU node with each "
    "placement (a node's own copy is used only for a job the agent did not answer for).",
    "placement.undo": "What happens to a set the probe finds harmful (combined throughput below "
    '1, or an auto-mode job below 1/max_slowdown of its solo speed): "requeue" requeues the '
    "newest job (it loses at most probe_s of work, more when undone at a second look: "
    "placement.left_behind; --no-requeue jobs are left alone) and aims "
    'it at a GPU of its shard type that fits; "off" lets the set run on. Either way the '
    "agent avoids the pair from then on.",
    "placement.left_behind": "A set kept by its probe is judged once more when a job leaves "
    "it, by the newest of those left (a pair that ran well next to a third job may not once "
    'that job is gone). "undo": a harmful set left behind is undone like any other (its '
    "newest job requeued; it loses the work it did on that GPU, more than probe_s); "
    '"learn": it runs on and is only learnt from.',
    "placement.unplaced": "A --colocate job that no shared GPU takes at submission: "
    '"own-gpu" keeps its own-GPU request (it waits in Slurm\'s queue for a whole GPU); '
    '"hold" holds it without a GPU request; the agent releases it onto the first shared '
    "GPU (of the GPU model it asked for) that fits it, with that GPU's shard request. "
    '"auto": "hold" when every GPU in [[gpus]] is shared (a job would otherwise wait '
    'for a whole shared GPU to drain), else "own-gpu" (it may take a free GPU that is not '
    "shared).",
    "placement.replan": "A --colocate job waiting in Slurm's queue with its own-GPU request "
    '(unplaced = "own-gpu"): "auto" moves it onto a shared GPU that takes it, if one does '
    "before a whole GPU frees (the agent changes its GPU request to that GPU's shard, oldest "
    "waiting job first), where Slurm can change a pending job's GRES (23.11 and later; on "
    'older Slurm nothing happens); "off" leaves it waiting for its whole GPU.',
    "placement.time_limit": "A job on a shared GPU runs slower than alone, and Slurm ends it "
    'at its time limit all the same. "extend": the agent adds the time sharing cost the job '
    "to its limit as it runs (the wall time it ran times one less its predicted speed in its "
    "set, in whole minutes, once 10 minutes are owed or sooner when the job nears its end; "
    'scontrol update TimeLimit=+N, which needs the rights the undo needs). "keep" leaves '
    "the limit as submitted: a job may then be ended because it shared a GPU.",
    # [store]
    "store.url": "SQLAlchemy URL of the job history database: a SQLite file by its "
    "absolute path (sqlite:////var/lib/...: four slashes) or postgresql+psycopg://....",
    "store.busy_timeout_s": "How long, in seconds, a writer waits for a locked SQLite "
    "database before giving up.",
    # [scores]
    "scores.path": "The live compatibility score set the agent reads. `slurm-colo retrain` "
    "replaces it atomically.",
    "scores.max_age_h": "A score set older than this many hours is reported stale by "
    "`slurm-colo doctor`.",
    "scores.gpu_model": "GPU model whose imported profiling campaign `slurm-colo retrain` "
    "uses, for one score set from all the history. Empty: the only campaign imported, or, "
    "where the records and campaigns name several GPU models, one set per model besides "
    "the site default.",
    "scores.window_days": "History older than this many days is not used for training.",
    "scores.half_life_days": "Recency weighting: the weight of an observation halves every "
    "this many days.",
    "scores.holdout_share": "Share of the observed pairs held out to check a new score set "
    "before it is published (below 1).",
    "scores.max_regression": "A new score set whose held-out error exceeds the live set's by "
    "more than this is not published; the live set stays.",
    "scores.max_classes": "The most job classes a score set scores, at least 2: those with "
    "the most evidence in the history. A set holds every pair of its classes, so its size and "
    "the retrain's time grow with their square (500 classes: 125,000 pairs). Jobs named afresh "
    "for each run are classes of one job each; the classes left out get the set's prior, and "
    "`slurm-colo retrain` says how many.",
    # [node]
    "node.mps_backend": '"real" (nvidia-cuda-mps-control) or "emulator" (explicit opt-in '
    "for tests and the lab; never on a production node).",
    "node.mps_control": "The MPS control binary, a name looked up on PATH or an absolute path.",
    "node.mps_timeout_s": "Time limit, in seconds, of one MPS control command.",
    "node.nvml_backend": '"real" (NVML through nvidia-ml-py) or "scenario" (explicit '
    "opt-in for tests and the lab).",
    "node.nvml_scenario": 'Scenario file used when nvml_backend is "scenario".',
    "node.run_dir": "Runtime directory on the node (MPS pipes and logs, per-job state); an "
    "absolute path.",
    "node.spool_dir": "Spool directory on the node, on disk (an absolute path): job records not yet sent to "
    "the history database, and a copy of each running job's state (running/), from which "
    "the record of a job a reboot ended is written.",
    "node.sampler_interval_s": "Seconds between two GPU utilisation samples of a running job.",
    "node.sampler_max_samples": (
        "No effect (accepted so older config files stay valid): the sampler keeps only "
        "streaming summaries, so its memory does not grow with the job's length."
    ),
    "node.spool_keep_days": (
        "Days an ingested record file stays in <spool_dir>/done/ (a copy for audits and "
        "re-imports; the database holds the record) before the node's ingest deletes it; 0 "
        "keeps them forever."
    ),
    "node.profile": 'Which GPU jobs the node side profiles: "colocated" (jobs placed on a '
    'shared GPU), "all" (exclusive jobs too: their solo profiles feed the model) or '
    '"none".',
    # [[gpus]]
    "gpus.nodes": 'Slurm hostlist of a set of identical GPU nodes, e.g. "gpu[01-16]". Required.',
    "gpus.count": "Number of GPUs per node. Required.",
    "gpus.model": "GPU model used in GRES type names (lower-case letters, digits and '.'), "
    'e.g. "v100". Empty gives types such as "s1" and "excl".',
    "gpus.memory_gib": "GPU memory per GPU, in GiB.",
    "gpus.shared": 'GPU indices in the shared pool, e.g. "2-3" of 4 or "6-7" of 8. The GPUs '
    "outside it must be consecutive indices (the pool at the node's lowest or highest "
    "indices): Slurm numbers a node's GPUs in the order of the types in slurm.conf's Gres= "
    "and adds up a type named twice. The highest indices are best: Slurm gives a plain "
    "--gres=gpu job the lowest free GPU, so a pool at the lowest is taken whole while idle. "
    'The default is every GPU; "" shares none.',
    "gpus.shards_per_gpu": "gres/shard count per shared GPU, which bounds how many jobs can "
    "share it (1-64).",
    "gpus.device_template": "Device file of a GPU; {index} is replaced by its index.",
}

SECTION_HELP: dict[str, str] = {
    "agent": "The placement agent on the controller host.",
    "placement": "The placement policy.",
    "store": "The job history database.",
    "scores": "The compatibility score set.",
    "node": "The GPU node side: prolog/epilog hooks, MPS, NVML sampling.",
    "gpus": "GPU layout of one set of identical nodes; repeat the table for each set. "
    "It determines the generated gres.conf and slurm.conf lines.",
}

#: [[gpus]] keys in their documented order with their defaults (None: required;
#: ``shared`` defaults to every GPU of the node, shown as a description).
GPU_KEYS: dict[str, Any] = {
    "nodes": None,
    "count": None,
    "model": "",
    "memory_gib": 16.0,
    "shared": "every GPU",
    "shards_per_gpu": 4,
    "device_template": "/dev/nvidia{index}",
}

#: the [[gpus]] example written into the example config
EXAMPLE_GPUS: dict[str, Any] = {
    "nodes": "gpu[01-04]",
    "count": 4,
    "model": "v100",
    "memory_gib": 16.0,
    "shared": "2-3",
    "shards_per_gpu": 4,
    "device_template": "/dev/nvidia{index}",
}


class ConfigKey(NamedTuple):
    section: str
    key: str
    default: Any  # None when required
    help: str


def sections() -> dict[str, type]:
    return dict(_config._SECTIONS)


def choices(section: str, key: str) -> tuple[str, ...]:
    return _config.choices(section, key)


def iter_keys() -> Iterator[ConfigKey]:
    """Every config key in file order, with its default and help text."""
    for name, cls in sections().items():
        for f in fields(cls):
            default = f.default if f.default is not MISSING else None
            yield ConfigKey(name, f.name, default, HELP.get(f"{name}.{f.name}", ""))
    for key, default in GPU_KEYS.items():
        yield ConfigKey("gpus", key, default, HELP.get(f"gpus.{key}", ""))


def missing_help() -> list[str]:
    """Config keys without help text, and help entries that name no key."""
    known = {f"{k.section}.{k.key}" for k in iter_keys()}
    lacking = sorted(k for k in known if not HELP.get(k))
    stale = sorted(f"{k} (no such key)" for k in HELP if k not in known)
    return lacking + stale


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _wrap(text: str, prefix: str = "# ", width: int = 88) -> list[str]:
    out: list[str] = []
    line = ""
    for word in text.split():
        if line and len(prefix) + len(line) + 1 + len(word) > width:
            out.append(prefix + line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        out.append(prefix + line)
    return out


def render_example_config() -> str:
    """The commented example site config: every key, set to its default, with its help."""
    lines = [
        "# slurm-colo site configuration: /etc/slurm-colo/config.toml",
        "#",
        "# Every section and key is optional and shown with its default value (an empty file",
        "# is valid); only nodes and count are required inside a [[gpus]] table. Unknown",
        "# keys and bad values are errors that name the key.",
        "# `slurm-colo doctor` checks this file; `man 5 slurm-colo-config` describes it.",
        "# Generated from slurm_colo/admin/config_doc.py (do not edit by hand: run",
        "# `python -m slurm_colo.admin.config_doc > contrib/examples/config.toml`).",
    ]
    for name, cls in sections().items():
        lines += ["", f"[{name}]"]
        lines += _wrap(SECTION_HELP[name])
        for f in fields(cls):
            lines.append("")
            lines += _wrap(HELP[f"{name}.{f.name}"])
            ch = choices(name, f.name)
            if ch:
                lines.append(f"# Accepted: {', '.join(ch)}.")
            lines.append(f"{f.name} = {toml_value(f.default)}")
    lines += ["", "[[gpus]]"]
    lines += _wrap(SECTION_HELP["gpus"])
    for key, value in EXAMPLE_GPUS.items():
        lines.append("")
        lines += _wrap(HELP[f"gpus.{key}"])
        lines.append(f"{key} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_example_config(), end="")
