"""The package's rooms and what each may import (docs/contributing.md says the same).

Imports are read from the source (module level and inside functions alike; what sits under
``if TYPE_CHECKING:`` is for type checkers only and is left out). A room is a subpackage of
``slurm_colo`` (``slurm_colo.node.gpu`` belongs to ``node``) or a top-level module.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "slurm_colo"

#: room -> the rooms it may import (besides itself and the standard library); a dotted
#: entry allows that one module of another room
BASE = {"errors", "fsutil", "logsetup", "clock", "gres_layout", "config", "contracts"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "fsutil": set(),
    "logsetup": set(),
    "clock": set(),
    "progress": set(),
    "gres_layout": set(),
    "contracts": {"errors"},
    "config": {"errors", "gres_layout", "contracts"},
    "scores": {"errors", "fsutil"},
    "gavel": {"errors", "fsutil"},
    "seed": {"gavel", "scores"},
    "metrics": set(),
    "lua": {"config"},
    "placement": BASE | {"scores", "slurm.model"},
    "model": {"errors", "gavel", "scores"},
    "sim": BASE | {"placement", "model", "scores", "gavel"},
    "slurm": BASE,
    "agent": BASE | {"placement", "slurm", "scores", "metrics", "store"},
    "emulators": {"errors", "fsutil"},
    "node": BASE | {"spool", "emulators"},
    "spool": BASE | {"store"},
    "store": {"errors", "contracts", "gavel", "scores"},
    "train": BASE | {"store", "model", "scores"},
    "hooks": BASE | {"node"},
    "admin": BASE | {"store", "node.layout", "node.jobstate"},
}
#: rooms that may import anything: the command line and the package's own version
TOP = {"cli", "__init__"}


def _runtime_imports(path: Path, module: str) -> Iterator[str]:
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    base = module.split(".") if is_pkg else module.split(".")[:-1]

    def walk(node: ast.AST) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from (x for n in child.orelse for x in walk(n))
                continue
            if isinstance(child, ast.Import):
                yield from (a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    parent = base[: len(base) - child.level + 1]
                    mod = ".".join(parent + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                for a in child.names:
                    yield f"{mod}.{a.name}"
            yield from walk(child)

    yield from walk(tree)


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        if "migrations" in p.parts:
            continue
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The package module an import names (``a.b.c`` may be module ``a.b`` + attribute c)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for mod, path in MODULES.items():
        deps = set()
        for imp in _runtime_imports(path, mod):
            if imp.split(".")[0] != "slurm_colo":
                continue
            target = _resolve(imp)
            if target and target != mod and not mod.startswith(target + "."):
                deps.add(target)
        g[mod] = deps
    return g


def _room(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules() -> None:
    assert _cycles(_graph()) == []


def test_no_import_cycle_between_rooms() -> None:
    rooms: dict[str, set[str]] = {}
    for mod, deps in _graph().items():
        rooms.setdefault(_room(mod), set()).update(_room(d) for d in deps if _room(d) != _room(mod))
    assert _cycles(rooms) == []


def test_every_room_has_its_rule() -> None:
    rooms = {_room(m) for m in MODULES}
    assert rooms - set(ALLOWED) - TOP == set(), (
        "add the new room to ALLOWED and docs/contributing.md"
    )


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_room_imports_only_what_it_may(room: str) -> None:
    bad = sorted(
        f"{m} imports {d}"
        for m, deps in _graph().items()
        if _room(m) == room
        for d in deps
        if _room(d) != room
        and _room(d) not in ALLOWED[room]
        and d.removeprefix("slurm_colo.") not in ALLOWED[room]
    )
    assert bad == []


def test_contracts_need_only_the_standard_library() -> None:
    """The hooks import contracts/: no third-party package may come with it."""
    stdlib = sys.stdlib_module_names
    bad = sorted(
        f"{m} imports {imp}"
        for m, p in MODULES.items()
        if _room(m) == "contracts"
        for imp in _runtime_imports(p, m)
        if imp.split(".")[0] not in stdlib and imp.split(".")[0] != "slurm_colo"
    )
    assert bad == []
