"""Config reference: every key documented, the example config current and valid."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from slurm_colo import config as cfgmod
from slurm_colo.admin import config_doc

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "contrib" / "examples" / "config.toml"


def test_every_config_field_has_help_and_no_stale_help():
    assert config_doc.missing_help() == []
    for name, cls in cfgmod._SECTIONS.items():
        for f in fields(cls):
            assert config_doc.HELP[f"{name}.{f.name}"].strip()


def test_every_section_has_help():
    for name in [*cfgmod._SECTIONS, "gpus"]:
        assert config_doc.SECTION_HELP[name].strip()


def test_example_config_is_current():
    assert EXAMPLE.read_text() == config_doc.render_example_config(), (
        "contrib/examples/config.toml is out of date: run "
        "`python -m slurm_colo.admin.config_doc > contrib/examples/config.toml`"
    )


def test_example_config_parses_to_the_defaults():
    cfg = cfgmod.parse_config(config_doc.render_example_config(), "example")
    default = cfgmod.Config()
    for name in cfgmod._SECTIONS:
        assert getattr(cfg, name) == getattr(default, name)
    assert len(cfg.gpus) == 1
    ng = cfg.gpus[0]
    assert ng.nodes == config_doc.EXAMPLE_GPUS["nodes"]
    assert ng.shared == (2, 3)


def test_example_config_mentions_every_key():
    text = config_doc.render_example_config()
    for k in config_doc.iter_keys():
        assert f"\n{k.key} = " in text, k
