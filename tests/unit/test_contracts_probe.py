"""The probe report both sides of PROBE use (contracts/probe.py)."""

from __future__ import annotations

import json

import pytest

from slurm_colo.contracts.probe import ProbeMember, ProbeReport
from slurm_colo.errors import ProtocolError

WIRE = {
    "job": 2,
    "since": 1000.0,
    "window_s": 500.0,
    "members": [
        {"job": 1, "cls": "a", "rate": 4.0, "rate_before": 10.0, "before": ["x"]},
        {"job": 2, "cls": "b", "rate": None},
    ],
    "gpu": 0,
}


def test_round_trip_keeps_every_key_and_its_order() -> None:
    r = ProbeReport.from_wire(json.loads(json.dumps(WIRE)))
    assert r.job == 2 and r.gpu == 0 and r.window_s == 500.0
    assert r.members[0] == ProbeMember(1, "a", 4.0, 10.0, ("x",))
    assert r.members[1] == ProbeMember(2, "b", None)  # the newcomer: no before-figures
    assert json.dumps(r.to_wire()) == json.dumps(WIRE)


def test_a_second_look_is_marked_on_the_wire_only_when_it_is_one() -> None:
    again = ProbeReport.from_wire({**WIRE, "again": True})
    assert again.again and again.to_wire()["again"] is True
    assert again.with_gpu(3).again  # the node adds the GPU to what it read
    assert not ProbeReport.from_wire(WIRE).again and "again" not in WIRE
    with pytest.raises(ProtocolError, match="'again' must be true or false"):
        ProbeReport.from_wire({**WIRE, "again": "yes"})


def test_a_member_measured_before_without_a_rate_keeps_its_keys() -> None:
    m = ProbeMember.from_wire(
        {"job": 1, "cls": "a", "rate": 1.0, "rate_before": None, "before": []}
    )
    assert m.before == () and m.to_wire() == {
        "job": 1,
        "cls": "a",
        "rate": 1.0,
        "rate_before": None,
        "before": [],
    }


def test_unknown_keys_are_ignored_and_the_gpu_is_optional() -> None:
    r = ProbeReport.from_wire(
        {
            "job": 3,
            "since": 1,
            "window_s": 2,
            "extra": {"x": 1},
            "members": [{"job": 3, "rate": 2, "colour": "red"}],
        }
    )
    assert r.gpu is None and "gpu" not in r.to_wire()
    assert r.members == (ProbeMember(3, "default", 2),)
    assert r.with_gpu(1).to_wire()["gpu"] == 1


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"since": 1.0},
        {"job": "2"},
        {"job": True},
        {"job": 2, "since": "now"},
        {"job": 2, "members": {"job": 1}},
        {"job": 2, "members": ["x"]},
        {"job": 2, "members": [{"job": 1.5}]},
        {"job": 2, "members": [{"job": 1, "cls": 7}]},
        {"job": 2, "members": [{"job": 1, "rate": "fast"}]},
        {"job": 2, "members": [{"job": 1, "rate": 1.0, "before": "a"}]},
        {"job": 2, "gpu": "0"},
    ],
)
def test_wrong_types_are_protocol_errors(bad: object) -> None:
    with pytest.raises(ProtocolError):
        ProbeReport.from_wire(bad)
