"""Parsing of nvidia-cuda-mps-control outputs (tests/fixtures/mps, see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_colo.node.gpu.mps import (
    format_mem_limit,
    parse_device_client_list,
    parse_fault_lines,
    parse_pid_list,
    parse_server_status,
)

FIX = Path(__file__).parents[1] / "fixtures" / "mps"


def _read(name: str) -> str:
    return (FIX / name).read_text()


def test_pid_lists() -> None:
    assert parse_pid_list(_read("get_server_list.txt")) == [20314]
    assert parse_pid_list(_read("get_server_list_empty.txt")) == []
    assert parse_pid_list(_read("get_client_list.txt")) == [20411, 20417]


def test_server_status() -> None:
    assert parse_server_status(_read("get_server_status_active.txt")) == "ACTIVE"
    assert parse_server_status(_read("get_server_status_fault.txt")) == "FAULT"
    assert parse_server_status("") == "UNKNOWN"
    assert parse_server_status("Server 1 not found") == "UNKNOWN"


def test_device_client_list() -> None:
    assert parse_device_client_list(_read("get_device_client_list.txt")) == {
        "GPU-5d3a1c8e-7b1f-4c2a-9e0d-2f6b8a1c3e77": [20411, 20417]
    }
    assert parse_device_client_list("GPU-a: 1 2\n") == {"GPU-a": [1, 2]}


def test_fault_lines_in_control_log() -> None:
    faults = parse_fault_lines(_read("control.log"))
    assert len(faults) == 2
    assert "fatal GPU exception" in faults[0] and "20411 20417" in faults[0]
    assert faults[1].endswith("Server 20314 exited with status 1")
    assert parse_fault_lines(_read("control_clean.log")) == []


@pytest.mark.parametrize("gib,expected", [(12, "0=12G"), (12.5, "0=12800M"), (0.5, "0=512M")])
def test_pinned_mem_limit_format(gib: float, expected: str) -> None:
    assert format_mem_limit(gib) == expected
