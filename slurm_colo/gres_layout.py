"""The GRES layout: which GPUs are shared and how Slurm sees them.

Design (Slurm 22.05 facts in docs/gres-layout.md):

* Every GPU gets a GRES *type*, so a job can be aimed at exactly one GPU and so Slurm never
  starts an exclusive ``gpu`` job on a GPU whose shards are in use (untyped shared GRES
  allows that in 22.05).
* GPUs in the shared pool get the type ``<model>_s<index>`` (``s<index>`` without a model),
  e.g. ``v100_s1``; each carries ``shards_per_gpu`` shards, which inherit that type. The
  agent targets GPU 1 of node n with ``--gres=shard:v100_s1:1`` plus ``ReqNodeList=n``.
* GPUs outside the pool keep the plain model type (``v100``; ``excl`` without a model), so
  existing ``--gres=gpu:v100:N`` requests keep working and never land on a shared GPU.
  Untyped ``--gres=gpu:N`` may take an *idle* shared GPU; Slurm then keeps shards off it
  until it is released.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TRES_GRES_RE = re.compile(r"(^|,)gres[:/]")

#: the first Slurm release that writes GRES in TRES strings as ``gres/gpu:1``; earlier ones
#: (22.05) write and need ``gres:gpu:1`` (docs/slurm-versions.md)
TRES_SLASH_SINCE = (23, 11)


def tres_gres(spec: str, slurm_version: tuple[int, int] | None = None) -> str:
    """A GRES request in TRES form (``gres:shard:v100_s1:1``, items comma-separated) written
    the way Slurm ``slurm_version`` (major, minor) writes it: ``gres/shard:...`` from 23.11,
    ``gres:shard:...`` before. With no version, the colon form: the agent's wire form, which
    the Lua hook rewrites to the job's own form and ``scontrol update TresPerNode=`` accepts
    on 22.05, 24.11 and 26.05 alike."""
    sep = "/" if slurm_version is not None and tuple(slurm_version) >= TRES_SLASH_SINCE else ":"
    return _TRES_GRES_RE.sub(lambda m: f"{m.group(1)}gres{sep}", spec)


def tres_items(spec: str) -> list[list[str]]:
    """The items of a GRES request in TRES form, each split at its colons without its
    ``gres:``/``gres/`` prefix: ``gres/shard:v100_s0:1,gres:gpu:1`` ->
    ``[["shard", "v100_s0", "1"], ["gpu", "1"]]``."""
    items = (s.strip() for s in spec.split(","))
    return [i.split("gres:", 1)[-1].split("gres/", 1)[-1].split(":") for i in items if i]


_MODEL_RE = re.compile(r"^[a-z0-9][a-z0-9.]{0,31}$")


#: the most GPUs one [[gpus]] table may give a node
MAX_GPUS_PER_NODE = 1024


def parse_index_list(text: str, count: int) -> tuple[int, ...]:
    """Parse ``"0-1,3"`` (or ``""`` for none) into sorted GPU indices below ``count``."""
    if not 1 <= count <= MAX_GPUS_PER_NODE:  # checked first: a huge count never ends
        raise ValueError(f"count must be within 1-{MAX_GPUS_PER_NODE}")
    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = _RANGE_RE.match(part)
        if not m:
            raise ValueError(f"bad GPU index list {text!r} (use e.g. '0-1,3')")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo or hi >= count:
            raise ValueError(f"GPU indices {part!r} outside 0-{count - 1}")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


#: a hostlist that names more nodes than this is refused rather than expanded
MAX_HOSTLIST_NODES = 100_000


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm hostlist such as ``gpu[01-03,07],login1`` into names. ``ValueError``
    for a range of more than :data:`MAX_HOSTLIST_NODES` names."""
    names: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr):
        item = item.strip()
        m = re.match(r"^(.*?)\[([^\]]*)\](.*)$", item)
        if not m:
            if item:
                names.append(item)
            continue
        prefix, body, rest = m.groups()
        for rng in body.split(","):
            a, _, b = rng.partition("-")
            width = len(a)
            if int(b or a) - int(a) + len(names) >= MAX_HOSTLIST_NODES:
                raise ValueError(f"hostlist {expr!r} names more than {MAX_HOSTLIST_NODES} nodes")
            for i in range(int(a), int(b or a) + 1):
                names.extend(
                    f"{prefix}{i:0{width}d}{tail}" for tail in expand_hostlist(rest) or [""]
                )
    return names


def compress_indices(idx: tuple[int, ...] | list[int]) -> str:
    """``[0,1,2,5]`` -> ``"0-2,5"``."""
    out: list[str] = []
    s = sorted(idx)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)


@dataclass(frozen=True)
class NodeGpus:
    """The GPUs of one set of identical nodes."""

    nodes: str
    count: int
    model: str = ""
    memory_gib: float = 16.0
    shared: tuple[int, ...] = ()
    shards_per_gpu: int = 4
    device_template: str = "/dev/nvidia{index}"

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_GPUS_PER_NODE:
            raise ValueError(f"count must be within 1-{MAX_GPUS_PER_NODE}")
        if self.model and not _MODEL_RE.match(self.model):
            raise ValueError(f"model {self.model!r}: lower-case letters, digits and '.' only")
        if not 1 <= self.shards_per_gpu <= 64:
            raise ValueError("shards_per_gpu must be within 1-64")
        if not 0 < self.memory_gib < math.inf:
            raise ValueError("memory_gib must be a positive number")
        expand_hostlist(self.nodes)  # a range too large to expand is refused here
        if "{index}" not in self.device_template:
            raise ValueError("device_template must contain {index}")
        runs = [t for t, _ in self.type_runs()]
        if len(runs) != len(set(runs)):
            raise ValueError(
                f"shared pool {compress_indices(self.shared)} of {self.count} GPUs splits the "
                f"whole GPUs (type {self.gres_type(self.exclusive()[0])}) in two: Slurm numbers "
                "a node's GPUs in the order of the types in slurm.conf's Gres= and adds up a "
                "type named twice, so it would give a job another GPU than the one slurm-colo "
                "placed it on. Keep the whole GPUs one block of consecutive indices (the "
                "shared pool at the node's lowest or highest indices)"
            )

    @property
    def node_names(self) -> list[str]:
        return expand_hostlist(self.nodes)

    def matches(self, node: str) -> bool:
        return node in self.node_names

    def is_shared(self, index: int) -> bool:
        return index in self.shared

    def gres_type(self, index: int) -> str:
        if index in self.shared:
            return f"{self.model}_s{index}" if self.model else f"s{index}"
        return self.model or "excl"

    def exclusive(self) -> list[int]:
        """The GPUs outside the shared pool, lowest index first."""
        return [i for i in range(self.count) if i not in self.shared]

    def type_runs(self) -> list[tuple[str, int]]:
        """``(type, count)`` of the node's GPUs in device index order, consecutive GPUs of
        one type counted together: the order slurm.conf's ``Gres=`` must list them in, as
        Slurm numbers a node's GPUs by it."""
        runs: list[tuple[str, int]] = []
        for i in range(self.count):
            t = self.gres_type(i)
            if runs and runs[-1][0] == t:
                runs[-1] = (t, runs[-1][1] + 1)
            else:
                runs.append((t, 1))
        return runs

    def shard_request(self, index: int, slurm_version: tuple[int, int] | None = None) -> str:
        """The ``tres_per_node`` string that targets shared GPU ``index``, in the form of
        Slurm ``slurm_version`` (:func:`tres_gres`; the colon form when not given)."""
        return tres_gres(f"gres:shard:{self.gres_type(index)}:1", slurm_version)

    def index_for_type(self, gres_type: str) -> int | None:
        for i in self.shared:
            if self.gres_type(i) == gres_type:
                return i
        return None

    # ---- generated configuration -------------------------------------------------------
    def gres_conf_lines(self) -> list[str]:
        lines = [
            f"# slurm-colo: {self.nodes}: {self.count} x {self.model or 'GPU'}, "
            f"shared pool {compress_indices(self.shared) or 'none'}, "
            f"{self.shards_per_gpu} shards per shared GPU"
        ]
        for i in range(self.count):  # device index order, as in slurm.conf's Gres=
            dev = self.device_template.format(index=i)
            lines.append(f"NodeName={self.nodes} Name=gpu Type={self.gres_type(i)} File={dev}")
        for i in sorted(self.shared):
            dev = self.device_template.format(index=i)
            lines.append(f"NodeName={self.nodes} Name=shard Count={self.shards_per_gpu} File={dev}")
        return lines

    def gres_mismatch(self, reported: str) -> str | None:
        """Why a node's GRES as Slurm reports it (``gpu:v100_s0:1(S:0),gpu:v100:3,shard:..``)
        has Slurm number its GPUs otherwise than their devices, as :meth:`type_runs` lists
        them; None when the GPU types come in that order, or when Slurm reports none."""
        have = []
        for part in reported.split(","):
            fields = part.split("(", 1)[0].strip().lower().split(":")
            if fields[0] == "gpu" and len(fields) > 1:
                have.append(":".join(fields))
        if not have:
            return None
        want = [f"gpu:{t}:{n}" for t, n in self.type_runs()]
        if have == want:
            return None
        return (
            f"Slurm lists its GPUs as {','.join(have)} where the [[gpus]] layout in device "
            f"index order is {','.join(want)}; Slurm numbers a node's GPUs in the order of "
            "Gres=, so a job would get another GPU than the one it was placed on "
            "(use the Gres= of `slurm-colo install --write DIR` and restart slurmctld and slurmd)"
        )

    def node_gres(self) -> str:
        """The ``Gres=`` value of the slurm.conf NodeName line: the GPU types in device
        index order (:meth:`type_runs`), then the shards."""
        parts = [f"gpu:{t}:{n}" for t, n in self.type_runs()]
        if self.shared:
            parts.append(f"shard:{self.shards_per_gpu * len(self.shared)}")
        return ",".join(parts)


def gres_conf(layouts: tuple[NodeGpus, ...] | list[NodeGpus]) -> str:
    lines = [
        "# gres.conf lines generated by `slurm-colo install` - review before use",
        "AutoDetect=off",
    ]
    for ng in layouts:
        lines.extend(ng.gres_conf_lines())
    return "\n".join(lines) + "\n"


def slurm_conf_snippet(layouts: tuple[NodeGpus, ...] | list[NodeGpus]) -> str:
    lines = [
        "# slurm.conf lines generated by `slurm-colo install` - merge into your NodeName lines",
        "GresTypes=gpu,shard",
    ]
    for ng in layouts:
        lines.append(f"# NodeName={ng.nodes} ... Gres={ng.node_gres()}")
    return "\n".join(lines) + "\n"
