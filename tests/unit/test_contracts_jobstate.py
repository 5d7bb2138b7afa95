"""The node's per-job state file: read back as written, older and damaged files."""

from __future__ import annotations

import json

import pytest

from slurm_colo.contracts.enums import Mechanism, Mode
from slurm_colo.contracts.jobstate import GpuMpsStart, JobState
from slurm_colo.contracts.placement import Placement
from slurm_colo.errors import ProtocolError


def test_round_trip_through_json() -> None:
    p = Placement("tok", "bert", Mode.AUTO, Mechanism.MPS, "n1", 1, 50, 8.0, 6.0, 1.2)
    st = JobState(
        7,
        "alice",
        1000,
        "n1",
        [1],
        "bert",
        Mode.AUTO,
        12.5,
        "boot",
        "lab",
        p,
        Mechanism.MPS,
        {1: GpuMpsStart("ok", 10, 20, "")},
        ["GPU-1"],
        4242,
    )
    back = JobState.from_json(json.loads(json.dumps(st.to_json())))
    assert back == st and back.mps[1].log_offset == 10 and back.placement == p


def test_a_sparse_file_takes_defaults_and_the_directory_job_id() -> None:
    st = JobState.from_json({"gpus": [0, 1], "start": 3.0, "later_field": "x"}, job=9)
    assert (st.job, st.gpus, st.start, st.placement, st.mode) == (9, [0, 1], 3.0, None, Mode.OFF)


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"job": "x"},
        {"job": 1, "gpus": ["a"]},
        {"job": 1, "mechanism": "nvlink"},
        {"job": 1, "placement": {"token": 5}},
        {"job": 1, "mps": {"0": "ok"}},
        {"job": 1, "start": 10**400},
        {"job": 1, "sampler_pid": 10**30},
        {"job": 1, "sampler_pid": -4},
    ],
)
def test_damaged_files_raise_protocol_error(bad: object) -> None:
    with pytest.raises(ProtocolError):
        JobState.from_json(bad)
