"""The terminal help is rendered with rich markup, where ``[word]`` is a style tag and
vanishes: a config section named in a help text (``[scores] path``) must be written
``\\[scores]`` to show. Rich markup also keeps a help paragraph's line breaks, so each
paragraph of a command's help is one line of its docstring."""

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


def test_each_paragraph_of_a_commands_help_is_one_line() -> None:
    """Before, six commands' summaries broke mid-sentence in their group's list (``node
    --help``: "reset the" / "restart-loop guard, ...")."""
    import inspect

    broken = []
    for path, cmd in _commands(typer.main.get_command(app)):
        paragraphs = inspect.cleandoc(cmd.help or "").split("\n\n")
        broken += [f"{' '.join(path)}: {p[:40]!r}" for p in paragraphs if "\n" in p.strip()]
    assert broken == []
    out = CliRunner().invoke(app, ["node", "--help"], env={"COLUMNS": "200"}).output
    line = next(x for x in out.splitlines() if "cleanup" in x)
    assert "Stop idle MPS daemons and stale MPS processes; spool finished jobs' records." in line
