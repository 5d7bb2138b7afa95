"""The machine-readable placement tag carried in a job's comment and admin comment.

Format: ``slurm-colo[v=1 tok=TOKEN cls=CLASS mode=MODE mech=mps gpu=NODE:IDX pct=N mem=GIB d=DELTA]``
(fields after ``v`` optional). After the agent undid a harmful placement, ``undone=1`` is
added; ``held=SHARD_TYPE`` while a requeued job waits, held, to be aimed at a GPU of that
type, ``held=*`` while a job held at submission (``placement.unplaced = "hold"``) waits,
without a GPU request, to be aimed at any shared GPU (``model=MODEL`` if it asked for one
GPU model). The agent writes it at submit time; it rebuilds its view
from the admin comment (users cannot edit it) after a restart, and the Prolog falls back
to the copy in the comment (``SLURM_JOB_COMMENT``) when the agent cannot be reached.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # keep the Prolog's import of parse_tag free of the placement package
    from slurm_colo.placement.view import Decision

_TAG_RE = re.compile(r"slurm-colo\[v=1((?: [a-z]+=[^ \]]*)*)\]")


#: ``held=`` value of a job held at submission: it may go to any shared GPU (of its model)
ANY_SHARED = "*"


def held_for_text(held: str, model: str = "") -> str:
    """What a held job waits for, in words: ``a v100_s1 GPU``, ``a shared a100 GPU``."""
    if held != ANY_SHARED:
        return f"a {held} GPU"
    return f"a shared {model} GPU" if model else "a shared GPU"


def make_tag(token: str, cls: str, mode: str, d: Decision, undone: bool = False,
             held: str = "", model: str = "") -> str:
    parts = [f"v=1 tok={token} cls={cls} mode={mode}"]
    if d.shared:
        parts.append(f"mech={d.mechanism} gpu={d.node}:{d.index}")
        if d.thread_pct is not None:
            parts.append(f"pct={d.thread_pct}")
        if d.mem_limit_gib is not None:
            parts.append(f"mem={d.mem_limit_gib:g}")
        if d.memory_gib is not None:
            parts.append(f"est={d.memory_gib:g}")
        if d.predicted_delta is not None:
            parts.append(f"d={d.predicted_delta:g}")
    if undone:
        parts.append("undone=1")
    if held:
        parts.append(f"held={held}")
    if model:
        parts.append(f"model={model}")
    return "slurm-colo[" + " ".join(parts) + "]"


def parse_tag(text: str | None) -> dict[str, Any] | None:
    """Decode a tag found anywhere in ``text`` into the placement dict the hooks use:
    ``shared, mechanism, thread_pct, mem_limit_gib, cls, mode, node, gpu, token, delta,
    undone, held, model``."""
    if not text:
        return None
    m = _TAG_RE.search(text)
    if not m:
        return None
    kv = dict(item.split("=", 1) for item in m.group(1).split())
    node, _, idx = kv.get("gpu", "").rpartition(":")

    def num(key: str, conv: type) -> Any:
        try:
            return conv(kv[key]) if key in kv else None
        except ValueError:
            return None

    return {
        "token": kv.get("tok", ""),
        "cls": kv.get("cls", "default"),
        "mode": kv.get("mode", "auto"),
        "shared": "mech" in kv,
        "mechanism": kv.get("mech"),
        "node": node or None,
        "gpu": int(idx) if idx.isdigit() else None,
        "thread_pct": num("pct", int),
        "mem_limit_gib": num("mem", float),
        "memory_gib": num("est", float),
        "delta": num("d", float),
        "partners": [],
        "undone": kv.get("undone") == "1",
        "held": kv.get("held") or None,
        "model": kv.get("model", ""),
    }
