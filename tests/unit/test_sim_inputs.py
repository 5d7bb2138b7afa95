"""``slurm-colo simulate --gavel FILE --gpu NAME --scores FILE --gpu-memory-gib``: another
measured file and GPU type, a site's score set instead of the fitted model, and every bad
input refused with a message that names it."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cli_run import run_cli
from typer.testing import CliRunner

from slurm_colo.cli import app
from slurm_colo.errors import ScoresError
from slurm_colo.gavel import load_gavel, parse_gavel
from slurm_colo.scores import load_scores
from slurm_colo.sim.run import missing_classes, unscored_pairs
from slurm_colo.sim.trace import read_sacct

#: a made-up GPU type and job types, in Gavel's format; every pair runs at 0.8 of solo speed
TYPES = {"Alpha (batch size 32)": 10.0, "Beta (batch size 64)": 4.0, "Gamma": 2.0}
CLASSES = ["alpha-bs32", "beta-bs64", "gamma"]
SMALL = ["--jobs", "160", "--gpus", "8", "--cross-user", "shard", "--seed", "1"]


def gavel_doc(gpu: str = "a100") -> dict[str, Any]:
    table: dict[str, Any] = {}
    for a, ra in TYPES.items():
        e: dict[str, Any] = {"null": ra}
        for b, rb in TYPES.items():
            e[f"('{b}', 1)"] = [0.8 * ra, 0.8 * rb]
        table[f"('{a}', 1)"] = e
        table[f"('{a}', 2)"] = {"null": 2 * ra}  # multi-GPU entries carry no pairs
    return {gpu: table}


@pytest.fixture
def gavel(tmp_path: Path) -> Path:
    f = tmp_path / "throughputs_a100.json"
    f.write_text(json.dumps(gavel_doc()))
    return f


def score_doc(
    never: set[str] = frozenset(), classes: list[str] = CLASSES, n: float = 0.8, **extra: Any
) -> dict[str, Any]:
    """Every pair of ``classes`` at ``n``; pairs with a class of ``never`` must not share."""
    pairs = [
        {
            "a": a,
            "b": b,
            "n_a": n,
            "n_b": n,
            "sd": 0.0,
            "observed": True,
            "never": a in never or b in never,
        }
        for i, a in enumerate(classes)
        for b in classes[i:]
    ]
    return {
        "format": "slurm-colo-scores/1",
        "id": "site-set",
        "gpu_model": "a100",
        "classes": {c: {} for c in classes},
        "pairs": pairs,
        **extra,
    }


def write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


def simulate(*args: str) -> Any:
    r = CliRunner().invoke(app, ["simulate", *SMALL, *args])
    assert r.exit_code == 0, r.output
    return r


def results(out: Path) -> dict[str, dict[str, Any]]:
    return {row["policy"]: row for row in json.loads((out / "results.json").read_text())}


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The real entry point: a ColoError is printed and exits 2."""
    code, _, err = run_cli(argv, capsys)
    return code, err


# ---- another file, any GPU key ---------------------------------------------------------


def test_any_gpu_key_of_a_gavel_file_is_simulated_end_to_end(gavel: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = simulate(
        "--gavel",
        str(gavel),
        "--gpu",
        "a100",
        "--policies",
        "exclusive-fifo,slurm-shard,ours,oracle",
        "--out",
        str(out),
    )
    assert "a100 data of" in r.output and "3 classes, 6 measured pairs" in r.output
    res = results(out)
    assert set(res) == {"exclusive-fifo", "slurm-shard", "ours", "oracle"}
    assert res["ours"]["colocated_share"] > 0 and res["oracle"]["colocated_share"] > 0
    with open(out / "jobs.csv", encoding="utf-8") as f:
        assert {row["cls"] for row in csv.DictReader(f)} == set(CLASSES)
    cmd = (out / "results.md").read_text()
    assert f"--gpu a100 --gavel {gavel}" in cmd and "--scores" not in cmd


def test_the_gpu_key_of_the_bundled_file_is_not_fixed_to_v100(tmp_path: Path) -> None:
    r = simulate("--jobs", "40", "--gpu", "k80", "--policies", "exclusive-fifo,oracle")
    assert "k80 data of the bundled file: 26 classes" in r.output


def test_parse_gavel_takes_any_key_and_lists_the_keys_a_file_has() -> None:
    data = parse_gavel({**gavel_doc("a100"), **gavel_doc("h100")}, "h100")
    assert data.gpu == "h100" and data.classes == CLASSES and len(data.unordered_pairs()) == 6
    with pytest.raises(ScoresError, match=r"no GPU type 'v100'; the file has: a100, h100"):
        parse_gavel({**gavel_doc("a100"), **gavel_doc("h100")}, "v100")


# ---- a score set instead of the fitted model -------------------------------------------


def test_a_score_set_replaces_the_fitted_model(gavel: Path, tmp_path: Path) -> None:
    base = ["--gavel", str(gavel), "--gpu", "a100", "--policies", "exclusive-fifo,ours"]
    simulate(*base, "--out", str(tmp_path / "fitted"))
    fitted = results(tmp_path / "fitted")["ours"]
    assert fitted["colocated_share"] > 0
    # a set that marks every pair harmful: ours never shares, whatever the data says
    never = write(tmp_path / "never.json", score_doc(never=set(CLASSES)))
    r = simulate(*base, "--scores", str(never), "--out", str(tmp_path / "never"))
    assert f"score set site-set of {never}" in r.output
    ours = results(tmp_path / "never")["ours"]
    assert ours["colocated_share"] == 0 and ours["avg_jct_h"] != fitted["avg_jct_h"]
    assert f"--scores {never}" in (tmp_path / "never" / "results.md").read_text()


def test_a_pair_the_score_set_marks_harmful_is_never_shared(gavel: Path, tmp_path: Path) -> None:
    scores = write(tmp_path / "s.json", score_doc(never={"gamma"}))
    out = tmp_path / "out"
    simulate(
        "--gavel",
        str(gavel),
        "--gpu",
        "a100",
        "--policies",
        "ours,ours-submit",
        "--scores",
        str(scores),
        "--out",
        str(out),
    )
    with open(out / "jobs.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for policy in ("ours", "ours-submit"):
        mine = [r for r in rows if r["policy"] == policy]
        # stretch = time running / solo time: 1 exactly for a job that never shared
        assert all(float(r["stretch"]) == 1.0 for r in mine if r["cls"] == "gamma")
        assert any(float(r["stretch"]) > 1.0 for r in mine if r["cls"] != "gamma")


def test_gpu_memory_is_honoured_with_the_score_sets_class_memory(
    gavel: Path, tmp_path: Path
) -> None:
    base = ["--gavel", str(gavel), "--gpu", "a100", "--policies", "ours", "--gpu-memory-gib", "12"]
    # no memory profile: a quarter of the GPU a job (placement.default_memory_share), 3 GiB
    simulate(*base, "--out", str(tmp_path / "a"))
    assert results(tmp_path / "a")["ours"]["colocated_share"] > 0
    # the score set says 8 GiB a job: two do not fit in 12 GiB (less the headroom)
    big = score_doc()
    big["classes"] = {c: {"memory_gib": 8.0} for c in CLASSES}
    scores = write(tmp_path / "big.json", big)
    simulate(*base, "--scores", str(scores), "--out", str(tmp_path / "b"))
    assert results(tmp_path / "b")["ours"]["colocated_share"] == 0
    assert "--gpu-memory-gib 12" in (tmp_path / "b" / "results.md").read_text()


def test_classes_the_score_set_lacks_are_named_and_get_no_data(gavel: Path, tmp_path: Path) -> None:
    scores = write(tmp_path / "part.json", score_doc(classes=["alpha-bs32", "beta-bs64"]))
    table = load_scores(scores)
    assert missing_classes(table, CLASSES) == ["gamma"]
    assert unscored_pairs(table, CLASSES) == 3  # gamma with alpha, beta and itself
    r = simulate(
        "--gavel", str(gavel), "--gpu", "a100", "--policies", "ours", "--scores", str(scores)
    )
    assert "lacks 1 of the 3 classes of the a100 data: gamma" in r.output


def test_a_score_set_for_another_gpu_type_is_used_with_a_warning(
    gavel: Path, tmp_path: Path
) -> None:
    scores = write(tmp_path / "v.json", {**score_doc(), "gpu_model": "v100"})
    r = simulate(
        "--jobs",
        "40",
        "--gavel",
        str(gavel),
        "--gpu",
        "a100",
        "--policies",
        "ours",
        "--scores",
        str(scores),
    )
    assert "is for GPU type 'v100', the measured data for 'a100'" in r.output


# ---- bad input: exit code 2 and a message naming the file, never a traceback ------------


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "is not JSON"),
        (b"\xff\xfe\x00", "is not JSON (not UTF-8 text)"),
        ("[1, 2]", "top level is not an object"),
        ('{"a100": 5}', "GPU type 'a100' is not an object"),
        ('{"a100": {"bad key": {"null": 1}}}', "bad job key"),
        ('{"a100": {"(\'A\', 1)": 3}}', "expected an object of rates"),
        ('{"a100": {"(\'A\', 1)": {"null": 1, "(\'A\', 1)": "x"}}}', "expected [rate, other rate]"),
        ('{"a100": {"(\'A\', 1)": {"null": 1, "(\'A\', 1)": [1, "x"]}}}', "expected a number"),
        ('{"a100": {}}', "no single-GPU job type"),
        ('{"a100": {"(\'A\', 1)": {"null": 1%s}}}' % ("0" * 400), "expected a number"),
        ('{"a100": {"(\'A\', 1e400)": {"null": 1}}}', "bad job key"),
        ('{"a100": {"(\'A\', 1)": {"null": 1, "(\'A\', 1)": [-1, 1]}}}', "a rate below 0"),
        (
            '{"a100": {"(\'A\', 1)": {"null": 1e-300, "(\'A\', 1)": [1, 1]}}}',
            "is not a measurement",
        ),
        ('{"a100": {"(\'A\', 1)": {"null": "fast"}}}', "solo rate: expected a number"),
        ('{"a100": {"(\'A\', 1)": {"null": -2}}}', "solo rate: below 0 (-2)"),
        ('{"a100": {"(\'A\', 1)": {"null": true}}}', "solo rate: expected a number"),
    ],
)
def test_a_corrupt_gavel_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes, says: str
) -> None:
    f = tmp_path / "bad.json"
    if isinstance(content, bytes):
        f.write_bytes(content)
    else:
        f.write_text(content)
    code, err = cli(["simulate", "--jobs", "10", "--gavel", str(f), "--gpu", "a100"], capsys)
    assert code == 2 and f"gavel data file {f}" in err and says in err
    assert "Traceback" not in err


def test_a_missing_gavel_file_or_gpu_key_is_refused(
    gavel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = cli(["simulate", "--gavel", str(tmp_path / "nope.json"), "--gpu", "a100"], capsys)
    assert code == 2 and f"gavel data file {tmp_path / 'nope.json'} not found" in err
    code, err = cli(["simulate", "--gavel", str(gavel), "--gpu", "v100"], capsys)
    assert code == 2 and f"{gavel} has no GPU type 'v100'; the file has: a100" in err
    code, err = cli(["simulate", "--gpu", "h100"], capsys)  # the bundled file
    assert code == 2 and "the file has: k80, k80_unconsolidated, v100, v100_unconsolidated" in err


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        (None, "not found"),
        ("{oops", "is corrupt (not JSON"),
        (b"\x89PNG\xff", "is corrupt (not UTF-8 text)"),
        ('{"format": "other/1"}', "unknown format"),
        (json.dumps(score_doc(n=-1.0)), "outside"),
        (
            json.dumps({**score_doc(), "pairs": [{"a": "gamma"}]}),
            "pairs[0] lacks 'b', 'n_a', 'n_b'",
        ),
        (
            json.dumps(score_doc(classes=["resnet50-bs64", "lm-bs20"])),
            "has none of the 3 classes of the a100 data (alpha-bs32, beta-bs64, gamma); "
            "it has: lm-bs20, resnet50-bs64",
        ),
    ],
)
def test_a_bad_score_file_is_refused(
    gavel: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    doc: str | bytes | None,
    says: str,
) -> None:
    f = tmp_path / "scores.json"
    if isinstance(doc, bytes):
        f.write_bytes(doc)
    elif doc is not None:
        f.write_text(doc)
    code, err = cli(
        ["simulate", "--jobs", "10", "--gavel", str(gavel), "--gpu", "a100", "--scores", str(f)],
        capsys,
    )
    assert code == 2 and f"score file {f}" in err and says in err, err
    assert "Traceback" not in err


def test_a_gpu_memory_that_is_not_a_size_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = cli(["simulate", "--jobs", "10", "--gpu-memory-gib", "-1"], capsys)
    assert code == 2 and "--gpu-memory-gib -1: give a positive size in GiB" in err


@pytest.mark.parametrize(
    "args, says",
    [
        (["--load", "nan"], "--load nan: give an offered load from 0.01 to 100"),  # never ended
        (["--jobs", "100000000000"], "--jobs 100000000000: at most 1,000,000"),  # filled memory
        (["--gpus", "200000"], "--gpus 200000: at most 100,000"),
        (["--users", "1000000"], "--users 1000000: at most 100,000"),
        # a GPU of 10^20 jobs: their speeds underflowed to 0 and a division raised
        (["--slots", "99999999999999999999"], "--slots 99999999999999999999: at most 48"),
        (["--seeds", "1-99999999999"], "more than 100 seeds"),  # walked the range for hours
        (["--load", "1e-300"], "--load 1e-300: give an offered load"),
        (["--seed", "-1"], "--seed -1: give a non-negative seed"),
        (["--hidden-share", "1.5"], "--hidden-share 1.5: give a share from 0 to below 1"),
        (["--aggressive-share", "nan"], "--aggressive-share nan: give a share from 0 to 1"),
        (["--max-duration-h", "-1"], "--max-duration-h -1: give hours, 0 for no cap"),
        (["--time-limits", "1-inf"], "--time-limits '1-inf': give finite 1 <= LOW <= HIGH"),
        (["--policies", ","], "--policies names no policy; known: exclusive-fifo"),
    ],
)
def test_trace_options_out_of_range_are_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    code, err = cli(["simulate", "--jobs", "10", *args], capsys)
    assert code == 2 and says in err, err
    assert "Traceback" not in err


def test_a_sacct_export_that_is_not_a_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = cli(["simulate", "--sacct", str(tmp_path)], capsys)
    assert code == 2 and f"cannot read sacct export {tmp_path}: Is a directory" in err


@pytest.mark.timeout(60)  # before: the FIFO waited for a writer for ever
@pytest.mark.parametrize(
    ("argv", "what", "empty"),
    [
        (["simulate", "--jobs", "10", "--sacct", "F"], "sacct export", "sacct export is empty"),
        (
            ["simulate", "--jobs", "10", "--gavel", "F", "--gpu", "a100"],
            "gavel data file",
            "is not JSON",
        ),
        (["simulate", "--jobs", "10", "--scores", "F"], "score file", "is corrupt (not JSON"),
        (["model", "evaluate", "--gavel", "F", "--gpu", "a100"], "gavel data file", "not JSON"),
        (["scores", "load", "F"], "score file", "is corrupt (not JSON"),
        (["scores", "show", "--file", "F"], "score file", "is corrupt (not JSON"),
    ],
)
def test_a_device_or_a_fifo_without_writer_as_an_input_file_ends_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], what: str, empty: str
) -> None:
    """A FIFO made a plain open wait for a writer for ever; /dev/zero was read until memory
    ran out (/dev/null stands for the devices here: reading it ends). A pipe may be meant
    (``--sacct <(sacct ...)``), so a FIFO is read: without a writer, as empty."""
    code, err = cli([str(Path("/dev/null")) if a == "F" else a for a in argv], capsys)
    assert code == 2 and f"cannot read {what} /dev/null: not a regular file or a pipe" in err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, err = cli([str(fifo) if a == "F" else a for a in argv], capsys)
    assert code == 2 and f"{fifo}" in err and empty in err, err


def test_a_command_reads_its_input_from_a_pipe(
    gavel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``slurm-colo scores show --file <(...)`` and ``--gavel <(...)``: the shell passes
    /dev/fd/N, a pipe, which is read as it comes."""
    doc = json.dumps(score_doc()).encode()
    r, w = os.pipe()
    os.write(w, doc)
    os.close(w)
    try:
        code, out, err = run_cli(["scores", "show", "--file", f"/dev/fd/{r}"], capsys)
    finally:
        os.close(r)
    assert code == 0 and "alpha-bs32" in out, err
    r, w = os.pipe()
    os.write(w, gavel.read_bytes())
    os.close(w)
    try:
        code, out, err = run_cli(
            ["model", "evaluate", "--gavel", f"/dev/fd/{r}", "--gpu", "a100", "--seeds", "1"],
            capsys,
        )
    finally:
        os.close(r)
    assert code == 0 and "a100: 6 measured pairs" in out, out + err


def test_input_files_saved_with_a_byte_order_mark_read_as_without(
    gavel: Path, tmp_path: Path
) -> None:
    """Before: a score set or a Gavel file with a UTF-8 byte-order mark was "not JSON", and
    a sacct export's first column was not JobID."""
    bom = b"\xef\xbb\xbf"
    scores = tmp_path / "scores.json"
    scores.write_bytes(bom + json.dumps(score_doc()).encode())
    assert load_scores(scores).pair("alpha-bs32", "gamma").n_a == 0.8
    g = tmp_path / "gavel.json"
    g.write_bytes(bom + gavel.read_bytes())
    assert load_gavel(g, "a100").classes == load_gavel(gavel, "a100").classes
    sacct = tmp_path / "jobs.txt"
    t = "2026-01-01T10:{:02d}:00"
    rows = [
        _sacct_line(str(i), t.format(i), t.format(i + 1), t.format(40), "gres/gpu=1")
        for i in range(3)
    ]
    sacct.write_bytes(bom + "\n".join([SACCT_HEAD, *rows]).encode() + b"\n")
    assert len(read_sacct(sacct, ["resnet18-bs64"])) == 3


def test_an_out_that_is_not_a_directory_is_refused_before_the_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: every policy ran (minutes for a large trace), then the write failed with
    `cannot write results to FILE: File exists` and the results were lost."""
    f = tmp_path / "results"
    f.write_text("")
    code, out, err = run_cli(["simulate", "--jobs", "10", "--out", str(f)], capsys)
    assert code == 2 and f"--out {f}: not a directory" in err
    assert "makespan" not in out + err  # no policy ran


def test_result_files_replace_a_symlink_planted_under_their_names(tmp_path: Path) -> None:
    """Before: each file was written with ``write_text``, through a symlink planted under
    its name (in a shared directory, the link's target was overwritten)."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    for name in ("results.json", "jobs.csv", "seeds.md"):
        (out / name).symlink_to(victim)
    simulate("--policies", "exclusive-fifo,oracle", "--out", str(out))
    simulate("--policies", "exclusive-fifo,oracle", "--seeds", "1-2", "--out", str(out))
    assert victim.read_text() == "keep me"
    for name in ("results.json", "jobs.csv", "seeds.md", "seeds.json", "summary.png"):
        assert (out / name).is_file() and not (out / name).is_symlink(), name
    assert set(results(out)) == {"exclusive-fifo", "oracle"}
    assert (out / "jobs.csv").read_text().startswith("policy,job,cls,user,jct_s")
    assert not [p.name for p in out.iterdir() if p.name.startswith(".tmp-")]


def test_load_gavel_names_the_file(gavel: Path) -> None:
    assert load_gavel(gavel, "a100").classes == CLASSES
    with pytest.raises(ScoresError, match=str(gavel)):
        load_gavel(gavel, "b200")


# ---- the oracle with an error ----------------------------------------------------------


def test_the_oracle_with_no_error_decides_as_the_oracle(tmp_path: Path) -> None:
    out = tmp_path / "o"
    names = "exclusive-fifo,oracle,oracle-error"
    simulate("--seeds", "1-2", "--policies", names, "--oracle-error", "0", "--out", str(out))
    rows = json.loads((out / "seeds.json").read_text())
    span = {(r["seed"], r["policy"]): r["makespan_h"] for r in rows}
    assert {s for s, _ in span} == {1, 2}
    for s in (1, 2):
        assert span[(s, "oracle-error")] == span[(s, "oracle")]
    assert "--policies exclusive-fifo,oracle,oracle-error" in (out / "seeds.md").read_text()
    assert "--oracle-error 0" in (out / "seeds.md").read_text()


def test_an_oracle_error_out_of_range_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--jobs", "10", "--policies", "oracle-error", "--oracle-error", "100"]
    code, err = cli(argv, capsys)
    assert code == 2 and "--oracle-error 100: give a percentage from 0 to below 100" in err


def _sacct_line(job: str, submit: str, start: str, end: str, tres: str) -> str:
    return f"{job}|alice|resnet18-bs64|{submit}|{start}|{end}|{tres}|"


SACCT_HEAD = "JobID|User|JobName|Submit|Start|End|AllocTRES|ReqTRES"


def test_a_sacct_export_says_what_it_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = "2026-01-01T10:{:02d}:00"
    lines = [SACCT_HEAD]
    for i in range(4):
        lines.append(
            _sacct_line(str(i), t.format(i), t.format(i + 1), t.format(i + 30), "gres/gpu=1")
        )
        lines.append(_sacct_line(f"{i}.batch", t.format(i), t.format(i + 1), t.format(30), "cpu=1"))
    lines.append(_sacct_line("8", t.format(9), "Unknown", "Unknown", "gres/gpu=1"))
    lines.append(_sacct_line("9", t.format(9), t.format(10), t.format(11), "cpu=4"))
    lines.append(_sacct_line("10", "Ystday 10:00", "Ystday 10:05", "11:00:00", "gres/gpu=1"))
    export = tmp_path / "jobs.txt"
    export.write_text("\n".join(lines) + "\n")
    code, err = cli(
        ["simulate", "--sacct", str(export), "--gpus", "2", "--policies", "exclusive-fifo"], capsys
    )
    assert code == 0, err
    assert (
        f"{export}: 4 GPU jobs; left out 4 job steps, 1 without GPUs, 1 that had not run or "
        "not ended, 1 with a time it cannot read (first: line 12: Submit 'Ystday 10:00')"
    ) in err


def test_a_sacct_export_in_another_time_format_is_refused_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = tmp_path / "jobs.txt"
    export.write_text(
        SACCT_HEAD + "\n" + _sacct_line("1", "25 Apr", "25 Apr", "26 Apr", "gres/gpu=1") + "\n"
    )
    code, err = cli(["simulate", "--sacct", str(export)], capsys)
    assert code == 2, err
    assert "no finished GPU jobs (gres/gpu in AllocTRES); left out: 1 with a time" in err
    assert "(first: line 2: Submit '25 Apr')" in err
    assert "export with SLURM_TIME_FORMAT=standard" in err and "Traceback" not in err


def test_job_types_that_did_not_run_alone_are_left_out_and_named(
    gavel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(gavel.read_text())
    doc["a100"]["('Beta (batch size 64)', 1)"]["null"] = 0.0  # Gavel's mark of a failed run
    del doc["a100"]["('Gamma', 1)"]["null"]
    f = tmp_path / "two-gone.json"
    f.write_text(json.dumps(doc))
    data = load_gavel(f, "a100")
    assert data.classes == ["alpha-bs32"] and data.no_solo == ["Beta (batch size 64)", "Gamma"]
    assert set(data.pairs) == {("alpha-bs32", "alpha-bs32")}
    said = 'left out 2 job types without a solo rate ("null"): Beta (batch size 64), Gamma'
    assert data.left_out() == said
    code, err = cli(["simulate", *SMALL, "--gavel", str(f), "--gpu", "a100"], capsys)
    assert code == 0 and said in err, err
    code, err = cli(
        ["model", "evaluate", "--gavel", str(f), "--gpu", "a100", "--seeds", "1"], capsys
    )
    assert said in err
    assert load_gavel(gavel, "a100").left_out() == ""
