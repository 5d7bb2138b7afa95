"""Parsing of nvidia-cuda-mps-control outputs captured on a real GPU node
(tests/fixtures/mps, see its README)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from slurm_colo.errors import MPSError
from slurm_colo.node.gpu.mps import (
    MpsControl,
    MpsNotRunning,
    format_mem_limit,
    log_line_time,
    parse_device_client_list,
    parse_fault_lines,
    parse_pid_list,
    parse_server_status,
)

FIX = Path(__file__).parents[1] / "fixtures" / "mps"


def _read(name: str) -> str:
    return (FIX / name).read_text()


def test_pid_lists() -> None:
    assert parse_pid_list(_read("get_server_list.txt")) == [624]
    assert parse_pid_list(_read("get_server_list_empty.txt")) == []
    assert parse_pid_list(_read("get_client_list.txt")) == [643, 642]


def test_server_status() -> None:
    assert parse_server_status(_read("get_server_status_active.txt")) == "ACTIVE"
    assert parse_server_status(_read("get_server_status_fault.txt")) == "FAULT"
    assert parse_server_status(_read("get_server_status_unknown.txt")) == "UNKNOWN"
    assert parse_server_status("") == "UNKNOWN"


def test_batched_session_gives_one_line_per_command() -> None:
    assert _read("batched.txt").splitlines() == ["ACTIVE", "50.0", "624"]


def test_device_client_list_is_a_header_per_device_and_a_line_per_client_context() -> None:
    assert parse_device_client_list(_read("get_device_client_list.txt")) == {0: [643, 642]}
    two = "[0] 3b:00.0, NVIDIA A100\n10.1\n10.2\n11.1\n[1] 5e:00.0, NVIDIA A100\n12.1\n"
    assert parse_device_client_list(two) == {0: [10, 11], 1: [12]}
    assert parse_device_client_list("") == {}
    assert parse_device_client_list("[0] 00:00.0, NVIDIA H200\n") == {0: []}


def test_a_fatal_fault_is_found_in_server_log_once_per_event() -> None:
    faults = parse_fault_lines(_read("server.log"))
    assert len(faults) == 1
    assert faults[0].endswith("Client {PID: 747, Context: 1} encountered a fatal GPU error.")
    assert log_line_time(faults[0]) is not None
    # the control log of the same session: servers come and go (another user's client
    # queued, then served), all with status 0, and the fault is not mentioned there
    assert parse_fault_lines(_read("control.log")) == []
    assert parse_fault_lines(_read("control_clean.log")) == []
    assert (
        parse_fault_lines(
            "[2026-11-27 04:07:24.983 Control   612] Server 624 exited with status 1\n"
        )
        != []
    )


@pytest.mark.parametrize(
    "line",
    [
        "[2026-11-27 04:08:32.605 Control   982] Try shutting down server.",
        "[2026-11-27 04:08:32.605 Control   982] try shutting down server",
        "[2026-11-27 04:08:32.694 Control   982] Server 986exited with status 0",
        "exited with status 0 ] server ",
    ],
)
def test_a_line_without_the_usual_words_never_stops_the_scan(line: str) -> None:
    """server.log belongs to the job's user, who can write any line into it; the fault
    logged after such a line is still found."""
    fault = _read("server.log")
    faults = parse_fault_lines(line + "\n" + fault)
    assert any(f.endswith("encountered a fatal GPU error.") for f in faults)


def test_a_killed_server_is_a_fault_though_logged_with_status_0() -> None:
    """Captured: SIGKILL to the server gave "Server 590 exited with status 0", as `quit`'s
    stop of server 633 did; only the stop had "Try shutting down server 633" before it."""
    faults = parse_fault_lines(_read("control_server_killed.log"))
    assert [f.split("] ", 1)[1] for f in faults] == ["Server 590 exited with status 0"]
    # the control logs of stopped servers only (quit, a switch to another user's server)
    assert parse_fault_lines(_read("control.log")) == []


def _replaying(tmp_path: Path, name: str, rc: int = 0, stream: str = "stdout") -> MpsControl:
    """A control gate whose program prints one captured reply (ignoring its stdin)."""
    code = f"import sys; sys.{stream}.write(open({str(FIX / name)!r}).read()); sys.exit({rc})"
    return MpsControl((sys.executable, "-c", code), tmp_path / "pipe", tmp_path / "log", "0")


def test_captured_replies_through_the_gate(tmp_path: Path) -> None:
    assert _replaying(tmp_path, "batched.txt").commands(["a", "b", "c"]) == [
        "ACTIVE",
        "50.0",
        "624",
    ]
    assert _replaying(tmp_path, "get_device_client_list.txt").device_clients() == {0: [643, 642]}
    # the real program answers an unknown command with exit status 0
    with pytest.raises(MPSError, match="Unknown command"):
        _replaying(tmp_path, "unknown_command.txt").command("no_such_command")
    with pytest.raises(MpsNotRunning):
        _replaying(tmp_path, "not_running.txt", rc=1, stream="stderr").server_list()


@pytest.mark.parametrize("gib,expected", [(12, "0=12G"), (12.5, "0=12800M"), (0.5, "0=512M")])
def test_pinned_mem_limit_format(gib: float, expected: str) -> None:
    assert format_mem_limit(gib) == expected
