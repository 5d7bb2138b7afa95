"""A placement: where the agent put a ``--colocate`` job and with what limits.

One frozen type, :class:`Placement`, from the agent's decision to the job's history record.
It travels in two encodings:

- the **tag** (:meth:`Placement.to_tag` / :meth:`Placement.from_tag`), carried in a job's
  comment and admin comment: ``slurm-colo[v=1 tok=TOKEN cls=CLASS mode=MODE mech=mps
  gpu=NODE:IDX pct=N mem=GIB est=GIB d=DELTA]`` (fields after ``mode`` optional). After the
  agent undid a harmful placement ``undone=1`` is added; ``held=SHARD_TYPE`` while a
  requeued job waits, held, to be aimed at a GPU of that type, ``held=*`` while a job held at
  submission waits, without a GPU request, for any shared GPU (``model=MODEL`` if it asked
  for one GPU model). The agent rebuilds its view from the admin comment (users cannot edit
  it) after a restart; the Prolog falls back to the admin comment's copy when the agent
  cannot be reached.
- the **wire** form (:meth:`Placement.to_wire` / :meth:`Placement.from_wire`), a JSON
  object with the field names below: the agent's JOBSTART reply, and the node's per-job
  state file.

Standard library only: the Prolog imports this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from slurm_colo.contracts.digits import decimal, number, whole
from slurm_colo.contracts.enums import Mechanism, Mode
from slurm_colo.errors import ProtocolError

_TAG_RE = re.compile(r"slurm-colo\[v=1((?: [a-z]+=[^ \]]*)*)\]")

#: ``held`` value of a job held at submission: it may go to any shared GPU (of its model)
ANY_SHARED = "*"


def held_for_text(held: str, model: str = "") -> str:
    """What a held job waits for, in words: ``a v100_s1 GPU``, ``a shared a100 GPU``."""
    if held != ANY_SHARED:
        return f"a {held} GPU"
    return f"a shared {model} GPU" if model else "a shared GPU"


def unheld(tag_text: str, held: str) -> str:
    """A held job's tag text without its ``held=`` mark (``held``: the mark's value), so
    that the agent leaves the job to Slurm; the rest of the tag as it was."""
    return tag_text.replace(f" held={held}", "")


#: what each number of a placement may be, both ends included: a tag or reply outside these
#: (``pct=1e400``, ``mem=nan``, a negative GPU) is damaged, not a limit to apply. The upper
#: ends of sizes and times are the config's own bound on a number (``config.MAX_WHOLE``):
#: an agent never sends more, so a site's large setting is never refused here.
LIMITS: dict[str, tuple[float, float]] = {
    "gpu": (0, 2**31 - 1),
    "thread_pct": (1, 100),
    "mem_limit_gib": (0, 2**53),  # 0: no limit
    "memory_gib": (0, 2**53),
    "predicted_delta": (0, 2**53),
    "probe_s": (0, 2**53),
    "job": (1, 2**32 - 1),  # a Slurm job id (partners)
}


def _num(conv: type, v: Any, name: str) -> Any:
    """A tag's number, None when unreadable or out of :data:`LIMITS` (a tag is read
    leniently: what cannot be used is left out)."""
    if v is None:
        return None
    try:
        return (whole if conv is int else number)(v, name, *LIMITS[name])
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Placement:
    """Where a job goes. ``mechanism`` is None for a job that keeps a GPU of its own."""

    token: str
    cls: str = "default"
    mode: Mode = Mode.AUTO
    mechanism: Mechanism | None = None
    node: str | None = None
    gpu: int | None = None
    #: MPS active thread percentage and pinned-memory limit (GiB) of the job
    thread_pct: int | None = None
    mem_limit_gib: float | None = None
    #: the job's GPU memory as the policy estimated it, GiB
    memory_gib: float | None = None
    #: predicted speedup of the GPU's set with this job in it (> 1: sharing pays)
    predicted_delta: float | None = None
    #: the agent undid this job's harmful placement (requeued it)
    undone: bool = False
    #: while held: the shard type it waits for, or ANY_SHARED
    held: str | None = None
    #: the GPU model the job asked for ("" = any)
    model: str = ""
    #: job ids sharing the GPU when the job started (wire only: a tag is written earlier)
    partners: tuple[int, ...] = field(default=())
    #: when the node's sampler probes the set, seconds after the job joined it: the agent's
    #: ``placement.probe_s``, so a GPU node needs no copy of it (wire only; None: the node's)
    probe_s: float | None = None

    @property
    def shared(self) -> bool:
        return self.mechanism is not None

    # ---- tag ------------------------------------------------------------------------------
    def to_tag(self) -> str:
        parts = [f"v=1 tok={self.token} cls={self.cls} mode={self.mode}"]
        if self.mechanism is not None:
            parts.append(f"mech={self.mechanism} gpu={self.node}:{self.gpu}")
            if self.thread_pct is not None:
                parts.append(f"pct={self.thread_pct}")
            if self.mem_limit_gib is not None:
                parts.append(f"mem={self.mem_limit_gib:g}")
            if self.memory_gib is not None:
                parts.append(f"est={self.memory_gib:g}")
            if self.predicted_delta is not None:
                parts.append(f"d={self.predicted_delta:g}")
        if self.undone:
            parts.append("undone=1")
        if self.held:
            parts.append(f"held={self.held}")
        if self.model:
            parts.append(f"model={self.model}")
        return "slurm-colo[" + " ".join(parts) + "]"

    @classmethod
    def from_tag(cls, text: str | None) -> Placement | None:
        """The placement of the tag found anywhere in ``text``; None without one."""
        if not text:
            return None
        m = _TAG_RE.search(text)
        if not m:
            return None
        kv = dict(item.split("=", 1) for item in m.group(1).split())
        node, _, idx = kv.get("gpu", "").rpartition(":")
        try:
            mode = Mode(kv.get("mode", "auto"))
        except ValueError:
            mode = Mode.AUTO
        try:
            mech = Mechanism(kv["mech"]) if "mech" in kv else None
        except ValueError:
            mech = Mechanism.SHARD  # shared by a newer agent's mechanism: no MPS limits
        return cls(
            token=kv.get("tok", ""),
            cls=kv.get("cls", "default"),
            mode=mode,
            mechanism=mech,
            node=node or None,
            gpu=_num(int, decimal(idx, 10), "gpu"),
            thread_pct=_num(int, kv.get("pct"), "thread_pct"),
            mem_limit_gib=_num(float, kv.get("mem"), "mem_limit_gib"),
            memory_gib=_num(float, kv.get("est"), "memory_gib"),
            predicted_delta=_num(float, kv.get("d"), "predicted_delta"),
            undone=kv.get("undone") == "1",
            held=kv.get("held") or None,
            model=kv.get("model", ""),
        )

    # ---- wire -----------------------------------------------------------------------------
    def to_wire(self) -> dict[str, Any]:
        """A JSON object. ``shared`` is written too, for hooks of earlier versions."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["mode"] = str(self.mode)
        out["mechanism"] = None if self.mechanism is None else str(self.mechanism)
        out["partners"] = list(self.partners)
        out["shared"] = self.shared
        return out

    @classmethod
    def from_wire(cls, d: Any) -> Placement:
        """Read :meth:`to_wire`'s object back. Unknown keys are ignored (a newer sender);
        a value of the wrong type raises :class:`ProtocolError`. Objects written by earlier
        versions (``delta``; ``shared`` with a mechanism) are read as well."""
        if not isinstance(d, dict) or not isinstance(d.get("token", ""), str):
            raise ProtocolError("placement: not an object with a string token")
        try:
            mech = d.get("mechanism")
            if mech is not None and d.get("shared") is False:
                mech = None
            return cls(
                token=d.get("token", ""),
                cls=str(d.get("cls") or "default"),
                mode=Mode(d.get("mode") or "auto"),
                mechanism=None if mech is None else Mechanism(mech),
                node=None if d.get("node") is None else str(d["node"]),
                gpu=_bounded_int(d.get("gpu"), "gpu"),
                thread_pct=_bounded_int(d.get("thread_pct"), "thread_pct"),
                mem_limit_gib=_float_or_none(d.get("mem_limit_gib"), "mem_limit_gib"),
                memory_gib=_float_or_none(d.get("memory_gib"), "memory_gib"),
                predicted_delta=_float_or_none(
                    d.get("predicted_delta", d.get("delta")), "predicted_delta"
                ),
                undone=bool(d.get("undone", False)),
                held=d.get("held") or None,
                model=str(d.get("model") or ""),
                partners=tuple(_partner(p) for p in d.get("partners") or ()),
                probe_s=_float_or_none(d.get("probe_s"), "probe_s"),
            )
        except (TypeError, ValueError, OverflowError) as e:
            raise ProtocolError(f"placement: {e}") from None


def _float_or_none(v: Any, name: str) -> float | None:
    return None if v is None else number(v, name, *LIMITS[name])


def _bounded_int(v: Any, name: str) -> int | None:
    return None if v is None else whole_in_limits(v, name)


def _partner(v: Any) -> int:
    return whole_in_limits(v, "job", "partners")


def whole_in_limits(v: Any, name: str, what: str = "") -> int:
    """``v`` as a whole number within ``LIMITS[name]``; else ``ValueError``/``TypeError``
    naming ``what`` (default ``name``)."""
    lo, hi = LIMITS[name]
    return whole(v, what or name, int(lo), int(hi))
