"""Option values, class derivation, config validation, and the C plugin's copy of the rules."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from slurm_colo.config import load_config, parse_config
from slurm_colo.contracts.options import (
    DEFAULT_CLASS,
    MODES,
    derive_class,
    parse_mode,
    validate_class,
)
from slurm_colo.errors import ConfigError, OptionError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "raw,mode",
    [
        (None, "auto"),
        ("", "auto"),
        ("(null)", "auto"),
        ("AUTO", "auto"),
        ("aggressive", "aggressive"),
        ("off", "off"),
    ],
)
def test_parse_mode(raw: str | None, mode: str) -> None:
    assert parse_mode(raw) == mode


def test_unknown_mode_names_accepted_values() -> None:
    with pytest.raises(OptionError, match="accepted values are auto, aggressive, off"):
        parse_mode("sometimes")


@pytest.mark.parametrize("name", ["resnet50-bs64", "a", "A3C", "lm.bs_20+x", "x" * 64])
def test_valid_classes(name: str) -> None:
    assert validate_class(name) == name


@pytest.mark.parametrize("name", ["", "-x", ".x", "has space", "x" * 65, "semi;colon", "ü"])
def test_invalid_classes(name: str) -> None:
    with pytest.raises(OptionError, match="invalid --colocate-class"):
        validate_class(name)


@pytest.mark.parametrize(
    "job_name,cls",
    [
        ("wrap", DEFAULT_CLASS),
        (None, DEFAULT_CLASS),
        ("train.sh", "train"),
        ("ResNet50 ImageNet", "resnet50-imagenet"),
        ("bash", DEFAULT_CLASS),
        ("--weird--", "weird"),
        ("!!!", DEFAULT_CLASS),
    ],
)
def test_derive_class_from_job_name(job_name: str | None, cls: str) -> None:
    assert derive_class(job_name) == cls


@pytest.mark.parametrize(
    "job_name,cls",
    [
        ("run-00042", "run"),
        ("train_2026-11-25", "train"),
        ("Train 2026-11-25 12:30", "train"),
        ("run_2026.11.25", "run"),
        ("sweep.7", "sweep"),
        ("run-00042.sh", "run"),
        ("exp1-00042", "exp1"),
        ("resnet50", "resnet50"),  # a name's own digits stay
        ("resnet-50", "resnet"),  # after a separator they are a number
        ("bert_lr0.001", "bert_lr0.001"),  # a decimal number is not cut at its point
        ("bert_lr0.001-3", "bert_lr0.001"),
        ("v1.2.3", "v1.2.3"),
        ("job_42", DEFAULT_CLASS),  # what is left is a generic name
        ("42", "42"),
        ("x" * 70 + "-12", "x" * 64),  # cut to 64 characters either way
    ],
)
def test_numbers_at_a_names_end_are_cut_when_asked(job_name: str, cls: str) -> None:
    from slurm_colo.contracts.enums import ClassNumbers

    assert derive_class(job_name, numbers=ClassNumbers.STRIP) == cls
    # names with nothing cut are the same class either way
    same = ("resnet50", "bert_lr0.001", "v1.2.3", "42", "x" * 70 + "-12")
    assert (derive_class(job_name) == cls) == (job_name in same)
    # an explicit class is never cut
    assert derive_class(job_name, "run-00042", ClassNumbers.STRIP) == "run-00042"


def test_class_name_numbers_is_a_placement_setting() -> None:
    assert (
        parse_config('[placement]\nclass_name_numbers = "strip"').placement.class_name_numbers
        == "strip"
    )
    assert parse_config("").placement.class_name_numbers == "keep"
    with pytest.raises(ConfigError, match="class_name_numbers = 'trim'; accepted: keep, strip"):
        parse_config('[placement]\nclass_name_numbers = "trim"')


def test_explicit_class_wins_and_is_validated() -> None:
    assert derive_class("train.sh", "bert-bs32") == "bert-bs32"
    with pytest.raises(OptionError):
        derive_class("train.sh", "bad class")


def test_c_plugin_uses_the_same_modes_and_class_rule() -> None:
    src = (REPO / "spank" / "colocate.c").read_text()
    c_modes = re.search(r"MODES\[\] = \{([^}]*)\}", src).group(1)  # type: ignore[union-attr]
    assert tuple(re.findall(r'"([a-z]+)"', c_modes)) == MODES
    assert f'#define MODES_TEXT "{", ".join(MODES)}"' in src
    assert "#define CLASS_MAX 64" in src and "'.' || c == '_' || c == '+' || c == '-'" in src


def test_empty_config_is_all_defaults() -> None:
    cfg = parse_config("")
    assert (
        cfg.placement.fallback == "exclusive"
        and cfg.agent.request_timeout_ms == 150
        and cfg.gpus == ()
    )


def test_full_config() -> None:
    cfg = parse_config("""
[agent]
socket = "/tmp/x.sock"
refresh_interval_s = 3
[placement]
fallback = "shard"
cross_user = "shard"
[[gpus]]
nodes = "gpu[01-02]"
count = 8
model = "a100"
memory_gib = 80
shared = "0-3,6-7"
""")
    assert cfg.agent.refresh_interval_s == 3.0
    ng = cfg.layout_for("gpu02")
    assert ng is not None and ng.shared == (0, 1, 2, 3, 6, 7) and ng.gres_type(6) == "a100_s6"
    assert cfg.layout_for("gpu03") is None


@pytest.mark.parametrize(
    "text,msg",
    [
        ("[agent]\nsockt = 'x'", "unknown key agent.sockt"),
        ("[placement]\nfallback = 'maybe'", "accepted: exclusive, shard"),
        ("[agent]\nrequest_timeout_ms = 'fast'", "must be a int"),
        ("[agent]\nrequest_timeout_ms = -5", "must not be negative"),
        ("[agent]\nrequest_timeout_ms = true", "must be a int, got True"),
        ("[placement]\nmin_delta = false", "must be a float, got False"),
        ("[frobnicate]\nx = 1", "unknown section [frobnicate]"),
        ("[[gpus]]\nnodes = 'n1'", "lacks required key 'count'"),
        ("[[gpus]]\nnodes = 'n1'\ncount = 4\nshared = '0-9'", "outside 0-3"),
        (
            "[[gpus]]\nnodes = 'n1'\ncount = 4\nshared = '1'",
            "gpus[0]: shared pool 1 of 4 GPUs splits",
        ),
        ("[[gpus]]\nnodes = 'n1'\ncount = 4\nmodel = 'A 100'", "model"),
        ("not toml [", "not valid TOML"),
        ("a = " + "[" * 5000 + "]" * 5000, "not valid TOML: arrays or tables nested too deeply"),
        ('[agent]\ncluster = "a\\nb"', "agent.cluster 'a\\nb' must be the cluster's name"),
        ('[agent]\ncluster = ""', "agent.cluster '' must be the cluster's name"),
        ("[placement]\nmin_delta = nan", "placement.min_delta must be a finite number"),
        ("[store]\nbusy_timeout_s = inf", "store.busy_timeout_s must be a finite number"),
        ("[placement]\nmax_slowdown = 0.0", "placement.max_slowdown must be at least 1"),
        (
            "[placement]\nthroughput_max_slowdown = 0.5",
            "placement.throughput_max_slowdown must be at least 1",
        ),
        ("[[gpus]]\nnodes = 'n1'\ncount = 99999999999999999999", "count must be within 1-1024"),
        ("[[gpus]]\nnodes = 'n1'\ncount = 1e400", "gpus[0]: cannot convert float infinity"),
        ("[[gpus]]\nnodes = 'n1'\ncount = 2\nmemory_gib = nan", "memory_gib must be a positive"),
        ("[[gpus]]\nnodes = 'n[0-9999999999]'\ncount = 2", "names more than 100000 nodes"),
    ],
)
def test_config_errors_name_the_problem(text: str, msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(text, "site.toml")
    assert msg in str(e.value) and "site.toml" in str(e.value)


@pytest.mark.parametrize(
    "text,msg",
    [
        ("[placement]\nmemory_headroom = 1.0", "placement.memory_headroom must be below 1"),
        (
            "[placement]\ndefault_memory_share = 2.5",
            "placement.default_memory_share must be at most 1",
        ),
        ("[placement]\nexplore_rate = 10", "placement.explore_rate must be at most 1"),
        ("[scores]\nholdout_share = 1", "scores.holdout_share must be below 1"),
        ("[agent]\nrefresh_interval_s = 0", "agent.refresh_interval_s must be at least 1"),
        ("[agent]\nrefresh_interval_s = 0.01", "agent.refresh_interval_s must be at least 1"),
        ("[agent]\nrequest_timeout_ms = 0", "agent.request_timeout_ms must be greater than 0"),
        ("[agent]\npending_ttl_s = 0", "agent.pending_ttl_s must be greater than 0"),
        ("[node]\nsampler_interval_s = 0", "node.sampler_interval_s must be greater than 0"),
        ("[node]\nmps_timeout_s = 0", "node.mps_timeout_s must be greater than 0"),
        ("[scores]\nwindow_days = 0", "scores.window_days must be greater than 0"),
        ('[node]\nrun_dir = ""', "node.run_dir must be an absolute path, got ''"),
        ('[node]\nspool_dir = "spool"', "node.spool_dir must be an absolute path, got 'spool'"),
        ('[scores]\npath = "live.json"', "scores.path must be an absolute path"),
        ('[agent]\nsocket = "agent.sock"', "agent.socket must be an absolute path"),
        ('[node]\nrun_dir = "/run/a\\u0000b"', "node.run_dir must not hold a NUL character"),
        ('[store]\nurl = ""', "store.url must not be empty"),
        (
            '[store]\nurl = "sqlite:///history.db"',
            "store.url names a SQLite file by a relative path",
        ),
        ('[node]\nmps_control = ""', "node.mps_control must not be empty"),
    ],
)
def test_a_setting_that_would_quietly_stop_sharing_or_misplace_files_is_refused(
    text: str, msg: str
) -> None:
    """Expected: each was accepted before. A memory headroom or an assumed memory share
    of a whole GPU and more, or an exploration rate above 1, left no shared GPU with room
    or made every job explore; a refresh interval of 0 had the agent ask slurmctld without
    pause; a run or spool directory given relative (or empty) put the node's files under
    whatever directory slurmd runs the hook in; a NUL in a path raised in every hook."""
    with pytest.raises(ConfigError) as e:
        parse_config(text, "site.toml")
    assert msg in str(e.value) and "site.toml" in str(e.value), str(e.value)


def test_the_edges_of_the_new_bounds_are_accepted() -> None:
    cfg = parse_config(
        "[placement]\nmemory_headroom = 0.0\ndefault_memory_share = 1.0\nexplore_rate = 1.0\n"
        "probe_s = 0\n[agent]\nrefresh_interval_s = 1\nretry_after_s = 0\n"
        '[node]\nrun_dir = "/r"\nnvml_scenario = ""\n[scores]\nholdout_share = 0.0\n',
        "site.toml",
    )
    assert cfg.placement.explore_rate == 1.0 and cfg.agent.refresh_interval_s == 1.0
    assert cfg.node.run_dir == "/r" and cfg.placement.probe_s == 0.0


def test_missing_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the default file (here through the environment) may be missing: the defaults
    monkeypatch.setenv("SLURM_COLO_CONFIG", str(tmp_path / "none.toml"))
    cfg = load_config()
    assert cfg.placement.fallback == "exclusive" and "missing: defaults" in cfg.source
    # a file named (--config) that is not there is a mistake, not the defaults
    with pytest.raises(ConfigError, match="none.toml not found.*--config"):
        load_config(tmp_path / "none.toml")
    assert load_config(tmp_path / "none.toml", missing_ok=True).placement.fallback == "exclusive"
    with pytest.raises(ConfigError, match="not found"):
        load_config(missing_ok=False)
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00[placement]")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(tmp_path / "bin.toml")
    os.mkfifo(tmp_path / "fifo.toml")  # reading it would wait for a writer for ever
    with pytest.raises(ConfigError, match="fifo.toml is not a regular file"):
        load_config(tmp_path / "fifo.toml")


def test_a_config_saved_with_a_byte_order_mark_reads_as_without(tmp_path: Path) -> None:
    """Editors on other systems save UTF-8 with a byte-order mark; before, such a config
    was `not valid TOML: Invalid statement (at line 1, column 1)`."""
    text = "[placement]\nexplore_rate = 0.25\n"
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + text.encode())
    cfg = load_config(tmp_path / "bom.toml")
    assert cfg.placement.explore_rate == 0.25 == parse_config(text, "x").placement.explore_rate


def test_a_mistyped_config_path_on_the_command_line_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli_run import run_cli

    for argv in (["status"], ["install"], ["retrain", "--dry-run"]):
        code, out, err = run_cli([*argv, "-c", str(tmp_path / "typo.toml")], capsys)
        assert code == 2 and f"config file {tmp_path / 'typo.toml'} not found" in err, argv
        assert out == ""
