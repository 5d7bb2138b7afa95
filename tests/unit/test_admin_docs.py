"""The docs: every `slurm-colo ...` command in a code block exists, with its options, and
the mkdocs site builds in strict mode."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.main import get_command

from slurm_colo.cli import app

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
FENCE_RE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: a slurm-colo command at the start of a line, after a "$ " prompt, "sudo " or "runuser ... -- "
INLINE_RE = re.compile(r"`(slurm-colo [^`]+)`")
CMD_RE = re.compile(r"^(?:\$ )?(?:sudo |runuser .*? -- )?(slurm-colo .*)$")


def doc_commands() -> list[tuple[str, str]]:
    """(page, command) for each line of a fenced code block that runs slurm-colo, and each
    inline code span in the text that starts with ``slurm-colo``."""
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(REPO).as_posix()
        for block in FENCE_RE.findall(text):
            for line in block.splitlines():
                m = CMD_RE.search(line.strip())
                if m:
                    out.append((name, m.group(1)))
        for span in INLINE_RE.findall(FENCE_RE.sub("", text)):
            out.append((name, span))
    return sorted(set(out))


def check_command(line: str) -> str | None:
    """None if ``line`` names an existing command path with existing options, else why not."""
    words = shlex.split(line, comments=True)[1:]
    cmd = get_command(app)
    path = ["slurm-colo"]
    skip = False
    for w in words:
        if skip:  # the value of the option before
            skip = False
            continue
        if w in ("|", ">", "&&", ";"):
            break
        subs = getattr(cmd, "commands", {})
        if w.startswith("-"):
            name = w.split("=", 1)[0]
            opts = {
                o: p
                for p in cmd.params
                for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))
            }
            if name not in opts:
                return f"{' '.join(path)} has no option {name}"
            takes_value = not getattr(opts[name], "is_flag", False) and not getattr(
                opts[name], "count", False
            )
            skip = takes_value and "=" not in w
        elif w in subs:
            cmd = subs[w]
            path.append(w)
        elif subs and not any(getattr(p, "param_type_name", "") == "argument" for p in cmd.params):
            return f"{' '.join(path)} has no command {w!r} (has: {', '.join(sorted(subs))})"
    return None


def test_docs_show_commands():
    pages = {page for page, _ in doc_commands()}
    assert {"docs/admin-guide.md", "docs/user-guide.md", "docs/index.md"} <= pages


@pytest.mark.parametrize("page,line", doc_commands())
def test_every_documented_command_exists(page, line):
    problem = check_command(line)
    assert problem is None, f"{page}: `{line}`: {problem}"


def test_command_lines_are_found_behind_prompts():
    for line, cmd in [
        ("$ slurm-colo doctor", "slurm-colo doctor"),
        ("runuser -u slurm-colo -- slurm-colo db upgrade", "slurm-colo db upgrade"),
        ("sudo slurm-colo install", "slurm-colo install"),
    ]:
        m = CMD_RE.search(line)
        assert m and m.group(1) == cmd
    assert CMD_RE.search("cp contrib/systemd/slurm-colo-agent.service /etc") is None


def test_checker_catches_unknown_commands_and_options():
    assert check_command("slurm-colo doctor") is None
    assert check_command("slurm-colo install spank --prefix /x") is None
    assert check_command("slurm-colo install --write /tmp/r") is None
    assert check_command("slurm-colo explain --json 42") is None
    assert "no command 'frobnicate'" in check_command("slurm-colo frobnicate")
    assert "no option --nope" in check_command("slurm-colo doctor --nope")
    assert "no option --nope" in check_command("slurm-colo install spank --nope=1")


def test_nav_lists_every_page_and_only_pages():
    conf = yaml.safe_load((REPO / "mkdocs.yml").read_text())

    def files(nav):
        for item in nav:
            for v in item.values():
                yield from (files(v) if isinstance(v, list) else [v])

    nav = set(files(conf["nav"]))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages <= nav, f"pages missing from the mkdocs nav: {sorted(pages - nav)}"
    assert nav <= pages, f"nav entries without a page: {sorted(nav - pages)}"


def test_mkdocs_builds_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    assert mkdocs, "mkdocs not installed (pip install -e '.[test]')"
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    r = subprocess.run(
        [
            mkdocs,
            "build",
            "--strict",
            "-f",
            str(tmp_path / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # never -q: mkdocs then drops the warnings that --strict counts
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING" not in r.stderr
    assert (tmp_path / "site" / "admin-guide" / "index.html").is_file()
