"""`slurm-colo install`: golden files for the generated snippets, --write, the CLI."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_colo.admin import install as inst
from slurm_colo.cli import app
from slurm_colo.config import parse_config
from slurm_colo.lua import render_job_submit_lua

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "install"
UPDATE = os.environ.get("SLURM_COLO_UPDATE_GOLDEN") == "1"

#: the fixed example site config the golden files are generated from
EXAMPLE_TOML = """
[agent]
socket = "/run/slurm-colo/agent.sock"
request_timeout_ms = 200

[placement]
fallback = "shard"

[[gpus]]
nodes = "gpu[01-02]"
count = 4
model = "v100"
shared = "0-1"
shards_per_gpu = 4

[[gpus]]
nodes = "dgx[1-2]"
count = 8
model = "a100"
memory_gib = 80.0
shared = "6-7"
shards_per_gpu = 8
"""
PYTHON = "/opt/slurm-colo/venv/bin/python3"
REVIEW_DIR = "/root/slurm-colo-review"


def example_cfg():
    return parse_config(EXAMPLE_TOML, "/etc/slurm-colo/config.toml")


def _golden(name: str, text: str) -> None:
    p = GOLDEN / name
    if UPDATE:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    assert p.exists(), f"golden file {p} missing: run with SLURM_COLO_UPDATE_GOLDEN=1"
    assert text == p.read_text(), (
        f"{name} differs from {p}; if the change is intended, regenerate with "
        "SLURM_COLO_UPDATE_GOLDEN=1 pytest tests/unit/test_admin_install.py and review the diff"
    )


def _snippets(shims=None):
    cfg = example_cfg()
    return inst.snippets(
        cfg, inst.Layout(), python=PYTHON, lua_text=render_job_submit_lua(cfg), shims=shims
    )


@pytest.mark.parametrize(
    "name", ["slurm.conf.snippet", "gres.conf.snippet", "plugstack-slurm-colo.conf", "hooks.env"]
)
def test_snippet_matches_golden(name):
    by_name = {s.name: s for s in _snippets()}
    _golden(name, by_name[name].text)


def test_steps_match_golden():
    _golden("INSTALL.txt", inst.steps_text(inst.Layout(), REVIEW_DIR))


def test_job_submit_lua_is_the_rendered_hook():
    cfg = example_cfg()
    lua = {s.name: s for s in _snippets()}["job_submit.lua"]
    assert lua.text == render_job_submit_lua(cfg)
    assert lua.target == "/etc/slurm/job_submit.lua"
    assert 'fallback = "shard"' in lua.text


def test_slurm_conf_has_every_setting_the_suite_needs():
    text = {s.name: s for s in _snippets()}["slurm.conf.snippet"].text
    settings = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    for want in (
        "JobSubmitPlugins=lua",
        "GresTypes=gpu,shard",
        "SelectType=select/cons_tres",
        "Prolog=/etc/slurm/prolog.d/*",
        "Epilog=/etc/slurm/epilog.d/*",
        "TaskProlog=/usr/local/libexec/slurm-colo/slurm-colo-taskprolog",
        "PrologEpilogTimeout=120",
    ):
        assert want in settings
    # one NodeName Gres= line per node set, from the gres layout
    assert "# NodeName=gpu[01-02] ... Gres=gpu:v100_s0:1,gpu:v100_s1:1,gpu:v100:2,shard:8" in text
    assert "# NodeName=dgx[1-2] ... Gres=gpu:a100:6,gpu:a100_s6:1,gpu:a100_s7:1,shard:16" in text


def test_plugstack_line_is_optional():
    text = {s.name: s for s in _snippets()}["plugstack-slurm-colo.conf"].text
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert lines == ["optional /usr/local/lib/slurm-colo/colocate.so"]


def test_hooks_env_names_interpreter_and_config():
    cfg = parse_config("", "/srv/colo/site.toml")
    env = inst.hooks_env_text(cfg, "/usr/bin/python3.11", inst.config_file_of(cfg))
    values = dict(ln.split("=", 1) for ln in env.splitlines() if not ln.startswith("#"))
    assert values == {
        "SLURM_COLO_PYTHON": "/usr/bin/python3.11",
        "SLURM_COLO_CONFIG": "/srv/colo/site.toml",
    }


def test_config_file_of_defaults_and_missing_file():
    assert inst.config_file_of(parse_config("", "<string>")) == "/etc/slurm-colo/config.toml"
    from slurm_colo.config import Config

    assert inst.config_file_of(Config(source="/x/c.toml (missing: defaults)")) == "/x/c.toml"


def test_gres_conf_without_gpus_says_what_to_do():
    text = inst.gres_conf_text(parse_config("", "site.toml"), inst.Layout())
    assert "no [[gpus]] table in site.toml" in text
    assert all(ln.startswith("#") for ln in text.splitlines())


def test_print_output_has_each_snippet_and_the_steps():
    items = _snippets(shims={"slurm-colo-prolog": "#!/bin/sh\nexit 0\n"})
    out = inst.render_print(items, inst.steps_text(inst.Layout(), "DIR"))
    for s in items:
        if s.executable:
            assert s.text not in out  # scripts are written with --write only
        else:
            assert f"==> {s.name}: " in out and s.text in out
    assert out.rstrip().endswith("slurm-colo doctor")


def test_write_snippets_one_file_each_with_modes(tmp_path):
    shims = {"slurm-colo-prolog": "#!/bin/sh\nexec true\n", "slurm-colo-taskprolog": "#!/bin/sh\n"}
    items = _snippets(shims=shims)
    written = inst.write_snippets(items, tmp_path / "review", "steps\n")
    names = sorted(p.name for p in written)
    assert names == sorted([s.name for s in items] + ["INSTALL.txt"])
    for s in items:
        p = tmp_path / "review" / s.name
        assert p.read_text() == s.text
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o755 if s.executable else 0o644)
    assert [s.target for s in items if s.name == "slurm-colo-prolog"] == [
        "/etc/slurm/prolog.d/50-slurm-colo"
    ]


def test_write_snippets_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    """Before: ``install --write DIR`` (and ``man --out DIR``) run as root in a directory
    another user can write wrote each file through a symlink planted under its name, and
    chmod-ed the link's target 755."""
    from slurm_colo.admin.man import write_all

    victim = tmp_path / "victim"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    review = tmp_path / "review"
    review.mkdir()
    for name in ("INSTALL.txt", "slurm-colo-prolog", "slurm-colo.1"):
        (review / name).symlink_to(victim)
    shims = {"slurm-colo-prolog": "#!/bin/sh\nexec true\n"}
    inst.write_snippets(_snippets(shims=shims), review, "steps\n")
    write_all(app, review)
    assert victim.read_text() == "secret\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    for name in ("INSTALL.txt", "slurm-colo-prolog", "slurm-colo.1"):
        assert not (review / name).is_symlink() and (review / name).read_text() != "secret\n"
    assert stat.S_IMODE((review / "slurm-colo-prolog").stat().st_mode) == 0o755


def test_cli_install_write(tmp_path, monkeypatch):
    conf = tmp_path / "config.toml"
    conf.write_text(EXAMPLE_TOML)
    monkeypatch.setenv("SLURM_COLO_CONFIG", str(conf))
    out = tmp_path / "review"
    r = CliRunner().invoke(app, ["install", "--write", str(out)])
    assert r.exit_code == 0, r.output
    cfg = parse_config(EXAMPLE_TOML, str(conf))
    assert (out / "job_submit.lua").read_text() == render_job_submit_lua(cfg)
    env = (out / "hooks.env").read_text()
    assert f"SLURM_COLO_CONFIG={conf}" in env
    assert "SLURM_COLO_PYTHON=" in env
    assert (out / "INSTALL.txt").read_text() in r.output
    assert (
        "NodeName=dgx[1-2] Name=gpu Type=a100_s6 File=/dev/nvidia6"
        in (out / "gres.conf.snippet").read_text()
    )


def test_cli_install_prints_without_writing(tmp_path, monkeypatch):
    conf = tmp_path / "config.toml"
    conf.write_text(EXAMPLE_TOML)
    monkeypatch.setenv("SLURM_COLO_CONFIG", str(conf))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["install"])
    assert r.exit_code == 0, r.output
    assert "JobSubmitPlugins=lua" in r.output
    assert "function slurm_job_submit" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]
