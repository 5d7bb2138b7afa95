"""The terminal help is rendered with rich markup, where ``[word]`` is a style tag and
vanishes: a config section named in a help text (``[scores] path``) must be written
``\\[scores]`` to show."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer.main
from typer.testing import CliRunner

from slurm_colo.cli import app

#: what rich reads as a tag: "[" then a letter, "/", "#" or "@", up to the next "]"
TAG = re.compile(r"(?<!\\)\[[a-z/#@][^\[\]]*\]")


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_no_help_text_has_a_word_rich_would_take_for_a_tag() -> None:
    lost = []
    seen = 0
    for path, cmd in _commands(typer.main.get_command(app)):
        texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]
        lost += [f"{' '.join(path)}: {m.group()}" for t in texts for m in TAG.finditer(t)]
        seen += 1
    assert seen > 25 and lost == []


def test_a_config_section_shows_in_the_help() -> None:
    out = CliRunner().invoke(app, ["retrain", "--help"], env={"COLUMNS": "200"}).output
    assert "instead of [scores] path" in out
    out = CliRunner().invoke(app, ["scores", "load", "--help"], env={"COLUMNS": "200"}).output
    assert "that model in [[gpus]] are judged" in out
