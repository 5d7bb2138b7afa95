"""Man pages: the committed docs/man/ pages are what the app renders now; each page is
well-formed roff; sections and the config page cover everything."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.main import get_command

from slurm_colo.admin import config_doc, man
from slurm_colo.cli import app

REPO = Path(__file__).resolve().parents[2]
MAN_DIR = REPO / "docs" / "man"


def test_committed_pages_are_current():
    pages = man.render_all(app)
    committed = {p.name: p.read_text() for p in MAN_DIR.glob("slurm-colo*.[158]")}
    fix = "regenerate them: slurm-colo man --out docs/man"
    assert sorted(committed) == sorted(pages), f"docs/man/ has other pages than the app: {fix}"
    for name, text in pages.items():
        assert committed[name] == text, f"docs/man/{name} is out of date: {fix}"


def test_rendering_is_deterministic():
    assert man.render_all(app) == man.render_all(app)


def test_one_page_per_command_in_the_right_section():
    pages = man.render_all(app)
    root = get_command(app)
    for name in root.commands:
        sec = 8 if name in man.ADMIN_COMMANDS else 1
        assert f"slurm-colo-{name}.{sec}" in pages
    assert "slurm-colo-install.8" in pages and "slurm-colo-doctor.8" in pages
    assert "slurm-colo-explain.1" in pages and "slurm-colo-status.1" in pages
    overview = pages["slurm-colo.1"]
    for name in root.commands:
        assert f".B {man.esc(name)}\n" in overview


def test_pages_are_well_formed_roff():
    for name, text in man.render_all(app).items():
        lines = text.splitlines()
        title, sec = name.rsplit(".", 1)
        assert lines[0].startswith(f'.TH "{title.upper()}" "{sec}"'), name
        assert ".SH NAME" in lines and ".SH SYNOPSIS" in lines and ".SH DESCRIPTION" in lines
        for ln in lines:
            # text lines must not start with a control character by accident
            if ln.startswith(".") or ln.startswith("'"):
                assert ln.split()[0] in (
                    ".TH",
                    ".SH",
                    ".SS",
                    ".TP",
                    ".B",
                    ".PP",
                    ".br",
                    ".nf",
                    ".fi",
                ), f"{name}: {ln!r}"


def test_subcommands_and_options_appear():
    page = man.render_all(app)["slurm-colo-install.8"]
    assert '.SS "install spank"' in page
    assert "\\-\\-prefix DIR" in page and "\\-\\-write DIR" in page


def test_config_page_documents_every_key():
    page = man.config_page()
    for k in config_doc.iter_keys():
        assert f"\\fB{man.esc(k.key)}\\fR" in page, k
    assert '.SH "[[gpus]]"' in page and '.SH "[placement]"' in page
    assert "Accepted: exclusive, shard." in page


def test_escape():
    assert man.esc("-x") == "\\-x"
    assert man.esc(".hidden") == "\\&.hidden"
    assert man.esc("a\\b") == "a\\eb"


def test_write_all_tree_and_stale_pages(tmp_path):
    (tmp_path / "man1").mkdir()
    (tmp_path / "man1" / "slurm-colo-gone.1").write_text("old")
    written = man.write_all(app, tmp_path, man_tree=True)
    assert not (tmp_path / "man1" / "slurm-colo-gone.1").exists()
    assert (tmp_path / "man5" / "slurm-colo-config.5") in written
    assert (tmp_path / "man8" / "slurm-colo-doctor.8").read_text() == man.render_all(app)[
        "slurm-colo-doctor.8"
    ]


def test_an_output_path_that_cannot_be_a_directory_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli_run import run_cli

    f = tmp_path / "a-file"
    f.write_text("mine")
    for argv in (["man", "--out", str(f)], ["install", "--write", str(f)]):
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and err.strip() == f"slurm-colo: error: {f}: File exists", argv
        assert "Traceback" not in err
    assert f.read_text() == "mine"
