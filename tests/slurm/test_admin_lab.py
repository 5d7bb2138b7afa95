"""The admin's view of the lab: doctor is green, install's snippets match what runs."""

from __future__ import annotations

import json
from pathlib import Path

from .labtools import agent_cli


def test_doctor_is_green_on_the_lab(clean: None) -> None:
    p = agent_cli("doctor", "--json")
    checks = json.loads(p.stdout)
    failed = [c for c in checks if c["status"] == "FAIL"]
    assert p.returncode == 0 and not failed, failed
    names = {c["name"] for c in checks}
    assert {"agent", "agent rights", "database", "scores", "job_submit.lua", "gres.conf"} <= names
    ok = ("agent", "agent rights", "database", "gres.conf", "Gres=")
    assert all(c["status"] == "OK" for c in checks if c["name"] in ok), checks
    # the lab's agent runs as root: Slurm lets it undo, hold, re-plan and raise limits
    rights = next(c for c in checks if c["name"] == "agent rights")
    assert "the agent runs as root" in rights["message"], rights


def test_install_writes_what_the_lab_runs(clean: None, tmp_path: Path) -> None:
    p = agent_cli("install", "--write", str(tmp_path))
    assert p.returncode == 0, p.stderr
    written = {f.name: f.read_text() for f in tmp_path.rglob("*") if f.is_file()}
    lua = next(text for name, text in written.items() if name.endswith(".lua"))
    assert lua == Path("/etc/slurm/job_submit.lua").read_text()
    gres = next(text for name, text in written.items() if "gres" in name and "conf" in name)
    assert gres == Path("/etc/slurm/gres.conf").read_text()
