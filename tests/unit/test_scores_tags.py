"""Score-set format (validation, atomic publish, set prediction) and the placement tag."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from slurm_colo.contracts.enums import Mechanism, Mode
from slurm_colo.contracts.placement import Placement
from slurm_colo.errors import ProtocolError, ScoresError
from slurm_colo.gavel import bundled_path, load_gavel
from slurm_colo.placement.view import Decision
from slurm_colo.scores import (
    ScoreTable,
    load_scores,
    publish_scores,
    scores_from_dict,
    table_from_pairs,
)
from slurm_colo.seed import table_from_measurements


def test_pair_lookup_is_symmetric_and_unknown_uses_the_prior() -> None:
    t = table_from_pairs([("a", "b", 0.9, 0.5)], prior_n=0.6, prior_sd=0.2)
    assert (t.pair("a", "b").n_a, t.pair("a", "b").n_b) == (0.9, 0.5)
    assert (t.pair("b", "a").n_a, t.pair("b", "a").n_b) == (0.5, 0.9)
    u = t.pair("a", "zzz")
    assert not u.known and u.n_a == u.n_b == 0.6 and u.sd == 0.2
    assert t.pair("a", "b").delta == pytest.approx(1.0)


def test_sets_compose_multiplicatively() -> None:
    t = table_from_pairs([("a", "b", 0.9, 0.8), ("a", "c", 0.7, 0.9), ("b", "c", 0.5, 0.6)])
    n, sd, never, known = t.set_throughputs(["a", "b", "c"])
    assert n == pytest.approx([0.9 * 0.7, 0.8 * 0.5, 0.9 * 0.6])
    assert known and not never and sd == pytest.approx(math.sqrt(3) * 0.02)
    assert t.delta(["a", "b", "c"])[0] == pytest.approx(3 * 0.8 * 0.5)
    t2 = table_from_pairs([("a", "b", 0.0, 0.0)])
    assert t2.delta(["a", "b"]) == (0.0, 0.0)


def test_round_trip_and_atomic_publish(tmp_path: Path) -> None:
    t = table_from_measurements(load_gavel(bundled_path(), "v100"))
    dest = tmp_path / "live" / "scores.json"
    publish_scores(t, dest)
    back = load_scores(dest)
    assert back.id == t.id and len(back.pairs) == len(t.pairs)
    assert back.pair("resnet18-bs32", "resnet18-bs64").delta == pytest.approx(
        t.pair("resnet18-bs32", "resnet18-bs64").delta, abs=1e-5
    )
    assert [p for p in os.listdir(dest.parent) if p.startswith(".")] == []  # no temp file left
    assert back.pair("resnet50-bs128", "resnet50-bs32").never


@pytest.mark.timeout(30)  # before: the agent's reload waited for a writer for ever
def test_the_live_set_must_be_a_regular_file(tmp_path: Path) -> None:
    """The agent and the hooks read the live set: a FIFO there is refused at once. A score
    file named on the command line may be a pipe; a FIFO without a writer reads as empty."""
    fifo = tmp_path / "scores.json"
    os.mkfifo(fifo)
    with pytest.raises(ScoresError, match="not a regular file"):
        load_scores(fifo)
    with pytest.raises(ScoresError, match="is corrupt"):
        load_scores(fifo, pipe=True)
    with pytest.raises(ScoresError, match="/dev/null: not a regular file or a pipe"):
        load_scores("/dev/null", pipe=True)


def test_publish_says_when_the_directory_could_not_be_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The set is in place, but may not outlive a power cut: publishing says so (the
    node's own files, written the same way, take a file in place for written)."""
    import errno

    from slurm_colo import fsutil

    def failing(path: Path) -> None:
        raise OSError(errno.EIO, "Input/output error", str(path))

    monkeypatch.setattr(fsutil, "fsync_dir", failing)
    t = ScoreTable(id="flushed")
    with pytest.raises(OSError, match="Input/output error"):
        publish_scores(t, tmp_path / "live.json")
    assert load_scores(tmp_path / "live.json").id == "flushed"
    fsutil.atomic_write_bytes(tmp_path / "node.json", b"{}")  # not strict: no error
    assert (tmp_path / "node.json").read_bytes() == b"{}"
    assert sorted(os.listdir(tmp_path)) == ["live.json", "node.json"]  # no temporary left
    assert (tmp_path / "live.json").stat().st_mode & 0o777 == 0o644


def test_publish_refuses_to_replace_what_is_not_a_file(tmp_path: Path) -> None:
    """Before: the rename replaced whatever stood at the path; ``retrain --out /dev/null``
    run as root replaced the system's /dev/null with the score set."""
    t = table_from_measurements(load_gavel(bundled_path(), "v100"))
    fifo, folder = tmp_path / "fifo", tmp_path / "folder"
    os.mkfifo(fifo)
    folder.mkdir()
    with pytest.raises(OSError, match="not a regular file"):
        publish_scores(t, fifo)
    with pytest.raises(IsADirectoryError):
        publish_scores(t, folder)
    assert fifo.is_fifo() and folder.is_dir() and sorted(os.listdir(tmp_path)) == ["fifo", "folder"]
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere.json")
    publish_scores(t, link)  # a link is replaced, as before; what it named is not written
    assert load_scores(link).id == t.id and not (tmp_path / "elsewhere.json").exists()


@pytest.mark.parametrize(
    "doc,msg",
    [
        ([], "not a score set"),
        ({"format": "other"}, "unknown format"),
        ({"format": "slurm-colo-scores/1", "pairs": [{"a": "x"}]}, r"pairs\[0\] lacks 'b', 'n_a'"),
        (
            {
                "format": "slurm-colo-scores/1",
                "pairs": [{"a": "x", "b": "y", "n_a": float("nan"), "n_b": 1}],
            },
            "finite",
        ),
        (
            {"format": "slurm-colo-scores/1", "pairs": [{"a": "x", "b": "y", "n_a": -1, "n_b": 1}]},
            "outside",
        ),
        ({"format": "slurm-colo-scores/1", "classes": {"x": {"sm_util": 3}}}, "outside"),
        # a whole number past a float's range (written as digits): refused, not a traceback
        (
            {
                "format": "slurm-colo-scores/1",
                "pairs": [{"a": "x", "b": "y", "n_a": 10**400, "n_b": 1}],
            },
            "expected a finite number, got 1000000000",
        ),
        # a flag written as a string: bool("false") is true, so it is refused, not read
        (
            {
                "format": "slurm-colo-scores/1",
                "pairs": [{"a": "x", "b": "y", "n_a": 1, "n_b": 1, "never": "false"}],
            },
            r"pairs\[0\]\.never: expected true or false, got 'false'",
        ),
        (
            {
                "format": "slurm-colo-scores/1",
                "pairs": [{"a": "x", "b": "y", "n_a": 1, "n_b": 1, "observed": 1}],
            },
            r"pairs\[0\]\.observed: expected true or false, got 1",
        ),
        # each part of the wrong shape is named, not reported as a Python error
        ({"format": "slurm-colo-scores/1", "metrics": "x"}, "metrics must be an object, not str"),
        (
            {"format": "slurm-colo-scores/1", "training": [1, 2]},
            "training must be an object, not list",
        ),
        (
            {"format": "slurm-colo-scores/1", "classes": [1, 2]},
            "classes must be an object of classes, not list",
        ),
        ({"format": "slurm-colo-scores/1", "pairs": {"x": 1}}, "pairs must be a list of pairs"),
        ({"format": "slurm-colo-scores/1", "pairs": [3]}, r"pairs\[0\] must be an object, not int"),
        (
            {"format": "slurm-colo-scores/1", "pairs": [{"a": "x", "n_a": 1}]},
            r"pairs\[0\] lacks 'b', 'n_b'",
        ),
        ({"format": "slurm-colo-scores/1", "prior": 3}, "prior must be an object, not int"),
    ],
)
def test_corrupt_score_sets_are_refused_with_the_reason(doc: object, msg: str) -> None:
    with pytest.raises(ScoresError, match=msg):
        scores_from_dict(doc)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ScoresError, match="not found"):
        load_scores(tmp_path / "none.json")
    (tmp_path / "half.json").write_text('{"format": "slurm-colo-scores/1", "pairs": [')
    with pytest.raises(ScoresError, match="corrupt"):
        load_scores(tmp_path / "half.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ScoresError, match="nested too deeply"):
        load_scores(tmp_path / "deep.json")


def test_tag_round_trip() -> None:
    d = Decision(
        "share",
        "x",
        node="gpu07",
        index=3,
        mechanism="mps",
        thread_pct=40,
        mem_limit_gib=7.5,
        predicted_delta=1.42,
        memory_gib=6.0,
    )
    tag = d.placement("ab12cd34", "bert-bs32", "aggressive").to_tag()
    got = Placement.from_tag(f"user text | {tag} trailing")
    assert got == Placement(
        "ab12cd34",
        "bert-bs32",
        Mode.AGGRESSIVE,
        Mechanism.MPS,
        "gpu07",
        3,
        thread_pct=40,
        mem_limit_gib=7.5,
        memory_gib=6.0,
        predicted_delta=1.42,
    )
    assert got.shared and Decision.from_placement(got, "x") == d
    held = Placement.from_tag(
        Decision("exclusive", "harmful")
        .placement("t", "c", "auto", undone=True, held="v100_s1")
        .to_tag()
    )
    assert held is not None and held.held == "v100_s1" and held.undone and not held.shared
    waiting = Placement.from_tag(
        Decision("exclusive", "no partner").placement("t", "c", "auto", held="v100_s0").to_tag()
    )
    assert waiting is not None and waiting.held == "v100_s0" and not waiting.undone
    again = Placement.from_tag(d.placement("t", "c", "auto", undone=True).to_tag())
    assert again is not None and again.undone and again.held is None and again.gpu == 3
    own = Placement.from_tag(Decision("exclusive", "why").placement("t", "c", "auto").to_tag())
    assert own is not None and own.shared is False and own.gpu is None
    assert Placement.from_tag("no tag here") is None and Placement.from_tag(None) is None
    bad = Placement.from_tag("slurm-colo[v=1 tok=x pct=abc mode=weird]")
    assert bad is not None and bad.thread_pct is None and bad.mode == Mode.AUTO


def test_placement_wire_round_trip_and_earlier_versions() -> None:
    p = Placement(
        "tok1",
        "bert",
        Mode.AUTO,
        Mechanism.MPS,
        "n1",
        2,
        40,
        7.5,
        6.0,
        1.3,
        partners=(11, 12),
        probe_s=15.0,
    )
    w = json.loads(json.dumps(p.to_wire()))
    assert Placement.from_wire(w) == p and w["shared"] is True and w["mechanism"] == "mps"
    assert w["probe_s"] == 15.0 and "probe_s" not in p.to_tag()  # wire only
    # what an agent of an earlier version sent (a dict with "delta", "shared")
    old = {
        "shared": True,
        "mechanism": "shard",
        "thread_pct": None,
        "mem_limit_gib": None,
        "cls": "c",
        "mode": "auto",
        "node": "n1",
        "gpu": 0,
        "partners": [5],
        "token": "t",
        "delta": 1.2,
        "memory_gib": 4.0,
        "some_newer_key": 1,
    }
    q = Placement.from_wire(old)
    assert q.mechanism == Mechanism.SHARD and q.predicted_delta == 1.2 and q.partners == (5,)
    assert q.probe_s is None  # an earlier agent sends none: the node uses its own setting
    assert not Placement.from_wire({"token": "t", "shared": False, "mechanism": "mps"}).shared
    for broken in (
        [],
        {"token": 3},
        {"token": "t", "gpu": "x"},
        {"token": "t", "mode": "fast"},
        {"token": "t", "mem_limit_gib": [1]},
        {"token": "t", "probe_s": "soon"},
    ):
        with pytest.raises(ProtocolError):
            Placement.from_wire(broken)


@pytest.mark.parametrize(
    "field,value",
    [
        ("thread_pct", 1e400),  # JSON's 1e400 is inf: int() raised OverflowError
        ("thread_pct", 0),
        ("thread_pct", 101),
        ("thread_pct", 50.5),
        ("mem_limit_gib", "nan"),
        ("mem_limit_gib", -1),
        ("mem_limit_gib", 1e400),
        ("memory_gib", -2.0),
        ("predicted_delta", "inf"),
        ("gpu", -1),
        ("gpu", "\u00b2"),
        ("probe_s", -5),
        ("partners", [1e400]),
        ("partners", [0]),
        ("partners", [None]),
    ],
)
def test_a_reply_number_out_of_range_is_a_protocol_error(field: str, value: object) -> None:
    """A JOBSTART reply or state file whose limit no agent writes is damaged, not applied:
    an MPS thread share of 1e400 used to end the Prolog after the MPS daemon had started."""
    with pytest.raises(ProtocolError, match=field):
        Placement.from_wire({"token": "t", "mechanism": "mps", field: value})


def test_a_sites_large_settings_still_pass() -> None:
    """The upper ends are the config's bound on any number (2^53): a probe after 10^10 s or
    a memory estimate of 10^7 GiB, however odd, is what the agent sent, not damage (a reply
    refused here would run the job without MPS)."""
    p = Placement("t", mechanism=Mechanism.MPS, probe_s=1e10, memory_gib=1e7, mem_limit_gib=0.0)
    assert Placement.from_wire(json.loads(json.dumps(p.to_wire()))) == p


def test_a_tag_number_out_of_range_is_left_out() -> None:
    """The tag is read leniently: a number that cannot be used is dropped, the rest kept."""
    tag = "slurm-colo[v=1 tok=t cls=a mode=auto mech=mps gpu=n1:\u00b2 pct=1e400 mem=nan est=-1 d=inf]"
    p = Placement.from_tag(tag)
    assert p is not None and p.mechanism == Mechanism.MPS and p.node == "n1"
    assert (p.gpu, p.thread_pct, p.mem_limit_gib, p.memory_gib, p.predicted_delta) == (
        None,
        None,
        None,
        None,
        None,
    )
    for pct in ("0", "-5", "101"):
        q = Placement.from_tag(f"slurm-colo[v=1 tok=t mech=mps gpu=n1:0 pct={pct} mem=12]")
        assert q is not None and q.thread_pct is None and q.mem_limit_gib == 12.0


def test_measured_table_covers_all_v100_pairs() -> None:
    d = load_gavel(bundled_path(), "v100")
    t = table_from_measurements(d)
    assert len(t.classes) == 26
    assert len(t.pairs) == len(d.unordered_pairs()) + len({p for p in d.never if p[0] <= p[1]})
    json.dumps(t.to_dict())


def test_a_bad_value_or_encoding_names_the_score_file(tmp_path: Path) -> None:
    f = tmp_path / "live.json"
    f.write_text(
        json.dumps(
            {
                "format": "slurm-colo-scores/1",
                "pairs": [{"a": "x", "b": "y", "n_a": 99, "n_b": 0.5}],
            }
        )
    )
    with pytest.raises(ScoresError, match=r"live\.json: pairs\[0\]\.n_a: 99 outside"):
        load_scores(f)
    f.write_bytes(b"\xff\xfe{")
    with pytest.raises(ScoresError, match=r"live\.json is corrupt \(not UTF-8"):
        load_scores(f)
