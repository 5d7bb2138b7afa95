"""`slurm-colo install spank`: version detection, prerequisites and the build commands."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_colo.admin import spank_build as sb
from slurm_colo.admin.run import NOT_FOUND, Result

REPO = Path(__file__).resolve().parents[2]
HEADER_22_05 = "#ifndef _SLURM_VERSION_H_\n#define SLURM_VERSION_NUMBER 0x160508\n#endif\n"


def include_dir(tmp_path: Path, header: str | None = HEADER_22_05, spank_h: bool = True) -> Path:
    d = tmp_path / "include"
    (d / "slurm").mkdir(parents=True)
    if spank_h:
        (d / "slurm" / "spank.h").write_text("/* spank */\n")
    if header is not None:
        (d / "slurm" / "slurm_version.h").write_text(header)
    return d


class Recorder:
    def __init__(self, answers: dict[str, Result] | None = None, fail_make: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.answers = answers or {}
        self.fail_make = fail_make

    def __call__(self, argv: Sequence[str]) -> Result:
        self.calls.append(list(argv))
        if argv[0] == "make":
            if self.fail_make:
                return Result(tuple(argv), 2, "", "cc: error one\ncolocate.c:1: error: boom\n")
            return Result(tuple(argv), 0, "", "")
        return self.answers.get(argv[0], Result(tuple(argv), NOT_FOUND))


def test_parse_versions():
    assert sb.parse_version_header(HEADER_22_05) == (22, 5, 8)
    assert sb.parse_version_header("#define SLURM_VERSION_NUMBER 1509633\n") == (23, 9, 1)
    assert sb.parse_version_header("nothing here") is None
    assert sb.parse_version_output("slurm-wlm 22.05.8\n") == (22, 5, 8)
    assert sb.parse_version_output("slurm 24.11.1") == (24, 11, 1)
    assert sb.parse_version_output("sinfo: error: no config") is None


@pytest.mark.parametrize(
    "version,ok",
    [
        ((21, 8, 8), False),
        ((22, 5, 0), True),
        ((23, 2, 7), True),
        ((24, 11, 3), True),
        ((26, 5, 5), True),
        ((27, 5, 0), False),
    ],
)
def test_supported_range(version, ok):
    assert sb.is_supported(version) is ok


def test_missing_spank_header_says_install_libslurm_dev(tmp_path):
    inc = include_dir(tmp_path, spank_h=False)
    with pytest.raises(sb.InstallError) as e:
        sb.check_build_prerequisites(inc, Recorder())
    assert "spank.h not found" in str(e.value) and "libslurm-dev" in str(e.value)


def test_unsupported_version_is_refused(tmp_path):
    inc = include_dir(tmp_path, header="#define SLURM_VERSION_NUMBER 0x150808\n")
    with pytest.raises(sb.InstallError) as e:
        sb.check_build_prerequisites(inc, Recorder())
    assert "Slurm 21.08.8" in str(e.value) and "22.05 to 26.x" in str(e.value)


def test_version_from_commands_when_header_lacks_it(tmp_path):
    inc = include_dir(tmp_path, header=None)
    rec = Recorder({"sinfo": Result(("sinfo", "-V"), 0, "slurm 23.02.6\n")})
    v, where = sb.detect_slurm_version(inc, rec)
    assert v == (23, 2, 6) and where == "sinfo -V"
    assert rec.calls == [["slurmctld", "-V"], ["sinfo", "-V"]]
    with pytest.raises(sb.InstallError):
        sb.detect_slurm_version(inc, Recorder())


def _src(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "colocate.c").write_text("int x;\n")
    (src / "Makefile").write_text("all:\n")
    (src / "colocate.so").write_bytes(b"stale build output")
    return src


def test_build_copies_source_and_runs_make_with_argv(tmp_path):
    inc, src, build = include_dir(tmp_path), _src(tmp_path), tmp_path / "build"
    rec = Recorder()
    out = sb.build_spank(src, build, inc, rec, prefix=tmp_path / "prefix")
    assert out == tmp_path / "prefix" / "colocate.so"
    assert sorted(p.name for p in build.iterdir()) == ["Makefile", "colocate.c"]
    assert rec.calls == [
        ["make", "-C", str(build), f"SLURM_INCLUDE={inc}"],
        [
            "make",
            "-C",
            str(build),
            "install",
            f"SLURM_INCLUDE={inc}",
            f"PREFIX={tmp_path / 'prefix'}",
        ],
    ]
    rec2 = Recorder()
    assert sb.build_spank(src, tmp_path / "b2", inc, rec2) == tmp_path / "b2" / "colocate.so"
    assert len(rec2.calls) == 1


def test_build_failure_shows_compiler_output(tmp_path):
    with pytest.raises(sb.InstallError) as e:
        sb.build_spank(
            _src(tmp_path), tmp_path / "b", include_dir(tmp_path), Recorder(fail_make=True)
        )
    assert "make failed (exit 2)" in str(e.value) and "boom" in str(e.value)


def test_build_refuses_incomplete_source(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(sb.InstallError) as e:
        sb.build_spank(empty, tmp_path / "b", include_dir(tmp_path), Recorder())
    assert "incomplete" in str(e.value)


def test_cli_install_spank_without_headers_fails_clearly(tmp_path):
    from typer.testing import CliRunner

    from slurm_colo.cli import app

    r = CliRunner().invoke(
        app,
        [
            "install",
            "spank",
            "--slurm-include",
            str(tmp_path),
            "--prefix",
            str(tmp_path / "prefix"),
        ],
    )
    assert isinstance(r.exception, sb.InstallError)
    assert "libslurm-dev" in str(r.exception)
    assert not (tmp_path / "prefix").exists()
